"""The host runtime's lanes on this machine, for real (root, util-linux): namespaces, commands, processes,
the environment restart, removal and the dead-owner sweep."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import pytest

from vsnap_qual.box import Bind, exec_timed_out
from vsnap_qual.runtimes import procfs
from vsnap_qual.runtimes.host import LANE_TOKEN, HostLane, HostSpec, sweep

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="host lanes need root")  # CI and dev machines are root


class StartLane(Protocol):
    """The ``lane_factory`` fixture: start a host lane named ``name`` (more ``HostSpec`` fields in ``spec_args``)."""

    def __call__(self, name: str = "t", **spec_args: Any) -> HostLane: ...


@pytest.fixture
def lane_factory(tmp_path: Path) -> Iterator[StartLane]:
    lanes: list[HostLane] = []
    root = tmp_path / "lanes"

    def start(name: str = "t", **spec_args: Any) -> HostLane:
        control = tmp_path / f"control-{name}"
        control.mkdir(exist_ok=True)
        probe = tmp_path / "probe"
        probe.mkdir(exist_ok=True)
        (probe / "marker.py").write_text("X = 1\n")
        spec = HostSpec(
            name=name,
            labels={"ai.vsnap.lane": name},
            environment={"PATH": os.environ["PATH"], "LANE_VAR": "v"},
            binds=[Bind("/vsnap/control", control, read_only=False), Bind("/vsnap/probe", probe)],
            root=root,
            **spec_args,
        )
        lane = HostLane.start(spec)
        lanes.append(lane)
        return lane

    yield start
    for lane in lanes:
        lane.remove()


def test_exec_gives_real_codes_output_environment_and_log(lane_factory: StartLane, tmp_path: Path) -> None:
    lane = lane_factory()
    log = tmp_path / "step.log"
    result = lane.exec(["sh", "-c", "echo out; echo err >&2; printf %s \"$LANE_VAR$EXTRA\"; exit 7"], 30,
                       env={"EXTRA": "x"}, log=log)  # fmt: skip
    assert result.exit_code == 7 and not exec_timed_out(result.exit_code, result.seconds, 30)
    assert result.stdout == "out\nvx" and result.stderr == "err\n"
    assert "out" in log.read_text() and "err" in log.read_text()
    fast = lane.exec(["sh", "-c", "kill -KILL $$"], 30)
    assert fast.exit_code == 137 and not exec_timed_out(fast.exit_code, fast.seconds, 30), "fast 137: no timeout"


def test_exec_is_bounded_in_the_lane_and_escalates_to_kill(lane_factory: StartLane) -> None:
    lane = lane_factory()
    started = time.time()
    slept = lane.exec(["sleep", "30"], 1)
    assert exec_timed_out(slept.exit_code, slept.seconds, 1)
    stubborn = lane.exec(["sh", "-c", "trap '' TERM; sleep 30"], 1)
    assert exec_timed_out(stubborn.exit_code, stubborn.seconds, 1) and stubborn.exit_code == 137
    assert time.time() - started < 25


def test_mounts_exist_only_inside_the_lane(lane_factory: StartLane, tmp_path: Path) -> None:
    lane = lane_factory()
    seen = lane.sh("ls /vsnap; cat /vsnap/probe/marker.py; touch /vsnap/probe/new 2>&1; echo hi > /vsnap/control/c")
    assert seen.stdout.split("\n")[:3] == ["control", "probe", "work"]
    assert "X = 1" in seen.stdout and "Read-only file system" in seen.stdout
    assert (tmp_path / "control-t" / "c").read_text() == "hi\n"
    assert not os.listdir("/vsnap"), "the host's /vsnap stays an empty mount point"
    assert lane.read_bytes("/vsnap/control/c") == b"hi\n" and lane.read_bytes("/vsnap/nope") is None


def test_lane_commands_never_work_in_the_callers_directory(
    lane_factory: StartLane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller's working directory can vanish mid-run (on the H200 the checkout was re-sent under a running
    tier): a lane that inherited it gave every fresh engine a deleted cwd, and oneMKL aborted at its first call.
    Lane commands run in "/", as in a container without a WORKDIR, whatever the caller's directory."""
    doomed = tmp_path / "checkout"
    doomed.mkdir()
    monkeypatch.chdir(doomed)
    lane = lane_factory()
    monkeypatch.chdir(tmp_path)
    doomed.rmdir()  # the caller's directory is gone while the lane runs on
    fresh = lane.exec([sys.executable, "-c", "import os; print(os.getcwd())"], 30)
    assert (fresh.exit_code, fresh.stdout) == (0, "/\n"), fresh.stderr[-500:]
    lane.restart()  # a fresh holder after the environment restart, the same rule
    assert lane.exec(["sh", "-c", "pwd -P"], 30).stdout == "/\n"


