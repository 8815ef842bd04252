"""The follow-up restore after a fault: a captured PID/TID taken by another host process is the host's doing
(restored once more, recorded), and CRIU's own reason (on vLLM's stdout) is kept (pure: a fake lane box)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from vsnap_qual import faults
from vsnap_qual.box import ExecResult, ShmEntry
from vsnap_qual.faults import ANY
from vsnap_qual.faults import tools as injection
from vsnap_qual.faults.kinds.occupy import PidHolder
from vsnap_qual.lane.state import FaultState
from vsnap_qual.runtimes.shell import ShellBox

TAIL = "CRIU restore.log (tail):\n"
COLLISION = TAIL + "(00.2) pie: 41: Error (criu/pie/restorer.c:2185): Unable to create a thread: -17\n"
CORRUPT = TAIL + "(00.1) Error (criu/protobuf.c:72): Read 9 bytes while 18 expected\nRestoring FAILED.\n"


class Box:
    def __init__(self, outputs: list[tuple[int, str]]) -> None:
        self.outputs = outputs
        self.restores = 0

    def exec(self, argv: list[str], timeout: float, **_: Any) -> ExecResult:
        code, stdout = self.outputs[self.restores]
        self.restores += 1
        return ExecResult(argv, code, stdout, "subprocess.CalledProcessError: returned non-zero exit status 1.", 0, 1)

    def processes(self) -> list[dict[str, Any]]:
        return []

    def sh(self, script: str, timeout: float = 60.0) -> ExecResult:
        return ExecResult(["sh"], 0, "", "", 0, 0)

    def tasks_held(self, ids: set[int]) -> list[str]:
        return []

    def signal(self, pids: list[int], signame: str, *, strict: bool = False) -> bool:
        return ShellBox.signal(self, pids, signame, strict=strict)  # type: ignore[arg-type]

    def endpoint(self, port: int) -> tuple[str, int]:
        return "127.0.0.1", port


def _lane(box: Box) -> Any:
    return SimpleNamespace(
        box=box,
        ports={"fault": 1},  # nothing listens on port 1
        state=FaultState(manifest={"process_tree": [40, 41]}),
        recorder=SimpleNamespace(engine_wait=contextlib.nullcontext, engine_time=0.0),
        config=SimpleNamespace(timeouts={"restore": 60, "http": 5, "stop": 60}, cleanup_grace=5.0),
    )


def test_a_taken_captured_id_is_restored_once_more_and_recorded() -> None:
    box = Box([(1, COLLISION), (1, CORRUPT)])
    outcome = faults.followup_restore(_lane(box), undo_injection=False)
    assert box.restores == 2
    assert "Unable to create a thread: -17" in outcome["retried_after"]
    assert outcome["exit_code"] == 1 and outcome["canary_ok"] is False
    assert outcome["criu_reason"][-1] == "Restoring FAILED."
    assert "Read 9 bytes while 18 expected" in outcome["criu_reason"][0]


OCCUPIED = "vllm.snapshot.runtime.SnapshotRestoreError: captured PID is already occupied: 40"


class PreCheckBox(Box):
    """vLLM's pre-check refuses: its words are on stderr (the traceback's last line)."""

    def exec(self, argv: list[str], timeout: float, **_: Any) -> ExecResult:
        code, stderr = self.outputs[self.restores]
        self.restores += 1
        return ExecResult(argv, code, "", stderr, 0, 1)


def test_a_captured_pid_vllms_pre_check_found_taken_is_restored_once_more_and_named_if_it_stays() -> None:
    """vLLM refusing because another process held a captured PID at that moment says nothing of the artifact: once
    more, as CRIU's collision; taken again, the follow-up says it never tried the artifact (never a pass as a
    refusal with a message)."""
    box = PreCheckBox([(1, OCCUPIED), (1, "Traceback\nError: the artifact is damaged")])
    outcome = faults.followup_restore(_lane(box), undo_injection=False)
    assert box.restores == 2
    assert outcome["retried_after"].endswith(OCCUPIED) and "ids_taken" not in outcome
    twice = PreCheckBox([(1, OCCUPIED), (1, OCCUPIED)])
    outcome = faults.followup_restore(_lane(twice), undo_injection=False)
    assert twice.restores == 2 and outcome["ids_taken"].endswith(OCCUPIED)
    expect = faults.Expect(ANY, None, None, None, fires=False)
    problems = faults.judge(
        faults.Fault("x", "x", "signal", head=expect),
        expect,
        faults.Observation(),
        {"cleanup": {"ok": True}, "followup_restore": outcome},
        faults.BUILTIN_INJECTORS["signal"],
    )
    assert len(problems) == 1 and "was never tried" in problems[0], problems


def test_any_other_failure_is_not_retried() -> None:
    box = Box([(1, CORRUPT), (0, "")])
    outcome = faults.followup_restore(_lane(box), undo_injection=False)
    assert box.restores == 1 and "retried_after" not in outcome
    assert outcome["exit_code"] == 1


class LocalBox(Box):
    """Shell scripts run for real on this machine (its /proc is the lane's PID namespace), through the real
    shell implementation of the box's task listing; restores are fake."""

    host_pid_namespace = True

    def __init__(self, outputs: list[tuple[int, str]]) -> None:
        super().__init__(outputs)
        self.held_at_restore: list[list[str]] = []
        self.captured: set[int] = set()

    def sh(self, script: str, timeout: float = 60.0) -> ExecResult:
        done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=timeout)
        return ExecResult(["sh"], done.returncode, done.stdout, done.stderr, 0, 0)

    def tasks_held(self, ids: set[int]) -> list[str]:
        return ShellBox.tasks_held(self, ids)  # type: ignore[arg-type]

    def exec(self, argv: list[str], timeout: float, **kw: Any) -> ExecResult:
        self.held_at_restore.append(injection.ids_held(self, self.captured))  # type: ignore[arg-type]
        return super().exec(argv, timeout, **kw)


