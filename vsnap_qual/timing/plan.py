"""The plan line, printed once the run's tests are collected: the lanes and steps this run *selected* (after ``-m``,
``-k``, ``--deselect``, paths, ``--vsnap-runners`` and the shard: what will run, not what a full qualification
requires), the fault timeout and the observation window, what the stall faults may wait (a stall no signal ends
waits out its lane's recovery deadline, derived from what the lane measured and at most the fault timeout), and how
long the selected steps took in kept runs (``--vsnap-plan-history``: a previous run's ``results.json`` or a
directory of kept runs, ``vsnap-qual history``'s). A GPU run is long and its steps report only when they end: the
plan says up front what is coming.

The estimate reads only runs that recorded steps (an empty or unreadable ``results.json`` is none) of the same
image family (the image less its tag and digest: ``vllm/vllm-openai:nightly-a`` and ``:nightly-b`` are one) and
the same CPU-smoke mode: the newest :data:`HISTORY_RUNS` of them, each step's median over them. Without any it says
so plainly: ``no estimate: no previous run``."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vsnap_qual import procedure
from vsnap_qual.faults.catalogue import BUILTIN_FAULTS

#: how many of the newest related runs the estimate reads
HISTORY_RUNS = 7


@dataclass(frozen=True)
class Estimate:
    """Step seconds from kept runs: each step name's median over :attr:`runs`; :attr:`none` says why there is no
    estimate when there are no runs."""

    medians: dict[str, float] = field(default_factory=dict)
    runs: tuple[str, ...] = ()
    none: str = "no estimate: no previous run"


def step_medians(results: object) -> dict[str, float]:
    """Median seconds of each step name in a finished run's ``results.json`` (steps that ran); none where it holds
    no list of steps."""
    from vsnap_qual.report.step_times import step_times  # not at import: the plan line's module loads with pytest

    steps = results.get("steps") if isinstance(results, dict) else None
    records = [step for step in steps if isinstance(step, dict)] if isinstance(steps, list) else []
    return {name: times.median for name, times in step_times(records).items()}


def _image_family(ref: str) -> str:
    from vsnap_qual.report.history import image_family  # not at import: the plan's module loads with pytest

    return image_family(ref)


def estimate(history: Path | None, image: str, cpu_smoke: bool, *, window: int = HISTORY_RUNS) -> Estimate:
    """The step medians of the newest ``window`` runs in ``history`` of ``image``'s family and this CPU-smoke mode
    that recorded steps; an :class:`Estimate` with none and the reason when there is no such run."""
    if history is None:
        return Estimate(none="no estimate: no previous run (no --vsnap-plan-history)")
    from vsnap_qual.report.history import find_runs, load  # not at import: pandas and jinja2 load with the report

    family = _image_family(image)
    try:
        paths = find_runs([history])
    except ValueError:
        paths = []
    related, other = [], 0
    for path in paths:
        try:
            results = load(path)
        except ValueError:
            continue  # unreadable, `{}`, another schema: no run to estimate from
        steps = [s for s in results["steps"] if isinstance(s, dict)]
        options = results["run"]["options"]
        if not steps:
            continue
        if _image_family(str(options.get("image") or "")) != family or bool(options.get("cpu_smoke")) != cpu_smoke:
            other += 1
            continue
        related.append((str(results["run"].get("started") or ""), str(results["run"].get("run_id") or path), steps))
    if not related:
        said = f"no estimate: no previous run of {family} in {history}"
        return Estimate(none=said + (f" ({other} of other images or modes)" if other else ""))
    related.sort(key=lambda r: r[0], reverse=True)
    used = related[:window]
    per_run = [step_medians({"steps": steps}) for _, _, steps in used]
    names = {name for medians in per_run for name in medians}
    medians = {name: statistics.median(m[name] for m in per_run if name in m) for name in names}
    return Estimate(medians=medians, runs=tuple(run_id for _, run_id, _ in used))


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def plan_line(
    selected: Sequence[str],
    fault_timeout: float,
    observe_s: float,
    parallel: int,
    found: Estimate,
    *,
    deselected: int = 0,
) -> str:
    """``plan: 2 lanes (v1/head, v1/base), 12 selected steps (4 faults per lane), …; about 9 min by …``.
    ``selected``: the ``runner/arm/step`` labels of the collected steps; ``parallel``: how many lanes run at once
    (one worker per runner under xdist); ``deselected``: steps the selection left out."""
    parallel = max(1, parallel)
    lanes = list(dict.fromkeys(label.rsplit("/", 1)[0] for label in selected))
    names = [label.rsplit("/", 1)[-1] for label in selected]
    faults = [n for n in names if procedure.is_fault_step(n)]
    per_lane = {
        lane: sum(1 for label in selected if label.startswith(lane + "/") and "/fault:" in label) for lane in lanes
    }
    counts = sorted(set(per_lane.values()))
    fault_said = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}" if counts else "0"
    # a stall that no signal ends waits out its lane's recovery deadline, at most the fault timeout (derived from
    # the lane's measured create and restores: faults.deadline); the cancellation faults signal as recovery runs
    stall_ids = {
        procedure.FAULT_PREFIX + f.id for f in BUILTIN_FAULTS if f.params is not None and f.params.waits_out_deadline()
    }
    stalls = sum(1 for n in faults if n in stall_ids)
    waited = stalls * fault_timeout / parallel
    line = (
        f"plan: {len(lanes)} lane{'s' if len(lanes) != 1 else ''} ({', '.join(lanes) or 'none'}), "
        f"{len(selected)} selected step{'s' if len(selected) != 1 else ''}"
        + (f" ({deselected} deselected)" if deselected else "")
        + f" ({fault_said} faults per lane), fault timeout {fault_timeout:g} s, window {observe_s:g} s after each "
        "restore"
    )
    if stalls:
        line += (
            f"; up to {_minutes(waited)} in the stall faults ({stalls} wait out their lane's recovery deadline, "
            "derived from the lane's measured create and restores, at most the fault timeout"
            + (f", {parallel} lanes at a time" if parallel > 1 else "")
            + ")"
        )
    if not found.runs:
        return f"{line}; {found.none}"
    known = [found.medians[name] for name in names if name in found.medians]
    runs = f"{len(found.runs)} previous run{'s' if len(found.runs) != 1 else ''} (newest {found.runs[0]})"
    if not known:
        return f"{line}; no estimate: {runs} ran none of these steps"
    said = f"; about {_minutes(sum(known) / parallel)} by the step medians of {runs}"
    if len(known) < len(names):
        said += f" ({len(names) - len(known)} of the steps they did not run not counted)"
    return line + said