def test_processes_are_the_lanes_own(lane_factory: StartLane) -> None:
    lane = lane_factory()
    other = subprocess.Popen(["sleep", "60"])  # a host process, same PID namespace, other mount namespace
    try:
        pid = lane.spawn(["sleep", "60"], "/vsnap/control/sleeper.log")
        pids = {p["pid"] for p in lane.processes()}
        assert pid in pids and other.pid not in pids
        assert next(p for p in lane.processes() if p["pid"] == pid)["sid"] == pid, "spawn starts a new session"
    finally:
        other.kill()
        other.wait()


def test_a_cpu_sample_reads_the_lanes_own_tasks(lane_factory: StartLane) -> None:
    """The decode-speed check's CPU figures (vsnap_qual.engine.decode_speed): the lane shares the host's PID namespace
    and cgroup; only its members' tasks count as the engine's."""
    lane = lane_factory()
    outside = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # other work on the machine
    inside = lane.spawn(["taskset", "-c", "0", "sh", "-c", "while :; do :; done"], "/vsnap/control/spinner.log")
    try:
        first = lane.cpu_sample()
        deadline = time.monotonic() + 30
        later = first
        while time.monotonic() < deadline and not (
            later
            and first
            and str(inside) in later["tasks"]
            and later["tasks"][str(inside)][0] > first["tasks"][str(inside)][0]
        ):
            time.sleep(0.05)
            later = lane.cpu_sample()
        assert first is not None and later is not None and str(inside) in later["tasks"]
        assert later["tasks"][str(inside)][0] > first["tasks"][str(inside)][0], "the spinner never ran"
        assert str(outside.pid) not in later["tasks"] and later["cpus"] == os.cpu_count()
        assert later["rss_kb"] > 0 and 0 <= later["anon_huge_kb"] <= later["rss_kb"], later
        assert later["cpus_allowed"].get("0", 0) >= 1, later  # the spinner, bound to CPU 0
    finally:
        outside.kill()
        outside.wait()
        lane.exec(["kill", str(inside)], 10)


def test_a_lane_owns_every_process_in_its_namespace_whatever_its_environment_says(lane_factory: StartLane) -> None:
    """A tree CRIU restores carries, in its restored environment, the token of the lane it was created in, and a
    process may clear its environment: either is still the lane's, stopped and audited with it (a restored tree
    that was nobody's kept its port and GPU on the H200). Another lane's namespace is not this one's."""
    origin = lane_factory("origin")
    restored = f"{LANE_TOKEN}={origin.token}"  # as a restored tree's environment says
    plain = lane_factory("plain")
    carried = int(plain.exec(["sh", "-c", f"env {restored} setsid sleep 60 >/dev/null 2>&1 & echo $!"], 30).stdout)
    cleared = int(plain.exec(["sh", "-c", "env -i setsid sleep 60 >/dev/null 2>&1 & echo $!"], 30).stdout)
    members = {p["pid"] for p in plain.processes()}
    assert {carried, cleared} <= members
    assert not {carried, cleared} & {p["pid"] for p in origin.processes()}
    plain.remove()
    for pid in (carried, cleared):
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()


