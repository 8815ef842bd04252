"""Negative paths of restore on the reference, checked against the contract: identity first (every differing
field named), PID and port checks before anything is released, a private canary and `error.json` on head,
the public canary only on base, corrupt images, a busy thread ID, a missing plugin and missing capabilities
refused by real CRIU or vLLM's preflight, and cleanup after every failure."""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path

import pytest

from tests.reference.refsupport import (
    ARTIFACT,
    ExecResult,
    Lane,
    LaneFactory,
    completion,
    create_artifact,
    free_port,
    restore,
)


def restored_processes(lane: Lane) -> str:
    """Live engine and CRIU processes of this lane's container (host PID namespace: other lanes are visible too)."""
    script = (
        f"for p in $(pgrep -f 'vllm.(snapshot.server|v1.engine.core)|c[r]iu'); do "
        f"grep -qs {lane.container.id} /proc/$p/cgroup && tr '\\0' ' ' < /proc/$p/cmdline && echo; done"
    )
    return lane.sh(script).stdout


@pytest.fixture
def lane_with_artifact(lane_factory: LaneFactory, request: pytest.FixtureRequest, tmp_path: Path) -> Lane:
    lane: Lane = lane_factory(request.param, control_dir=tmp_path / "control")
    created = create_artifact(lane)
    assert created.code == 0, created.stderr
    return lane


@pytest.mark.docker
@pytest.mark.parametrize("lane_with_artifact", ["head"], indirect=True)
def test_head_recovery_failure_never_binds_and_keeps_error_json(lane_with_artifact: Lane, tmp_path: Path) -> None:
    lane = lane_with_artifact
    marker = tmp_path / "control" / "refplug" / "raise-wake_up"
    marker.write_text("")
    port = free_port()
    failed = restore(lane, port)
    assert failed.code == 1
    assert failed.stderr.rstrip().endswith("SnapshotRestoreError: restored process exited before binding HTTP")
    error = json.loads(lane.read(f"{ARTIFACT}/error.json"))
    assert error["phase"] == "recovery: restore memory"
    assert error["error_type"] == "Exception" and "refplug fault: wake_up" in error["error"]
    assert lane.sh(f"stat -c %a {ARTIFACT}/error.json").stdout.strip() == "600"
    assert list(error) == sorted(error)
    assert restored_processes(lane) == ""
    # The follow-up restore deletes the stale record at the start of recovery and serves.
    marker.unlink()
    port = free_port()
    assert restore(lane, port).code == 0
    assert lane.exec(["test", "-e", f"{ARTIFACT}/error.json"]).code == 1
    assert (
        completion(port, "The capital of France is")["text"]
        == json.loads(lane.read(f"{ARTIFACT}/manifest.json"))["oracle_text"]
    )
    assert restored_processes(lane).count("vllm.") == 2  # the check sees a live restored tree
    lane.stop_session(int(lane.read(f"{ARTIFACT}/restored.pid")))
    assert restored_processes(lane) == ""


def _sigterm_restore_during_recovery(lane: Lane, tmp_path: Path) -> tuple[int, str]:
    """Restore with the worker's wake-up stalled, SIGTERM the `vllm snapshot restore` command while the restored
    tree recovers; its exit code and what is left of the restored tree the moment it exited."""
    (tmp_path / "control" / "refplug" / "stall-wake_up").write_text("30")
    port = free_port()
    lane.background(
        f"vllm snapshot restore {ARTIFACT} --host 127.0.0.1 --port {port} > /tmp/sigterm.log 2>&1; "
        "echo $? > /tmp/sigterm.rc; "
        "for p in $(pgrep -f 'vllm.(snapshot.server|v1.engine.core)'); do "
        f"grep -qs {lane.container.id} /proc/$p/cgroup && tr '\\0' ' ' < /proc/$p/cmdline && echo; done "
        "> /tmp/left.tmp; mv /tmp/left.tmp /tmp/left.txt"
    )
    find = (
        "for p in $(pgrep -f 'python3 [^ ]*vllm snapshot restore'); do grep -qs "
        f"{lane.container.id} /proc/$p/cgroup && echo $p; done"
    )
    for _ in range(600):  # the restored tree is up (stalled in recovery) once both engine processes exist
        if restored_processes(lane).count("vllm.") == 2:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the restored tree never appeared")
    target = lane.sh(find).stdout.split()
    assert target, "no vllm snapshot restore command to signal"
    lane.sh(f"kill -TERM {' '.join(target)}")
    for _ in range(300):
        if lane.exec(["test", "-e", "/tmp/left.txt"]).code == 0:
            break
        time.sleep(0.1)
    return int(lane.read("/tmp/sigterm.rc").strip()), lane.read("/tmp/left.txt")


