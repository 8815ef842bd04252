"""What one lane hands another lane that runs in another process (issue 45, ``--vsnap-overlap=lanes``): the head
arm's answers the base arm is judged against, when the two arms run at once on workers of their own.

A directory the session's processes share (``<report dir>/handoff/``) holds, per lane, what it hands on
(``<lane>.<what>.json``, written whole, then renamed) and which of its steps have ended (``<lane>.<step>.done``,
written by the plugin as each step's test ends, however it ended). A lane asking for another's answer waits for that
step's end, only when the session runs that step at all (``expected``: the selected tests' lanes and steps) and at
most ``wait_s`` seconds; then it reads the answer, or finds none (the step failed or was skipped): the asking step
says so, as when the head arm's answer is missing in one process.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vsnap_qual import procedure

#: the steps whose answers a lane hands another (the head arm's ordinary reference and unit outcomes): only their
#: ends are written
HANDED_STEPS = (procedure.ORDINARY, procedure.UNIT)
#: how often a waiting lane looks for the other lane's step end
POLL_S = 0.2


@dataclass
class Handoff:
    """The session's shared directory of handed-on answers and ended steps (see the module docstring)."""

    directory: Path
    #: the (lane, step) pairs this session runs: a wait only for those
    expected: frozenset[tuple[str, str]] = frozenset()
    #: the longest a lane waits for another's step to end
    wait_s: float = 3600.0
    #: the clock and the pause (a unit test's own)
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)

    def _path(self, lane: str, name: str) -> Path:
        return self.directory / f"{lane}.{name}"

    def put(self, lane: str, what: str, value: Any) -> None:
        """``lane`` hands on ``value`` (JSON) as ``what``: written whole, then renamed into place."""
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self._path(lane, f"{what}.json")
        partial = final.with_name(f".{final.name}.{os.getpid()}")
        partial.write_text(json.dumps(value), encoding="utf-8")
        partial.replace(final)

    def ended(self, lane: str, step: str) -> None:
        """``lane``'s test of ``step`` has ended (passed, failed or skipped): whoever waits for it stops waiting
        (a step no lane waits for: nothing written)."""
        if step not in HANDED_STEPS:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        self._path(lane, f"{step}.done").touch()

    def has_ended(self, lane: str, step: str) -> bool:
        return self._path(lane, f"{step}.done").exists()

    def get(self, lane: str, what: str, step: str) -> tuple[Any, str]:
        """What ``lane`` handed on as ``what`` once its ``step`` ended, and, when nothing, why (in words): the
        session does not run that step, the step ended without handing it on, or it did not end in time."""
        if (lane, step) not in self.expected:
            return None, f"this run does not run {lane}'s {step} step"
        deadline = self.clock() + self.wait_s
        while not self.has_ended(lane, step):
            if self.clock() >= deadline:
                return None, f"{lane}'s {step} step did not end within {self.wait_s:g} s"
            self.sleep(POLL_S)
        path = self._path(lane, f"{what}.json")
        if not path.exists():
            return None, f"{lane}'s {step} step ended without handing on its {what}"
        return json.loads(path.read_text(encoding="utf-8")), ""
