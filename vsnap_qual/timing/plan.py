"""The plan line printed before a run starts: lanes, required steps, the fault timeout and the observation window,
and how long it may take — up to what the stall faults wait (a stall no signal ends waits out its lane's recovery
deadline, derived from what the lane measured and at most the fault timeout) and, where a finished run lies in the
report root, what its steps took, scaled to this plan. A GPU run is long and its steps report only when they end:
the plan says up front what is coming."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from vsnap_qual.faults.catalogue import BUILTIN_FAULTS


def previous_run(report_root: Path, exclude: Path) -> tuple[Path, object] | None:
    """The newest finished run (``results.json``) in the report root other than this run's directory: its folder
    and its JSON as loaded (any run's, of any harness version: :func:`step_medians` reads what it needs)."""
    if not report_root.is_dir():
        return None
    found = sorted(
        (p for p in report_root.glob("*/results.json") if p.parent != exclude),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for path in found:
        try:
            return path.parent, json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    return None


def step_medians(results: object) -> dict[str, float]:
    """Median seconds of each step name in a finished run's ``results.json`` (steps that ran); none where it holds
    no list of steps."""
    from vsnap_qual.report.step_times import step_times  # not at import: the plan line's module loads with pytest

    steps = results.get("steps") if isinstance(results, dict) else None
    records = [step for step in steps if isinstance(step, dict)] if isinstance(steps, list) else []
    return {name: times.median for name, times in step_times(records).items()}


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def plan_line(
    lanes: Sequence[str],
    required: Sequence[str],
    fault_ids: Sequence[str],
    fault_timeout: float,
    observe_s: float,
    parallel: int,
    previous: tuple[Path, object] | None,
) -> str:
    """``plan: 4 lanes, 116 required steps (19 faults per lane), fault timeout 20 s, window 30 s; at least …``;
    ``parallel``: how many lanes run at once (one worker per runner under xdist)."""
    parallel = max(1, parallel)
    # a stall that no signal ends waits out its lane's recovery deadline, at most the fault timeout (derived from
    # the lane's measured create and restores: faults.deadline); the cancellation faults signal as recovery runs
    stalls = sum(
        1 for f in BUILTIN_FAULTS if f.id in fault_ids and f.params is not None and f.params.waits_out_deadline()
    )
    waited = stalls * fault_timeout * len(lanes) / parallel
    line = (
        f"plan: {len(lanes)} lanes ({', '.join(lanes)}), {len(required)} required steps "
        f"({len(fault_ids)} faults per lane), fault timeout {fault_timeout:g} s, window {observe_s:g} s after each "
        f"restore; up to {_minutes(waited)} in the stall faults ({stalls} per lane waits out its recovery deadline, "
        "derived from the lane's measured create and restores, at most the fault timeout"
        + (f", {parallel} lanes at a time" if parallel > 1 else "")
        + ")"
    )
    if previous is None:
        return line + "; no finished run in the report root to estimate from"
    where, results = previous
    medians = step_medians(results)
    names = [label.rsplit("/", 1)[-1] for label in required]
    known = [medians[name] for name in names if name in medians]
    if not known:
        return line + f"; {where.name} ran none of these steps"
    total = sum(known) / parallel
    said = f"; about {_minutes(total)} by the step times of {where.name}"
    if len(known) < len(names):
        said += f" ({len(names) - len(known)} of the steps it did not run not counted)"
    return line + said
