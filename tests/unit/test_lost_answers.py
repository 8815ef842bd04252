"""A box's look whose answer is lost on its way back is not an answer (issue 44 item 6).

Docker's daemon waits at most 2 s after an exec's process exited for its output to be copied, then closes the
streams and reports the exit code all the same: on a loaded host a look at the restored tree's processes came
back with exit code 0 and no output, and "no ``pid`` line" read as "every process gone" while they lived. Here the
shell implementation runs on this machine (its own ``sh`` and ``/proc``, as the Docker and host runtimes run it in
theirs), through an exec that loses the output of chosen answers the way the daemon does."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from vsnap_qual.box import ExecResult, RuntimeFailure
from vsnap_qual.runtimes.shell import ShellBox


class LossyShell(ShellBox):
    """A box whose commands run on this machine; the output of the first ``lose`` answers is lost (exit code 0,
    output cut to ``kept`` bytes)."""

    name = "lossy"

    def __init__(self, lose: int, kept: int = 0) -> None:
        self.lose, self.kept, self.asked = lose, kept, 0

    def exec(
        self, argv: list[str], timeout: float, *, env: Mapping[str, str] | None = None, log: Path | None = None
    ) -> ExecResult:
        started = time.time()
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        self.asked += 1
        out = done.stdout[: self.kept] if self.asked <= self.lose else done.stdout
        return ExecResult(argv, done.returncode, out, done.stderr, started, time.time())


def test_a_look_whose_answer_was_lost_is_asked_again_not_read_as_every_process_gone() -> None:
    me, gone = os.getpid(), _a_finished_pid()
    box = LossyShell(lose=1)
    assert box.look([me, gone])[0] == [me] and box.asked == 2
    # cut short after the first line: the rest (ports, the end line) never came, so it is asked again too
    box = LossyShell(lose=1, kept=len(f"pid {me}\n"))
    assert box.look([me, gone])[0] == [me] and box.asked == 2
    # an answer that came whole is read once
    box = LossyShell(lose=0)
    assert box.look([me, gone])[0] == [me] and box.asked == 1


def test_the_processes_own_state_is_a_whole_answer_too() -> None:
    me = os.getpid()
    box = LossyShell(lose=1)
    start = Path(f"/proc/{me}/stat").read_text().rsplit(")", 1)[1].split()[19]
    assert box.identify([me]) == {me: start} and box.asked == 2


def test_an_answer_lost_twice_fails_the_look_rather_than_say_what_it_never_said() -> None:
    box = LossyShell(lose=2)
    with pytest.raises(RuntimeFailure, match="without its last line twice"):
        box.look([os.getpid()])
    assert box.asked == 2


def _a_finished_pid() -> int:
    done = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    return int(done.stdout)
