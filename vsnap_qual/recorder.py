"""Step bookkeeping of a lane, whatever runtime it has: outcomes, prerequisites, one evidence record per step,
engine time, log paths. (The Docker toolset is ``docker_lane.LaneRun``; the steps are ``steps``.)"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from vsnap_qual import model, procedure
from vsnap_qual.config import Lane
from vsnap_qual.evidence import EvidenceStore, utc_now


@dataclass(kw_only=True)
class StepRecorder:
    """Records a lane's steps: each ends as one ``step`` evidence record; a step whose prerequisite did not pass
    is skipped naming it."""

    lane: Lane
    store: EvidenceStore
    purpose: str = "lifecycle"
    outcomes: dict[str, str] = field(default_factory=dict)  # step -> "passed" | failure message
    last_logs: list[str] = field(default_factory=list)  # report-relative paths, newest last
    engine_time: float = 0.0  # seconds spent waiting on the engine in the current step (commands, HTTP)

    def require(self, *steps: str) -> None:
        """Skip the calling step when a prerequisite did not pass, naming it."""
        for step in steps:
            outcome = self.outcomes.get(step)
            if outcome != "passed":
                reason = "did not run" if outcome is None else outcome.splitlines()[0][:300]
                pytest.skip(f"{self.lane.name}: prerequisite {step} did not pass ({reason})")

    @contextlib.contextmanager
    def step(self, name: str, nodeid: str = "", requires: tuple[str, ...] | None = None) -> Iterator[dict[str, Any]]:
        """Record one step: its results dict is filled by the body; the outcome comes from how it ends.
        Its prerequisites are the procedure table's (``requires`` overrides them)."""
        if requires is None:
            requires = procedure.step(name).requires
        record: dict[str, Any] = {"results": {}, "logs": [], "argv": None, "exit_code": None}
        started = time.time()
        self.engine_time = 0.0
        outcome, message = "passed", ""
        try:
            self.require(*requires)
            yield record
        except pytest.skip.Exception as exc:
            outcome, message = "skipped", str(exc)
            raise
        except BaseException as exc:
            outcome, message = "failed", f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self.outcomes[name] = "passed" if outcome == "passed" else f"{outcome}: {message}"
            self.store.write(
                model.StepRecord(
                    kind="step",
                    time=utc_now(),
                    runner=cast(model.Runner, self.lane.runner),
                    arm=cast(model.Arm, self.lane.arm),
                    lane=self.lane.name,
                    purpose=cast(model.Purpose, self.purpose),
                    step=name,
                    nodeid=nodeid,
                    outcome=cast(model.Outcome, outcome),
                    message=message,
                    argv=record["argv"],
                    exit_code=record["exit_code"],
                    started=_iso(started),
                    ended=utc_now(),
                    seconds=round(time.time() - started, 3),
                    engine_seconds=round(self.engine_time, 3),
                    logs=record["logs"],
                    results=record["results"],
                )
            )

    @contextlib.contextmanager
    def engine_wait(self) -> Iterator[None]:
        """Account the enclosed time as the engine's (a command, a start, an HTTP answer), not the harness's."""
        started = time.time()
        try:
            yield
        finally:
            self.engine_time += time.time() - started

    def log(self, record: dict[str, Any], name: str) -> Path:
        path = self.store.log_path(f"{self.lane.name}-{self.purpose}", name)
        record["logs"].append(self.store.relative(path))
        self.last_logs.append(self.store.relative(path))
        return path


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).isoformat(timespec="milliseconds")
