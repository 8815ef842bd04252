"""The container runtime against the real Docker engine (no fakes): exec codes, deadlines, restart, sweep."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker.errors
import pytest

from vsnap_qual import box as vbox
from vsnap_qual.box import BoxSpec
from vsnap_qual.engine import decode_speed
from vsnap_qual.faults import parked
from vsnap_qual.model import CpuSample
from vsnap_qual.runtimes import docker as docker_runtime
from vsnap_qual.runtimes.docker import EngineContainer

if TYPE_CHECKING:
    from docker.client import DockerClient

BASE_IMAGE = "vsnap-debian:bookworm"
pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def box(docker_client: DockerClient) -> Iterator[EngineContainer]:
    image = docker_runtime.resolve_image(docker_client, BASE_IMAGE, pull_timeout=5)
    spec = BoxSpec(
        engine=BASE_IMAGE,
        image_id=image.id,
        name=f"vsnap-test-runtime-{int(time.time())}",
        labels={vbox.LABEL_SESSION: "test-runtime", vbox.LABEL_OWNER: vbox.owner_label()},
        environment={"VLLM_USE_V2_MODEL_RUNNER": "1"},
        privileges="host-namespaces",
    )
    container = EngineContainer.start(docker_client, spec)
    yield container
    container.remove()


def test_exec_returns_real_exit_codes_and_output(box: EngineContainer, tmp_path: Path) -> None:
    log = tmp_path / "step.log"
    result = box.exec(["sh", "-c", "echo out; echo err >&2; exit 7"], 30, log=log)
    assert result.exit_code == 7
    assert result.stdout == "out\n" and result.stderr == "err\n"
    assert "out" in log.read_text() and "err" in log.read_text()
    assert box.exec(["printenv", "VLLM_USE_V2_MODEL_RUNNER"], 10).stdout.strip() == "1"
    assert box.exec(["printenv", "EXTRA"], 10, env={"EXTRA": "x"}).stdout.strip() == "x"


def test_exec_is_bounded_inside_the_container(box: EngineContainer) -> None:
    started = time.time()
    result = box.exec(["sleep", "30"], 2)
    assert vbox.exec_timed_out(result.exit_code, result.seconds, 2) and result.exit_code == 124
    assert time.time() - started < 10


def test_spawn_keeps_running_after_the_exec_returns(box: EngineContainer) -> None:
    pid = box.spawn(["sleep", "300"], "/tmp/sleeper.log")
    assert any(p["pid"] == pid for p in box.processes())
    assert box.exec(["kill", "-0", str(pid)], 10).exit_code == 0
    box.exec(["kill", str(pid)], 10)


def test_files_are_read_back_and_missing_files_are_none(box: EngineContainer) -> None:
    box.sh("printf 'abc' > /tmp/f", 10)
    assert box.read_bytes("/tmp/f") == b"abc"
    assert box.read_bytes("/tmp/does-not-exist") is None


def test_restart_keeps_the_container_and_its_filesystem_but_not_its_processes(box: EngineContainer) -> None:
    box.sh("echo kept > /root/marker", 10)
    pid = box.spawn(["sleep", "300"], "/tmp/s2.log")
    before = box.id
    box.restart(stop_timeout=5)
    box.container.reload()
    assert box.id == before and box.container.status == "running"
    assert box.read_text("/root/marker") == "kept\n"
    assert all(p["pid"] != pid for p in box.processes())


def test_sweep_removes_containers_of_dead_owners_only(docker_client: DockerClient) -> None:
    image = docker_client.images.list()[0]  # created, never started: any local image does
    labels = {vbox.LABEL_SESSION: "test-sweep"}
    dead = docker_client.containers.create(
        image.id,
        ["sleep", "1"],
        labels={**labels, vbox.LABEL_OWNER: f"{__import__('socket').gethostname()}:999999999"},
    )
    alive = docker_client.containers.create(
        image.id, ["sleep", "1"], labels={**labels, vbox.LABEL_OWNER: vbox.owner_label()}
    )
    try:
        removed = docker_runtime.sweep(docker_client)
        assert dead.name in removed and alive.name not in removed
        with pytest.raises(docker.errors.NotFound):
            docker_client.containers.get(dead.id)
        assert docker_runtime.sweep(docker_client, "test-sweep") == [alive.name]
    finally:
        for c in (dead, alive):
            docker_runtime.remove_container(c)


def test_missing_image_is_not_pulled_silently(docker_client: DockerClient) -> None:
    with pytest.raises(vbox.RuntimeFailure, match="is not present locally and could not be pulled"):
        docker_runtime.resolve_image(docker_client, "vsnap-no-such-image:never", pull_timeout=30)


def test_sweep_tolerates_a_container_that_vanishes_while_it_lists(docker_client: DockerClient) -> None:
    """Another worker removes its container between our listing and our inspect/remove (the NotFound race
    that failed one of three ``make qualify`` runs): the sweep removes the rest and does not raise."""
    image = docker_client.images.list()[0]
    session = f"test-sweep-race-{int(time.time() * 1000)}"
    labels = {vbox.LABEL_SESSION: session, vbox.LABEL_OWNER: vbox.owner_label()}
    vanishing = docker_client.containers.create(image.id, ["true"], labels=labels, name=f"{session}-a")
    staying = docker_client.containers.create(image.id, ["true"], labels=labels, name=f"{session}-b")
    real_list = docker_client.api.containers

    def list_then_sibling_removes(*args: Any, **kwargs: Any) -> Any:
        found = real_list(*args, **kwargs)
        vanishing.remove(force=True)  # the sibling's teardown, right after our listing
        return found

    docker_client.api.containers = list_then_sibling_removes
    try:
        removed = docker_runtime.sweep(docker_client, session)
    finally:
        del docker_client.api.containers
        docker_runtime.remove_container(staying)
    assert removed == [f"{session}-b"]
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(staying.id)


def test_an_abandoned_exec_keeps_writing_its_log_until_its_stream_ends(box: EngineContainer, tmp_path: Path) -> None:
    """Past the host deadline the exec is abandoned, but the log is not closed under the pump: output that
    arrives later still reaches the log (before, the pump wrote to a closed file)."""
    log = tmp_path / "late.log"
    # TERM is ignored, so only --kill-after (10 s) would end it; the host deadline (1 s + 8 s) comes first
    result = box.exec(["sh", "-c", "trap '' TERM; sleep 9.5; echo late-$((40 + 2))"], 1, log=log)
    assert result.exit_code is None and vbox.exec_timed_out(result.exit_code, result.seconds, 1)
    deadline = time.time() + 20
    while "late-42" not in log.read_text() and time.time() < deadline:  # the argv line says late-$((40 + 2))
        time.sleep(0.1)
    assert "late-42" in log.read_text()


def test_a_one_shot_probe_that_hangs_is_killed_at_its_time_limit(docker_client: DockerClient) -> None:
    """The preflight image probe has a time limit: a hanging python3 ends it and leaves no container."""
    image = docker_runtime.resolve_image(docker_client, BASE_IMAGE, pull_timeout=5)
    labels = {vbox.LABEL_SESSION: "test-oneshot", vbox.LABEL_OWNER: vbox.owner_label()}
    started = time.time()
    ran = docker_runtime.run_oneshot(docker_client, image.id, ["sleep", "600"], labels, timeout=2)
    assert ran.timed_out and ran.exit_code is None
    assert time.time() - started < 60
    assert not docker_client.containers.list(all=True, filters={"label": f"{vbox.LABEL_SESSION}=test-oneshot"})
    done = docker_runtime.run_oneshot(
        docker_client, image.id, ["sh", "-c", "echo out; echo err >&2; exit 3"], labels, 30
    )
    assert (done.exit_code, done.stdout, done.stderr, done.timed_out) == (3, "out\n", "err\n", False)


def _until_it_ran(box: EngineContainer, tid: str, deadline_s: float = 30.0) -> tuple[CpuSample, CpuSample]:
    """Samples until the task ``tid`` has run since the first one (it is busy: it runs as soon as a CPU is free)."""
    first = box.cpu_sample()
    assert first is not None, "the box gave no CPU sample"
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        later = box.cpu_sample()
        if (
            later
            and tid in later["tasks"]
            and tid in first["tasks"]
            and later["tasks"][tid][0] > first["tasks"][tid][0]
        ):
            return first, later
        time.sleep(0.05)
    raise AssertionError(f"task {tid} never ran")


def test_a_cpu_sample_reads_the_boxs_own_tasks_even_with_the_hosts_pid_namespace(box: EngineContainer) -> None:
    """The decode-speed check's CPU figures (vsnap_qual.engine.decode_speed): this box shares the host's PID namespace,
    so /proc lists the host's processes too; only the container's own count as the engine's."""
    outside = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # other work on the machine
    inside = box.spawn(["taskset", "-c", "0", "sh", "-c", "while :; do :; done"], "/tmp/spinner.log")
    try:
        first, later = _until_it_ran(box, str(inside))
        assert str(outside.pid) not in later["tasks"] and later["cpus"] == os.cpu_count()
        assert later["machine_busy_s"] > first["machine_busy_s"]
        share = decode_speed.cpu_share(first, later, 1.0)
        assert share is not None and share["engine_cpu_s"] > 0
        # the box's processes' memory (smaps_rollup), the spinner's among them; huge pages counted, maybe none
        assert later["rss_kb"] > 0 and 0 <= later["anon_huge_kb"] <= later["rss_kb"], later
        # each task's allowed CPUs: the spinner's, bound to CPU 0 as vLLM binds its OpenMP threads
        assert later["cpus_allowed"].get("0", 0) >= 1, later
    finally:
        outside.kill()
        outside.wait()
        box.exec(["kill", str(inside)], 10)


