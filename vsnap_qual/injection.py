"""The lane-side tools of the injected failures (:mod:`vsnap_qual.faults`): the fault lane's own artifact and its
pristine copy, arming the probe's hook points, watching a port, occupying a captured PID, blocking the port,
corrupting the manifest or an image, the signaller, and waiting until the captured PIDs are
free. No expectations and no judging here: what a fault must show and whether it did are :mod:`faults`' job."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from vsnap_qual import artifact_deps, checks, engine
from vsnap_qual.artifact_files import ArtifactFiles, ArtifactFilesError
from vsnap_qual.box import Box, ControlDir, ExecResult, ProcessRow
from vsnap_qual.contract import ARTIFACT, CONTROL, WORK
from vsnap_qual.control import read_json_files
from vsnap_qual.model import CapturedIdWait, FiredRecord, FreshArtifact
from vsnap_qual.probe.vsnap_probe import control_files
from vsnap_qual.recorder import StepEvidence
from vsnap_qual.steps import check, shm_left_by_create, skip_if_limitation, vllm_reason

if TYPE_CHECKING:
    from vsnap_qual.faults import FaultLane

BACKUP = f"{WORK}/artifact.pristine"


# ---- the fault lane's own artifact -------------------------------------------------------------------------
def prepare_artifact(run: FaultLane, rec: StepEvidence) -> None:
    """Create the fault lane's artifact with a short ``VLLM_SNAPSHOT_TIMEOUT_S`` and keep a pristine copy."""
    make_artifact(run, rec, "create")
    rec.results.update(
        {
            "snapshot_timeout_s": run.config.fault_timeout,
            "manifest": run.state.manifest,
            "outside_files": run.state.outside_files,
        }
    )


def make_artifact(run: FaultLane, rec: StepEvidence, name: str) -> None:
    """``vllm snapshot create`` of the fault artifact (its log ``name``), its pristine copy, and what the faults
    need to know of it (manifest, captured thread IDs, outside files)."""
    run.box.remove_path(ARTIFACT)
    run.box.remove_path(BACKUP)
    env = {"VLLM_SNAPSHOT_TIMEOUT_S": f"{run.config.fault_timeout:g}"}
    shm_before = run.shm_names()
    result = run.snapshot(rec, "create", *run.create_argv(), timeout_key="create", env=env, name=name)
    if result.exit_code != 0:
        reason = vllm_reason(result.stderr or result.stdout)
        skip_if_limitation(reason, cpu_smoke=run.config.cpu_smoke, variant=run.lane.variant)
        check(False, f"fault-lane create exited {result.exit_code}: {reason}\n{result.tail()}")
    run.state.timed("create", result.seconds)
    run.state.manifest = json.loads(run.box.read_text(f"{ARTIFACT}/manifest.json"))
    run.state.captured_tids = thread_ids(run.box)
    run.state.outside_files = artifact_deps.outside_files(run.box)
    run.state.shm_owned.update(run.state.outside_files)
    shm_left_by_create(run, shm_before, rec, judged=False)  # recorded, and removed with the lane
    run.claim_made_remaps("fault-artifact")
    copied = run.box.sh(f"cp -a {ARTIFACT} {BACKUP}", 300)
    check(copied.exit_code == 0, f"cannot keep a pristine copy of the artifact: {copied.tail()}")
    try:
        run.state.artifact_files = ArtifactFiles.kept(run.box, ARTIFACT, BACKUP)
    except ArtifactFilesError as exc:
        check(False, f"cannot read the fault artifact's pristine copy: {exc}")


def consumed(run: FaultLane) -> list[str]:
    """The fault artifact's outside files that are gone: it no longer restores, whatever a fault does."""
    return artifact_deps.absent(run.box, run.state.outside_files)


def fresh_artifact(run: FaultLane, rec: StepEvidence, gone: list[str], why: str) -> None:
    """A new fault artifact (and pristine copy) because the previous one was consumed, said in the step's
    evidence: each fault starts from an artifact that restores, so one engine defect is one finding."""
    started = time.monotonic()
    argv, exit_code = rec.argv, rec.exit_code  # the step's command stays the fault's own
    make_artifact(run, rec, "create-fresh-artifact")
    rec.argv, rec.exit_code = argv, exit_code
    rec.results["fresh_artifact"] = FreshArtifact(
        reason=why, consumed=gone, outside_files=run.state.outside_files, seconds=round(time.monotonic() - started, 1)
    )


