"""The strict stop tells a tree slow to exit (a loaded machine) from one that does not exit (issue 44 item 6): a
tree still alive at the grace is looked at while it progresses, up to a cap, and named when it stalls or at the cap.

The rule is pure (``checks.stop_progress``); ``audit.strict_stop`` is driven here by a scripted box (what each look
sees) and by real processes of this machine that ignore SIGTERM."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import cast

import pytest

from vsnap_qual import checks
from vsnap_qual.box import Box, ExecResult, ProcessRow, Termination, ThreadWaits, TreeEntry
from vsnap_qual.lane import audit
from vsnap_qual.model import CleanupAudit, LeftoverProcess, StopRecord
from vsnap_qual.runtimes.shell import ShellBox

ROOT, CORE = 8528, 8599
TREE = (TreeEntry(ROOT, "1581701", "python3 -m vllm.snapshot.server"), TreeEntry(CORE, "1581703", "python3 -m core"))


# ---- the rule ---------------------------------------------------------------------------------------------------
def test_a_process_that_left_since_the_last_look_is_progress() -> None:
    moved = checks.stop_progress(checks.StopLook(5.0, {ROOT: 10, CORE: 50}), checks.StopLook(5.6, {ROOT: 10}))
    assert moved == f"at 5.6 s: pid {CORE} exited"


def test_cpu_time_moving_is_progress_and_idle_survivors_are_stalled() -> None:
    before = checks.StopLook(5.0, {ROOT: 10, CORE: 50})
    # the fresh-box engine core at load 10-12: running, about a sixth of a core
    assert checks.stop_progress(before, checks.StopLook(5.5, {ROOT: 10, CORE: 58})) == (
        f"at 5.5 s: CPU ticks spent in 0.50 s: pid {CORE} 8"
    )
    # asleep, ignoring SIGTERM: a poll loop's tick now and then is no progress
    assert checks.stop_progress(before, checks.StopLook(5.5, {ROOT: 11, CORE: 50})) is None
    assert checks.stop_progress(before, checks.StopLook(5.5, {ROOT: 10, CORE: 50})) is None
    assert checks.stop_stalled(before, checks.StopLook(5.5, {ROOT: 11, CORE: 50})) == (
        "stopped progressing at 5.5 s: no process left and 1 CPU ticks in 0.50 s (under 5 a second)"
    )


def test_the_extension_is_bounded_by_the_grace() -> None:
    assert checks.stop_cap(5.0) == 15.0
    assert checks.stop_cap(2.0) == 6.0


def test_the_finding_says_the_deadline_used_and_how_it_was_reached() -> None:
    leftover = LeftoverProcess(pid=CORE, start_time="1581703", cmdline="core", gpu_holder=False, state="S")
    plain = CleanupAudit(ok=False, pids_gone=True, ports_closed=True, link_remaps_equal=True, grace_s=5.0)
    plain["leftovers"] = [leftover]
    assert checks.audit_problems(plain).startswith("still alive 5 s after SIGTERM (killed by the harness): pid 8599")
    extended = CleanupAudit(**plain)
    extended["stop"] = StopRecord(
        grace_s=5.0,
        deadline_s=6.1,
        extension=["at 5.6 s: pid 8528 exited"],
        stalled="stopped progressing at 6.1 s: no process left and 0 CPU ticks in 0.50 s",
    )
    assert checks.audit_problems(extended).startswith(
        "still alive 6.1 s after SIGTERM (the 5 s grace extended while the tree progressed: at 5.6 s: pid 8528 "
        "exited; then stopped progressing at 6.1 s: no process left and 0 CPU ticks in 0.50 s) (killed by the harness)"
    )


# ---- the stop, over a scripted box -------------------------------------------------------------------------------
class ScriptedBox:
    """What a box's looks after the grace see: ``looks[i]`` maps each live PID to its state and CPU ticks (the last
    one repeats); the signals the stop sent are kept. A small fake of the box's process calls, for the pure rule."""

    def __init__(self, looks: list[Mapping[int, tuple[str, int]]], through_grace: int) -> None:
        self.looks = looks
        self.through_grace = through_grace  # the engine core's CPU ticks from SIGTERM to the grace's end
        self.index = -1
        self.terminated = False
        self.signals: list[tuple[list[int], str]] = []

    def _now(self) -> Mapping[int, tuple[str, int]]:
        return self.looks[min(self.index, len(self.looks) - 1)]

    def processes(self) -> list[ProcessRow]:
        if self.terminated:
            self.index += 1  # one look after the grace: processes, then identify, then thread_waits
        rows = [ProcessRow(pid=pid, ppid=1, sid=ROOT, stat=st, args="python3") for pid, (st, _) in self._now().items()]
        return rows or [ProcessRow(pid=1, ppid=0, sid=1, stat="Ss", args="init")]

    def identify(self, pids: list[int]) -> dict[int, str]:
        starts = {t.pid: t.start_time for t in TREE}
        return {p: starts[p] for p in pids if p in self._now()}

    def thread_waits(self, pids: list[int]) -> dict[int, ThreadWaits]:
        return {p: ThreadWaits(("0",), self._now()[p][1]) for p in pids if p in self._now()}

    def terminate(self, pids: list[int], grace: float, *, kill: bool = True) -> Termination:
        assert kill is False, "the stop judges and kills survivors itself"
        self.signals.append((list(pids), "TERM"))
        self.terminated = True
        at_grace = {ROOT: 10, CORE: 50}
        at_term = {ROOT: 10, CORE: 50 - self.through_grace}
        survivors = ((ROOT, "S", "1581701"), (CORE, "R", "1581703"))
        return Termination(frozenset(), TREE, survivors, ticks_at_term=at_term, ticks_at_grace=at_grace)

    def signal(self, pids: list[int], signame: str, *, strict: bool = False) -> bool:
        self.signals.append((list(pids), signame))
        return True


