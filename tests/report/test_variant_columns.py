"""Engine-feature variants in the report (issue 28): each variant's lanes are a column group of their own, after
the plain configuration's, and a change on a variant's lane is named with its column."""

from __future__ import annotations

import json
from pathlib import Path

from tests.report.synthetic_runs import MakeRun, RunSpec
from vsnap_qual.report import write_reports

NOPC = ("nopc", "--no-enable-prefix-caching")


def test_each_variant_is_a_column_group_after_the_plain_ones(make_run: MakeRun) -> None:
    directory = make_run("variants", RunSpec(changed_digests=(), variants=(NOPC,)))
    summary = write_reports(directory, github_step_summary=False).summary_md.read_text()
    results = json.loads((directory / "results.json").read_text())
    assert [(lane["runner"], lane["arm"]) for lane in results["lanes"]] == [
        ("v1", "head"), ("v1", "base"), ("v2", "head"), ("v2", "base"),
        ("v1+nopc", "head"), ("v1+nopc", "base"), ("v2+nopc", "head"), ("v2+nopc", "base"),
    ]  # fmt: skip
    assert results["verdict"]["status"] == "pass"
    assert "Variants: `nopc` (`--no-enable-prefix-caching`)" in summary
    lifecycle = next(line for line in summary.splitlines() if line.startswith("| create, inspect, two restores"))
    assert "v1+nopc (head, base); v2+nopc (head, base)" in lifecycle


def test_a_change_on_a_variants_lane_fails_the_run_and_is_named_with_its_column(make_run: MakeRun) -> None:
    spec = RunSpec(changed_digests=(("v2+nopc", "restore-2", "model.norm.weight"),), variants=(NOPC,))
    directory = make_run("changed", spec)
    summary = write_reports(directory, github_step_summary=False).summary_md.read_text()
    results = json.loads((directory / "results.json").read_text())
    assert results["verdict"]["status"] == "fail"
    digests = next(c for c in results["verdict"]["checks"] if c["id"] == "digests")
    failed = {item["id"] for item in digests["items"] if item["ok"] is False}
    assert failed == {"digests.v2+nopc.head.restore-2"}
    row = next(line for line in summary.splitlines() if line.startswith("| parameter digests"))
    assert "v2+nopc" in row and "model.norm.weight" in row


def test_a_run_without_variants_reads_as_before(make_run: MakeRun) -> None:
    directory = make_run("plain", RunSpec(changed_digests=()))
    summary = write_reports(directory, github_step_summary=False).summary_md.read_text()
    assert "Variants:" not in summary and "+" not in "".join(
        lane["runner"] for lane in json.loads((directory / "results.json").read_text())["lanes"]
    )


def _with_adapter_compare(directory: Path, *, ok_on_restore_2: bool) -> None:
    """Give the v1+lora head arm's restores an adapter comparison (what a lane serving an adapter records)."""
    path = directory / "evidence.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record in records:
        lane = (record.get("runner"), record.get("arm"))
        if record["kind"] == "step" and lane == ("v1+lora", "head") and record["step"] in ("restore-1", "restore-2"):
            canary = record["results"]["canary_compare"]
            ok = record["step"] == "restore-1" or ok_on_restore_2
            record["results"]["adapter_compare"] = {"tiny": [{**c, "ok": ok} for c in canary]}
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_the_adapter_row_sums_up_the_adapter_comparisons_of_the_restores(make_run: MakeRun) -> None:
    lora = ("lora", "--enable-lora --lora-modules tiny=/a/tiny")
    directory = make_run("adapters", RunSpec(changed_digests=(), variants=(lora,)))
    plain = write_reports(directory, github_step_summary=False)
    row = next(c for c in json.loads(plain.results_json.read_text())["verdict"]["checks"] if c["id"] == "adapters")
    assert row["status"] == "not run" and "no lane serves a LoRA adapter" in row["result"]
    _with_adapter_compare(directory, ok_on_restore_2=True)
    results = json.loads(write_reports(directory, github_step_summary=False).results_json.read_text())
    row = next(c for c in results["verdict"]["checks"] if c["id"] == "adapters")
    assert row["status"] == "pass" and row["result"].startswith("v1+lora/head: adapters tiny,")
    assert [i["id"] for i in row["items"]] == ["adapters.v1+lora.head.restore-1", "adapters.v1+lora.head.restore-2"]
    _with_adapter_compare(directory, ok_on_restore_2=False)
    results = json.loads(write_reports(directory, github_step_summary=False).results_json.read_text())
    row = next(c for c in results["verdict"]["checks"] if c["id"] == "adapters")
    assert row["status"] == "FAIL" and row["details"][0].startswith("v1+lora/head/restore-2: adapter 'tiny'")


def test_a_variant_vllm_refuses_reads_not_applicable_in_the_lifecycle_row(make_run: MakeRun) -> None:
    refusal = "not applicable: vLLM refuses variant spec: ValueError: snapshot create does not support speculative"
    steps = ("create", "inspect", "restore-1", "restart", "restore-2", "restore-after-stop", "fresh-box")
    skipped = tuple((f"{r}+spec/{a}/{s}", refusal) for r in ("v1", "v2") for a in ("head", "base") for s in steps)
    spec = RunSpec(changed_digests=(), variants=(("spec", "--speculative-config {}"),), skipped_steps=skipped)
    summary = write_reports(make_run("refused", spec), github_step_summary=False).summary_md.read_text()
    row = next(line for line in summary.splitlines() if line.startswith("| create, inspect, two restores"))
    assert "v1+spec not applicable (head, base); v2+spec not applicable (head, base)" in row, row
    assert "v1 (head, base)" in row
