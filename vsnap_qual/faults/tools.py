"""The lane-side tools every fault kind shares (:mod:`vsnap_qual.faults`): the fault lane's own artifact and its
pristine copy, the probe's fired records, the in-box listener watch, and the waits: for what a faulted command left,
and until the captured PIDs are free. No expectations and no judging here (:mod:`.judge`); what one kind alone does
is in its own module (:mod:`.kinds`). Every look into the box is one of its named operations (``box.Box``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from vsnap_qual import vllm_words
from vsnap_qual.box import BoxFiles, BoxProcesses, ControlDir, ExecResult, ProcessRow, RuntimeFailure
from vsnap_qual.contract import ARTIFACT, CONTROL, WORK
from vsnap_qual.control import read_json_files
from vsnap_qual.faults import deadline
from vsnap_qual.faults.lane import FaultLane
from vsnap_qual.lane import artifact_deps
from vsnap_qual.lane.artifact_files import ArtifactFiles, ArtifactFilesError
from vsnap_qual.lane.snapshot_cli import shm_left_by_create
from vsnap_qual.model import (
    CapturedIdWait,
    FaultArtifactResults,
    FaultResults,
    FiredRecord,
    FreshArtifact,
    RecoveryDeadline,
    ShmLeftRecord,
)
from vsnap_qual.probe.vsnap_probe import control_files
from vsnap_qual.recorder import StepEvidence
from vsnap_qual.vllm_words import StepFailed, check, skip_if_limitation, vllm_reason

BACKUP = f"{WORK}/artifact.pristine"


# ---- the fault lane's own artifact -------------------------------------------------------------------------
def prepare_artifact(lane: FaultLane, rec: StepEvidence[FaultArtifactResults]) -> None:
    """Create the fault lane's artifact with a short ``VLLM_SNAPSHOT_TIMEOUT_S``, sized by what this lane's
    lifecycle measured (:func:`recovery_deadline`), and keep a pristine copy."""
    lane.state.deadline = recovery_deadline(lane)
    rec.results["recovery_deadline"] = lane.state.deadline  # recorded first: a create that fails says it too
    make_artifact(lane, rec, "create")
    rec.results.update(
        FaultArtifactResults(
            snapshot_timeout_s=snapshot_timeout(lane),
            manifest=lane.state.manifest,
            outside_files=lane.state.outside_files,
        )
    )


def recovery_deadline(lane: FaultLane) -> RecoveryDeadline:
    """The deadline the fault artifact is created with (``faults.deadline``: the rule), from what this lane's
    lifecycle measured in this process before now (``lane.peers.measured``): its create and its restores."""
    measured = lane.peers.measured.get(lane.spec.name, {})
    restores, creates = measured.get("restore-ready", []), measured.get("create", [])
    name = lane.spec.name
    source = (
        f"lane {name}'s lifecycle before the fault artifact: {len(creates)} create(s), {len(restores)} restore(s)"
        if restores or creates
        else f"nothing of lane {name}'s lifecycle was measured in this process before the fault artifact"
    )
    return deadline.derive(lane.config.fault_timeout, lane.config.cleanup_grace, restores, creates, source)


def snapshot_timeout(lane: FaultLane) -> float:
    """The ``VLLM_SNAPSHOT_TIMEOUT_S`` the lane's fault artifact is (re)created with: the deadline chosen for it
    (:func:`recovery_deadline`), else ``--vsnap-fault-timeout``."""
    chosen = lane.state.deadline
    return chosen["deadline_s"] if chosen and "deadline_s" in chosen else lane.config.fault_timeout


def make_artifact(lane: FaultLane, rec: StepEvidence[ShmLeftRecord], name: str) -> None:
    """``vllm snapshot create`` of the fault artifact (its log ``name``), its pristine copy, and what the faults
    need to know of it (manifest, captured thread IDs, outside files). Where the box runs the harness's scripts,
    its files are hashed once with their stat keys (:mod:`vsnap_qual.artifact_files`: a digest and a reset then
    read only what changed); elsewhere each digest and reset takes the whole artifact."""
    box = lane.box
    box.remove_path(ARTIFACT)
    box.remove_path(BACKUP)
    env = {"VLLM_SNAPSHOT_TIMEOUT_S": f"{snapshot_timeout(lane):g}"}
    shm_before = lane.cli.shm_names()
    result = lane.cli.snapshot(rec, "create", *lane.cli.create_argv(), timeout_key="create", env=env, name=name)
    if result.exit_code != 0:
        reason = vllm_reason(result.stderr or result.stdout)
        skip_if_limitation(reason, cpu_smoke=lane.config.cpu_smoke, variant=lane.spec.variant)
        check(False, f"fault-lane create exited {result.exit_code}: {reason}\n{result.tail()}")
    lane.state.timed("create", result.seconds)
    lane.state.manifest = json.loads(box.read_text(f"{ARTIFACT}/manifest.json"))
    lane.state.captured_tids = thread_ids(box)
    lane.state.outside_files = artifact_deps.outside_files(box)
    lane.state.shm_owned.update(lane.state.outside_files)
    shm_left_by_create(lane.cli, lane.state, shm_before, rec, judged=False)  # recorded, and removed with the lane
    lane.cli.claim_made_remaps("fault-artifact")
    try:
        box.copy_tree(ARTIFACT, BACKUP)
    except RuntimeFailure as exc:
        check(False, f"cannot keep a pristine copy of the artifact: {exc}")
    if not box.has_shell:
        lane.state.artifact_files = None
        return
    try:
        lane.state.artifact_files = ArtifactFiles.kept(box, ARTIFACT, BACKUP)
    except ArtifactFilesError as exc:
        check(False, f"cannot read the fault artifact's pristine copy: {exc}")


def consumed(lane: FaultLane) -> list[str]:
    """The fault artifact's outside files that are gone: it no longer restores, whatever a fault does."""
    return artifact_deps.absent(lane.box, lane.state.outside_files)


