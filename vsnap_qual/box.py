"""Where a lane's engine runs, declared once: the :class:`Box` protocol and the value types every runtime shares.

A *box* is one lane's long-lived environment (a Docker container, a host lane in a mount namespace of its own, a
pod of a runtime registered from a conftest). Everything the lane, its steps and its faults do to the engine goes
through these methods; nothing above this module knows which runtime made the box. This module is neutral: it
imports no runtime (so a host-runtime run never loads the docker SDK).

Two bounds hold on every command a box runs: coreutils ``timeout`` inside the box and a deadline in the harness
(``HOST_GRACE_S`` past it), so a step fails within its budget whatever the engine does.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypedDict

from vsnap_qual.contract import Purpose
from vsnap_qual.model import CpuSample

LABEL_SESSION = "ai.vsnap.session"
LABEL_LANE = "ai.vsnap.lane"
LABEL_OWNER = "ai.vsnap.owner"  # "<hostname>:<pid>" of the pytest process that owns the box
HOST_GRACE_S = 8.0  # harness deadline = in-box timeout + 8 s (a step fails within its budget + 10 s)


class RuntimeFailure(RuntimeError):
    """A runtime could not do what a step asked; the message says what and how to fix it."""


@dataclass(frozen=True)
class ExecResult:
    """One finished command in a box."""

    argv: list[str]
    exit_code: int | None  # None: the harness's deadline passed and the command was abandoned
    stdout: str
    stderr: str
    started: float
    ended: float

    @classmethod
    def gathered(
        cls, argv: list[str], code: int | None, out: list[bytes], err: list[bytes], started: float
    ) -> ExecResult:
        """A command that ends now, from the output chunks its pumps gathered."""
        return cls(
            argv=list(argv),
            exit_code=code,
            stdout=b"".join(out).decode("utf-8", "replace"),
            stderr=b"".join(err).decode("utf-8", "replace"),
            started=started,
            ended=time.time(),
        )

    @property
    def seconds(self) -> float:
        return self.ended - self.started

    def tail(self, lines: int = 30) -> str:
        text = (self.stderr or self.stdout).rstrip()
        return "\n".join(text.splitlines()[-lines:])


def exec_timed_out(code: int | None, seconds: float, timeout: float) -> bool:
    """Whether a command wrapped in coreutils ``timeout`` ran out of time: abandoned by the harness's deadline
    (``code`` None), ``timeout``'s own 124, or 137 (its ``--kill-after`` SIGKILL) only once the deadline had
    passed; a 137 before it is a process killed by someone else (OOM killer, a stop), not a timeout."""
    if code is None:
        return True
    return code == 124 or (code == 137 and seconds >= timeout)


def bounded(argv: list[str], timeout: float) -> list[str]:
    """``argv`` under coreutils ``timeout`` (the in-box bound; SIGKILL 10 s after SIGTERM)."""
    return ["timeout", "--signal=TERM", "--kill-after=10", f"{max(timeout, 1.0):.0f}s", *argv]


class ProcessRow(TypedDict):
    """One process of a box, numbered as the box itself numbers it."""

    pid: int
    ppid: int
    sid: int
    stat: str
    args: str


@dataclass(frozen=True)
class TreeEntry:
    """A process of a stopped tree as recorded when the stop began: with host PID namespaces a PID is reused by
    other processes, so a process is its PID *and* its start time (``/proc/PID/stat`` field 22)."""

    pid: int
    start_time: str
    cmdline: str


@dataclass(frozen=True)
class Termination:
    """What a strict stop (SIGTERM to a tree, up to a grace, then SIGKILL) saw: the GPU's compute apps as it began,
    the tree, and the survivors of the grace (pid, state, start time), before the harness's SIGKILL."""

    gpu_apps: frozenset[int]
    tree: tuple[TreeEntry, ...]
    survivors: tuple[tuple[int, str, str], ...]
    #: the ``/dev/shm`` files the tree held (open or mapped, not yet unlinked) as it began: what its own cleanup
    #: must remove, whichever lane shares the box's ``/dev/shm``
    shm_held: tuple[str, ...] = ()
    #: seconds from SIGTERM until no process of the tree was left (zombies count as gone); None: some outlived the
    #: grace
    gone_after_s: float | None = None
    #: CPU ticks (``utime + stime`` of ``/proc/PID/stat``, USER_HZ) of each process of the tree as SIGTERM was sent,
    #: and of each survivor at the grace's end: whether it was still working through the grace
    ticks_at_term: Mapping[int, int] = field(default_factory=dict)
    ticks_at_grace: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ShmEntry:
    """A file of the box's ``/dev/shm``: CRIU's ``link_remap.*``, Python's ``psm_*`` segments, ``sem.*``."""

    name: str
    device: str
    inode: str
    mode: str
    size: int

    @property
    def line(self) -> str:
        """``/dev/shm/NAME|device|inode|mode|size``: the entry as the evidence records it (the same name may be a
        new file later, with another inode)."""
        return f"/dev/shm/{self.name}|{self.device}|{self.inode}|{self.mode}|{self.size}"


