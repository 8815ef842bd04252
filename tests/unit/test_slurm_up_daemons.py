"""scripts/slurm-up.sh starts munged, slurmctld and slurmd holding none of its own descriptors but 0-2: run as
``flock LOCK scripts/slurm-up.sh`` (as the shared machine's docker lock is taken), a daemon that kept the lock's
descriptor held everyone's lock until Slurm stopped (seen in issue 46's committed runs)."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm-up.sh"


def _detached() -> str:
    found = re.search(r"^detached\(\) \{\n.*?^\}\n", SCRIPT.read_text(), re.M | re.S)
    assert found, "scripts/slurm-up.sh defines detached()"
    return found[0]


def test_every_daemon_is_started_detached() -> None:
    lines = [line.strip() for line in SCRIPT.read_text().splitlines()]
    for start in ("runuser -u munge -- munged", 'slurmctld -f "$CONF"', 'slurmd -f "$CONF"'):
        assert f"detached {start}" in lines, start
        assert start not in lines, f"{start} is started with the script's descriptors"


def test_a_detached_daemon_does_not_hold_the_callers_lock(tmp_path: Path) -> None:
    lock, pidfile = tmp_path / "lock", tmp_path / "pid"
    script = tmp_path / "start.sh"
    # a daemon that forks away and keeps running, as munged and slurmd do
    script.write_text(_detached() + f"detached setsid -f sh -c 'echo $$ > {pidfile}; exec sleep 60'\n")
    quiet = subprocess.DEVNULL  # the daemon keeps 0-2, as munged does: no pipe of ours to wait on
    subprocess.run(["flock", str(lock), "bash", str(script)], check=True, timeout=30, stdin=quiet, stdout=quiet)
    deadline = time.monotonic() + 10
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert time.monotonic() < deadline, "the daemon never started"
        time.sleep(0.05)
    pid = int(pidfile.read_text())
    try:
        free = subprocess.run(["flock", "-n", str(lock), "true"], timeout=10).returncode == 0
        assert free, "the daemon still holds the lock taken by the script's caller"
    finally:
        subprocess.run(["kill", str(pid)], check=False)