def test_only_a_process_whose_threads_all_wait_on_futexes_looks_parked_for_good(box: EngineContainer) -> None:
    """The probe behind a fault audit's early end (vsnap_qual.faults.parked, Box.thread_waits) against the box's
    real /proc: a process whose two threads block on locks forever looks parked once PARKED_FOR has passed; a
    sleeper (a timer, not a futex) and a spinner (CPU spent) never do, however long they are watched."""
    locked = "import threading; held = threading.Lock(); held.acquire(); threading.Thread(target=held.acquire).start()"
    pids = {
        "locked": box.spawn(["python3", "-c", f"{locked}; held.acquire()"], "/tmp/locked.log"),
        "sleeper": box.spawn(["sleep", "300"], "/tmp/sleeper2.log"),
        "spinner": box.spawn(["python3", "-c", "while True: pass"], "/tmp/spinner2.log"),
    }
    try:
        rows = {p["pid"]: p for p in box.processes()}
        looked = box.thread_waits(sorted(pids.values()))
        assert len(looked[pids["locked"]].wchans) == 2, looked  # both threads, each where it waits
        said = {}
        for name, pid in pids.items():
            watch = parked.ParkedWatch(box)
            started = time.monotonic()
            while time.monotonic() - started < parked.PARKED_FOR + 1.5 and not watch([rows[pid]]):
                time.sleep(0.1)
            said[name] = (watch([rows[pid]]), round(time.monotonic() - started, 1))
        assert said["locked"][0] and said["locked"][1] >= parked.PARKED_FOR, said
        assert not said["sleeper"][0] and not said["spinner"][0], said
    finally:
        box.exec(["kill", "-KILL", *map(str, pids.values())], 10)


