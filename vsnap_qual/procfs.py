"""Reading the host's ``/proc`` (pure parsing plus plain file reads; no Docker): process facts for the host
runtime's lanes and TCP listeners."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcInfo:
    """One process as ``/proc/<pid>`` describes it."""

    pid: int
    ppid: int
    sid: int
    pgrp: int
    state: str
    start_time: int  # clock ticks since boot (field 22 of stat): with the PID, identifies the process
    args: str
    mount_namespace: str | None


def parse_stat(text: str) -> tuple[str, int, int, int, int]:
    """(state, ppid, pgrp, sid, starttime) from a ``/proc/<pid>/stat`` line (comm may hold spaces and parens)."""
    rest = text[text.rindex(")") + 2 :].split()
    return rest[0], int(rest[1]), int(rest[2]), int(rest[3]), int(rest[19])


def proc_info(pid: int, proc: Path = PROC) -> ProcInfo | None:
    """The process ``pid``, or None when it is gone (or is a kernel thread with no command line)."""
    base = proc / str(pid)
    try:
        state, ppid, pgrp, sid, start = parse_stat((base / "stat").read_text())
        raw = (base / "cmdline").read_bytes()
    except (OSError, ValueError, IndexError):
        return None
    namespace = None
    with contextlib.suppress(OSError):
        namespace = os.readlink(base / "ns" / "mnt")
    args = raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
    return ProcInfo(pid, ppid, sid, pgrp, state, start, args, namespace)


def all_pids(proc: Path = PROC) -> list[int]:
    return sorted(int(entry.name) for entry in proc.iterdir() if entry.name.isdigit())


def processes_in_mount_namespace(namespace: str, proc: Path = PROC) -> list[ProcInfo]:
    """Every live process whose mount namespace is ``namespace`` (e.g. ``mnt:[4026532301]``), zombies excluded."""
    found = []
    for pid in all_pids(proc):
        info = proc_info(pid, proc)
        if info is not None and info.mount_namespace == namespace and info.state != "Z":
            found.append(info)
    return found


def innermost_ids(pid: int, proc: Path = PROC) -> tuple[int, int] | None:
    """(pid, sid) of the host process ``pid`` as its innermost PID namespace sees them (``NSpid:`` / ``NSsid:``
    of ``/proc/<pid>/status``, last field); the host's own values when it shares the host's PID namespace. None
    when the process is gone; ``ValueError`` when the kernel gives no ``NSpid`` line (before Linux 4.1)."""
    try:
        text = (proc / str(pid) / "status").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    if "NSpid" not in fields:
        raise ValueError(f"/proc/{pid}/status has no NSpid line: cannot map host PIDs to the container's")
    ns_pid = int(fields["NSpid"].split()[-1])
    ns_sid = int(fields["NSsid"].split()[-1]) if "NSsid" in fields else ns_pid
    return ns_pid, ns_sid