def _stop(box: ScriptedBox, grace: float = 5.0) -> tuple[list[LeftoverProcess], audit.ServerHandle]:
    handle = audit.ServerHandle(port=51659, root_pid=ROOT, pids=[ROOT, CORE])
    leftovers = audit.strict_stop(cast(Box, box), handle, grace, [CORE])
    return leftovers, handle


@pytest.fixture(autouse=True)
def quick_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit, "LOOK_PAUSE", 0.01)


def test_a_tree_still_exiting_at_the_grace_is_given_the_extension_and_is_no_leftover() -> None:
    # the fresh-box stop of the first 4-shard run: the engine core running (R) at the grace, its server waiting
    looks: list[Mapping[int, tuple[str, int]]] = [
        {ROOT: ("S", 10), CORE: ("R", 50)},
        {ROOT: ("S", 10), CORE: ("R", 90)},
    ]
    box = ScriptedBox([*looks, {ROOT: ("S", 12)}, {}], through_grace=40)
    leftovers, handle = _stop(box)
    assert leftovers == []
    assert [s for _, s in box.signals] == ["TERM", "KILL"] and box.signals[1][0] == []
    stop = handle.stop
    assert stop["grace_s"] == 5.0 and stop["cap_s"] == 15.0 and 5.0 < stop["gone_after_s"] < 15.0
    grace_window, spent, core, root = stop["extension"]
    assert grace_window == f"at 5.0 s: CPU ticks spent in 5.00 s: pid {CORE} 40"
    assert re.fullmatch(rf"at [0-9.]+ s: CPU ticks spent in [0-9.]+ s: pid {CORE} 40", spent)
    assert core.endswith(f"s: pid {CORE} exited") and root.endswith(f"s: pid {ROOT} exited")
    assert "stalled" not in stop and stop["deadline_s"] == stop["gone_after_s"]


