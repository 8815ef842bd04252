"""The snapshot commands of a lane, exactly as a user types them, each recorded in its step (its own log, its exit
code, the engine's time), and the artifact they leave in the box: its files, the ``/dev/shm`` files it needs and
does not carry, the link remaps its dump made, and what a create left in ``/dev/shm`` that nothing holds
(:func:`shm_left_by_create`). Implements :class:`vsnap_qual.lane.protocols.SnapshotCli` over a box."""

from __future__ import annotations

import calendar
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from vsnap_qual.box import Box, ControlDir, ExecResult, ShmHolders
from vsnap_qual.config import LaneSpec, QualConfig
from vsnap_qual.contract import ARTIFACT, restore_argv
from vsnap_qual.engine import boundaries, client
from vsnap_qual.lane import artifact_deps, audit
from vsnap_qual.lane.artifact_deps import SHM
from vsnap_qual.lane.protocols import RestoreRun
from vsnap_qual.lane.state import ArtifactState
from vsnap_qual.model import BoundaryRequest, ShmLeftRecord, ShmNotJudged
from vsnap_qual.probe.vsnap_probe import control_files
from vsnap_qual.recorder import StepEvidence, StepRecorder


def recorded_command(
    box: Box,
    recorder: StepRecorder,
    config: QualConfig,
    rec: StepEvidence[object],
    argv: list[str],
    timeout_key: str,
    env: dict[str, str] | None,
    name: str,
) -> ExecResult:
    """One engine command of the step in the box, recorded: its own log, its exit code in the evidence, its time
    the engine's."""
    rec.argv = argv
    with recorder.engine_wait():
        result = box.exec(argv, config.timeouts[timeout_key], env=env, log=recorder.log(rec, name))
    rec.exit_code = result.exit_code
    return result


@dataclass(frozen=True, kw_only=True)
class LaneSnapshotCli:
    """The snapshot commands and the artifact of one lane's box."""

    box: Box
    recorder: StepRecorder
    config: QualConfig
    spec: LaneSpec
    ports: dict[str, int]
    scope: audit.AuditScope

    def command(
        self, rec: StepEvidence[object], argv: list[str], timeout_key: str, env: dict[str, str] | None, name: str
    ) -> ExecResult:
        """One recorded engine command of the step (its own log, its exit code in the evidence)."""
        return recorded_command(self.box, self.recorder, self.config, rec, argv, timeout_key, env, name)

    def snapshot(
        self,
        rec: StepEvidence[object],
        action: str,
        *args: str,
        timeout_key: str,
        env: dict[str, str] | None = None,
        name: str | None = None,
    ) -> ExecResult:
        return self.command(rec, ["vllm", "snapshot", action, *args], timeout_key, env, name or action)

    def restore_at(
        self, rec: StepEvidence[object], port: int, name: str, env: dict[str, str] | None = None
    ) -> ExecResult:
        """``vllm snapshot restore ARTIFACT --host 127.0.0.1 --port PORT`` as one recorded step command."""
        return self.command(rec, restore_argv(port), "restore", env, name)

    def create_argv(self, target: str = ARTIFACT) -> list[str]:
        return [*self.config.engine_argv(self.spec), "--snapshot-dir", target]

    def create(self, rec: StepEvidence[object]) -> ExecResult:
        self.box.remove_path(ARTIFACT)
        return self.snapshot(rec, "create", *self.create_argv(), timeout_key="create")

    def inspect(self, rec: StepEvidence[object], name: str = "inspect") -> ExecResult:
        return self.snapshot(rec, "inspect", ARTIFACT, timeout_key="inspect", name=name)

    def restore(
        self,
        rec: StepEvidence[object],
        step: str,
        during_hold: Callable[[int, float], BoundaryRequest] | None = None,
    ) -> RestoreRun:
        port = self.ports[step]
        host, reach = self.box.endpoint(port)
        if during_hold is None:
            with client.ListenerWatch(reach, host) as watch:
                result = self.restore_at(rec, port, name=step)
            return RestoreRun(result, port, watch.first_bound)
        ask = during_hold
        held = HeldRecovery(self.box.control(), lambda began: ask(port, began), self.config.timeouts["http"])
        with held, client.ListenerWatch(reach, host) as watch:
            result = self.restore_at(rec, port, name=step)
            held.command_ended()
        return RestoreRun(result, port, watch.first_bound, held.record)

    def artifact_file(self, name: str) -> str:
        return self.box.read_text(f"{ARTIFACT}/{name}")

    def keep_child_log(self, rec: StepEvidence[object]) -> None:
        self.recorder.store.write_text(self.recorder.log(rec, "create-child"), self.artifact_file("child.log"))

    def snapshot_kv(self) -> int | None:
        """KV capacity of a snapshot: profiled once at create, in ``child.log`` up to its snapshot size."""
        size_text = self.box.read_text(f"{ARTIFACT}/child.log.snapshot-size").strip()
        data = self.box.read_bytes(f"{ARTIFACT}/child.log") or b""
        if size_text.isdigit():
            data = data[: int(size_text)]
        return client.kv_from_log(data.decode("utf-8", "replace"))

    def files_bytes(self) -> int:
        """What the manifest's ``artifact_bytes`` counts (the contract: every regular file under the artifact at
        manifest time, i.e. every one but ``manifest.json``, written after it), as the box lists them now."""
        entries = self.box.list_dir(ARTIFACT, depth=None)
        return sum(e.size for e in entries if e.type == "f" and e.path != "manifest.json")

    def outside_files(self) -> list[str]:
        return artifact_deps.outside_files(self.box)

    def absent_files(self, paths: list[str]) -> list[str]:
        return artifact_deps.absent(self.box, paths)

    def claim_made_remaps(self, step: str) -> list[str]:
        """The ``/dev/shm/link_remap.*`` paths the lane's artifact names (its dump made them), claimed for this
        lane's ``step`` in the run's claims, so a leak of them is this lane's whichever lane sees it first."""
        made = [p for p in artifact_deps.named(self.box) if p.rsplit("/", 1)[-1].startswith(audit.LINK_REMAP)]
        audit.claim_made_remaps(self.scope, made, step)
        return made

    def shm_names(self) -> set[str]:
        """The names in the box's ``/dev/shm`` now."""
        return {entry.name for entry in self.box.shm()}

    def shm_unheld(self, names: list[str]) -> ShmHolders | None:
        """Which of these ``/dev/shm`` names no process the box can read holds, and which processes it cannot read
        (:class:`ShmHolders`); None where the box cannot see every process that may hold one (a PID namespace of
        its own: another lane's, or the host's, are not in it)."""
        return self.box.shm_unheld(names) if self.box.host_pid_namespace else None