def fresh_artifact(lane: FaultLane, rec: StepEvidence[FaultResults], gone: list[str], why: str) -> None:
    """A new fault artifact (and pristine copy) because the previous one was consumed, said in the step's
    evidence: each fault starts from an artifact that restores, so one engine defect is one finding."""
    started = time.monotonic()
    argv, exit_code = rec.argv, rec.exit_code  # the step's command stays the fault's own
    make_artifact(lane, rec, "create-fresh-artifact")
    rec.argv, rec.exit_code = argv, exit_code
    rec.results["fresh_artifact"] = FreshArtifact(
        reason=why, consumed=gone, outside_files=lane.state.outside_files, seconds=round(time.monotonic() - started, 1)
    )


def thread_ids(box: BoxFiles) -> set[int]:
    """The TID of every thread the artifact captured: CRIU writes one ``images/core-<tid>.img`` per thread and
    must recreate each with exactly that TID (a process's threads follow its PID, so they are not in the
    manifest's process tree)."""
    try:
        names = [entry.path for entry in box.list_dir(f"{ARTIFACT}/images", "core-*.img")]
    except RuntimeFailure as exc:
        raise StepFailed(f"cannot list the artifact's thread images: {exc}") from None
    return {int(name[5:-4]) for name in names if name[5:-4].isdigit()}


def captured_ids(lane: FaultLane) -> set[int]:
    """Every PID and TID a restore of the fault artifact must recreate: the process tree and its threads."""
    return set(lane.state.manifest.get("process_tree") or []) | set(lane.state.captured_tids)


def reset_artifact(lane: FaultLane) -> None:
    """Put the pristine artifact back at the same path (restore pins the artifact path): only what changed since
    the last reset where the lane knows the artifact's files (:mod:`vsnap_qual.artifact_files`), else all of it."""
    files = lane.state.artifact_files
    if files is not None:
        try:
            files.reset(lane.box)
        except ArtifactFilesError as exc:
            check(False, f"cannot reset the artifact: {exc}")
        return
    try:
        lane.box.copy_tree(BACKUP, ARTIFACT, replace=True)
    except RuntimeFailure as exc:
        check(False, f"cannot reset the artifact: {exc}")


def artifact_digest(lane: FaultLane) -> str:
    """A digest over the fault artifact's files (path, mode, content): from its kept hashes where the lane keeps
    them (only the changed files read, :mod:`vsnap_qual.lane.artifact_files`), else the whole tree's; one the box
    cannot read differs from every digest."""
    files = lane.state.artifact_files
    if files is not None and files.artifact == ARTIFACT:
        try:
            return files.digest(lane.box)
        except ArtifactFilesError as exc:
            return f"unreadable: {exc}"
    return lane.box.digest_tree(ARTIFACT)


