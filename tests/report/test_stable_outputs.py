"""Machine-readable outputs a tool can key on: stable check ids, a fixed step order."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from tests.report.synthetic_runs import MakeRun, RunSpec
from vsnap_qual import model, procedure
from vsnap_qual.report import render_reports, write_reports
from vsnap_qual.report.assemble import assemble_file, read_evidence
from vsnap_qual.report.validation_table import CHECK_IDS

#: The same run shape with other figures: parameter count, KV capacity, Δ logprob, changed digests, step times.
OTHER_FIGURES = RunSpec(
    params=44,
    changed_digests=(("v1", "restore-1", "model.layers.2.mlp.down_proj.weight"),),
    canary_deltas=(("v2", "restore-2", 1, 0.0007), ("v1", "restore-1", 0, 0.02)),
    kv={
        ("v1", "head"): (40_000, 39_000),
        ("v1", "base"): (40_000, 39_500),
        ("v2", "head"): (41_104, 41_088),
        ("v2", "base"): (41_104, 41_088),
    },
    step_seconds_scale=1.7,
)


def _checks(directory: Path) -> list[dict[str, Any]]:
    write_reports(directory, github_step_summary=False)
    checks: list[dict[str, Any]] = json.loads((directory / "results.json").read_text())["verdict"]["checks"]
    return checks


def test_check_ids_are_stable_when_only_the_figures_differ(make_run: MakeRun) -> None:
    first = _checks(make_run("a", RunSpec()))
    second = _checks(make_run("b", OTHER_FIGURES))
    ids = [c["id"] for c in first]
    assert ids == [c["id"] for c in second] == list(CHECK_IDS)
    # the sentences and results carry the figures; the ids do not
    assert [c["result"] for c in first] != [c["result"] for c in second]
    assert all(c["name"] and c["name"] != c["id"] for c in first)
    by_id = {c["id"]: c for c in second}
    assert by_id["digests"]["status"] == "FAIL" and by_id["canary.single-token"]["status"] == "FAIL"
    # the judgements behind each row have stable ids too, and only their ok follows the data
    items = {c["id"]: [i["id"] for i in c["items"]] for c in first}
    assert items == {c["id"]: [i["id"] for i in c["items"]] for c in second}
    assert "digests.v1.head.restore-1" in items["digests"] and "lifecycle.v2.base.restart" in items["lifecycle"]
    assert "faults.v1.base.wake-raise" in items["faults"] and "kv" in items and items["ready"] == []
    second_items = {i["id"]: i["ok"] for c in second for i in c["items"]}
    first_items = {i["id"]: i["ok"] for c in first for i in c["items"]}
    assert first_items["digests.v1.head.restore-1"] is True and second_items["digests.v1.head.restore-1"] is False
    assert first_items["digests.v2.head.restore-2"] is False and second_items["digests.v2.head.restore-2"] is True


def test_rendering_again_keeps_the_recorded_ids(make_run: MakeRun, tmp_path: Path) -> None:
    directory = make_run("a", RunSpec())
    results = assemble_file(directory / "evidence.jsonl")
    render_reports(results, tmp_path / "again")
    again = json.loads((tmp_path / "again" / "results.json").read_text())
    assert [c["id"] for c in again["verdict"]["checks"]] == list(CHECK_IDS)


def _labels(results: model.Results) -> list[str]:
    return [procedure.label(s["runner"], s["arm"], s["step"]) for s in results["steps"]]


def test_steps_are_in_procedure_order_whatever_order_the_lanes_finished(make_run: MakeRun) -> None:
    directory = make_run("a", RunSpec(changed_digests=()))
    path = directory / "evidence.jsonl"
    written = assemble_file(path)
    records: list[dict[str, Any]] = read_evidence(path).records
    steps = [r for r in records if r["kind"] == "step"]
    random.Random(7).shuffle(steps)  # what two xdist workers interleaving their lanes can produce
    others = [r for r in records if r["kind"] != "step"]
    path.write_text("".join(json.dumps(r) + "\n" for r in [*others[:-1], *steps, others[-1]]))
    shuffled = assemble_file(path)
    assert _labels(shuffled) == _labels(written)
    order = procedure.step_order(written["coverage"]["faults"])
    keys = [
        (order[s["step"]], written["runners"].index(s["runner"]), written["arms"].index(s["arm"]))
        for s in shuffled["steps"]
    ]
    assert keys == sorted(keys)
    assert _labels(shuffled)[:4] == ["v1/head/ordinary", "v1/base/ordinary", "v2/head/ordinary", "v2/base/ordinary"]


def test_a_repeated_step_is_judged_by_its_last_record_after_ordering(make_run: MakeRun) -> None:
    directory = make_run("a", RunSpec(changed_digests=()))
    path = directory / "evidence.jsonl"
    records: list[dict[str, Any]] = read_evidence(path).records
    first = next(r for r in records if r.get("step") == "restore-1")
    failed_try = {**first, "outcome": "failed", "message": "first try"}
    index = records.index(first)
    records.insert(index, failed_try)  # the failed try was written before the passing one
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    results = assemble_file(path)
    tries = [s for s in results["steps"] if s["step"] == "restore-1" and s["runner"] == first["runner"]]
    tries = [s for s in tries if s["arm"] == first["arm"]]
    assert [s["outcome"] for s in tries] == ["failed", "passed"]
    assert results["verdict"]["status"] == "pass"
