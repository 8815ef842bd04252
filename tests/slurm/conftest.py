"""The real Slurm cluster of these tests: started by ``scripts/slurm-up.sh``, stopped by ``scripts/slurm-down.sh``.

Several test processes may use it at once (xdist workers, two sessions on one machine): they register under a
file lock in the cluster's state directory, the first one brings the cluster up, the last one to leave brings it down,
but only a cluster that test sessions started (its slurmctld's PID is recorded): one started by hand stays up. Each
session's jobs carry its own name prefix, which its teardown cancels; jobs of sessions whose process is gone (killed
before their teardown) are cancelled at start, and a cluster such a session started is still stopped by the last.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.host_processes import cluster_daemons
from tests.slurm.slurm_cluster import SlurmCluster

ROOT = Path(__file__).resolve().parents[2]
SLURM_UP = ROOT / "scripts" / "slurm-up.sh"
SLURM_DOWN = ROOT / "scripts" / "slurm-down.sh"
STATE_DIR = Path(os.environ.get("VSNAP_SLURM_DIR", "/var/lib/vsnap-slurm"))
JOB_PREFIX = "vsnap-test-"  # + the test process's PID + "-": a session's own jobs
_SESSION_JOB = re.compile(re.escape(JOB_PREFIX) + r"([0-9]+)-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def _sessions() -> Iterator[dict[str, Any]]:
    """The test sessions using the cluster, under an exclusive lock: ``pids`` (live ones only) and ``owned_slurmctld``
    (the PID of the slurmctld that test sessions started, or None). Saved on exit."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    record = STATE_DIR / "test-sessions.json"
    with (STATE_DIR / "test-sessions.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            sessions = json.loads(record.read_text())
        except (OSError, ValueError):
            sessions = {}
        sessions["pids"] = [pid for pid in sessions.get("pids", []) if _alive(pid)]
        sessions.setdefault("owned_slurmctld", None)
        yield sessions
        record.write_text(json.dumps(sessions))


def _running(name: str) -> int | None:
    """The PID of this state directory's slurmctld or slurmd, from its PID file as the scripts read it."""
    try:
        pid = int((STATE_DIR / "run" / f"{name}.pid").read_text().strip())
        return pid if Path(f"/proc/{pid}/comm").read_text().strip() == name else None
    except (OSError, ValueError):
        return None


def _script(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(path)], capture_output=True, text=True, timeout=900, check=False, env=os.environ.copy()
    )


def _output(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\n{(done.stdout + done.stderr).strip()}"


def _default_partition(env: dict[str, str]) -> str:
    out = subprocess.run(["sinfo", "-h", "-o", "%P"], env=env, capture_output=True, text=True, check=True).stdout
    defaults = [name.rstrip("*") for name in out.split() if name.endswith("*")]
    assert len(defaults) == 1, f"sinfo lists no single default partition: {out!r}"
    return defaults[0]


def _stop_if_last(sessions: dict[str, Any]) -> list[str]:
    """Run slurm-down.sh when no session is left and test sessions started the running cluster; what went wrong."""
    owned = sessions["owned_slurmctld"]
    if sessions["pids"] or owned is None:
        return []
    if _running("slurmctld") not in (owned, None):  # someone restarted it meanwhile: theirs now
        sessions["owned_slurmctld"] = None
        return []
    problems = []
    down = _script(SLURM_DOWN)
    if down.returncode != 0:
        problems.append(f"scripts/slurm-down.sh failed: {_output(down)}")
    sessions["owned_slurmctld"] = None
    left = cluster_daemons(STATE_DIR)
    if left:
        problems.append("Slurm processes of the cluster left after slurm-down.sh:\n" + "\n".join(map(str, left)))
    return problems


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A running one-node Slurm cluster on this machine (``scripts/slurm-up.sh``; never skipped: if it cannot start,
    the test fails with the script's output). Yields the environment that reaches it, its default partition and this
    session's job name prefix; at teardown every job of that prefix is cancelled and, when the last session using
    the cluster leaves, ``scripts/slurm-down.sh`` stops it and no slurmctld/slurmd/slurmstepd of it may be left."""
    with _sessions() as sessions:
        was_running = _running("slurmctld")
        up = _script(SLURM_UP)
        if was_running is None:
            sessions["owned_slurmctld"] = _running("slurmctld") or -1  # -1: stop what slurm-up left, even if dead
        if up.returncode != 0:
            problems = _stop_if_last(sessions)
            pytest.fail(
                f"scripts/slurm-up.sh could not start the cluster: {_output(up)}" + "".join(f"\n{p}" for p in problems),
                pytrace=False,
            )
        sessions["pids"].append(os.getpid())

    conf = STATE_DIR / "slurm.conf"
    env = {**os.environ, "SLURM_CONF": str(conf)}
    cluster = SlurmCluster(env=env, partition="", job_prefix=f"{JOB_PREFIX}{os.getpid()}-", conf=conf)
    try:
        cluster.partition = _default_partition(env)
        # Jobs of test sessions killed before their teardown (their PID is gone) would hold the node's CPUs.
        stale = []
        for job_id, name in cluster.jobs_with_prefix(JOB_PREFIX).items():
            session = _SESSION_JOB.match(name)
            if session and not _alive(int(session.group(1))):
                stale.append(job_id)
        cluster.cancel_and_wait(stale)
        yield cluster
    finally:
        problems = []
        try:
            cluster.cancel_and_wait(sorted(cluster.jobs_with_prefix(cluster.job_prefix)))
        except AssertionError as exc:
            problems.append(f"cancelling this session's jobs: {exc}")
        with _sessions() as sessions:
            sessions["pids"] = [pid for pid in sessions["pids"] if pid != os.getpid()]
            problems += _stop_if_last(sessions)
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)