@pytest.mark.docker
@pytest.mark.parametrize("lane_with_artifact", ["head"], indirect=True)
def test_head_sigterm_during_recovery_terminates_the_restored_tree_at_once(
    lane_with_artifact: Lane, tmp_path: Path
) -> None:
    code, left = _sigterm_restore_during_recovery(lane_with_artifact, tmp_path)
    assert code != 0
    assert "vllm." not in left, f"restored processes outlived the SIGTERM'd restore: {left}"


@pytest.mark.docker
@pytest.mark.parametrize("lane_with_artifact", ["base"], indirect=True)
def test_base_recovery_failure_has_no_error_record(lane_with_artifact: Lane, tmp_path: Path) -> None:
    lane = lane_with_artifact
    (tmp_path / "control" / "refplug" / "raise-reload_weights").write_text("")
    failed = restore(lane, free_port())
    assert failed.code == 1
    assert "restored process exited before binding HTTP" in failed.stderr
    assert lane.exec(["test", "-e", f"{ARTIFACT}/error.json"]).code == 1
    assert restored_processes(lane) == ""


@pytest.mark.docker
@pytest.mark.parametrize("lane_with_artifact", ["head"], indirect=True)
def test_restore_preconditions(lane_with_artifact: Lane) -> None:
    lane = lane_with_artifact
    manifest_before = lane.read(f"{ARTIFACT}/manifest.json")

    # Identity: every differing field is named, nothing is mutated.
    lane.sh(
        "sed 's/vsnapref-1.0/vsnapref-2.0/; s/simulated GPU/simulated GPU B/' /etc/vsnap-reference/gpu.json "
        "> /tmp/gpu-b.json"
    )
    mismatch = lane.exec(
        ["vllm", "snapshot", "restore", ARTIFACT, "--port", str(free_port())],
        120,
        {"VSNAP_REF_GPU_CONFIG": "/tmp/gpu-b.json", "VLLM_EXTRA_SETTING": "1"},
    )
    assert mismatch.code == 1
    assert mismatch.stderr.rstrip().splitlines()[-1] == (
        "vllm.snapshot.manifest.SnapshotCompatibilityError: snapshot mismatch: driver_version, gpu_name, environment"
    )
    assert lane.exec(["test", "-e", f"{ARTIFACT}/release.json"]).code == 1

    # Port already in use: the tree is restored, then released only if the port is free; else cleaned up.
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        busy = holder.getsockname()[1]
        occupied = restore(lane, busy)
    assert occupied.code == 1
    assert occupied.stderr.rstrip().endswith(f"snapshot restore address is already in use: 127.0.0.1:{busy}")
    assert restored_processes(lane) == ""

    # A captured PID in use: vLLM's own check refuses before anything is mutated.
    tree = json.loads(manifest_before)["process_tree"]
    port = free_port()
    assert restore(lane, port).code == 0
    assert int(lane.read(f"{ARTIFACT}/restored.pid")) == tree[0]
    again = restore(lane, free_port())
    assert again.code == 1
    assert again.stderr.rstrip().endswith(f"captured PID is already occupied: {tree[0]}")
    lane.stop_session(tree[0])
    assert restored_processes(lane) == ""


def criu_failure(result: ExecResult, action: str) -> str:
    """vLLM's failure after a failed CRIU run: exit 1, the CRIU log tail on the log stream (stdout), the
    SnapshotRestoreError/CalledProcessError on stderr. Returns the logged tail."""
    assert result.code == 1, result.stdout + result.stderr
    assert f"CRIU {action}.log (tail):" in result.stdout, result.stdout
    assert "returned non-zero exit status 1" in result.stderr.rstrip().splitlines()[-1]
    return result.stdout.split(f"CRIU {action}.log (tail):", 1)[1]


def hold_pid(lane: Lane, pid: int) -> None:
    """Occupy ``pid`` in the (host) PID namespace with a sleeping process, through ns_last_pid (the lane has
    CAP_SYS_ADMIN and an unmasked /proc/sys), retrying while other processes fork."""
    script = (
        "import os, sys, time\n"
        f"target = {pid}; deadline = time.monotonic() + 30\n"
        "while time.monotonic() < deadline:\n"
        "    open('/proc/sys/kernel/ns_last_pid', 'w').write(str(target - 1))\n"
        "    child = os.fork()\n"
        "    if child == 0:\n"
        "        os.execvp('sleep', ['sleep', '600'])\n"
        "    if child == target:\n"
        "        sys.exit(0)\n"
        "    os.kill(child, 9); os.waitpid(child, 0)\n"
        "sys.exit(1)\n"
    )
    assert lane.exec(["python3", "-c", script], 60).code == 0, f"could not occupy PID {pid}"
    assert lane.exec(["kill", "-0", str(pid)]).code == 0