# ---- the probe's records and the listener watch -----------------------------------------------------------
def clear_fired(control: ControlDir) -> None:
    """Remove every fired record: one is evidence of the fault that made it only."""
    for name in control.names(control_files.FIRED_GLOB):
        control.remove(name)


def fired_records(control: ControlDir) -> list[FiredRecord]:
    """The probe's records of the hooks that acted (JSON the probe wrote; read as the model's open record)."""
    return [cast(FiredRecord, record) for record in read_json_files(control, control_files.FIRED_GLOB)]


class ListenerScan:
    """A watcher in the box for a LISTEN socket on the port, every 10 ms
    (:meth:`vsnap_qual.box.BoxNetwork.watch_listener`): whether HTTP was bound, as the box itself saw it."""

    def __init__(self, lane: FaultLane, port: int) -> None:
        self.lane, self.port = lane, port
        self.name = control_files.listen_marker(port)
        self.marker = f"{CONTROL}/{self.name}"
        self.pid: int | None = None

    def __enter__(self) -> ListenerScan:
        self.lane.control.remove(self.name)
        log = f"{CONTROL}/{control_files.FAULTS_DIR}/scan-{self.port}.log"
        self.pid = self.lane.box.watch_listener(self.port, self.marker, log)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pid:
            self.lane.box.signal([self.pid], "KILL")

    @property
    def bound(self) -> bool:
        return self.lane.control.read_text(self.name) is not None


# ---- what a command left, and the captured IDs -------------------------------------------------------------
def new_processes(box: BoxProcesses, baseline: set[int], ignore: set[int]) -> list[ProcessRow]:
    """The box's processes that are neither in ``baseline`` nor in ``ignore``."""
    return [p for p in box.processes() if p["pid"] not in baseline and p["pid"] not in ignore]


def settle(
    box: BoxProcesses,
    baseline: set[int],
    ignore: set[int],
    limit: float = 5.0,
    hopeless: Callable[[list[ProcessRow]], bool] | None = None,
) -> list[ProcessRow]:
    """The processes still left after up to ``limit`` seconds (exiting ones get the time to finish), or as soon as
    ``hopeless`` says of what is left that no more time could end it (:class:`vsnap_qual.faults.parked.ParkedWatch`)."""
    return settle_timed(box, baseline, ignore, limit, hopeless)[0]


def settle_timed(
    box: BoxProcesses,
    baseline: set[int],
    ignore: set[int],
    limit: float = 5.0,
    hopeless: Callable[[list[ProcessRow]], bool] | None = None,
) -> tuple[list[ProcessRow], float]:
    """:func:`settle`, and for how long something was left: until the start of the last look that still found a
    process (0.0 where the first found none). Where nothing is left at the end, that is the least time the
    leftovers' own teardown took."""
    started = time.monotonic()
    deadline = started + limit
    left = new_processes(box, baseline, ignore)
    last_left = started if left else None
    pause = 0.02
    while left and time.monotonic() < deadline and not (hopeless and hopeless(left)):
        time.sleep(pause)
        pause = min(pause * 2, 0.1)
        looked = time.monotonic()
        left = new_processes(box, baseline, ignore)
        if left:
            last_left = looked
    return left, round((last_left or started) - started, 3)


def credit_teardown(lane: FaultLane, left: list[ProcessRow], held_s: float) -> float | None:
    """A wait for what a faulted or killed command left that ended with everything gone by itself: the engine's
    own teardown, its time the engine's (as :func:`wait_engine_gone` counts a killed tree's); a wait that ended with
    processes left (the limit, or parked for good) stays the harness's. The seconds credited (None: none)."""
    if left or held_s <= 0:
        return None
    lane.recorder.engine_time += held_s
    return held_s


def kill_leftovers(box: BoxProcesses, baseline: set[int], ignore: set[int]) -> list[int]:
    """SIGKILL every process new since ``baseline`` (less ``ignore``); the PIDs it went to."""
    leftovers = [p["pid"] for p in new_processes(box, baseline, ignore)]
    if leftovers:
        box.signal(leftovers, "KILL")
    return leftovers


