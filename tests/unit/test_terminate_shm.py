"""The strict stop's report of the /dev/shm files the tree held, from a real process on this machine (its /proc)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from vsnap_qual.box import ExecResult
from vsnap_qual.runtimes.shell import ShellBox


class LocalShell(ShellBox):
    """A box whose commands run on this machine."""

    name = "local"

    def exec(
        self, argv: list[str], timeout: float, *, env: Mapping[str, str] | None = None, log: Path | None = None
    ) -> ExecResult:
        started = time.time()
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return ExecResult(argv, done.returncode, done.stdout, done.stderr, started, time.time())


HOLDER = """
import mmap, os, sys, time
held, mapped, gone = sys.argv[1:4]
f = open(held, "w+b")                      # open
g = open(mapped, "w+b"); g.write(b"x" * 4096); g.flush()
m = mmap.mmap(g.fileno(), 4096); g.close()  # mapped only (like a multiprocessing segment)
h = open(gone, "w+b"); os.unlink(gone)      # open but already unlinked: nothing to leak
print("ready", flush=True)
time.sleep(60)
"""


def test_the_stop_names_the_dev_shm_files_the_tree_held_open_or_mapped() -> None:
    tag = uuid.uuid4().hex[:8]
    held, mapped, gone = (f"/dev/shm/psm_{tag}{n}" for n in "abc")
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, held, mapped, gone], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        seen = LocalShell().terminate([proc.pid], grace=5)
        assert seen.shm_held == tuple(sorted([held, mapped]))
        assert [t.pid for t in seen.tree] == [proc.pid]
    finally:
        proc.kill()
        proc.wait()
        for path in (held, mapped, gone):
            if os.path.exists(path):
                os.unlink(path)
