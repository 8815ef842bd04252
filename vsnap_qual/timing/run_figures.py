"""The figures of one finished run, from its ``results.json`` (side by side, medians with n; nothing re-judged):

- ordinary cold start (``vllm serve`` → ready) vs restore (``vllm snapshot restore`` → serving listener, restore-1
  and restore-2), and the follow-up restores after the faults;
- ``vllm snapshot create``;
- the engine's own time (``engine_seconds``: waiting on its commands, start, stop and HTTP answers, and on its
  killed trees' teardown until their PIDs are free, up to the last look that still found one held:
  ``faults.tools.wait_engine_gone``; likewise on what a faulted or killed command left, where it then went by itself:
  ``faults.tools.credit_teardown``) against the steps' time and the session's wall time (first to last record), the
  rest being the harness's;
- the harness's own time per step (steps − engine, summed over the lanes, with its median per step) and, for the
  fault steps, per phase of their sequence (``results.phases``, recorded by the run itself: ``faults.Phases``).

Run: ``.venv/bin/python bench/run_figures.py reports/<run>/results.json`` (the H200 figures of evidence/gpu/ come
from it); the benchmarks and the evidence tests import :func:`figures` from here. The per-step arithmetic is
``vsnap_qual/report/step_times.py``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
from pathlib import Path
from typing import TypedDict

from vsnap_qual import model, procedure
from vsnap_qual.procedure import results_as
from vsnap_qual.report.recorded import Ready
from vsnap_qual.report.step_times import idle_total, step_times, totals


class Series(TypedDict):
    """Some seconds, one per step or phase that ran: their median, count, least, most and sum."""

    median: float
    n: int
    min: float
    max: float
    total: float


class StepHarness(TypedDict):
    """One step name's time over every lane that ran it: the engine's, the step's, the observation window's idle
    seconds, and the median of the harness's own."""

    n: int
    engine_s: float
    steps_s: float
    harness_median_s: float
    idle_s: float


class RunFigures(TypedDict):
    """A finished run's figures; a series is None where the run has no such step."""

    harness_by_step: dict[str, StepHarness]
    fault_phases: dict[str, Series | None]
    fault_harness_s: Series | None
    verdict: str
    cold_start_ready_s: Series | None
    restore_ready_s: Series | None
    followup_restore_s: Series | None
    create_s: Series | None
    engine_s: float
    steps_s: float
    idle_s: float
    wall_s: float | None


def _series(values: list[float]) -> Series | None:
    if not values:
        return None
    return Series(median=statistics.median(values), n=len(values), min=min(values), max=max(values), total=sum(values))


def figures(results: model.Results) -> RunFigures:
    """The run's figures; a series is None where the run has no such step."""
    steps = results["steps"]

    def ready(*names: str) -> list[float]:
        passed = [
            (results_as(s, Ready) or Ready()).get("ready_seconds")
            for s in steps
            if s["step"] in names and s["outcome"] == "passed"
        ]
        return [seconds for seconds in passed if seconds is not None]

    faults = [found for s in steps if (found := results_as(s, model.FaultResults)) is not None]
    followups = [follow["seconds"] for f in faults if (follow := f.get("followup_restore")) and follow.get("seconds")]
    started, ended = results["run"].get("started"), results["run"].get("ended")
    wall = None
    if started and ended:
        wall = (dt.datetime.fromisoformat(ended) - dt.datetime.fromisoformat(started)).total_seconds()
    times = step_times(steps)
    harness = {
        name: StepHarness(
            n=t.n, engine_s=t.engine_total, steps_s=t.total, harness_median_s=t.harness_median, idle_s=t.idle_total
        )
        for name, t in times.items()
    }
    # each phase's own time less what it spent waiting on the engine (``results.phases_engine``, where recorded)
    phases: dict[str, list[float]] = {}
    for recorded in faults:
        engine_share = recorded.get("phases_engine") or {}
        for name, seconds in (recorded.get("phases") or {}).items():
            phases.setdefault(name, []).append(float(seconds) - float(engine_share.get(name) or 0.0))
    fault_harness = [h for name, t in times.items() if name.startswith("fault:") for h in t.harness]
    steps_s, engine_s = totals(times)
    return {
        "harness_by_step": harness,
        "fault_phases": {name: _series(values) for name, values in phases.items()},
        "fault_harness_s": _series(fault_harness),
        "verdict": results["verdict"]["status"],
        "cold_start_ready_s": _series(ready(procedure.ORDINARY)),
        "restore_ready_s": _series(ready(procedure.RESTORE_1, procedure.RESTORE_2)),
        "followup_restore_s": _series(followups),
        "create_s": _series(
            [s["seconds"] for s in steps if s["step"] == procedure.CREATE and s["outcome"] == "passed"]
        ),
        "engine_s": engine_s,
        "steps_s": steps_s,
        "idle_s": idle_total(times),
        "wall_s": wall,
    }


def _line(name: str, series: Series | None) -> str:
    if series is None:
        return f"{name:28s} -"
    return f"{name:28s} median {series['median']:.2f} s (n={series['n']}, {series['min']:.2f}–{series['max']:.2f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, help="a run's results.json (or a committed results.json.gz)")
    args = parser.parse_args(argv)
    from vsnap_qual.report.assemble import load_results

    found = figures(load_results(args.results))
    print(f"verdict                      {found['verdict']}")
    print(_line("ordinary cold start, ready", found["cold_start_ready_s"]))
    print(_line("restore, ready", found["restore_ready_s"]))
    print(_line("follow-up restores (faults)", found["followup_restore_s"]))
    print(_line("snapshot create", found["create_s"]))
    cold, restore = found["cold_start_ready_s"], found["restore_ready_s"]
    if cold and restore:
        print(f"{'restore / cold start':28s} {restore['median'] / cold['median']:.2f}")
    print(f"{'engine / steps / wall':28s} {found['engine_s']:.0f} s / {found['steps_s']:.0f} s / ", end="")
    print(f"{found['wall_s']:.0f} s" if found["wall_s"] is not None else "-")
    if found["wall_s"] and found["engine_s"]:
        print(f"{'wall / engine':28s} {found['wall_s'] / found['engine_s']:.2f}")
        if found["idle_s"]:
            less = (found["wall_s"] - found["idle_s"]) / found["engine_s"]
            print(f"{'(wall − window idle) / engine':28s} {less:.2f} (window idle {found['idle_s']:.0f} s)")
    print(_line("harness time per fault", found["fault_harness_s"]))
    print()
    print(f"{'step':28s} {'n':>3s} {'engine s':>9s} {'window s':>9s} {'steps s':>9s} {'harness s':>9s} {'median':>7s}")
    for name, row in sorted(found["harness_by_step"].items(), key=lambda kv: -(kv[1]["steps_s"] - kv[1]["engine_s"])):
        own = row["steps_s"] - row["engine_s"]
        print(
            f"{name:28s} {row['n']:3d} {row['engine_s']:9.1f} {row['idle_s']:9.1f} {row['steps_s']:9.1f} "
            f"{own:9.1f} {row['harness_median_s']:7.2f}"
        )
    if found["fault_phases"]:
        print()
        print(f"{'fault phase (harness s)':28s} {'n':>3s} {'median s':>9s} {'total s':>9s}")
        for name, series in found["fault_phases"].items():
            assert series is not None
            print(f"{name:28s} {series['n']:3d} {series['median']:9.2f} {series['total']:9.1f}")
    return 0