def ids_held(box: BoxProcesses, ids: set[int]) -> list[str]:
    """Which of these PIDs/TIDs still name a task in the lane's PID namespace, whatever it is: a process of the
    lane or not, a thread of another process, a zombie, one still tearing down its GPU context after SIGKILL.
    That is what vLLM's ``os.kill(pid, 0)`` availability probe and CRIU's ``clone3(set_tid)`` see, whereas the
    lane's process listing leaves out zombies and exiting processes. Each as ``PID name state tgid ppid``."""
    return box.tasks_held(ids)


def wait_ids_free(box: BoxProcesses, ids: set[int], limit: float) -> CapturedIdWait:
    """Wait (up to ``limit`` s) until none of ``ids`` names a task any more; what was waited for is evidence.
    ``held_s``: until the last look that still found one held (its start), the least time the tasks' own
    teardown took; the rest of ``waited_s`` is the looks' (:func:`wait_engine_gone` credits it to the engine)."""
    started = time.monotonic()
    held = ids_held(box, ids)
    first, last_held = held, started if held else None
    pause = 0.02  # a task exits in milliseconds, a GPU context's teardown in seconds: short looks throughout
    while held and time.monotonic() - started < limit:
        time.sleep(pause)
        pause = min(pause * 2, HELD_LOOK_PAUSE)
        looked = time.monotonic()
        held = ids_held(box, ids)
        if held:
            last_held = looked
    outcome = CapturedIdWait()
    if first:
        outcome.update({"held_at_first": first, "waited_s": round(time.monotonic() - started, 2)})
        outcome["held_s"] = round((last_held or started) - started, 3)
    if held:
        outcome["still_held"] = held
    return outcome


def wait_engine_gone(lane: FaultLane, ids: set[int], limit: float) -> CapturedIdWait:
    """:func:`wait_ids_free` where the IDs are held by the engine's own tree going away (stopped or killed a
    moment ago, its GPU context tearing down): that teardown is the engine's time, as a stop's wait for its
    processes is (``Servers.stop``); only the looks' overrun past it is the harness's."""
    waited = wait_ids_free(lane.box, ids, limit)
    lane.recorder.engine_time += waited.get("held_s", 0.0)
    return waited


#: the longest pause between two looks at held IDs: what a wait may overrun the teardown it waits for by
HELD_LOOK_PAUSE = 0.05


# ---- a restore of the harness's own ----------------------------------------------------------------------------
def restore_retrying_taken(
    lane: FaultLane, argv: list[str], captured: set[int], baseline: set[int]
) -> tuple[ExecResult, dict[str, object]]:
    """A restore of the harness's own (a fault's follow-up, a killed create's artifact) tried once more where it
    failed only because a captured ID was taken at that moment (:func:`vllm_words.captured_id_taken`: CRIU's clone
    met EEXIST, or vLLM's pre-check found a captured PID occupied), which says nothing of the artifact. Before the
    second try the lane's own leftovers are stopped and the IDs waited free. Returned with the evidence:
    ``retried_after`` and ``held_at_retry`` (who held them), and ``ids_taken`` where the second try met the same."""
    with lane.recorder.engine_wait():
        result: ExecResult = lane.box.exec(argv, lane.config.timeouts["restore"])
    taken = vllm_words.captured_id_taken(result.stdout, result.stderr) if result.exit_code else None
    if not taken:
        return result, {}
    said: dict[str, object] = {"retried_after": taken, "held_at_retry": ids_held(lane.box, captured)}
    kill_leftovers(lane.box, baseline, set())
    wait_engine_gone(lane, captured, lane.config.cleanup_grace)
    with lane.recorder.engine_wait():
        result = lane.box.exec(argv, lane.config.timeouts["restore"])
    again = vllm_words.captured_id_taken(result.stdout, result.stderr) if result.exit_code else None
    if again:
        said["ids_taken"] = again
    return result, said


def never_tried(what: str, said: Mapping[str, Any]) -> str:
    """A restore of the harness's own that met a taken captured ID twice (:func:`restore_retrying_taken`): a refusal
    with a message that says nothing of the artifact, so nothing was judged."""
    return (
        f"{what} was never tried: its restore met a captured ID taken twice ({said.get('ids_taken')}; held at "
        f"the retry by {said.get('held_at_retry') or 'nothing listed'}), so nothing is said of the artifact"
    )