def test_environment_restart_ends_every_process_and_empties_shm_but_keeps_work(lane_factory: StartLane) -> None:
    lane = lane_factory()
    pid = lane.spawn(["sleep", "300"], "/vsnap/control/sleeper.log")
    start = procfs.proc_info(pid).start_time  # type: ignore[union-attr]
    assert lane.sh("echo kept > /vsnap/work/artifact; echo x > /dev/shm/vsnap-test-entry").exit_code == 0
    holder, ident = lane.holder.pid, lane.id  # type: ignore[union-attr]
    lane.restart()
    info = procfs.proc_info(pid)
    assert info is None or info.start_time != start, "the lane's process (and its PID) must be gone"
    assert lane.sh("cat /vsnap/work/artifact").stdout == "kept\n"
    assert lane.sh("ls -A /dev/shm").stdout == "", "the lane's /dev/shm is emptied"
    assert not os.path.exists("/dev/shm/vsnap-test-entry"), "the lane's /dev/shm is its own"
    assert lane.holder.pid != holder and lane.id == ident  # type: ignore[union-attr]
    assert [p["pid"] for p in lane.processes()] == [lane.holder.pid]  # type: ignore[union-attr]


def test_remove_leaves_nothing(lane_factory: StartLane, tmp_path: Path) -> None:
    lane = lane_factory()
    lane.spawn(["sleep", "300"], "/vsnap/control/sleeper.log")
    namespace = lane.namespace
    assert namespace is not None
    lane.remove()
    assert procfs.processes_in_mount_namespace(namespace) == []
    assert not lane.dir.exists()
    with pytest.raises(Exception, match="holder is gone"):
        lane.processes()


def test_sweep_removes_the_lanes_of_a_dead_owner_only(lane_factory: StartLane, tmp_path: Path) -> None:
    mine = lane_factory("mine")
    root = tmp_path / "lanes"
    child = textwrap.dedent(f"""
        import os, sys
        from pathlib import Path
        from vsnap_qual.runtimes.host import HostLane, HostSpec
        lane = HostLane.start(HostSpec(name="orphan", labels={{}}, environment={{"PATH": os.environ["PATH"]}},
                                       root=Path({str(root)!r})))
        print(lane.spawn(["sleep", "300"], "/vsnap/work/s.log"), flush=True)
        sys.stdin.read()
    """)
    owner = subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    orphan_pid = int(owner.stdout.readline())
    orphan_start = procfs.proc_info(orphan_pid).start_time  # type: ignore[union-attr]
    assert sweep(root) == [], "a live owner's lane is not swept"
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    assert sweep(root) == ["orphan"]
    deadline = time.time() + 10
    while (info := procfs.proc_info(orphan_pid)) is not None and info.start_time == orphan_start:
        assert time.time() < deadline, "the dead owner's lane process survived the sweep"
        time.sleep(0.05)
    assert not (root / "orphan").exists() and mine.running


def test_orphans_are_reparented_to_the_holder_and_reaped(lane_factory: StartLane) -> None:
    """Some hosts' init never reaps (the lent GPU machine's): the holder is the lane's subreaper."""
    lane = lane_factory()
    pid = int(lane.sh("setsid sh -c 'sleep 1' </dev/null >/dev/null 2>&1 & echo $!").stdout)
    info = procfs.proc_info(pid)
    assert info is not None and info.ppid == lane.holder.pid  # type: ignore[union-attr]
    deadline = time.time() + 10
    while procfs.proc_info(pid) is not None or os.path.exists(f"/proc/{pid}"):
        assert time.time() < deadline, f"orphan {pid} left unreaped: {Path(f'/proc/{pid}/stat').read_text()}"
        time.sleep(0.05)


def test_many_instant_commands_all_get_their_exit_code(lane_factory: StartLane) -> None:
    """A command that ends at once must still be answered pid-then-exit (a reaper race once lost the pid)."""
    lane = lane_factory()

    def burst(offset: int) -> list[int | None]:
        return [lane.exec(["true"] if (offset + i) % 2 else ["false"], 10).exit_code for i in range(40)]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(burst, range(8)))
    assert results == [[0 if (o + i) % 2 else 1 for i in range(40)] for o in range(8)]
