"""The canaries as the views show them: read straight from each step's records, its recorded judgement rendered and
never made again (``vsnap_qual.report.canary``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.report.synthetic_runs import MakeRun, RunSpec
from vsnap_qual import procedure
from vsnap_qual.report.assemble import assemble_file
from vsnap_qual.report.canary import canary_rows, canary_summary


def _results(directory: Path) -> Any:
    return assemble_file(directory / "evidence.jsonl")


def test_canary_statuses(report_dir: Path) -> None:
    rows = canary_rows(_results(report_dir))
    # 2 runners × 2 arms × 5 steps (ordinary, restore-1, restore-2, restore-after-stop, fresh-box) × 5 prompts
    assert len(rows) == 100
    (row,) = [r for r in rows if (r["runner"], r["arm"], r["step"], r["index"]) == ("v1", "head", "restore-1", 2)]
    assert row["status"] == "within tolerance"
    assert row["delta"] is not None and abs(row["delta"] - 0.0004) < 1e-9
    assert {r["status"] for r in rows if r["step"] == "ordinary"} == {"reference"}
    assert {r["status"] for r in rows if r["step"] != "ordinary"} == {"bit-exact", "within tolerance"}


def test_the_steps_that_carry_canaries_come_from_their_results_types() -> None:
    """Which steps carry canaries is what their results types declare, not a list kept by hand."""
    assert procedure.CANARY_STEPS == ("ordinary", "restore-1", "restore-2", "restore-after-stop", "fresh-box")
    assert procedure.RESTORES == ("restore-1", "restore-2", "restore-after-stop", "fresh-box")
    assert procedure.recording("digest_compare") == ("vs-head", *procedure.RESTORES)


def test_canary_rows_show_the_steps_recorded_judgement_and_never_recompute(report_dir: Path) -> None:
    results = _results(report_dir)
    restored = [r for r in canary_rows(results) if r["step"] != "ordinary"]
    assert sum(r["status"] == "bit-exact" for r in restored) == 79
    assert sum(r["status"] == "within tolerance" for r in restored) == 1
    # the restore's own judgement wins, even where the report could have computed another one
    step = next(s for s in results["steps"] if (s["runner"], s["arm"], s["step"]) == ("v1", "head", "restore-1"))
    step["results"]["canary_compare"][0]["ok"] = False
    first = next(r for r in canary_rows(results) if (r["runner"], r["arm"], r["step"]) == ("v1", "head", "restore-1"))
    assert first["ok"] is False and first["status"] == "mismatch"
    for step in results["steps"]:
        step.get("results", {}).pop("canary_compare", None)
    restored = [r for r in canary_rows(results) if r["step"] != "ordinary"]
    assert {r["status"] for r in restored} == {"not judged"} and {r["ok"] for r in restored} == {None}


def test_token_flip_is_a_mismatch(make_run: MakeRun) -> None:
    results = _results(make_run("flip", RunSpec(canary_token_flips=(("v2", "restore-1", 0),))))
    bad = [r for r in canary_rows(results) if not r["ok"]]
    assert [(r["runner"], r["step"], r["index"]) for r in bad] == [("v2", "restore-1", 0)]
    assert bad[0]["status"] == "mismatch"


def test_a_canary_summary_row_per_compared_step(report_dir: Path) -> None:
    summary = canary_summary(canary_rows(_results(report_dir)))
    # 2 runners × 2 arms × 4 restores; the ordinary reference is not compared with itself
    assert len(summary) == 16 and all(row["prompts"] == 5 for row in summary)
    (row,) = [r for r in summary if (r["runner"], r["arm"], r["step"]) == ("v1", "head", "restore-1")]
    assert (row["equal"], row["bit_exact"], row["ok"]) == (5, 4, True)
    assert row["max_abs_delta"] is not None and abs(row["max_abs_delta"] - 0.0004) < 1e-9