@pytest.mark.docker
@pytest.mark.parametrize("lane_with_artifact", ["head"], indirect=True)
def test_real_criu_restore_failures(lane_with_artifact: Lane, tmp_path: Path) -> None:
    """Faults that only CRIU itself can see: each is vLLM's own failure (exit 1, CRIU's restore.log tail) and
    leaves nothing running; the artifact is untouched and restores once the fault is gone."""
    lane = lane_with_artifact

    def registrations() -> dict[str, int]:
        """refplug's register() records: loaded-<pid> -> write time (a re-run rewrites it)."""
        return {path.name: path.stat().st_mtime_ns for path in (tmp_path / "control" / "refplug").glob("loaded-*")}

    registered = registrations()
    manifest_before = lane.read(f"{ARTIFACT}/manifest.json")
    manifest = json.loads(manifest_before)
    root = manifest["process_tree"][0]
    images = f"{ARTIFACT}/images"
    threads = sorted(
        int(name[len("core-") : -len(".img")])
        for name in lane.sh(f"ls {images}").stdout.split()
        if name.startswith("core-") and int(name[len("core-") : -len(".img")]) not in manifest["process_tree"]
    )
    assert threads, "the captured processes have threads (CRIU writes one core-<tid>.img per thread)"

    def faulted(corrupt: str, path: str) -> ExecResult:
        assert lane.sh(f"cp -p {path} /tmp/pristine.img && {corrupt}").code == 0
        try:
            return restore(lane, free_port())
        finally:
            assert lane.sh(f"cat /tmp/pristine.img > {path}").code == 0

    # A truncated image file (the root's core image, cut in half): CRIU reads less than the record says.
    core = f"{images}/core-{root}.img"
    truncated = faulted(f"truncate -s $(( $(stat -c %s {core}) / 2 )) {core}", core)
    tail = criu_failure(truncated, "restore")
    assert re.search(rf"Read \d+ bytes while \d+ expected from {re.escape(core)}", tail), tail
    assert "Restoring FAILED." in tail
    assert restored_processes(lane) == ""

    # An altered image file (pstree.img's magic overwritten).
    pstree = f"{images}/pstree.img"
    altered = faulted(f"printf '\\377\\377\\377\\377' | dd of={pstree} bs=1 conv=notrunc 2>/dev/null", pstree)
    assert "Head magic doesn't match for pstree.img" in criu_failure(altered, "restore")
    assert restored_processes(lane) == ""

    # A captured thread ID in use: vLLM checks process PIDs only; CRIU itself cannot recreate the thread.
    hold_pid(lane, threads[-1])
    try:
        busy = restore(lane, free_port())
    finally:
        lane.exec(["kill", "-KILL", str(threads[-1])])
    tail = criu_failure(busy, "restore")
    assert "Unable to create a thread: -17" in tail and "Restoring FAILED." in tail, tail
    assert restored_processes(lane) == ""

    # The CRIU CUDA plugin missing: vLLM's preflight refuses before CRIU runs or anything is mutated.
    plugin_dir = lane.sh("echo $CRIU_CUDA_PLUGIN_DIR").stdout.strip()
    assert lane.sh(f"mv {plugin_dir}/cuda_plugin.so /tmp/cuda_plugin.so").code == 0
    try:
        missing = restore(lane, free_port())
    finally:
        assert lane.sh(f"mv /tmp/cuda_plugin.so {plugin_dir}/cuda_plugin.so").code == 0
    assert missing.code == 1
    assert missing.stderr.rstrip().endswith(f"RuntimeError: CRIU CUDA plugin not found in {plugin_dir}")
    assert restored_processes(lane) == ""

    assert lane.read(f"{ARTIFACT}/manifest.json") == manifest_before
    port = free_port()
    assert restore(lane, port).code == 0
    assert completion(port, "The capital of France is")["text"] == manifest["oracle_text"]
    # The restored processes did not start again: no plugin registered anew (a re-executed tree would call
    # register() in its API server and engine core and rewrite their loaded-<pid> records).
    assert registrations() == registered
    assert {f"loaded-{pid}" for pid in manifest["process_tree"]} <= set(registered)
    lane.stop_session(root)
    assert restored_processes(lane) == ""


@pytest.mark.docker
def test_host_without_the_capabilities(lane_factory: LaneFactory) -> None:
    """Docker's default capabilities (host namespaces only): CRIU refuses to dump; vLLM logs CRIU's output,
    exits 1, kills the snapshot child and removes the unpublished target."""
    lane: Lane = lane_factory("head", privileges="host-namespaces")
    failed = create_artifact(lane)
    assert failed.code == 1
    assert "CRIU stdout (tail):" in failed.stdout, failed.stdout
    assert "CRIU needs to have the CAP_SYS_ADMIN or the CAP_CHECKPOINT_RESTORE capability" in failed.stdout
    assert "CRIU dump.log unavailable:" in failed.stdout  # CRIU stopped before it opened its log
    assert "returned non-zero exit status 1" in failed.stderr.rstrip().splitlines()[-1]
    assert lane.exec(["test", "-e", ARTIFACT]).code == 1
    assert restored_processes(lane) == ""
