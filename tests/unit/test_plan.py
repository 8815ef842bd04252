"""The plan line before a run (``vsnap_qual/timing/plan.py``): the stall faults' bound and an estimate from a finished
run in the report root, scaled to the steps this run requires and the lanes that run at once."""

from __future__ import annotations

import json
from pathlib import Path

from vsnap_qual import procedure
from vsnap_qual.faults import BUILTIN_FAULTS
from vsnap_qual.timing import plan

LANES = ["v1-head", "v2-head", "v1-base", "v2-base"]
IDS = [f.id for f in BUILTIN_FAULTS]


def _required() -> list[str]:
    return procedure.required([(lane[:2], lane[3:], False) for lane in LANES], IDS)


def test_the_bound_is_what_the_stall_faults_may_wait_and_no_run_is_said_as_such(tmp_path: Path) -> None:
    line = plan.plan_line(LANES, _required(), IDS, 300.0, 30.0, 2, None)
    stalls = [f.id for f in BUILTIN_FAULTS if f.params is not None and f.params.waits_out_deadline()]
    assert stalls == ["recovery-deadline"]  # the cancellation faults stall too, but are signalled as recovery runs
    # 1 stall × at most 300 s × 4 lanes, 2 lanes at a time: up to 10 min (each lane's deadline is derived from what
    # it measured, the fault timeout its upper bound: faults.deadline)
    assert (
        "up to 10 min in the stall faults (1 per lane waits out its recovery deadline, derived from the lane's "
        "measured create and restores, at most the fault timeout, 2 lanes at a time)"
    ) in line
    assert line.startswith(f"plan: 4 lanes (v1-head, v2-head, v1-base, v2-base), {len(_required())} required steps")
    assert line.endswith("no finished run in the report root to estimate from")


def test_the_estimate_scales_a_previous_runs_step_medians_to_this_plan(tmp_path: Path) -> None:
    old = tmp_path / "old"
    old.mkdir()
    steps = [{"step": s.rsplit("/", 1)[-1], "seconds": 6.0} for s in _required() if not s.endswith("fresh-box")]
    (old / "results.json").write_text(json.dumps({"steps": steps}))
    (tmp_path / "this").mkdir()
    found = plan.previous_run(tmp_path, exclude=tmp_path / "this")
    assert found is not None and found[0] == old
    line = plan.plan_line(LANES, _required(), IDS, 20.0, 30.0, 2, found)
    counted = len(_required()) - 4  # fresh-box: a step the old run did not run
    assert f"about {counted * 6 / 2 / 60:.0f} min by the step times of old (4 of the steps it did not run" in line
    assert plan.previous_run(tmp_path, exclude=old) is None  # this run's own directory is never its estimate