def test_a_tree_that_did_not_progress_through_the_grace_is_named_at_the_grace() -> None:
    # tests/broken's lingers-after-stop: the engine core asleep ignoring SIGTERM, its server waiting for it, gone
    # right after the grace (the server's own 5 s wait ends): no look after the grace, no extension
    box = ScriptedBox([{}], through_grace=1)
    leftovers, handle = _stop(box)
    assert [(p["pid"], p["gpu_holder"], p["state"]) for p in leftovers] == [(CORE, True, "R"), (ROOT, False, "S")]
    assert box.signals[-1] == ([ROOT, CORE], "KILL") and box.index == -1
    assert handle.stop["stalled"] == (
        f"not progressing through the grace: no process left and CPU ticks spent in 5 s: pid {ROOT} 0, "
        f"pid {CORE} 1 (under 5 a second)"
    )
    assert handle.stop["deadline_s"] == 5.0
    assert "gone_after_s" not in handle.stop and "extension" not in handle.stop


def test_a_tree_that_progressed_through_the_grace_is_named_at_the_first_look_that_sees_nothing_move() -> None:
    box = ScriptedBox([{ROOT: ("S", 10), CORE: ("S", 50)}], through_grace=40)
    leftovers, handle = _stop(box)
    assert [(p["pid"], p["gpu_holder"], p["state"]) for p in leftovers] == [(CORE, True, "S"), (ROOT, False, "S")]
    assert box.signals[-1] == ([ROOT, CORE], "KILL")
    assert handle.stop["stalled"].startswith("stopped progressing at ")
    assert "gone_after_s" not in handle.stop and handle.stop["deadline_s"] > 5.0


def test_a_tree_that_spins_ignoring_sigterm_is_named_at_the_cap() -> None:
    looks: list[Mapping[int, tuple[str, int]]] = [{CORE: ("R", 1000 * n)} for n in range(1, 10_000)]
    leftovers, handle = _stop(ScriptedBox(looks, through_grace=40), grace=0.05)
    assert [p["pid"] for p in leftovers] == [CORE]
    assert handle.stop["stalled"] == "reached the cap (0.15 s, 3 graces) still progressing"
    assert handle.stop["deadline_s"] >= 0.15 and len(handle.stop["extension"]) >= 1


# ---- the stop, over real processes of this machine --------------------------------------------------------------
class LocalShell(ShellBox):
    """A box whose commands run on this machine."""

    name = "local"

    def exec(
        self, argv: list[str], timeout: float, *, env: Mapping[str, str] | None = None, log: Path | None = None
    ) -> ExecResult:
        started = time.time()
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return ExecResult(argv, done.returncode, done.stdout, done.stderr, started, time.time())

    def processes(self) -> list[ProcessRow]:
        rows = []
        for line in self.sh("ps -eo pid=,ppid=,sid=,stat=,args=", 30).stdout.splitlines():
            pid, ppid, sid, stat, *args = line.split()
            rows.append(ProcessRow(pid=int(pid), ppid=int(ppid), sid=int(sid), stat=stat, args=" ".join(args)))
        return rows


IGNORES = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\n{body}"


@pytest.mark.parametrize(
    ("body", "stalled"),
    [("time.sleep(120)", ("not progressing through the grace",)), ("while True: pass", ("reached the cap", "stop"))],
    ids=["asleep", "spinning"],
)
def test_a_real_process_that_ignores_sigterm_is_named_and_killed(body: str, stalled: tuple[str, ...]) -> None:
    """Asleep it is named at the grace; spinning, at the cap (or, should the machine give it under 5% of a core,
    at the look that saw it so): never let go."""
    proc = subprocess.Popen(
        [sys.executable, "-c", IGNORES.format(body=body)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        handle = audit.ServerHandle(port=1, root_pid=proc.pid, pids=[proc.pid])
        leftovers = audit.strict_stop(cast(Box, LocalShell()), handle, 0.3, [])
        assert [p["pid"] for p in leftovers] == [proc.pid]
        assert handle.stop["stalled"].startswith(stalled)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()


def test_a_real_process_that_exits_on_sigterm_is_gone_and_timed() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        handle = audit.ServerHandle(port=1, root_pid=proc.pid, pids=[proc.pid])
        assert audit.strict_stop(cast(Box, LocalShell()), handle, 30.0, []) == []
        assert proc.wait(timeout=30) == -signal.SIGTERM
        assert 0 <= handle.stop["gone_after_s"] < 30.0 and "extension" not in handle.stop
    finally:
        proc.kill()
        proc.wait()
