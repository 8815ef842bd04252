"""Run the harness (a ``pytest suites/`` run, or a script that starts one) as a test's child process, ended the way
a user's terminal ends it.

``subprocess.run`` answers the caller's Ctrl-C (and its own timeout) by SIGKILLing the child after at most 0.25 s.
A harness killed so never reaches its own interrupt cleanup (the session-end sweep of its lanes): an interrupted
``.ci/run`` left a real-vLLM lane container and vLLM's ``/dev/shm`` segments behind that way (2026-12-03). Here the
child runs in a session of its own, so one signal reaches it, from here: on Ctrl-C (or any exception) its process
group gets SIGINT, on the timeout SIGTERM (both an interrupt to the harness, ``vsnap_qual/plugin/``), and only
what is still running ``CLEANUP_S`` later is killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence
from typing import Any

#: how long a stopped harness may take to remove what it started before it is killed
CLEANUP_S = 120.0


def run(
    argv: Sequence[str], *, timeout: float, cleanup_s: float = CLEANUP_S, **popen: Any
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **popen)``, except how it ends early."""
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **popen
    ) as child:
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(child, signal.SIGTERM, cleanup_s)
            raise
        except BaseException:  # Ctrl-C: what the terminal would have sent the child too
            _stop(child, signal.SIGINT, cleanup_s)
            raise
    return subprocess.CompletedProcess(list(argv), child.returncode, out, err)


def _stop(child: subprocess.Popen[str], signum: signal.Signals, cleanup_s: float) -> None:
    """Signal the child's process group once and let it clean up (reading its pipes, so it never blocks on them);
    kill the group only if the child still runs after ``cleanup_s``. What a harness that ended leaves is its own
    leak, for the tests to see, never hidden here."""
    if child.poll() is not None:
        return
    os.killpg(child.pid, signum)
    try:
        child.communicate(timeout=cleanup_s)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
