"""Reading the host's ``/proc`` (pure parsing plus plain file reads; no Docker): process facts for the host
runtime's lanes and TCP listeners."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from vsnap_qual.model import CpuSample

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


#: the fields of /proc/stat's ``cpu`` line that are busy time (user, nice, system, irq, softirq, steal; guest
#: time is counted inside user and nice already)
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


def busy_seconds(stat_cpu_fields: list[str], clock_ticks: int) -> float:
    """Seconds every CPU has spent busy, from the fields after ``cpu`` on /proc/stat's first line."""
    values = [int(v) for v in stat_cpu_fields]
    return sum(values[i] for i in _BUSY_FIELDS if i < len(values)) / clock_ticks


def parse_cpu_sample(text: str) -> CpuSample:
    """A :class:`~vsnap_qual.model.CpuSample` from the lines of ``ShellBox.cpu_sample``'s script:
    ``stat <fields of /proc/stat's cpu line>``, ``cpus <n>``, ``ticks <USER_HZ>`` (100 where not said) and
    ``task <tid> <schedstat>`` and ``aff <tid> <Cpus_allowed_list>`` per engine task, ``mem <pid> <Rss>
    <AnonHugePages>`` per engine process."""
    tasks: dict[str, list[int]] = {}
    allowed: dict[str, int] = {}
    memory: dict[str, tuple[int, int]] = {}
    stat: list[str] = []
    cpus, ticks = 0, 100
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        fields = rest.split()
        if kind == "stat" and fields:
            stat = fields
        elif kind == "cpus" and fields and fields[0].isdigit():
            cpus = int(fields[0])
        elif kind == "ticks" and fields and fields[0].isdigit() and int(fields[0]) > 0:
            ticks = int(fields[0])
        elif kind == "task" and len(fields) >= 3 and fields[1].isdigit() and fields[2].isdigit():
            tasks[fields[0]] = [int(fields[1]), int(fields[2])]
        elif kind == "mem" and len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
            memory[fields[0]] = (int(fields[1]), int(fields[2]))
        elif kind == "aff" and len(fields) == 2:
            allowed[fields[1]] = allowed.get(fields[1], 0) + 1
    sample = CpuSample(tasks=tasks, machine_busy_s=busy_seconds(stat, ticks) if stat else 0.0, cpus=cpus)
    if memory:
        sample["rss_kb"] = sum(rss for rss, _ in memory.values())
        sample["anon_huge_kb"] = sum(huge for _, huge in memory.values())
    if allowed:
        sample["cpus_allowed"] = allowed
    return sample


def cpu_sample(pids: list[int], proc: Path = PROC) -> CpuSample:
    """The same sample read here: the tasks of ``pids`` and this machine's /proc/stat."""
    lines = []
    with contextlib.suppress(OSError):
        stat = (proc / "stat").read_text().splitlines()
        lines.append("stat " + stat[0].partition(" ")[2])
        lines.append(f"cpus {sum(1 for line in stat if line.startswith('cpu') and line[3:4].isdigit())}")
        lines.append(f"ticks {os.sysconf('SC_CLK_TCK')}")
    for pid in pids:
        with contextlib.suppress(OSError):
            for task in (proc / str(pid) / "task").iterdir():
                with contextlib.suppress(OSError):
                    lines.append(f"task {task.name} {(task / 'schedstat').read_text().strip()}")
                with contextlib.suppress(OSError):
                    status = (task / "status").read_text().splitlines()
                    allowed = [x.split(":", 1)[1].strip() for x in status if x.startswith("Cpus_allowed_list:")]
                    lines.extend(f"aff {task.name} {cpus}" for cpus in allowed)
        with contextlib.suppress(OSError):
            rollup = dict(line.split()[:2] for line in (proc / str(pid) / "smaps_rollup").read_text().splitlines()[1:])
            lines.append(f"mem {pid} {rollup.get('Rss:', '')} {rollup.get('AnonHugePages:', '0')}")
    return parse_cpu_sample("\n".join(lines))
