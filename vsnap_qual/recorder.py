"""Step bookkeeping of a lane, whatever runtime it has: outcomes, prerequisites, one typed evidence record per
step, engine time, log paths. (The lane is ``lane.LaneRun``, whose recorder this is; the steps are ``steps``; the
table is ``procedure``.)"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

import pytest

from vsnap_qual import model, procedure, progress
from vsnap_qual.clock import utc_now, utc_time
from vsnap_qual.config import LaneSpec
from vsnap_qual.contract import Purpose
from vsnap_qual.evidence import EvidenceStore

#: the results type of a step (``model.RestoreResults`` …), or a piece of one a lane's service writes
#: (``model.ServeRecord``): a step's evidence is one of each piece its type holds (read only: covariant)
R = TypeVar("R", covariant=True)


class StepEvidence(Generic[R]):
    """What one step gathers while it runs; written as its ``step`` record when it ends, however it ends (a
    failed step keeps what it had gathered). ``results`` is the step's typed results (``procedure.Step.results``),
    filled as it goes; ``step`` the table entry's name (which restore it is)."""

    def __init__(self, results: R, step: str = "") -> None:
        self._results = results
        self.step = step
        self.logs: list[str] = []  # report-relative paths
        self.argv: list[str] | None = None
        self.exit_code: int | None = None
        #: the step delivered what later steps use, whatever its checks found (``procedure.Step.delivered``)
        self.delivered = False

    @property
    def results(self) -> R:
        return self._results

    @classmethod
    def of(cls, step: str) -> StepEvidence[Any]:
        """The empty evidence of the table's step ``step``: its results of the type its entry names."""
        return StepEvidence(procedure.step(step).results(), step)


@dataclass(kw_only=True)
class StepRecorder:
    """Records a lane's steps: each ends as one ``step`` evidence record; a step whose prerequisite did not pass
    is skipped naming it."""

    spec: LaneSpec
    store: EvidenceStore
    purpose: Purpose = "lifecycle"
    outcomes: dict[str, str] = field(default_factory=dict)  # step -> "passed" | failure message
    delivered: set[str] = field(default_factory=set)  # steps that delivered (``StepEvidence``)
    last_logs: list[str] = field(default_factory=list)  # report-relative paths, newest last
    engine_time: float = 0.0  # seconds spent waiting on the engine in the current step (commands, HTTP)

    def require(self, *steps: str, delivered: tuple[str, ...] = ()) -> None:
        """Skip the calling step when a prerequisite did not pass, naming it; one of ``delivered`` need only have
        delivered what the calling step uses (its own findings are its own step's)."""
        for step in steps + delivered:
            outcome = self.outcomes.get(step)
            if step in delivered and step in self.delivered:
                continue
            if outcome is not None and outcome.startswith(f"skipped: {model.NOT_APPLICABLE_PREFIX}"):
                why = outcome.splitlines()[0][:300].removeprefix(f"skipped: {model.NOT_APPLICABLE_PREFIX}")
                progress.not_applicable(f"{self.spec.name}: {step} is not applicable ({why})")
            if outcome != "passed":
                reason = "did not run" if outcome is None else outcome.splitlines()[0][:300]
                pytest.skip(f"{self.spec.name}: prerequisite {step} did not pass ({reason})")

    @contextlib.contextmanager
    def step(self, name: str, nodeid: str = "", requires: tuple[str, ...] | None = None) -> Iterator[StepEvidence[Any]]:
        """Record one step: the body fills its evidence (its results of the table's type for ``name``); the outcome
        comes from how it ends. Its prerequisites are the procedure table's (``requires`` overrides them)."""
        entry = procedure.step(name)
        delivered: tuple[str, ...] = ()
        if requires is None:
            requires, delivered = entry.requires, entry.delivered
        evidence = StepEvidence.of(name)
        started = time.time()
        clock = time.monotonic()
        self.engine_time = 0.0
        outcome: model.Outcome = "passed"
        message = ""
        try:
            self.require(*requires, delivered=delivered)
            yield evidence
        except pytest.skip.Exception as exc:
            outcome, message = "skipped", str(exc)
            raise
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (the plugin makes it one): stopped, not failed
            outcome = "skipped"
            message = f"{model.INTERRUPTED_PREFIX}the run was stopped ({exc or 'Ctrl-C'}) while this step ran"
            raise
        except BaseException as exc:
            outcome, message = "failed", f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self.outcomes[name] = "passed" if outcome == "passed" else f"{outcome}: {message}"
            if evidence.delivered:
                self.delivered.add(name)
            record = model.StepRecord(
                kind="step",
                time=utc_now(),
                runner=self.spec.column,
                arm=self.spec.arm,
                lane=self.spec.name,
                purpose=self.purpose,
                step=name,
                nodeid=nodeid,
                outcome=outcome,
                message=message,
                argv=evidence.argv,
                exit_code=evidence.exit_code,
                started=utc_time(started),
                ended=utc_now(),
                seconds=round(time.monotonic() - clock, 3),
                engine_seconds=round(self.engine_time, 3),
                logs=evidence.logs,
                results=cast(model.StepResults, evidence.results),
            )
            if self.spec.variant:
                record["variant"] = self.spec.variant.name
            self.store.write(record)

    @contextlib.contextmanager
    def engine_wait(self) -> Iterator[None]:
        """Account the enclosed time as the engine's (a command, a start, an HTTP answer), not the harness's."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.engine_time += time.monotonic() - started

    def log(self, evidence: StepEvidence[object], name: str) -> Path:
        """A new log file of the step (in the report directory), listed in its evidence."""
        path = self.store.log_path(f"{self.spec.name}-{self.purpose}", name)
        self.keep_log(evidence, path)
        return path

    def keep_log(self, evidence: StepEvidence[object], path: Path) -> None:
        evidence.logs.append(self.store.relative(path))
        self.last_logs.append(self.store.relative(path))