def thread_ids(box: Box) -> set[int]:
    """The TID of every thread the artifact captured: CRIU writes one ``images/core-<tid>.img`` per thread and
    must recreate each with exactly that TID (a process's threads follow its PID, so they are not in the
    manifest's process tree)."""
    listing = box.sh(f"find {ARTIFACT}/images -maxdepth 1 -name 'core-*.img' -printf '%f\\n'", 60)
    check(listing.exit_code == 0, f"cannot list the artifact's thread images: {listing.tail()}")
    return {int(name[5:-4]) for name in listing.stdout.split() if name[5:-4].isdigit()}


def captured_ids(run: FaultLane) -> set[int]:
    """Every PID and TID a restore of the fault artifact must recreate: the process tree and its threads."""
    return set(run.state.manifest.get("process_tree") or []) | set(run.state.captured_tids)


def reset_artifact(run: FaultLane) -> None:
    """Put the pristine artifact back at the same path (restore pins the artifact path): only what changed since
    the last reset where the lane knows the artifact's files (:mod:`artifact_files`), else all of it."""
    files = run.state.artifact_files
    if files is not None:
        try:
            files.reset(run.box)
        except ArtifactFilesError as exc:
            check(False, f"cannot reset the artifact: {exc}")
        return
    result = run.box.sh(f"rm -rf {ARTIFACT} && cp -a {BACKUP} {ARTIFACT}", 300)
    check(result.exit_code == 0, f"cannot reset the artifact: {result.tail()}")


# ---- arming and observing ----------------------------------------------------------------------------------
def clear_fired(control: ControlDir) -> None:
    for name in control.names(control_files.FIRED_GLOB):
        control.remove(name)


def arm(control: ControlDir, point: str, stall_s: float | None = None) -> None:
    """Arm the probe's hook point (the fired records of earlier faults are cleared by ``run_fault`` first)."""
    control.write_json(control_files.ARMED, control_files.armed_payload(point, stall_s))


def disarm(control: ControlDir) -> None:
    control.remove(control_files.ARMED)


def fired_records(control: ControlDir) -> list[FiredRecord]:
    """The probe's records of the hooks that acted (JSON the probe wrote; read as the model's open record)."""
    return [cast(FiredRecord, record) for record in read_json_files(control, control_files.FIRED_GLOB)]


class ListenerScan:
    """An in-box scanner of ``/proc/net/tcp*`` for a LISTEN socket on the port, every 10 ms."""

    def __init__(self, run: FaultLane, port: int) -> None:
        self.run, self.port = run, port
        self.name = control_files.listen_marker(port)
        self.marker = f"{CONTROL}/{self.name}"
        self.pid: int | None = None

    def __enter__(self) -> ListenerScan:
        self.run.control.remove(self.name)
        code = (
            "import time,sys\n"
            f"needle=':{self.port:04X} '\n"
            "while True:\n"
            "    for f in ('/proc/net/tcp','/proc/net/tcp6'):\n"
            "        try:\n"
            "            rows=open(f).read().splitlines()[1:]\n"
            "        except OSError:\n"
            "            continue\n"
            "        if any(needle in r.split()[1]+' ' and r.split()[3]=='0A' for r in rows):\n"
            f"            open({self.marker!r},'a').write(repr(time.time())+'\\n'); sys.exit(0)\n"
            "    time.sleep(0.01)\n"
        )
        self.pid = self.run.box.spawn(["python3", "-c", code], f"{CONTROL}/faults/scan-{self.port}.log")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pid:
            self.run.box.sh(f"kill -KILL {self.pid} 2>/dev/null; true", 15)

    @property
    def bound(self) -> bool:
        return self.run.control.read_text(self.name) is not None


def new_processes(box: Box, baseline: set[int], ignore: set[int]) -> list[ProcessRow]:
    return [p for p in box.processes() if p["pid"] not in baseline and p["pid"] not in ignore]