@dataclass(frozen=True)
class ShmHolders:
    """Of some ``/dev/shm`` names, which no process the box could read holds open or mapped (``unheld``), and the
    processes whose fds and maps it could not read (``unread``, ``PID comm``). The kernel lets the box's root read
    every process but one with a capability the box lacks (ptrace's access rule); no process started in the box
    can gain one, so an unread process is none of its engine's (on this project's machines: PID 1, the VM's agent,
    and in a box with fewer capabilities than the host's, the host's own daemons and other runs' engines)."""

    unheld: list[str]
    unread: list[str]


@dataclass(frozen=True)
class DirEntry:
    """An entry below a listed directory (:meth:`Box.list_dir`): its path relative to that directory, its type
    (``f`` a regular file, ``d`` a directory, ``l`` a link, as ``find -printf %y`` says) and its size in bytes."""

    path: str
    type: str
    size: int


@dataclass(frozen=True)
class ThreadWaits:
    """Where each thread of one process waits in the kernel (``/proc/<pid>/task/*/wchan``, sorted) and the CPU ticks
    the process has spent so far (``utime + stime``, all its threads): :meth:`Box.thread_waits`."""

    wchans: tuple[str, ...]
    ticks: int


@dataclass(frozen=True)
class GpuRow:
    """One GPU as ``nvidia-smi`` lists it inside the box."""

    name: str
    uuid: str
    driver: str
    memory_mib: int | None


@dataclass(frozen=True)
class BoxFacts:
    """What the box says of itself when it starts: CRIU's version line, ``CUDA_VERSION``, the GPUs it sees."""

    criu: str | None
    cuda: str | None
    gpus: tuple[GpuRow, ...] = ()


@dataclass(frozen=True)
class ImageInfo:
    """What the harness records and checks of an arm's engine: an image, or the host runtime's Python."""

    id: str
    repo_digests: list[str]
    labels: dict[str, str]
    platform: str


@dataclass(frozen=True)
class Bind:
    """A path of the harness's machine mounted at ``target`` in a box."""

    target: str
    source: Path
    read_only: bool = True