def _zombie() -> int:
    """A child that has exited and is not reaped yet: a zombie, which the lane's listing leaves out but which
    still takes its PID (vLLM's ``os.kill(pid, 0)`` succeeds on it)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    deadline = time.time() + 10
    while Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] != "Z":
        assert time.time() < deadline
        time.sleep(0.01)
    return pid


def _holding_thread() -> tuple[threading.Thread, threading.Event, int]:
    """A thread of this process, started and holding its TID until the returned event is set."""
    ready, stop = threading.Event(), threading.Event()
    tids: list[int] = []

    def worker() -> None:
        tids.append(threading.get_native_id())
        ready.set()
        stop.wait(30)

    thread = threading.Thread(target=worker)
    thread.start()
    ready.wait(10)
    return thread, stop, tids[0]


def test_a_zombie_and_a_thread_of_another_process_hold_their_ids() -> None:
    box = LocalBox([])
    zombie = _zombie()
    thread, stop, tid = _holding_thread()
    try:
        held = injection.ids_held(box, {zombie, tid})  # type: ignore[arg-type]
        by_id = {int(line.split()[0]): line.split() for line in held}
        assert set(by_id) == {zombie, tid}
        assert by_id[zombie][2] == "Z", held  # PID name State ...: the zombie's state
        assert int(by_id[tid][-2]) == os.getpid(), held  # the thread's Tgid is this process
    finally:
        stop.set()
        thread.join()
        os.waitpid(zombie, 0)
    assert injection.ids_held(box, {zombie}) == []  # type: ignore[arg-type]


def test_the_follow_up_waits_until_no_captured_id_names_a_task() -> None:
    """The captured PIDs of the faulted restore's tree (here a zombie, as one left exiting or unreaped) must be
    free before CRIU is asked to recreate them; the wait is recorded."""
    box = LocalBox([(1, CORRUPT)])
    zombie = _zombie()
    box.captured = {zombie}
    reaper = threading.Timer(0.6, os.waitpid, (zombie, 0))
    reaper.start()
    lane = _lane(box)
    lane.state.manifest = {"process_tree": [zombie]}
    outcome = faults.followup_restore(lane, undo_injection=False)
    reaper.join()
    assert box.held_at_restore == [[]], "no restore while a captured PID still names a task"
    waited = outcome["captured_ids_wait"]
    assert waited["waited_s"] >= 0.5 and "still_held" not in waited
    # the zombie's 0.6 s are its own (the engine's teardown, credited to it); the looks overran it by one pause
    assert 0.5 <= waited["held_s"] <= waited["waited_s"] <= waited["held_s"] + 0.2, waited
    assert lane.recorder.engine_time == waited["held_s"]


def test_a_captured_id_that_never_comes_free_is_named_not_blamed_on_the_artifact() -> None:
    box = LocalBox([(1, CORRUPT)])
    zombie = _zombie()
    lane = _lane(box)
    lane.state.manifest = {"process_tree": [zombie]}
    lane.config.timeouts["stop"] = 0.5
    try:
        follow = faults.followup_restore(lane, undo_injection=False)
    finally:
        os.waitpid(zombie, 0)
    problems = faults.judge(
        faults.Fault("x", "x", "signal", head=faults.Expect(ANY, None, None, None, fires=False)),
        faults.Expect(ANY, None, None, None, fires=False),
        faults.Observation(),
        {"cleanup": {"ok": True}, "followup_restore": follow},
        faults.BUILTIN_INJECTORS["signal"],
    )
    assert problems == [
        f"the follow-up restore could not be tried fairly: captured PIDs still held after the fault's tree was "
        f"killed ({follow['captured_ids_wait']['still_held'][0]})"
    ]
    assert follow["captured_ids_wait"]["still_held"][0].startswith(f"{zombie} ")


def test_a_captured_thread_id_held_by_another_thread_is_waited_for() -> None:
    """A restore recreates every captured thread with its TID too (``images/core-<tid>.img``), and threads are not
    in the manifest's process tree: a TID still taken (here by a thread of this process, ended after 0.6 s) is
    waited for like a PID, instead of CRIU failing on it ("Unable to create a thread: -17")."""
    box = LocalBox([(1, CORRUPT)])
    thread, stop, tid = _holding_thread()
    threading.Timer(0.6, stop.set).start()
    lane = _lane(box)
    lane.state.manifest = {"process_tree": []}  # only the thread is captured here (the fake's PIDs 40, 41 are real)
    lane.state.captured_tids = {tid}
    box.captured = {tid}
    outcome = faults.followup_restore(lane, undo_injection=False)
    thread.join()
    assert box.held_at_restore == [[]], "no restore while a captured TID still names a task"
    assert outcome["captured_ids_wait"]["waited_s"] >= 0.5


@pytest.mark.skipif(os.geteuid() != 0, reason="ns_last_pid is root's")
def test_occupying_a_pid_moves_the_cursor_past_every_captured_id_in_the_same_command() -> None:
    """While ``ns_last_pid`` sits below the captured PID, whatever forks or clones next takes the captured TIDs (with
    host PIDs: any host thread; one of Docker's kept a TID for good in CI). The occupation itself moves the
    cursor past them right after its fork, before it returns."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    target = int(Path("/proc/sys/kernel/ns_last_pid").read_text()) + 200
    if target + 1200 >= pid_max:  # the cursor near pid_max (it wraps there): any free PID low down serves as well
        target = 400
    while Path(f"/proc/{target}").exists():
        target += 1
    past = target + 600
    assert past < pid_max, f"no free PID found below {pid_max - 600}"
    box = LocalBox([])
    servers = SimpleNamespace(alive=lambda pids: [pid for pid in pids if Path(f"/proc/{pid}").exists()])
    lane = SimpleNamespace(box=box, servers=servers)
    holder = PidHolder(lane, target, past)
    try:
        occupied = holder.occupy()
        cursor = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    finally:
        holder.release()
    if not occupied:
        pytest.skip("another process took the PID eight times in a row")
    assert holder.where == "container"
    assert cursor >= past, f"the cursor was left at {cursor}, just past the occupied PID {target}"


class ShmBox(LocalBox):
    def shm(self) -> list[ShmEntry]:  # this machine's /dev/shm
        return [ShmEntry(e.name, "0", str(e.inode()), "600", 0) for e in os.scandir("/dev/shm")]


def test_a_follow_up_on_an_artifact_whose_outside_files_are_gone_says_so_and_keeps_criu_s_words() -> None:
    """The faulted restore's graceful exit unlinked a /dev/shm segment the artifact needs: the follow-up is still
    tried (CRIU's words are the evidence) and records what was gone; the judge leaves it to the one finding."""
    present = Path(f"/dev/shm/psm_vsnap_test_{os.getpid()}")
    present.write_text("x")
    try:
        _follow_up_on_a_consumed_artifact(present)
    finally:
        present.unlink()


def _follow_up_on_a_consumed_artifact(present: Path) -> None:
    gone = "/dev/shm/psm_vsnap_never_there"
    box = ShmBox([(1, TAIL + f"(01.2) Error (criu/files-reg.c:2353): Can't open file {gone[1:]} on restore\n")])
    lane = _lane(box)
    lane.state.manifest = {"process_tree": []}  # a real shell: no real PID of this machine in the way
    lane.state.outside_files = [str(present), gone]
    outcome = faults.followup_restore(lane, undo_injection=False)
    assert outcome["consumed"] == [gone] and box.restores == 1
    assert "Can't open file dev/shm/psm_vsnap_never_there" in outcome["criu_reason"][0]
    lane.state.outside_files = [str(present)]
    assert "consumed" not in faults.followup_restore(_with(lane, ShmBox([(1, CORRUPT)])), undo_injection=False)


def _with(lane: Any, box: Box) -> Any:
    lane.box = box
    return lane
