"""The plan line (``vsnap_qual/timing/plan.py``): what the run *selected* (lanes, steps, the stall faults among them)
and an estimate from kept runs of the same image family (``--vsnap-plan-history``), never from an empty or
unreadable ``results.json`` nor from another image's run; without any, "no estimate: no previous run"."""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from vsnap_qual import procedure
from vsnap_qual.faults import BUILTIN_FAULTS
from vsnap_qual.options import parse_plan_history
from vsnap_qual.timing import plan

ROOT = Path(__file__).resolve().parents[2]
H100 = ROOT / "evidence" / "gpu" / "2026-12-07-v1-full-d575706" / "results.json.gz"
REAL = ROOT / "evidence" / "real-vllm" / "2026-12-02-full-f7df29a" / "results.json"
IDS = [f.id for f in BUILTIN_FAULTS]
LANES = ["v1/head", "v2/head", "v1/base", "v2/base"]


def _all() -> list[str]:
    return procedure.required([(lane[:2], lane[3:], False) for lane in LANES], IDS)


def _h100() -> dict[str, Any]:
    found: dict[str, Any] = json.loads(gzip.decompress(H100.read_bytes()))
    return found


def _keep(history: Path, name: str, results: object) -> Path:
    (history / name).mkdir(parents=True)
    path = history / name / "results.json"
    path.write_text(json.dumps(results))
    return path


def test_without_history_it_says_so_plainly() -> None:
    line = plan.plan_line(_all(), 300.0, 30.0, 2, plan.estimate(None, "img:tag", False))
    assert line.endswith("; no estimate: no previous run (no --vsnap-plan-history)"), line
    assert line.startswith(f"plan: 4 lanes (v1/head, v2/head, v1/base, v2/base), {len(_all())} selected steps")
    # 1 stall × at most 300 s × 4 lanes, 2 lanes at a time: up to 10 min
    assert "up to 10 min in the stall faults (4 wait out their lane's recovery deadline" in line
    assert "2 lanes at a time" in line


def test_the_line_counts_only_what_the_selection_kept() -> None:
    """``-m 'not fault' --vsnap-runners=v1``: two lanes, their lifecycle steps, no fault and so no stall bound."""
    chosen = [s for s in _all() if s.startswith("v1/") and "/fault" not in s]
    line = plan.plan_line(chosen, 300.0, 30.0, 1, plan.Estimate(), deselected=len(_all()) - len(chosen))
    assert line.startswith(
        f"plan: 2 lanes (v1/head, v1/base), {len(chosen)} selected steps ({len(_all()) - len(chosen)} deselected) "
        "(0 faults per lane)"
    ), line
    assert "stall" not in line
    one = plan.plan_line(["v1/head/restore-1"], 300.0, 30.0, 1, plan.Estimate())
    assert one.startswith("plan: 1 lane (v1/head), 1 selected step (0 faults per lane)"), one


def test_the_estimate_is_the_median_of_the_newest_runs_of_the_same_image_family(tmp_path: Path) -> None:
    history = tmp_path / "history"
    h100 = _h100()
    family = h100["run"]["options"]["image"]
    _keep(history, "a-older", h100)
    newer = json.loads(json.dumps(h100))
    newer["run"]["options"]["image"] = family + ":another-tag"  # one family, another tag: a night's new image
    newer["run"]["started"] = "2026-12-08T00:00:00+00:00"
    newer["run"]["run_id"] = "the-newer-night"
    for step in newer["steps"]:
        step["seconds"] = 3 * float(step["seconds"] or 0)
    _keep(history, "b-newer", newer)
    _keep(history, "c-empty", {})  # a run that wrote `{}`: never an estimate
    (history / "d-unreadable").mkdir()
    (history / "d-unreadable" / "results.json").write_text("not json")
    (history / "e-other-image").mkdir()
    (history / "e-other-image" / "results.json").write_bytes(REAL.read_bytes())
    found = plan.estimate(history, family + ":tonight", False)
    assert found.runs == ("the-newer-night", h100["run"]["run_id"]), "the two runs of the family, newest first"
    create = [float(s["seconds"]) for s in h100["steps"] if s["step"] == "create"]
    assert found.medians["create"] == pytest.approx(2 * sorted(create)[len(create) // 2], rel=0.3)  # median(1×, 3×)
    lifecycle = [s for s in _all() if s.startswith("v1/") and "/fault" not in s]
    line = plan.plan_line(lifecycle, 20.0, 30.0, 1, found)
    assert "by the step medians of 2 previous runs (newest the-newer-night)" in line, line
    assert plan.estimate(history, family, False, window=1).runs == ("the-newer-night",)


def test_no_run_of_this_image_is_no_estimate_and_an_empty_results_json_is_never_one(tmp_path: Path) -> None:
    history = tmp_path / "history"
    _keep(history, "empty", {})
    (history / "other").mkdir()
    (history / "other" / "results.json").write_bytes(REAL.read_bytes())
    found = plan.estimate(history, "vllm/vllm-openai:nightly-abc", False)
    assert not found.runs
    assert found.none == f"no estimate: no previous run of vllm/vllm-openai in {history} (1 of other images or modes)"
    line = plan.plan_line(_all(), 20.0, 30.0, 2, found)
    assert line.endswith(found.none)
    # the same image in CPU smoke mode is another mode
    assert not plan.estimate(history, "vsnap-vllm-cpu:0.32.0", False).runs
    assert plan.estimate(history, "vsnap-vllm-cpu:0.31.0", True).runs, "the real-vLLM run, CPU smoke, its family"
    # a results.json given alone is a history of one run
    assert plan.estimate(history / "other" / "results.json", "vsnap-vllm-cpu:x", True).runs


def test_an_empty_history_directory_is_no_previous_run(tmp_path: Path) -> None:
    assert plan.estimate(tmp_path, "img:1", False).none == f"no estimate: no previous run of img in {tmp_path}"


def test_a_history_that_does_not_exist_is_refused_naming_the_fix(tmp_path: Path) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="does not exist: give a previous run's results.json"):
        parse_plan_history(str(tmp_path / "nowhere"))
    assert parse_plan_history("") is None
    assert parse_plan_history(str(tmp_path)) == tmp_path
