"""The decode-speed row (``validation_table._decode``): one figure per restore (the judged slowdown), and for a
slowdown judged on a busy machine a note under it saying what was measured and how much of it was the machine's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.report.synthetic_runs import MakeRun, RunSpec
from vsnap_qual.report import write_reports


def _with_decode(directory: Path, judgement: dict[str, Any]) -> None:
    path = directory / "evidence.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record in records:
        if record["kind"] == "step" and record["step"] in ("restore-1", "restore-2"):
            record["results"]["decode_judgement"] = dict(judgement)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _row(directory: Path) -> dict[str, Any]:
    results = json.loads(write_reports(directory, github_step_summary=False).results_json.read_text())
    return next(c for c in results["verdict"]["checks"] if c["id"] == "decode")


def test_a_slowdown_the_machines_other_work_explains_is_one_figure_with_both_in_a_note(make_run: MakeRun) -> None:
    directory = make_run("decode", RunSpec(changed_digests=()))
    base = {"ordinary_tps": 1153.4, "restored_tps": 656.8, "tolerance": 1.75, "retried": False, "problems": []}
    _with_decode(
        directory, {**base, "measured_slowdown": 1.756, "machine_slowdown": 1.765, "slowdown": 0.995, "ok": True}
    )
    row = _row(directory)
    assert row["status"] == "pass"
    assert "restore-1 0.99×," in row["result"] and "measured" not in row["result"], row["result"]
    assert any(
        d.startswith("v1/head/restore-1: 0.99× is the measured slowdown 1.76× over the machine's own 1.76×")
        for d in row["details"]
    ), row["details"]
    _with_decode(directory, {**base, "measured_slowdown": 1.2, "machine_slowdown": 1.0, "slowdown": 1.2, "ok": True})
    row = _row(directory)
    assert "restore-1 1.20×," in row["result"] and "measured" not in row["result"]
    assert not any("machine's own" in d for d in row["details"]), "no note where the machine's work was not counted"
