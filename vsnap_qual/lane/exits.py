"""How watched processes ended, though the harness is not their parent: the kernel's process-event connector
(netlink ``NETLINK_CONNECTOR``, ``CN_IDX_PROC``) reports every task's exit with its wait status to a listener with
``CAP_NET_ADMIN`` in the initial namespaces. A restored server's tree is nobody's child here (its parent was the
restore, which exited), so this is the only place its death signal or exit code can come from.

PIDs are the host's: only boxes in the host PID namespace are watched (their PIDs are the ones the events carry).
Where the socket cannot be opened (no privilege, another network namespace) the watch says so, and the finding
then says the exit status was not observable and why."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import struct
import threading
import time
from collections.abc import Iterable
from pathlib import Path

NETLINK_CONNECTOR = 11
CN_IDX_PROC = 1
CN_VAL_PROC = 1
PROC_CN_MCAST_LISTEN = 1
PROC_CN_MCAST_IGNORE = 2
PROC_EVENT_EXIT = 0x80000000
NLMSG_DONE = 3
_NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_CN_MSG = struct.Struct("=IIIIHH")  # idx, val, seq, ack, len, flags
_EVENT = struct.Struct("=IIQ")  # what, cpu, timestamp_ns
_EXIT = struct.Struct("=iiII")  # pid, tgid, exit_code, exit_signal


def describe(status: int) -> str:
    """A wait status in words: ``killed by SIGKILL`` (``, core dumped``) or ``exit code 1``."""
    if status & 0x7F:
        number = status & 0x7F
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"killed by {name}" + (", core dumped" if status & 0x80 else "")
    return f"exit code {(status >> 8) & 0xFF}"


class ExitWatch:
    """Listens for exits while it is open; :meth:`ended` answers how each watched process (thread-group leader)
    ended, or why that cannot be known."""

    def __init__(self, pids: Iterable[int], why_not: str | None = None) -> None:
        self.pids = set(pids)
        self.exits: dict[int, int] = {}
        self.events = 0  # exit events of any process read while open: the watch worked, whatever it missed
        self.unavailable: str | None = why_not
        self._sock: socket.socket | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ExitWatch:
        if self.unavailable:  # the box's PIDs are not the ones the kernel's events carry
            return self
        try:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
            sock.bind((0, CN_IDX_PROC))
            sock.send(self._control(PROC_CN_MCAST_LISTEN))
        except OSError as exc:
            self.unavailable = f"the kernel's process events are not readable here ({exc.strerror or exc})"
            return self
        self._sock = sock
        self._thread = threading.Thread(target=self._listen, name="vsnap-exit-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.send(self._control(PROC_CN_MCAST_IGNORE))
            self._sock.close()

    @staticmethod
    def _control(op: int) -> bytes:
        payload = struct.pack("=I", op)
        cn = _CN_MSG.pack(CN_IDX_PROC, CN_VAL_PROC, 0, 0, len(payload), 0) + payload
        return _NLMSG.pack(_NLMSG.size + len(cn), NLMSG_DONE, 0, 0, os.getpid()) + cn

    def _listen(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self._sock], [], [], 0.2)
                if not ready:
                    continue
                data = self._sock.recv(65536)
            except OSError as exc:  # ENOBUFS: events were dropped under load
                self.unavailable = f"process events were lost ({exc.strerror or exc})"
                continue
            self.take(data)

    def take(self, data: bytes) -> None:
        """Read one netlink datagram's exit events of the watched processes."""
        offset = 0
        while offset + _NLMSG.size <= len(data):
            length = _NLMSG.unpack_from(data, offset)[0]
            if length < _NLMSG.size:
                return
            body = offset + _NLMSG.size + _CN_MSG.size
            if body + _EVENT.size + _EXIT.size <= offset + length:
                what = _EVENT.unpack_from(data, body)[0]
                if what == PROC_EVENT_EXIT:
                    self.events += 1
                    pid, tgid, code, _ = _EXIT.unpack_from(data, body + _EVENT.size)
                    if pid == tgid and tgid in self.pids:
                        self.exits[tgid] = code
            offset += (length + 3) & ~3

    def wait_for(self, pids: Iterable[int], limit: float = 1.0) -> None:
        """Give the listener up to ``limit`` seconds to read the exits of processes already gone."""
        wanted = set(pids)
        deadline = time.monotonic() + limit
        while self._thread is not None and not wanted <= set(self.exits) and time.monotonic() < deadline:
            time.sleep(0.05)

    def ended(self, pids: Iterable[int]) -> str:
        """How these processes ended, in words (``1234 killed by SIGKILL; 1240 exit code 0``), or why unknown."""
        pids = list(pids)
        said = [f"{pid} {describe(self.exits[pid])}" for pid in pids if pid in self.exits]
        if said:
            return "; ".join(said)
        if self.unavailable:
            return f"exit status not observed: {self.unavailable}"
        # the watch read other processes' exits but none of these: they did not end as processes of this PID
        # namespace do (or the events were dropped unreported); what holds their PIDs now says more
        now = "; ".join(f"{pid}: {holder_now(pid)}" for pid in pids)
        return f"exit status not observed (the watch read {self.events} other exit events); now {now}"


def holder_now(pid: int) -> str:
    """What this machine's PID ``pid`` names now: nothing, or a process (its state, start time and command)."""
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
        cmdline = (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "free"
    fields = stat.rsplit(")", 1)[1].split()
    return f"held by a process in state {fields[0]} started at tick {fields[19]}: {cmdline.strip()[:120]}"