# ---- a restore's recovery held (issue 44 item 3) -----------------------------------------------------------------
def fired_at(text: object) -> float | None:
    """The epoch second of a probe record's ``time`` (UTC ISO-8601 with microseconds, or an epoch second as a
    runtime's own engine may write it); None where unreadable."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    if not isinstance(text, str):
        return None
    try:
        whole, _, fraction = text.rstrip("Z").partition(".")
        return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + float(f"0.{fraction or 0}")
    except ValueError:
        return None


class HeldRecovery:
    """The probe's :data:`boundaries.HOLD_POINT` armed to hold the restore's recovery for :data:`boundaries.HOLD_S`
    seconds; once its record says the hold began, ``during_hold(began)`` is asked (in a thread, while the restore
    command runs). The point is disarmed once it fired, or once :data:`boundaries.HOLD_LATE_S` passed after the
    command ended without it firing (:attr:`record` then says so)."""

    def __init__(self, control: ControlDir, during_hold: Callable[[float], BoundaryRequest], http_s: float) -> None:
        self.control, self.during_hold, self.http_s = control, during_hold, http_s
        self.record: BoundaryRequest | None = None
        self._ended: float | None = None
        self._known: set[str] = set()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> HeldRecovery:
        self._known = set(self.control.names(control_files.FIRED_GLOB))
        self.control.write_json(
            control_files.ARMED, control_files.armed_payload(boundaries.HOLD_POINT, boundaries.HOLD_S)
        )
        self._thread.start()
        return self

    def command_ended(self) -> None:
        self._ended = time.time()

    def __exit__(self, *exc: object) -> None:
        if self._ended is None:
            self._ended = time.time()
        self._thread.join(boundaries.HOLD_LATE_S + boundaries.HOLD_S + self.http_s + 5.0)
        self.control.remove(control_files.ARMED)
        if self.record is None:
            self.record = BoundaryRequest(boundary="recovery", held=False, outcome="not sent", detail="no answer came")

    def _began(self) -> float | None:
        point = f"fired-{boundaries.HOLD_POINT}-"
        for name in self.control.names(control_files.FIRED_GLOB):
            if name in self._known or point not in name:
                continue
            try:
                payload = json.loads(self.control.read_text(name) or "")
            except ValueError:
                continue  # being written
            if isinstance(payload, dict) and (began := fired_at(payload.get("time"))) is not None:
                return began
        return None

    def _run(self) -> None:
        while True:
            began = self._began()
            if began is not None:
                record = self.during_hold(began)
                record.update({"boundary": "recovery", "held": True, "hold_s": boundaries.HOLD_S})
                self.record = record
                return
            if self._ended is not None and time.time() > self._ended + boundaries.HOLD_LATE_S:
                self.record = BoundaryRequest(
                    boundary="recovery", held=False, hold_s=boundaries.HOLD_S, outcome="not sent",
                    detail=f"the probe's {boundaries.HOLD_POINT} point did not fire during the restore or "
                    f"{boundaries.HOLD_LATE_S:g} s after it (an engine without the point, or the probe not loaded)",
                )  # fmt: skip
                return
            time.sleep(0.02)


# ---- what a create left in /dev/shm ------------------------------------------------------------------------------
class ShmLooks(Protocol):
    """What :func:`shm_left_by_create` looks at (a lane's snapshot commands, the lifecycle's and the fault lane's)."""

    def shm_names(self) -> set[str]: ...
    def shm_unheld(self, names: list[str]) -> ShmHolders | None: ...


def shm_left_by_create(
    cli: ShmLooks, state: ArtifactState, before: set[str], rec: StepEvidence[ShmLeftRecord], judged: bool = True
) -> list[str] | None:
    """The ``/dev/shm`` files new since just before the create that no process holds and the artifact does not
    name (``artifact_deps.outside_files``; CRIU's ``link_remap.*`` have their own audit): a leak of the create,
    since its dumped tree is gone and no restore looks for them. Judged (returned) only where the box sees every
    process that could hold one (the host's PID namespace: a box of its own cannot see another lane's holders)
    and the caller judges (``judged``: the fault lane's own artifact is not, one finding being one): the caller
    records them (``results.shm_left``); None where they are not judged (recorded here, if any, in
    ``results.shm_left_not_judged``). A process the box cannot read is taken
    to hold none of them (:class:`ShmHolders`: it has a capability the box lacks, so it is none of this lane's
    engine); where one was met, ``results.shm_unread`` names it. What no process holds is removed with the lane
    (``ArtifactState.shm_owned``)."""
    outside = {path.rsplit("/", 1)[-1] for path in state.outside_files}
    new = sorted(
        name for name in cli.shm_names() - before if name not in outside and not name.startswith(audit.LINK_REMAP)
    )
    holders = cli.shm_unheld(new)
    files = [SHM + name for name in (new if holders is None else holders.unheld)]
    if holders is not None:
        state.shm_owned.update(files)
        if files and holders.unread:
            rec.results["shm_unread"] = holders.unread
        if judged:
            return files
    if files:
        why = (
            "the box has a PID namespace of its own: it cannot see every process that may hold them"
            if holders is None
            else "the fault lane's own artifact: a create's leak is judged once, at the lifecycle's create"
        )
        rec.results["shm_left_not_judged"] = ShmNotJudged(files=files, why=why)
    return None


def shm_left_by_commands(cli: ShmLooks, state: ArtifactState, before: set[str]) -> tuple[list[str], bool]:
    """The ``/dev/shm`` files new since ``before`` that no process holds and no artifact of the lane names (CRIU's
    ``link_remap.*`` have their own audit), and whether that was judged (the box sees every process that could hold
    one): what a fault's commands left (issue 44). Those no process holds are the lane's to remove
    (``ArtifactState.shm_owned``), as a create's are."""
    keep = {path.rsplit("/", 1)[-1] for path in (*state.outside_files, *state.shm_owned)}
    new = sorted(n for n in cli.shm_names() - before if n not in keep and not n.startswith(audit.LINK_REMAP))
    if not new:
        return [], True
    holders = cli.shm_unheld(new)
    files = [SHM + name for name in (new if holders is None else holders.unheld)]
    if holders is not None:
        state.shm_owned.update(files)
    return files, holders is not None


#: what a /dev/shm name says of its maker (the name's prefix), for the create check's message: Python's words
SHM_KINDS = {
    "sem.mp-": "a Python multiprocessing lock or semaphore made outside a fork context, whose name CPython unlinks "
    '"when the object is garbage collected or the process shuts down" (multiprocessing/synchronize.py), or its '
    "resource tracker does; a dump's SIGKILL stops both",
}


def shm_kinds(files: list[str]) -> str:
    """``. sem.mp-*: …`` for each kind of name in ``files`` that :data:`SHM_KINDS` knows ("" for none)."""
    names = [path.rsplit("/", 1)[-1] for path in files]
    return "".join(
        f". {prefix}*: {words}" for prefix, words in SHM_KINDS.items() if any(n.startswith(prefix) for n in names)
    )


def unread_words(unread: list[str], shown: int = 4) -> str:
    """The processes the holder look could not read, as the create check's message names them ("" for none;
    the first ``shown`` by name, the rest counted: all are in ``results.shm_unread``)."""
    if not unread:
        return ""
    named = ", ".join(unread[:shown]) + (f" and {len(unread) - shown} more" if len(unread) > shown else "")
    return (
        f"; no process it could read holds them, and it could not read {len(unread)} ({named}): each has a "
        "capability the box lacks, so none is this lane's engine"
    )
