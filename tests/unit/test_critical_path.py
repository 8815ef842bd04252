"""Time to a verdict (``vsnap_qual/timing/critical_path.py``, ``bench/critical_path.py``): the critical path of a run's
steps beside its measured wall, on small synthetic runs whose answer is known, and on the committed GPU run."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, cast

import jsonschema
import pytest

from vsnap_qual import model, procedure
from vsnap_qual.faults.catalogue import FAULTS_BY_ID
from vsnap_qual.report import schema
from vsnap_qual.timing.critical_path import markdown, time_to_verdict

ROOT = Path(__file__).resolve().parents[2]
#: where the committed GPU runs are (docs/gpu-run/ until issue 43 moved them)
GPU_RUN_DIRS = (ROOT / "evidence" / "gpu",)
T0 = datetime(2026, 12, 7, 1, 0, 0, tzinfo=timezone.utc)
STEP_SCHEMA = jsonschema.Draft202012Validator(schema.record_schema("step"))


def step(
    lane: str,
    name: str,
    at: float,
    seconds: float,
    engine: float | None,
    *,
    worker: str = "gw0",
    results: dict[str, Any] | None = None,
) -> model.Step:
    """One step record of lane ``v1-head`` (runner-arm) as ``model.Step`` types it, started ``at`` seconds after
    T0; ``engine`` None: no ``engine_seconds`` recorded. Checked against the evidence schema as it is made."""
    runner, arm = lane.split("-")
    record = model.Step(
        time=(T0 + timedelta(seconds=at + seconds)).isoformat(),
        runner=runner,
        arm="head" if arm == "head" else "base",
        lane=lane,
        purpose="faults" if procedure.step(name).purpose == "faults" else "lifecycle",
        step=name,
        nodeid=f"suites/test_x.py::test_{name}[{lane}]",
        outcome="passed",
        message="",
        argv=None,
        exit_code=None,
        started=(T0 + timedelta(seconds=at)).isoformat(),
        ended=(T0 + timedelta(seconds=at + seconds)).isoformat(),
        seconds=seconds,
        logs=[],
        results=results or {},  # type: ignore[typeddict-item]
    )
    if engine is not None:
        record["engine_seconds"] = engine
    STEP_SCHEMA.validate({**record, "kind": "step"})
    return record


def run_of(steps: list[model.Step], workers: dict[str, str] | None = None) -> model.Results:
    """A ``results.json`` of these steps (the fields the critical path reads): its lanes' environments name each
    box's worker."""
    lanes = []
    for lane in dict.fromkeys(s["lane"] for s in steps):
        runner, arm = lane.split("-")
        worker = (workers or {}).get(lane, "gw0")
        envs = [{"lane": lane, "purpose": purpose, "worker": worker} for purpose in ("lifecycle", "faults")]
        lanes.append({"runner": runner, "arm": arm, "environment": envs[0], "other_environments": envs[1:]})
    return cast(model.Results, {"run": {}, "verdict": {"status": "pass"}, "lanes": lanes, "steps": steps})


def known_dag() -> model.Results:
    """v1-head's ordinary is long; v1-base's vs-head needs it: the path runs through the cross-lane edge (10 + 1 +
    3 = 14 engine seconds) and is longer than either lifecycle chain alone (11, 6). v2-head's lifecycle (9) and
    v1-head's faults (7) run beside it and add nothing."""
    return run_of(
        [
            step("v1-head", "ordinary", 0, 11, 10),
            step("v1-head", "create", 11, 2, 1),
            step("v1-base", "ordinary", 0, 3, 2, worker="gw1"),
            step("v1-base", "vs-head", 3, 1.5, 1),
            step("v1-base", "create", 4.5, 4, 3),
            step("v2-head", "ordinary", 13, 10, 9),
            step("v1-head", "fault-artifact", 23, 5, 4),
            step("v1-head", "fault:wake-raise", 28, 4, 3),
        ],
        workers={"v1-base": "gw1"},
    )


