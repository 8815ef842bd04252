"""``tests/harness_child.py``: a harness run by a test and stopped (the test's Ctrl-C, its timeout) gets one signal
and the time to clean up before anything kills it; ``subprocess.run`` SIGKILLed it after 0.25 s, and an
interrupted ``.ci/run`` left a lane container behind that way."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests import harness_child

# A stand-in harness: on SIGINT or SIGTERM it "cleans up" for a second (a sweep), writes what it got, exits 130.
CHILD = r"""
import os, signal, sys, time
from pathlib import Path
out = Path(sys.argv[1])
def stop(signum, frame):
    time.sleep(1.0)
    out.joinpath("cleaned").write_text(signal.Signals(signum).name)
    sys.exit(130)
signal.signal(signal.SIGINT, stop)
signal.signal(signal.SIGTERM, stop)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
out.joinpath("ready").write_text(str(os.getpgid(0)))
while True:
    time.sleep(0.05)
"""


def _blocked() -> None:  # in the child before exec: a signal sent before its handlers exist waits for them
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})


def test_a_test_stopped_by_ctrl_c_lets_the_harness_clean_up_before_it_returns(tmp_path: Path) -> None:
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job may ignore SIGINT

    def interrupt_when_ready() -> None:
        deadline = time.monotonic() + 60
        while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)  # the test's own Ctrl-C

    thread = threading.Thread(target=interrupt_when_ready)
    try:
        thread.start()
        with pytest.raises(KeyboardInterrupt):
            harness_child.run([sys.executable, "-c", CHILD, str(tmp_path)], timeout=120, preexec_fn=_blocked)
    finally:
        thread.join()
        signal.signal(signal.SIGINT, previous)
    assert (tmp_path / "cleaned").read_text() == "SIGINT"  # its cleanup ran to the end before run() returned
    assert int((tmp_path / "ready").read_text()) != os.getpgid(0)  # its own process group: one signal, from run()


def test_a_harness_past_its_timeout_is_stopped_with_sigterm_and_cleans_up(tmp_path: Path) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        harness_child.run([sys.executable, "-c", CHILD, str(tmp_path)], timeout=0.5, preexec_fn=_blocked)
    assert (tmp_path / "cleaned").read_text() == "SIGTERM"


def test_a_harness_that_ends_gives_its_output_and_exit_code() -> None:
    done = harness_child.run([sys.executable, "-c", "import sys; print('out'); sys.exit(3)"], timeout=60)
    assert (done.returncode, done.stdout) == (3, "out\n")
