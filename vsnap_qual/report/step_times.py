"""A finished run's time per step, from its recorded steps: each step's wall ``seconds``, the engine's own
``engine_seconds`` (waiting on its commands, starts, stops and HTTP answers) and the harness's, the rest.

The one place this arithmetic is written: the report's timing sentence (``report.html.harness_time``), the plan
line's estimate (``timing.plan.step_medians``), ``timing.run_figures`` and ``timing.critical_path`` read it from here.
It lives with the report, a reader of recorded steps like them, so the report imports nothing above its island.
Pure and import-light (no pandas).
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StepTimes:
    """The timed records of one step name (``ordinary``, ``fault:wake-raise``), over every lane that ran it."""

    seconds: tuple[float, ...]
    #: the engine's own seconds of each record, 0 where none was recorded
    engine: tuple[float, ...]
    #: the observation window's idle seconds of each record (the watch's pauses between its looks at a restored
    #: server, ``results.soak.idle_s``): a wait the user asked for, neither the engine's work nor the harness's
    idle: tuple[float, ...] = ()

    @property
    def n(self) -> int:
        return len(self.seconds)

    @property
    def total(self) -> float:
        return sum(self.seconds)

    @property
    def engine_total(self) -> float:
        return sum(self.engine)

    @property
    def harness(self) -> tuple[float, ...]:
        """The harness's own seconds of each record: its seconds less the engine's."""
        return tuple(s - e for s, e in zip(self.seconds, self.engine, strict=True))

    @property
    def harness_total(self) -> float:
        return self.total - self.engine_total

    @property
    def idle_total(self) -> float:
        return sum(self.idle)

    @property
    def work(self) -> tuple[float, ...]:
        """The harness's own work of each record: its seconds less the engine's and the window's idle time."""
        idle = self.idle or (0.0,) * self.n
        return tuple(h - i for h, i in zip(self.harness, idle, strict=True))

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def harness_median(self) -> float:
        return statistics.median(self.harness)


def step_times(steps: Iterable[Mapping[str, Any]]) -> dict[str, StepTimes]:
    """The steps that ran (a recorded, non-zero ``seconds``) by step name, in the order the names first appear."""
    seconds: dict[str, list[float]] = {}
    engine: dict[str, list[float]] = {}
    idle: dict[str, list[float]] = {}
    for step in steps:
        if not step.get("seconds"):
            continue
        name = str(step["step"])
        seconds.setdefault(name, []).append(float(step["seconds"]))
        engine.setdefault(name, []).append(float(step.get("engine_seconds") or 0.0))
        soak = (step.get("results") or {}).get("soak") or {}
        idle.setdefault(name, []).append(float(soak.get("idle_s") or 0.0))
    return {name: StepTimes(tuple(values), tuple(engine[name]), tuple(idle[name])) for name, values in seconds.items()}


def totals(times: Mapping[str, StepTimes]) -> tuple[float, float]:
    """(the steps' seconds, the engine's own seconds) summed over every step name."""
    return sum(t.total for t in times.values()), sum(t.engine_total for t in times.values())


def idle_total(times: Mapping[str, StepTimes]) -> float:
    """The observation window's idle seconds summed over every step name."""
    return sum(t.idle_total for t in times.values())


def _seconds(stamp: object) -> float | None:
    try:
        return dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def lanes_overlapped(steps: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, float]]:
    """Each pair of lanes whose steps ran at the same time, with the seconds they did (issue 45: the run says
    which lanes overlapped), from the steps' ``started`` and ``ended``; a lane is its ``lane`` (else runner-arm),
    its lifecycle and faults steps together. Pairs by lane name; none that never met."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for step in steps:
        start, end = _seconds(step.get("started")), _seconds(step.get("ended"))
        if start is None or end is None or end <= start:
            continue
        lane = str(step.get("lane") or f"{step.get('runner')}-{step.get('arm')}")
        spans.setdefault(lane, []).append((start, end))
    names = sorted(spans)
    found: list[tuple[str, str, float]] = []
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            shared = sum(
                max(0.0, min(a_end, b_end) - max(a_start, b_start))
                for a_start, a_end in spans[first]
                for b_start, b_end in spans[second]
            )
            if shared > 0:
                found.append((first, second, round(shared, 1)))
    return found