def test_the_critical_path_takes_the_cross_lane_edge_and_a_parallel_lane_adds_nothing() -> None:
    found = time_to_verdict(known_dag())
    engine = found.path("engine")
    assert engine.seconds == 14
    assert engine.steps == ("v1-head/ordinary", "v1-base/vs-head", "v1-base/create")
    assert found.path("steps").seconds == 11 + 1.5 + 4
    assert [(e.before, e.after) for e in found.needs] == [("v1-head/ordinary", "v1-base/vs-head")]
    # the measured run: 32 s of wall (0 → 32), 40.5 s of steps, two at once at most (gw0 and gw1)
    assert found.wall.steps_s == 32
    assert found.ratios.wall_per_engine_path == pytest.approx(32 / 14)
    assert found.concurrency.most_at_once == 2
    assert found.concurrency.serial_s == 40.5
    assert [w.worker for w in found.concurrency.workers] == ["gw0", "gw1"]
    # a lane's faults after its own lifecycle (as a worker runs them today): v1-head 10 + 1 + 4 + 3 = 18
    after = found.path("engine", "faults after lifecycle")
    assert (after.seconds, after.steps[-1]) == (18, "v1-head/fault:wake-raise")
    assert "v1-head/ordinary → v1-base/vs-head" in markdown(found)


def test_the_fault_lanes_weight_tamper_waits_for_its_own_lifecycle_ordinary() -> None:
    """The one thing a fault chain takes from its lifecycle chain (faults.WeightsInjector reads the lane's ordinary
    reference): a long ordinary puts the tamper step on the critical path, after it."""
    found = time_to_verdict(
        run_of(
            [
                step("v1-head", "ordinary", 0, 30, 30),
                step("v1-head", "fault-artifact", 0, 5, 5),
                step("v1-head", "fault:weight-tampered", 30, 6, 6),
            ]
        )
    )
    assert found.path("engine").steps == ("v1-head/ordinary", "v1-head/fault:weight-tampered")
    assert found.path("engine").seconds == 36


def test_the_observation_windows_idle_is_summed_and_an_unrecorded_one_is_said() -> None:
    def restore(lane: str, name: str, at: float, idle: float | None) -> model.Step:
        soak: dict[str, Any] = {"alive": True, "window_s": 30.0}
        if idle is not None:
            soak["idle_s"] = idle
        return step(lane, name, at, 31, 13, results={"soak": soak})

    found = time_to_verdict(run_of([restore("v1-head", "restore-1", 0, 18.0), restore("v1-head", "restore-2", 31, 17)]))
    assert found.chains[0].idle_s == 35
    assert found.totals.idle_s == 35
    assert found.chains[0].harness_s == 2 * (31 - 13)
    unrecorded = time_to_verdict(
        run_of([restore("v1-head", "restore-1", 0, 18.0), restore("v1-head", "restore-2", 31, None)])
    )
    assert unrecorded.chains[0].idle_s is None and unrecorded.totals.idle_s is None
    assert unrecorded.idle_unrecorded == ("v1-head/restore-2",)
    assert "window idle is not recorded" in markdown(unrecorded)


def test_a_step_without_engine_seconds_makes_the_engine_figures_not_recorded_not_zero() -> None:
    found = time_to_verdict(run_of([step("v1-head", "ordinary", 0, 11, 10), step("v1-head", "create", 11, 5, None)]))
    assert found.engine_missing == ("v1-head/create",)
    assert found.path("engine").seconds is None
    assert "v1-head/create" in (found.path("engine").missing or "")
    assert found.totals.engine_s is None and found.totals.harness_s is None
    assert found.chains[0].engine_s is None and found.ratios.wall_per_engine_path is None
    assert found.path("steps").seconds == 16  # what was recorded is still said
    said = markdown(found)
    assert "critical path, engine seconds, chains apart | not recorded" in said
    assert "`engine_seconds` not recorded for 1 step(s)" in said


