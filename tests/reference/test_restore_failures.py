"""Negative paths of restore on the reference, checked against the contract: identity first (every differing
field named), PID and port checks before anything is released, a private canary and `error.json` on head,
the public canary only on base, corrupt images refused, and cleanup after every failure."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from refsupport import ARTIFACT, Lane, completion, create_artifact, free_port, restore


def restored_processes(lane: Lane) -> str:
    """Live engine processes of this lane's container (host PID namespace: other lanes are visible too)."""
    script = (
        f"for p in $(pgrep -f 'vllm.(snapshot.server|v1.engine.core)'); do "
        f"grep -qs {lane.container.id} /proc/$p/cgroup && tr '\\0' ' ' < /proc/$p/cmdline && echo; done"
    )
    return lane.sh(script).stdout


@pytest.fixture
def lane_with_artifact(lane_factory, request: pytest.FixtureRequest, tmp_path: Path) -> Lane:
    lane: Lane = lane_factory(request.param, control_dir=tmp_path / "control")
    created = create_artifact(lane)
    assert created.code == 0, created.stderr
    return lane


@pytest.mark.docker
@pytest.mark.parametrize("lane_with_artifact", ["head"], indirect=True)
def test_head_recovery_failure_never_binds_and_keeps_error_json(
    lane_with_artifact: Lane, tmp_path: Path
) -> None:
    lane = lane_with_artifact
    marker = tmp_path / "control" / "refplug" / "raise-wake_up"
    marker.write_text("")
    port = free_port()
    failed = restore(lane, port)
    assert failed.code == 1
    assert failed.stderr.rstrip().endswith(
        "SnapshotRestoreError: restored process exited before binding HTTP"
    )
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
        "vllm.snapshot.manifest.SnapshotCompatibilityError: "
        "snapshot mismatch: driver_version, gpu_name, environment"
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

    # Captured PIDs in use (only meaningful when the reference restores the captured PIDs).
    if lane.exact_pids:
        port = free_port()
        assert restore(lane, port).code == 0
        tree = json.loads(manifest_before)["process_tree"]
        again = restore(lane, free_port())
        assert again.code == 1
        assert again.stderr.rstrip().endswith(f"captured PID is already occupied: {tree[0]}")
        lane.stop_session(int(lane.read(f"{ARTIFACT}/restored.pid")))

    # A corrupt image fails the CRIU stand-in's restore; the artifact's manifest is untouched.
    lane.sh(f"f=$(ls {ARTIFACT}/images/pages-*.img); head -c 100 $f > /tmp/p && cat /tmp/p > $f")
    corrupt = restore(lane, free_port())
    assert corrupt.code == 1
    assert "Restoring FAILED." in corrupt.stdout + corrupt.stderr
    assert "is missing or corrupt" in corrupt.stdout + corrupt.stderr
    assert lane.read(f"{ARTIFACT}/manifest.json") == manifest_before
    assert restored_processes(lane) == ""