@dataclass
class BoxSpec:
    """What a lane's box looks like; built by the lane from the validated configuration."""

    name: str
    engine: str  # the arm's engine as the user named it: an image reference, the host runtime's Python
    image_id: str  # what preflight resolved it to (an image ID), for a runtime that pins it
    labels: dict[str, str]
    environment: dict[str, str]
    binds: list[Bind] = field(default_factory=list)
    #: binds of the overlay's files over the image's modules (a runtime that imports the checkout in place
    #: leaves them out: the host runtime's Python imports the checkout itself)
    overlay_binds: list[Bind] = field(default_factory=list)
    privileges: str = "privileged"
    gpus: str = "none"  # "none" | "all" | "GPU-<uuid>"
    ports: tuple[int, ...] = ()
    purpose: Purpose = "lifecycle"
    #: an IPC namespace and a ``/dev/shm`` of the box's own, whatever the privileges mode shares (a fresh box: what
    #: a new pod or node starts with)
    private_ipc: bool = False
    #: the name of the box whose artifact this box restores (a fresh box): the trees it restores were created in
    #: that box and carry its identity in their memory (the host runtime's lane token), so they are this box's own
    adopts: str | None = None


class ControlDir(Protocol):
    """The lane's control directory (``contract.CONTROL`` in the box): what the probe writes and the harness reads
    (imports, loaded, fired records), what the harness writes and the probe reads (arming), engine logs. Read and
    written through the box's runtime, so a box on another machine works as well as a local bind mount."""

    def write_json(self, name: str, payload: object) -> None: ...
    def read_text(self, name: str) -> str | None: ...
    def remove(self, name: str) -> None: ...
    def names(self, pattern: str) -> list[str]: ...
    def local_copy(self, name: str) -> Path | None:
        """A file of this machine holding ``name``'s bytes (the file itself when the directory is local)."""
        ...


class BoxLife(Protocol):
    """The box's own life: its names, how its PIDs are numbered, its control directory, a restart and its removal."""

    @property
    def name(self) -> str:
        """How messages name the box (``container vsnap-…``, ``lane vsnap-…``)."""
        ...

    @property
    def id(self) -> str:
        """The environment's identity: unchanged by :meth:`restart` (a container ID, a host lane's name)."""
        ...

    @property
    def host_pid_namespace(self) -> bool:
        """Whether the box's PIDs are PIDs of the harness's machine (host PID namespace, or the host runtime)."""
        ...

    def control(self) -> ControlDir: ...
    def restart(self, stop_timeout: int = 20) -> None:
        """Stop and start the same environment: every process gone, the filesystem (the artifact) kept."""
        ...

    def remove(self) -> None: ...


class BoxCommands(Protocol):
    """Commands in the box: ``exec`` under both bounds, a detached ``spawn``, and a shell script where the box has
    one."""

    @property
    def has_shell(self) -> bool:
        """Whether the box runs the harness's own POSIX shell and Python scripts (``sh``, ``python3 -c``): where it
        does not, the fault kinds that need one (the identity drifts' kits, the PID holder and ``ns_last_pid``, the
        weight copy) are not applicable, and the fault artifact is digested and reset whole."""
        ...

    def exec(
        self, argv: list[str], timeout: float, *, env: Mapping[str, str] | None = None, log: Path | None = None
    ) -> ExecResult:
        """Run ``argv`` to completion under both bounds; stream its output to ``log`` as it comes."""
        ...

    def sh(self, script: str, timeout: float = 60.0, env: Mapping[str, str] | None = None) -> ExecResult:
        """A POSIX shell script in the box (only where :attr:`has_shell`: the fault kinds that need one)."""
        ...

    def spawn(self, argv: list[str], log_path: str, *, env: Mapping[str, str] | None = None) -> int:
        """Start ``argv`` detached in a session of its own, output to ``log_path`` (a box path); its PID."""
        ...


