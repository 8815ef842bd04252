"""The kinds that occupy what a restore must have free, before it starts: ``pid`` (the snapshot's first captured PID
held by a sleeper of ours: it needs the box's shell and ``ns_last_pid``) and ``port`` (a listener of ours on the
restore's port: a named box operation, any box)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

from vsnap_qual.box import BoxCommands
from vsnap_qual.contract import CONTROL
from vsnap_qual.engine import client
from vsnap_qual.faults.injector import Attempt, Injector, Kind, Observation
from vsnap_qual.faults.lane import FaultLane
from vsnap_qual.model import PidInjected, PortInjected
from vsnap_qual.probe.vsnap_probe import control_files
from vsnap_qual.procedure import Expect, Fault, before_mutation

NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"


# ---- pid --------------------------------------------------------------------------------------------------------
def cursor_past(ids: set[int]) -> int:
    """Where the PID allocation cursor goes after an occupation: past every captured ID with a margin, or low
    where that is beyond ``pid_max`` (global to the kernel, which every lane of a run shares)."""
    past = max(ids) + 512
    return past if past < int(Path("/proc/sys/kernel/pid_max").read_text()) else 300


def move_pid_cursor_past(box: BoxCommands, ids: set[int]) -> bool:
    """Set the PID namespace's allocation cursor (``ns_last_pid``) past the captured IDs, so that processes and
    threads forked after an injection that set it just below a captured PID do not take the other captured IDs
    (CRIU must recreate each captured PID and TID; the threads' TIDs follow their process's PID)."""
    return box.sh(f"echo {cursor_past(ids)} > {NS_LAST_PID}", 15).exit_code == 0


class PidHolder:
    """A sleeper at exactly one PID: inside the box when it may set ``ns_last_pid``, else on this machine when the
    box's PIDs are this machine's (a host PID namespace: the captured PIDs are host PIDs).

    The allocation cursor goes past ``past`` (every captured ID) right after each fork, in the same command:
    while it sits just below the captured PID, whatever the host forks or clones takes the captured IDs next
    (the threads' TIDs follow their process's PID). A long-lived thread created then (Docker's own, with host
    PIDs) keeps a captured TID for good, and every later restore of the artifact fails (CRIU: "Unable to create
    a thread: -17")."""

    def __init__(self, lane: FaultLane, pid: int, past: int) -> None:
        self.lane, self.pid, self.past = lane, pid, past
        self.where: str | None = None
        self.cursor_moved = False  # the cursor went past ``past`` right after the occupying fork
        self._host: subprocess.Popen[bytes] | None = None

    def occupy(self) -> bool:
        """Hold the PID (True), in the box or on this machine; already held by anything also counts."""
        if self.lane.servers.alive([self.pid]):
            self.where = "already occupied"
            return True
        script = (
            f"for i in 1 2 3 4 5 6 7 8; do echo {self.pid - 1} > {NS_LAST_PID} 2>/dev/null || exit 3; "
            f"sleep 600 </dev/null >/dev/null 2>&1 & p=$!; echo {self.past} > {NS_LAST_PID} || exit 5; "
            f"if [ $p -eq {self.pid} ]; then exit 0; fi; kill $p; done; exit 4"
        )
        if self.lane.box.sh(script, 30).exit_code == 0:
            self.where, self.cursor_moved = "container", True
            return True
        if not self.lane.box.host_pid_namespace or os.geteuid() != 0:
            return False
        cursor = Path(NS_LAST_PID)
        for _ in range(200):  # other lanes fork too: retry until our fork gets the PID
            try:
                cursor.write_text(str(self.pid - 1))
            except OSError:
                return False
            proc = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            try:
                cursor.write_text(str(self.past))
                self.cursor_moved = True
            except OSError:
                self.cursor_moved = False
            if proc.pid == self.pid:
                self._host, self.where = proc, "host"
                return True
            proc.kill()
            proc.wait()
        return False

    def release(self) -> None:
        """End our sleeper (wherever it runs)."""
        if self._host is not None:
            self._host.kill()
            self._host.wait()
        elif self.where == "container":
            self.lane.box.signal([self.pid], "KILL")


class PidInjector(Injector):
    """``pid``: the snapshot's first captured PID occupied by a sleeper of ours (retried up to 3 times until the
    occupation holds); fired when our process held it as the restore started and still as it ended. Not applicable
    on a box that runs no shell (the occupation sets ``ns_last_pid`` and forks in one script)."""

    ATTEMPTS = 3

    def not_applicable(self, lane: FaultLane, fault: Fault) -> str | None:
        if not lane.box.has_shell:
            return "the box runs no shell: a captured PID is occupied by a script that sets ns_last_pid and forks"
        return None

    def begin(self, at: Attempt) -> None:
        lane, injected = at.lane, cast(PidInjected, at.injected)
        holder = PidHolder(lane, int(lane.state.manifest["process_tree"][0]), cursor_past(at.captured))
        at.state["holder"] = holder
        injected["pid"] = holder.pid
        for attempt in range(1, self.ATTEMPTS + 1):  # verified in place; an occupation that did not hold: again
            injected["occupied"] = holder.occupy()
            injected["occupied_in"] = holder.where
            injected["attempts"] = attempt
            if injected["occupied"] and lane.servers.alive([holder.pid]):
                break
            holder.release()
        # the occupation moved the allocation cursor past the captured IDs right after its fork; else now
        injected["pid_cursor_moved"] = holder.cursor_moved or move_pid_cursor_past(lane.box, at.captured)
        at.ignore.add(holder.pid)

    @staticmethod
    def holder(at: Attempt) -> PidHolder | None:
        """This attempt's sleeper (None before :meth:`begin` made it)."""
        holder = at.state.get("holder")
        return holder if isinstance(holder, PidHolder) else None

    def at_restore_start(self, at: Attempt) -> None:
        holder = self.holder(at)
        held = holder is not None and bool(at.lane.servers.alive([holder.pid]))  # as the restore starts
        cast(PidInjected, at.injected)["held_at_restore"] = held

    @contextlib.contextmanager
    def restoring(self, at: Attempt) -> Iterator[None]:
        yield
        holder = self.holder(at)
        held = holder is not None and bool(at.lane.servers.alive([holder.pid]))  # and when it ended
        cast(PidInjected, at.injected)["held_after_restore"] = held

    def end(self, at: Attempt) -> None:
        holder = self.holder(at)
        if holder is not None and holder.where in ("container", "host"):
            holder.release()

    def fired(self, obs: Observation, injected: Mapping[str, Any]) -> bool:
        return bool(injected.get("occupied") and injected.get("held_at_restore") and injected.get("held_after_restore"))


# ---- port -------------------------------------------------------------------------------------------------------
def block_port(lane: FaultLane, port: int) -> int:
    """A listener of ours on the box's ``port`` (:meth:`vsnap_qual.box.Box.hold_port`), once the harness can
    connect to it; its PID (the harness's sweep ends it with the faulted command's leftovers)."""
    pid = lane.box.hold_port(port, f"{CONTROL}/{control_files.FAULTS_DIR}/blocker-{port}.log")
    host, reach = lane.box.endpoint(port)
    client.wait_until(lambda: client.port_open(reach, host), 10.0)
    return pid


class PortInjector(Injector):
    """``port``: a listener of ours on the restore's port; fired when the port was bound as the restore started.
    HTTP is not watched and the port not audited (the injection itself holds it)."""

    watches_port = False

    def begin(self, at: Attempt) -> None:
        at.ignore.add(block_port(at.lane, at.port))
        cast(PortInjected, at.injected)["port"] = at.port

    def at_restore_start(self, at: Attempt) -> None:
        host, reach = at.lane.box.endpoint(at.port)
        cast(PortInjected, at.injected)["bound_at_restore"] = client.port_open(reach, host)

    def fired(self, obs: Observation, injected: Mapping[str, Any]) -> bool:
        return bool(injected.get("bound_at_restore"))


KINDS = (
    Kind(
        "pid",
        PidInjector(),
        injected=PidInjected,
        faults=(
            Fault(
                "pid-occupied", "a captured PID is already occupied", "pid",
                head=before_mutation("captured PID is already occupied"),
            ),
        ),
    ),
    Kind(
        "port",
        PortInjector(),
        injected=PortInjected,
        faults=(
            Fault("port-in-use", "the restore port is already in use", "port",
                  head=Expect(1, None, None, None, message="already in use")),
        ),
    ),
)  # fmt: skip