def _unreadable(box: EngineContainer) -> set[int]:
    """The PIDs whose maps the box's python cannot open (PermissionError), asked apart from the shell script."""
    ask = (
        "import os\nfor p in os.listdir('/proc'):\n if p.isdigit():\n  try: os.close(os.open(f'/proc/{p}/maps', 0))\n"
        "  except PermissionError: print(p)\n  except OSError: pass"
    )
    return {int(x) for x in box.exec(["python3", "-c", ask], 30).stdout.split()}


def test_a_dev_shm_name_is_held_by_an_open_fd_or_a_mapping_alone_and_otherwise_unheld(box: EngineContainer) -> None:
    """The probe behind the create's /dev/shm check (lane.snapshot_cli.shm_left_by_create) against real /proc: a
    file kept open, one only mapped (its fd closed, as a semaphore is), one nobody holds; a name that only starts like
    a held one is not held by it."""
    tag = f"vsnap-test-{os.getpid()}"
    names = {k: f"{tag}-{k}" for k in ("open", "mapped", "unheld")}
    names["prefix"] = names["mapped"][:-1]  # "…-mappe": a held name's prefix, a file of its own
    box.sh(" && ".join(f"head -c 32 /dev/zero > /dev/shm/{n}" for n in names.values()), 15)
    mapper = (
        f"import mmap, os, time; fd = os.open('/dev/shm/{names['mapped']}', os.O_RDWR); m = mmap.mmap(fd, 32); "
        "os.close(fd); time.sleep(300)"
    )
    holders_pids = [
        box.spawn(["sh", "-c", f"exec 3</dev/shm/{names['open']}; exec sleep 300"], "/tmp/open-holder.log"),
        box.spawn(["python3", "-c", mapper], "/tmp/map-holder.log"),
    ]
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until both holders hold (each a fresh process being set up)
            unreadable_before = _unreadable(box)
            holders = box.shm_unheld(sorted(names.values()))
            unreadable_after = _unreadable(box)
            if names["open"] not in holders.unheld and names["mapped"] not in holders.unheld:
                break
            time.sleep(0.1)
        assert sorted(holders.unheld) == sorted([names["unheld"], names["prefix"]]), holders
        # the processes it could not read, each named with its command, are those whose maps cannot be opened
        # (asked another way, before and after: on this project's machines at least PID 1, the VM's agent)
        unread = {int(entry.split()[0]): entry for entry in holders.unread}
        assert all(len(entry.split()) >= 2 for entry in unread.values()), holders.unread
        assert set(unread) <= unreadable_before | unreadable_after, (unread, unreadable_before, unreadable_after)
        assert unreadable_before & unreadable_after <= set(unread), (unread, unreadable_before, unreadable_after)
        assert not set(unread) & set(holders_pids), unread
        assert box.shm_unheld([]).unheld == []
    finally:
        box.exec(["kill", "-KILL", *map(str, holders_pids)], 10)
        box.sh(f"rm -f /dev/shm/{tag}-*", 15)


