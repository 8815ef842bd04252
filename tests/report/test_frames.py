"""The pandas comparisons every view renders from."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from tests.report.synthetic_runs import open_results
from vsnap_qual import checks, model, procedure
from vsnap_qual.faults import BUILTIN_FAULTS, FAULTS_BY_ID
from vsnap_qual.report.assemble import assemble_file
from vsnap_qual.report.frames import (
    cleanup_frame,
    compare_all,
    digest_frame,
    digest_summary,
    fault_frame,
    kv_frame,
    readiness_frame,
    records,
    step_matrix,
    timing_frame,
)


def _results(directory: Path) -> model.Results:
    return assemble_file(directory / "evidence.jsonl")


def test_digest_table_columns_and_changed_first(report_dir: Path) -> None:
    frame = digest_frame(_results(report_dir), "v2")
    assert list(frame.columns[:4]) == ["ordinary", "restore-1", "restore-2", "base"]
    assert len(frame) == 30
    assert frame.index[0] == "model.norm.weight"
    assert frame.iloc[0]["status"] == "changed"
    assert frame.iloc[0]["changed_in"] == "restore-2"
    assert (frame.iloc[1:]["status"] == "unchanged").all()


def test_digest_summary_text(report_dir: Path) -> None:
    summary = {r["runner"]: r for r in records(digest_summary(_results(report_dir)))}
    assert summary["v1"]["text"] == "30/30 unchanged" and summary["v1"]["ok"]
    assert summary["v2"]["text"] == "29/30 unchanged (1 changed)" and not summary["v2"]["ok"]
    assert summary["v2"]["changed_names"] == ["model.norm.weight"]


def test_unobservable_and_missing_parameters(report_dir: Path) -> None:
    def observe_less(digests: dict[str, Any]) -> None:
        digests["lm_head.weight"]["sha256"] = None
        del digests["model.embed_tokens.weight"]

    results = assemble_file(_record_digests(report_dir, "v1", "restore-1", observe_less))
    frame = digest_frame(results, "v1")
    assert frame.loc["lm_head.weight", "status"] == "unobservable"
    assert frame.loc["model.embed_tokens.weight", "status"] == "missing"
    assert list(frame["status"][:2]) == ["missing", "unobservable"]


def test_digest_summary_falls_back_to_digest_compare(report_dir: Path) -> None:
    results = _results(report_dir)
    for step in results["steps"]:
        open_results(step).pop("digests", None)
    summary = {r["runner"]: r for r in records(digest_summary(results))}
    assert summary["v2"]["changed_names"] == ["model.norm.weight"]
    assert summary["v2"]["text"] == "29/30 unchanged (1 changed)"


def test_kv_delta_tokens_and_percent(report_dir: Path) -> None:
    rows = {(r["runner"], r["arm"]): r for r in records(kv_frame(_results(report_dir)))}
    v2 = rows[("v2", "head")]
    assert (v2["ordinary"], v2["snapshot"], v2["delta"]) == (63_104, 63_088, -16)
    assert abs(cast(float, v2["delta_pct"]) - (-16 / 63_104 * 100)) < 1e-9


def test_timings_median_and_n_for_repeated_steps(report_dir: Path) -> None:
    evidence = report_dir / "evidence.jsonl"
    lines = evidence.read_text().splitlines()
    restore = next(json.loads(line) for line in lines if '"step": "restore-1"' in line)
    restore["seconds"] = 30.0
    lines.insert(-1, json.dumps(restore))
    evidence.write_text("\n".join(lines) + "\n")
    frame = timing_frame(assemble_file(evidence))
    row = frame[(frame.runner == "v1") & (frame.arm == "head") & (frame.step == "restore-1")].iloc[0]
    assert (row["n"], row["median"], row["max"]) == (2, 19.5, 30.0)
    ready = {(r["runner"], r["arm"]): r for r in records(readiness_frame(assemble_file(evidence)))}
    assert ready[("v1", "head")]["restore_n"] == 5
    assert cast(float, ready[("v1", "head")]["speedup"]) > 1


def test_faults_cleanup_and_matrix(report_dir: Path) -> None:
    results = _results(report_dir)
    faults = fault_frame(results)
    assert len(faults) == 4 * len(BUILTIN_FAULTS)
    assert set(faults["fault"]) == set(FAULTS_BY_ID)
    judged = faults[faults["expected_http_bound"].notna()]
    assert (judged["http_bound"] == judged["expected_http_bound"]).all()
    assert set(faults[faults["http_bound"].astype(bool)]["fault"]) == {
        "communicators-raise",
        "canary-perturb",
        "recovery-deadline",
    }  # noqa: E712
    cleanup = cleanup_frame(results)
    # the base arm's SIGTERM cleanup is recorded, not judged (faults.BASE_OVERRIDES): no row of the audit table;
    # the kill kind's row is its audit after the harness's sweep wherever vLLM's own is not judged
    assert len(cleanup) == 4 * (5 + len(BUILTIN_FAULTS)) - 2 and cleanup["ok"].all()
    matrix = {r["lane"]: r for r in records(step_matrix(results))}
    assert matrix["v2/head"]["restore-2"] == "failed"
    assert matrix["v1/base"]["overlay"] is None
    assert matrix["v1/head"]["faults"] == f"{len(BUILTIN_FAULTS)}/{len(BUILTIN_FAULTS)}"


def test_matrix_shows_extra_steps_after_the_core_ones(report_dir: Path) -> None:
    results = _results(report_dir)
    vs_head = {"runner": "v1", "arm": "base", "step": "vs-head", "outcome": "failed", "results": {}}
    results["steps"].append(cast(model.Step, vs_head))  # a partial record: the matrix reads these fields
    matrix = step_matrix(results)
    # after the core steps, the others in the procedure table's order (results.json's step order)
    assert list(matrix.columns)[-4:] == ["vs-head", "fault-artifact", "faults", "faults_ok"]
    assert records(matrix)[1]["vs-head"] == "failed"


def test_compare_all_on_an_empty_run(tmp_path: Path) -> None:
    (tmp_path / "evidence.jsonl").write_text("")
    comparisons = compare_all(assemble_file(tmp_path / "evidence.jsonl"))
    assert comparisons.digests.empty and comparisons.faults.empty


def _record_digests(directory: Path, runner: str, step: str, change: Callable[[dict[str, Any]], None]) -> Path:
    """Change one restore's digests in the evidence and record its comparison as the harness does
    (``checks.compare_digests`` against the lane's ordinary digests)."""
    evidence = directory / "evidence.jsonl"
    records = [json.loads(line) for line in evidence.read_text().splitlines()]
    steps = {(r["runner"], r["arm"], r["step"]): r for r in records if r["kind"] == "step"}
    restore = steps[(runner, "head", step)]
    change(restore["results"]["digests"])
    reference = steps[(runner, "head", "ordinary")]["results"]["digests"]
    restore["results"]["digest_compare"] = checks.compare_digests(reference, restore["results"]["digests"])
    evidence.write_text("".join(json.dumps(r) + "\n" for r in records))
    return evidence


def test_digest_rows_show_the_recorded_comparison_an_extra_parameter_is_extra(report_dir: Path) -> None:
    """A parameter the restore has and the ordinary server had not is recorded as ``extra``
    (``checks.compare_digests``); the table and its summary say so, never "missing"."""
    evidence = _record_digests(
        report_dir,
        "v1",
        "restore-1",
        lambda digests: digests.update({"extra.weight": {"sha256": "ee" * 32, "shape": [2], "dtype": "float16"}}),
    )
    results = assemble_file(evidence)
    compare = next(
        open_results(s)["digest_compare"]
        for s in results["steps"]
        if (s["runner"], s["arm"], s["step"]) == ("v1", "head", "restore-1")
    )
    assert (compare["extra"], compare["missing"], compare["ok"]) == (["extra.weight"], [], False)
    frame = digest_frame(results, "v1")
    assert frame.loc["extra.weight", "status"] == "extra"
    summary = {r["runner"]: r for r in records(digest_summary(results))}
    assert summary["v1"]["text"] == "30/31 unchanged (1 extra)" and not summary["v1"]["ok"]
    assert summary["v1"]["extra_names"] == ["extra.weight"] and summary["v1"]["missing_names"] == []
    check = next(c for c in results["verdict"]["checks"] if c["id"] == "digests")
    assert "1 extra" in check["result"] and "missing" not in check["result"]


def test_digest_rows_never_classify_a_parameter_themselves(report_dir: Path) -> None:
    """The status is the recorded comparison's: bytes that differ in the table without a comparison naming them
    (here edited after the run) are not turned into a finding by the report."""
    results = _results(report_dir)
    restore = next(s for s in results["steps"] if (s["runner"], s["arm"], s["step"]) == ("v1", "head", "restore-1"))
    open_results(restore)["digests"]["lm_head.weight"]["sha256"] = "ff" * 32
    frame = digest_frame(results, "v1")
    assert frame.loc["lm_head.weight", "restore-1"] == "ff" * 32
    assert frame.loc["lm_head.weight", "status"] == "unchanged"


def test_a_one_block_kv_difference_never_prints_as_zero() -> None:
    from vsnap_qual.report import figures

    one_block = -16 / 1_048_576 * 100  # 16 tokens of a million: −0.0015 %
    assert figures.percent(one_block) == "−0.0015%"
    assert figures.percent(-16 / 63_104 * 100) == "−0.03%"
    assert figures.percent(0) == "0.00%"
    assert figures.percent(0.005) == "+0.01%"


def test_a_changed_buffer_is_named_as_a_buffer_in_the_table_the_summary_and_the_validation_row(
    report_dir: Path,
) -> None:
    """A zeroed KV scale (a buffer) is counted and named apart from the parameters (issue #28, item 2)."""
    from vsnap_qual.report.frames import compare_all
    from vsnap_qual.report.html import render_html
    from vsnap_qual.report.validation_table import validation_checks

    evidence = report_dir / "evidence.jsonl"
    records_ = [json.loads(line) for line in evidence.read_text().splitlines()]
    buffers: dict[str, dict[str, Any]] = {
        "model.rotary_emb.cos_sin_cache": {"sha256": "c" * 64, "shape": [512, 32], "dtype": "float32"},
        "model.layers.0.self_attn.k_scale": {"sha256": "1" * 64, "shape": [], "dtype": "float32"},
    }
    steps = {(r["runner"], r["arm"], r["step"]): r for r in records_ if r["kind"] == "step"}
    for (runner, arm, _step), record in steps.items():
        digests = record.get("results", {}).get("digests")
        if runner != "v1" or digests is None:
            continue
        for name, entry in buffers.items():
            digests[name] = {**entry, "source": "buffer"}
        if (arm, _step) == ("head", "restore-1"):
            digests["model.layers.0.self_attn.k_scale"]["sha256"] = "0" * 64
    reference = steps[("v1", "head", "ordinary")]["results"]["digests"]
    for step in procedure.RESTORES:
        if (restore := steps.get(("v1", "head", step))) is not None and "digests" in restore["results"]:
            restore["results"]["digest_compare"] = checks.compare_digests(reference, restore["results"]["digests"])
    evidence.write_text("".join(json.dumps(r) + "\n" for r in records_))
    results = assemble_file(evidence)

    frame = digest_frame(results, "v1")
    assert frame.loc["model.layers.0.self_attn.k_scale", "kind"] == "buffer"
    assert frame.loc["model.layers.0.self_attn.k_scale", "status"] == "changed"
    assert frame.loc["model.rotary_emb.cos_sin_cache", "kind"] == "buffer"
    assert frame.loc["model.embed_tokens.weight", "kind"] == "parameter"
    summary = {r["runner"]: r for r in records(digest_summary(results))}["v1"]
    assert summary["buffers"] == 2 and summary["changed_buffer_names"] == ["model.layers.0.self_attn.k_scale"]
    assert summary["text"] == "31/32 unchanged (1 changed); 2 buffers, 1 changed", summary["text"]
    comparisons = compare_all(results)
    row = next(c for c in validation_checks(results, comparisons) if c["name"].startswith("parameter digests"))
    assert row["ok"] is False
    assert "v1 buffers changed: model.layers.0.self_attn.k_scale" in row["details"], row["details"]
    assert not any(d.startswith("v1 changed:") for d in row["details"]), row["details"]
    html = render_html(results, comparisons=comparisons)
    assert "<td>buffer</td>" in html and "buffers: model.layers.0.self_attn.k_scale" in html