class BoxFiles(Protocol):
    """The box's files as the box sees them: read, write in place, test, list, copy, truncate and digest a path,
    export and import a tree. Each a named operation: no shell needed of the caller."""

    def read_bytes(self, path: str) -> bytes | None:
        """A file's bytes as the box sees it; None when it does not exist or is not a regular file."""
        ...

    def read_text(self, path: str) -> str: ...
    def write_bytes(self, path: str, data: bytes) -> None:
        """Write ``data`` over the file ``path`` in place (the same inode, truncated first), as a program in the box
        would. Fails with :class:`RuntimeFailure`."""
        ...

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists in the box (of any type)."""
        ...

    def list_dir(self, path: str, glob: str = "*", depth: int | None = 1) -> list[DirEntry]:
        """The entries below the directory ``path`` whose name matches ``glob``, down to ``depth`` levels (None:
        all), sorted by path; fails with :class:`RuntimeFailure` when ``path`` cannot be listed."""
        ...

    def copy_tree(self, source: str, target: str, *, replace: bool = False) -> None:
        """Copy ``source`` with everything under it to ``target`` (modes, owners, times and links kept); ``replace``:
        remove ``target`` first. Fails with :class:`RuntimeFailure`."""
        ...

    def truncate(self, path: str, size: int) -> None:
        """Cut the file ``path`` to ``size`` bytes, in place. Fails with :class:`RuntimeFailure`."""
        ...

    def digest_tree(self, path: str) -> str:
        """A digest of the directory ``path``: every regular file's path and content, every entry's path and mode;
        a directory the box cannot read has the digest of nothing."""
        ...

    def export_tree(self, path: str, into: Path) -> None:
        """Write the directory ``path`` of the box, with everything under it, as a tar archive to ``into`` (a file
        of this machine; the archive's top entry is the directory's own name)."""
        ...

    def import_tree(self, archive: Path, parent: str) -> None:
        """Unpack a tar archive of :meth:`export_tree` into the directory ``parent`` of the box (modes, owners and
        sizes as they were)."""
        ...

    def ensure_dir(self, path: str, mode: int = 0o700) -> None: ...
    def remove_path(self, path: str) -> None: ...


class BoxProcesses(Protocol):
    """The box's processes, numbered as the box numbers them: list, look, identify, signal and stop them, the tasks
    holding IDs, where their threads wait in the kernel."""

    def processes(self) -> list[ProcessRow]:
        """The box's processes. Fails closed: raises :class:`RuntimeFailure` when they cannot be listed (an empty
        list would tell a stop or an audit that nothing runs)."""
        ...

    def look(self, pids: list[int]) -> tuple[list[int], set[int]]:
        """In one round trip: which of ``pids`` exist, and the LISTEN ports."""
        ...

    def identify(self, pids: list[int]) -> dict[int, str]:
        """The start time of each of ``pids`` that exists."""
        ...

    def terminate(self, pids: list[int], grace: float, *, kill: bool = True) -> Termination:
        """SIGTERM ``pids``; what is still alive (same PID and start time) ``grace`` seconds later is reported,
        then SIGKILLed (``kill=False``: left running, for the caller to judge and kill)."""
        ...

    def signal(self, pids: list[int], signame: str, *, strict: bool = False) -> bool:
        """Send ``SIG<signame>`` (``KILL``, ``TERM``, ``INT``) to each of ``pids`` at once. True: the box sent it;
        ``strict``: and every one of them was there to receive it."""
        ...

    def tasks_held(self, ids: set[int]) -> list[str]:
        """Which of these PIDs/TIDs name any task (a zombie, a thread of another process), as ``PID name state
        tgid ppid``: what CRIU's ``clone3(set_tid)`` meets."""
        ...

    def wchan(self, pids: list[int]) -> dict[int, str]:
        """Where each of ``pids`` waits in the kernel (``/proc/<pid>/wchan``; ``gone`` for one that is not there);
        an empty mapping where the box could not be asked."""
        ...

    def thread_waits(self, pids: list[int]) -> dict[int, ThreadWaits]:
        """For each of ``pids`` that exists, in one look: where each of its threads waits and its CPU ticks so far."""
        ...


class BoxSharedMemory(Protocol):
    """The box's ``/dev/shm``: its files, and which of them no process holds."""

    def shm(self) -> list[ShmEntry]:
        """The box's ``/dev/shm`` (fails with :class:`RuntimeFailure` when it cannot be listed)."""
        ...

    def shm_unheld(self, names: list[str]) -> ShmHolders:
        """Which of these ``/dev/shm`` names no process the box can see and read holds open or mapped, and which
        processes it could not read (fails with :class:`RuntimeFailure` when the box cannot be asked)."""
        ...