def test_the_named_operations_run_in_a_container_as_the_fault_kinds_use_them(box: EngineContainer) -> None:
    """The shell box's named operations (``runtimes/shell.py``) through ``docker exec``: the file ones the artifact
    kinds and the fault artifact use, and a signal that says whether its target was there."""
    root = "/tmp/named-ops"
    box.remove_path(root)
    box.ensure_dir(f"{root}/art/images")
    box.write_bytes(f"{root}/art/manifest.json", b'{"schema_version":1}')
    box.write_bytes(f"{root}/art/images/core-41.img", b"c" * 300)
    inode = box.sh(f"stat -c %i {root}/art/manifest.json", 10).stdout
    box.write_bytes(f"{root}/art/manifest.json", b'{"schema_version":2}')
    assert box.sh(f"stat -c %i {root}/art/manifest.json", 10).stdout == inode, "written in place"
    assert box.read_bytes(f"{root}/art/manifest.json") == b'{"schema_version":2}'
    assert box.exists(f"{root}/art") and not box.exists(f"{root}/none")
    assert [(e.path, e.type, e.size) for e in box.list_dir(f"{root}/art/images", "core-*.img")] == [
        ("core-41.img", "f", 300)
    ]
    box.copy_tree(f"{root}/art", f"{root}/copy")
    assert box.digest_tree(f"{root}/copy") == box.digest_tree(f"{root}/art")
    box.truncate(f"{root}/art/images/core-41.img", 150)
    assert [e.size for e in box.list_dir(f"{root}/art", "*.img", depth=None)] == [150]
    box.copy_tree(f"{root}/copy", f"{root}/art", replace=True)
    assert box.digest_tree(f"{root}/copy") == box.digest_tree(f"{root}/art")
    sleeper = box.spawn(["sleep", "300"], "/tmp/named-ops-sleeper.log")
    assert box.wchan([sleeper])[sleeper] not in ("", "gone") and box.thread_waits([sleeper])[sleeper].wchans
    assert box.signal([sleeper], "KILL", strict=True)
    assert not box.signal([2**22 + 1], "KILL", strict=True) and box.signal([2**22 + 1], "KILL")
    box.remove_path(root)