def test_the_stall_and_refused_faults_and_their_follow_up_restores_are_summed() -> None:
    def fault(fault_id: str, at: float, seconds: float, engine: float, follow: float, seen: bool | None) -> model.Step:
        table = FAULTS_BY_ID[fault_id]
        return step(
            "v1-head", table.step, at, seconds, engine,
            results={
                "expected": dataclasses.asdict(table.expect("head")),
                "observed": {"exit_code": 1, "artifact_unchanged": seen},
                "followup_restore": {"exit_code": 0, "canary_ok": True, "seconds": follow},
            },
        )  # fmt: skip

    found = time_to_verdict(
        run_of(
            [
                step("v1-head", "fault-artifact", 0, 5, 4),
                fault("recovery-deadline", 5, 24, 22, 0.8, False),
                fault("identity-host", 29, 3, 1.5, 0.7, True),
                fault("pid-occupied", 32, 2.5, 1, 0.6, True),
                fault("port-in-use", 34.5, 3.5, 2, 0.9, False),
            ]
        )
    )
    assert found.stall.steps == ("v1-head/fault:recovery-deadline",)
    assert (found.stall.seconds, found.stall.engine_s, found.stall.followup_s) == (24, 22, 0.8)
    assert found.refusals.steps == ("v1-head/fault:identity-host", "v1-head/fault:pid-occupied")
    assert found.refusals.seconds == 5.5 and found.refusals.followup_s == pytest.approx(1.3)
    assert found.refusals.left_out == (
        "port-in-use (expected exit 1, artifact_unchanged None; observed artifact_unchanged False in 1)",
    )
    assert found.followups.n == 4 and found.followups.seconds == pytest.approx(3.0)


def committed_gpu_run() -> Path:
    """The run the GPU tier's README names first (the newest): the first name written as code there that is a run
    directory with its results.json."""
    for directory in GPU_RUN_DIRS:
        readme = directory / "README.md"
        if not readme.is_file():
            continue
        for name in re.findall(r"`([\w.-]+)/?`", readme.read_text(encoding="utf-8")):
            run: Path = directory / name
            if (run / "results.json").is_file():
                return run
    raise AssertionError(f"no README in {[str(d.relative_to(ROOT)) for d in GPU_RUN_DIRS]} names a run with results")


def test_the_script_on_the_committed_gpu_run_says_its_wall_beside_its_critical_path() -> None:
    run = committed_gpu_run()
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "critical_path.py"), "--json", str(run)],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    found = json.loads(done.stdout)
    steps = json.loads((run / "results.json").read_text())["steps"]
    starts = [datetime.fromisoformat(s["started"]) for s in steps]
    ends = [datetime.fromisoformat(s["ended"]) for s in steps]
    assert found["wall"]["steps_s"] == pytest.approx((max(ends) - min(starts)).total_seconds())
    engine = {f"{s['lane']}/{s['step']}": s["engine_seconds"] for s in steps}
    path = next(p for p in found["paths"] if p["weight"] == "engine" and p["layout"] == "chains apart")
    assert path["seconds"] == pytest.approx(sum(engine[label] for label in path["steps"]))
    # the floor: no shorter than any one chain's engine work, no longer than all of it
    assert max(c["engine_s"] for c in found["chains"]) <= path["seconds"] + 1e-9
    assert path["seconds"] < found["totals"]["engine_s"]
    assert found["ratios"]["wall_per_engine_path"] == pytest.approx(found["wall"]["steps_s"] / path["seconds"])
    assert not found["engine_missing"], "every step of the GPU runs since 12-02 records engine_seconds"
    runner = found["chains"][0]["lane"].split("-")[0]  # the base arm's vs-head waits for the head arm's ordinary
    assert {"before": f"{runner}-head/ordinary", "after": f"{runner}-base/vs-head"} in [
        {"before": e["before"], "after": e["after"]} for e in found["needs"]
    ]