class BoxNetwork(Protocol):
    """The box's network: where the harness reaches a port, which ports listen, a listener of the harness's own, a
    watch for one."""

    def endpoint(self, port: int) -> tuple[str, int]:
        """Where the harness reaches the box's ``port`` over TCP."""
        ...

    @property
    def connect_proves_listener(self) -> bool:
        """Whether a connect to :meth:`endpoint` succeeds only while something listens in the box (false where a
        proxy accepts for published ports)."""
        ...

    def listening_ports(self) -> set[int]:
        """TCP ports in LISTEN state in the box's network namespace."""
        ...

    def hold_port(self, port: int, log_path: str) -> int:
        """Start a listener of the harness's own on the box's ``port`` (it accepts nothing; output to ``log_path``, a
        box path); its PID, listed among the box's processes until it is signalled."""
        ...

    def watch_listener(self, port: int, marker: str, log_path: str) -> int:
        """Start a watcher that writes ``marker`` (a box path in the control directory) once a socket listens on the
        box's ``port``, looking every 10 ms (output to ``log_path``); its PID (signal it to stop)."""
        ...


class BoxMachine(Protocol):
    """The machine as the box sees it: its CPU at a moment, the GPU's compute apps, CRIU's and CUDA's versions and
    the GPUs."""

    def cpu_sample(self) -> CpuSample | None:
        """The box's processes' CPU time and run-queue wait per task, and the machine's busy time, at this moment
        (``vsnap_qual.engine.decode_speed``); None where the box cannot tell."""
        ...

    def gpu_apps(self) -> set[int] | None:
        """The PIDs ``nvidia-smi`` lists as compute apps; None when the box has no ``nvidia-smi``."""
        ...

    def gpu_memory(self) -> dict[int, int] | None:
        """The GPU memory each compute app ``nvidia-smi`` lists uses, MiB by PID; None when the box has no
        ``nvidia-smi`` or it cannot say."""
        ...

    def facts(self, gpus: bool) -> BoxFacts:
        """CRIU's version, ``CUDA_VERSION`` and (``gpus``) the GPUs, as the box sees them."""
        ...


class Box(BoxLife, BoxCommands, BoxFiles, BoxProcesses, BoxSharedMemory, BoxNetwork, BoxMachine, Protocol):
    """Everything a lane needs from where its engine runs: the narrow protocols above, one per job, composed.
    Implemented whole by each runtime (``vsnap_qual.runtimes``); :class:`vsnap_qual.runtimes.shell.ShellBox`
    implements the process-level operations over ``exec`` for any box with a POSIX shell and ``/proc``. A function
    that needs one job of a box takes that protocol (``faults.parked`` a :class:`BoxProcesses`, the artifact's
    faults a :class:`BoxFiles`)."""


# ---- ownership: which process started a box (a sweep removes boxes of owners that are gone) -------------------
def owner_label() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_alive(owner: str) -> bool:
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's session: not ours to judge
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lane_labels(session: str, lane: str) -> dict[str, str]:
    """The labels every box of a lane carries: its session, its lane and its owner."""
    return {LABEL_SESSION: session, LABEL_LANE: lane, LABEL_OWNER: owner_label()}


# ---- the harness's own machine ----------------------------------------------------------------------------------
def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct free ports (all sockets held open until every port is chosen)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def listening_ports(proc_net_tcp: str) -> set[int]:
    """The LISTEN ports of a ``/proc/net/tcp{,6}`` listing (other lines are ignored)."""
    ports = set()
    for line in proc_net_tcp.splitlines():
        cols = line.split()
        if len(cols) > 3 and cols[3] == "0A" and ":" in cols[1]:
            ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports
