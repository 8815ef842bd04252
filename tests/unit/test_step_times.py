"""A run's time per step (``vsnap_qual/report/step_times.py``): the one arithmetic the report's timing sentence, the
plan line's estimate and ``bench/run_figures.py`` share."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from vsnap_qual import model
from vsnap_qual.report.html import harness_time
from vsnap_qual.report.step_times import step_times, totals
from vsnap_qual.timing import plan, run_figures

ROOT = Path(__file__).resolve().parents[2]
STEPS: list[dict[str, Any]] = [  # the fields step_times reads of a step record
    {"step": "ordinary", "seconds": 13.0, "engine_seconds": 12.0},
    {"step": "fault:wake-raise", "seconds": 4.0, "engine_seconds": 1.0},
    {"step": "fault:wake-raise", "seconds": 7.0},  # no engine time recorded: all of it the harness's
    {"step": "ordinary", "seconds": 11.0, "engine_seconds": 10.5},
    {"step": "overlay", "seconds": 0.0, "engine_seconds": 3.0},  # did not run: not counted at all
    {"step": "vs-head", "seconds": None},
]


def test_step_times_group_by_step_and_split_the_engines_time_from_the_harnesss() -> None:
    times = step_times(STEPS)
    assert list(times) == ["ordinary", "fault:wake-raise"]  # as first seen; steps that did not run are left out
    fault = times["fault:wake-raise"]
    assert (fault.n, fault.total, fault.engine_total, fault.harness) == (2, 11.0, 1.0, (3.0, 7.0))
    assert (fault.median, fault.harness_median, fault.harness_total) == (5.5, 5.0, 10.0)
    ordinary = times["ordinary"]
    assert (ordinary.median, ordinary.harness) == (12.0, (1.0, 0.5))
    assert totals(times) == (35.0, 23.5)
    assert step_times([]) == {}


def test_the_report_the_plan_and_the_bench_say_the_same_times() -> None:
    times = step_times(STEPS)
    assert plan.step_medians({"steps": STEPS}) == {name: t.median for name, t in times.items()}
    said = harness_time(cast(model.Results, {"steps": STEPS}))
    assert said == (
        "Steps 35 s, of which the engine's own 24 s and the harness's 12 s (steps / engine 1.49); "
        "the harness's median per fault step 5.00 s (n=2)."
    )
    bench = [{**step, "outcome": "failed", "results": {}} for step in STEPS]  # the fields the bench reads besides
    found = run_figures.figures(cast(model.Results, {"steps": bench, "run": {}, "verdict": {"status": "fail"}}))
    assert found["harness_by_step"]["fault:wake-raise"] == {
        "n": 2, "engine_s": 1.0, "steps_s": 11.0, "harness_median_s": 5.0, "idle_s": 0.0,
    }  # fmt: skip
    assert (found["steps_s"], found["engine_s"]) == totals(times)
    fault_harness = found["fault_harness_s"]
    assert fault_harness is not None and fault_harness["median"] == times["fault:wake-raise"].harness_median


def test_the_observation_windows_idle_time_is_kept_apart_from_the_harnesss_work() -> None:
    """A restore's watch pauses (``results.soak.idle_s``) are the window the user asked for: step_times keeps them
    apart, so the harness's own work is its time less the engine's and the window's."""
    from vsnap_qual.report.step_times import idle_total, step_times

    times = step_times(
        [
            {"step": "restore-1", "seconds": 30.0, "engine_seconds": 10.0, "results": {"soak": {"idle_s": 18.0}}},
            {"step": "restore-1", "seconds": 31.0, "engine_seconds": 12.0, "results": {"soak": {"idle_s": 17.0}}},
            {"step": "create", "seconds": 3.0, "engine_seconds": 2.5, "results": {}},
        ]
    )
    assert times["restore-1"].harness == (20.0, 19.0) and times["restore-1"].work == (2.0, 2.0)
    assert times["create"].work == (0.5,) and idle_total(times) == 35.0


def test_the_lanes_whose_steps_ran_at_the_same_time_are_paired_with_their_seconds() -> None:
    """Issue 45: the run says which lanes overlapped, from its steps' times (a lane's two boxes are one lane)."""
    from vsnap_qual.report.step_times import lanes_overlapped

    def step(lane: str, start: str, end: str) -> dict[str, Any]:
        return {"lane": lane, "started": f"2026-12-07T10:00:{start}+00:00", "ended": f"2026-12-07T10:00:{end}+00:00"}

    steps = [
        step("v1-head", "00", "10"), step("v1-head", "10", "20"),  # lifecycle, then faults
        step("v1-base", "05", "15"),
        step("v2-head", "30", "40"),  # met none
        {"runner": "v2", "arm": "base", "started": "2026-12-07T10:00:35+00:00", "ended": "2026-12-07T10:00:50+00:00"},
        {"lane": "v1-head", "started": None, "ended": None},  # not timed: not counted
    ]  # fmt: skip
    assert lanes_overlapped(steps) == [("v1-base", "v1-head", 10.0), ("v2-base", "v2-head", 5.0)]
    assert lanes_overlapped(steps[:2]) == []
