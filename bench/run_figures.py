"""The figures of one finished run, from its ``results.json`` (side by side, medians with n; nothing re-judged):

- ordinary cold start (``vllm serve`` → ready) vs restore (``vllm snapshot restore`` → serving listener, restore-1
  and restore-2), and the follow-up restores after the faults;
- ``vllm snapshot create``;
- the engine's own time (``engine_seconds``: waiting on its commands, start, stop and HTTP answers) against the
  steps' time and the session's wall time (first to last record), the rest being the harness's.

Run: ``python bench/run_figures.py reports/<run>/results.json`` (the H200 figures of docs/gpu-run/ come from it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
from pathlib import Path
from typing import Any


def _series(values: list[float]) -> dict[str, Any] | None:
    if not values:
        return None
    return {"median": statistics.median(values), "n": len(values), "min": min(values), "max": max(values)}


def figures(results: dict[str, Any]) -> dict[str, Any]:
    """The run's figures; a series is None where the run has no such step."""
    steps = results["steps"]

    def ready(*names: str) -> list[float]:
        return [s["results"]["ready_seconds"] for s in steps if s["step"] in names and s["outcome"] == "passed"]

    followups = [
        s["results"]["followup_restore"]["seconds"]
        for s in steps
        if str(s["step"]).startswith("fault:") and ((s["results"] or {}).get("followup_restore") or {}).get("seconds")
    ]
    run = results["run"]
    wall = None
    if run.get("started") and run.get("ended"):
        wall = (dt.datetime.fromisoformat(run["ended"]) - dt.datetime.fromisoformat(run["started"])).total_seconds()
    return {
        "verdict": results["verdict"]["status"],
        "cold_start_ready_s": _series(ready("ordinary")),
        "restore_ready_s": _series(ready("restore-1", "restore-2")),
        "followup_restore_s": _series(followups),
        "create_s": _series([s["seconds"] for s in steps if s["step"] == "create" and s["outcome"] == "passed"]),
        "engine_s": sum(s.get("engine_seconds") or 0.0 for s in steps),
        "steps_s": sum(s.get("seconds") or 0.0 for s in steps),
        "wall_s": wall,
    }


def _line(name: str, series: dict[str, Any] | None) -> str:
    if series is None:
        return f"{name:28s} -"
    return f"{name:28s} median {series['median']:.2f} s (n={series['n']}, {series['min']:.2f}–{series['max']:.2f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, help="a run's results.json")
    args = parser.parse_args(argv)
    found = figures(json.loads(args.results.read_text()))
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
