"""What runs on this host, read from /proc: a job's processes (by a marker in their environment, which every
descendant inherits) and the cluster's own daemons (by their tie to its state directory)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SLURM_DAEMONS = frozenset({"slurmctld", "slurmd", "slurmstepd"})


@dataclass(frozen=True)
class HostProcess:
    pid: int
    name: str
    cmdline: str

    def __str__(self) -> str:
        return f"PID {self.pid} ({self.name}): {self.cmdline}"


def _processes() -> list[Path]:
    return [entry for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # gone meanwhile, or a kernel thread
        return b""


def _describe(proc: Path) -> HostProcess:
    name = _read(proc / "comm").decode(errors="replace").strip()
    cmdline = _read(proc / "cmdline").replace(b"\0", b" ").decode(errors="replace").strip()
    return HostProcess(int(proc.name), name, cmdline)


def with_environment_marker(marker: str) -> list[HostProcess]:
    """Live processes whose environment holds ``marker`` (a zombie's environment reads empty: it holds nothing)."""
    wanted = marker.encode()
    return [
        _describe(proc)
        for proc in _processes()
        if int(proc.name) != os.getpid() and wanted in _read(proc / "environ").split(b"\0")
    ]


def _refers_to(proc: Path, state_dir: Path) -> bool:
    """The process names the state directory on its command line, works in it, or holds a file of it open
    (slurmstepd: the slurmd log; slurmctld and slurmd: ``-f STATE_DIR/slurm.conf`` and their logs)."""
    root = str(state_dir)
    if root.encode() in _read(proc / "cmdline"):
        return True
    links = [proc / "cwd"]
    try:
        links += list((proc / "fd").iterdir())
    except OSError:
        return False
    for link in links:
        try:
            target = os.readlink(link)
        except OSError:
            continue
        if target == root or target.startswith(root + "/"):
            return True
    return False


def cluster_daemons(state_dir: Path) -> list[HostProcess]:
    """slurmctld, slurmd and slurmstepd processes of the cluster whose state lives in ``state_dir``."""
    found = []
    for proc in _processes():
        described = _describe(proc)
        if described.name in SLURM_DAEMONS and _refers_to(proc, state_dir):
            found.append(described)
    return found