def settle(
    box: Box,
    baseline: set[int],
    ignore: set[int],
    limit: float = 5.0,
    hopeless: Callable[[list[ProcessRow]], bool] | None = None,
) -> list[ProcessRow]:
    """The processes still left after up to ``limit`` seconds (exiting ones get the time to finish), or as soon as
    ``hopeless`` says of what is left that no more time could end it (:class:`vsnap_qual.parked.ParkedWatch`)."""
    return settle_timed(box, baseline, ignore, limit, hopeless)[0]


def settle_timed(
    box: Box,
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


def credit_teardown(run: FaultLane, left: list[ProcessRow], held_s: float) -> float | None:
    """A wait for what a faulted or killed command left that ended with everything gone by itself: the engine's
    own teardown, its time the engine's (as :func:`wait_engine_gone` counts a killed tree's); a wait that ended with
    processes left (the limit, or parked for good) stays the harness's. The seconds credited (None: none)."""
    if left or held_s <= 0:
        return None
    run.recorder.engine_time += held_s
    return held_s


def kill_leftovers(box: Box, baseline: set[int], ignore: set[int]) -> list[int]:
    leftovers = [p["pid"] for p in new_processes(box, baseline, ignore)]
    if leftovers:
        box.sh("kill -KILL " + " ".join(map(str, leftovers)) + " 2>/dev/null; true", 15)
    return leftovers


def ids_held(box: Box, ids: set[int]) -> list[str]:
    """Which of these PIDs/TIDs still name a task in the lane's PID namespace, whatever it is: a process of the
    lane or not, a thread of another process, a zombie, one still tearing down its GPU context after SIGKILL.
    That is what vLLM's ``os.kill(pid, 0)`` availability probe and CRIU's ``clone3(set_tid)`` see, whereas the
    lane's process listing leaves out zombies and exiting processes. Each as ``PID name state tgid ppid``."""
    return box.tasks_held(ids)


def wait_ids_free(box: Box, ids: set[int], limit: float) -> CapturedIdWait:
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


def wait_engine_gone(run: FaultLane, ids: set[int], limit: float) -> CapturedIdWait:
    """:func:`wait_ids_free` where the IDs are held by the engine's own tree going away (stopped or killed a
    moment ago, its GPU context tearing down): that teardown is the engine's time, as a stop's wait for its
    processes is (``LaneTools.stop``); only the looks' overrun past it is the harness's."""
    waited = wait_ids_free(run.box, ids, limit)
    run.recorder.engine_time += waited.get("held_s", 0.0)
    return waited


#: the longest pause between two looks at held IDs: what a wait may overrun the teardown it waits for by
HELD_LOOK_PAUSE = 0.05


NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"


def restore_retrying_taken(
    run: FaultLane, argv: list[str], captured: set[int], baseline: set[int]
) -> tuple[ExecResult, dict[str, object]]:
    """A restore of the harness's own (a fault's follow-up, a killed create's artifact) tried once more where it
    failed only because a captured ID was taken at that moment (:func:`checks.captured_id_taken`: CRIU's clone
    met EEXIST, or vLLM's pre-check found a captured PID occupied), which says nothing of the artifact. Before the
    second try the lane's own leftovers are stopped and the IDs waited free. Returned with the evidence:
    ``retried_after`` and ``held_at_retry`` (who held them), and ``ids_taken`` where the second try met the same."""
    with run.recorder.engine_wait():
        result: ExecResult = run.box.exec(argv, run.config.timeouts["restore"])
    taken = checks.captured_id_taken(result.stdout, result.stderr) if result.exit_code else None
    if not taken:
        return result, {}
    said: dict[str, object] = {"retried_after": taken, "held_at_retry": ids_held(run.box, captured)}
    kill_leftovers(run.box, baseline, set())
    wait_engine_gone(run, captured, run.config.cleanup_grace)
    with run.recorder.engine_wait():
        result = run.box.exec(argv, run.config.timeouts["restore"])
    again = checks.captured_id_taken(result.stdout, result.stderr) if result.exit_code else None
    if again:
        said["ids_taken"] = again
    return result, said


def cursor_past(ids: set[int]) -> int:
    """Where the PID allocation cursor goes after an occupation: past every captured ID with a margin, or low
    where that is beyond ``pid_max`` (global to the kernel, which every lane of a run shares)."""
    past = max(ids) + 512
    return past if past < int(Path("/proc/sys/kernel/pid_max").read_text()) else 300


def move_pid_cursor_past(box: Box, ids: set[int]) -> bool:
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

    def __init__(self, run: FaultLane, pid: int, past: int) -> None:
        self.run, self.pid, self.past = run, pid, past
        self.where: str | None = None
        self.cursor_moved = False  # the cursor went past ``past`` right after the occupying fork
        self._host: subprocess.Popen[bytes] | None = None

    def occupy(self) -> bool:
        if self.run.pid_alive(self.pid):
            self.where = "already occupied"
            return True
        script = (
            f"for i in 1 2 3 4 5 6 7 8; do echo {self.pid - 1} > {NS_LAST_PID} 2>/dev/null || exit 3; "
            f"sleep 600 </dev/null >/dev/null 2>&1 & p=$!; echo {self.past} > {NS_LAST_PID} || exit 5; "
            f"if [ $p -eq {self.pid} ]; then exit 0; fi; kill $p; done; exit 4"
        )
        if self.run.box.sh(script, 30).exit_code == 0:
            self.where, self.cursor_moved = "container", True
            return True
        if not self.run.box.host_pid_namespace or os.geteuid() != 0:
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
        if self._host is not None:
            self._host.kill()
            self._host.wait()
        elif self.where == "container":
            self.run.box.sh(f"kill -KILL {self.pid} 2>/dev/null; true", 15)


def block_port(run: FaultLane, port: int) -> int:
    code = (
        "import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
        f"s.bind(('127.0.0.1', {port})); s.listen(1); time.sleep(900)"
    )
    pid = run.box.spawn(["python3", "-c", code], f"{CONTROL}/{control_files.FAULTS_DIR}/blocker-{port}.log")
    host, reach = run.endpoint(port)
    engine.wait_until(lambda: engine.port_open(reach, host), 10.0)
    return pid


def corrupt_manifest(box: Box) -> None:
    script = (
        "import json,os,sys\n"
        f"p={ARTIFACT + '/manifest.json'!r}\n"
        "m=json.load(open(p)); m['schema_version']=2\n"
        "fd=os.open(p, os.O_WRONLY|os.O_TRUNC); os.write(fd, json.dumps(m, sort_keys=True, separators=(',',':'))"
        ".encode()); os.close(fd)\n"
    )
    result = box.exec(["python3", "-c", script], 30)
    check(result.exit_code == 0, f"could not change the manifest: {result.tail()}")


def truncate_image(box: Box) -> str:
    """Truncate the largest process core image to half. A core image, not a pages image: CRIU 4.2.1 fails a
    short core image cleanly (``Read N bytes while M expected``, ``Restoring FAILED.``), but its restorer spins
    on a short pages image instead of failing, and vLLM passes CRIU no timeout (README: findings)."""
    script = (
        f"f=$(find {ARTIFACT}/images -type f -name 'core-*.img' -printf '%s %p\\n' | sort -rn | head -1 | "
        'cut -d\' \' -f2-); [ -n "$f" ] || exit 3; s=$(stat -c %s "$f"); truncate -s $((s/2)) "$f"; '
        'echo "$f"'
    )
    result = box.sh(script, 30)
    check(result.exit_code == 0, f"no images/ file to truncate: {result.tail()}")
    return result.stdout.strip()


def signal_when_fired(run: FaultLane, signame: str, done: threading.Event, sent: list[str], limit: float) -> None:
    """Once a hook reports that recovery is running, signal this lane's ``vllm snapshot restore``.

    The target is looked up among this container's processes only: with host pid namespaces a pattern match
    (``pkill -f``) would also hit other lanes' restores."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and not done.is_set():
        if fired_records(run.control):
            time.sleep(0.3)
            procs = run.box.processes()
            wrappers = {
                p["pid"]
                for p in procs
                if p["args"].startswith("timeout ") and f"vllm snapshot restore {ARTIFACT}" in p["args"]
            }
            targets = [p["pid"] for p in procs if p["ppid"] in wrappers]  # the restore command itself
            if targets:
                result = run.box.sh(f"kill -{signame} {' '.join(map(str, targets))}", 15)
                if result.exit_code == 0:
                    sent.append(f"SIG{signame} to {targets}")
            return
        time.sleep(0.05)
