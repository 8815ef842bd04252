"""The privileges modes against the real Docker engine: what a lane container is really granted."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest

from vsnap_qual import box as vbox
from vsnap_qual.box import BoxSpec
from vsnap_qual.runtimes import docker as docker_runtime
from vsnap_qual.runtimes import privileges
from vsnap_qual.runtimes.docker import EngineContainer

if TYPE_CHECKING:
    from docker.client import DockerClient

BASE_IMAGE = "vsnap-debian:trixie"
pytestmark = pytest.mark.docker

SHOW = (
    "grep -E '^(CapEff|Seccomp):' /proc/self/status; "
    "test -w /proc/sys/kernel/ns_last_pid && echo ns_last_pid=writable; "
    "echo init=$(cat /proc/1/comm)"
)


def _box(docker_client: DockerClient, mode: str) -> EngineContainer:
    """A labelled lane-like container of the base image in this privileges mode (the caller removes it)."""
    image = docker_runtime.resolve_image(docker_client, BASE_IMAGE, pull_timeout=5)
    spec = BoxSpec(
        engine=BASE_IMAGE,
        image_id=image.id,
        name=f"vsnap-test-privileges-{uuid.uuid4().hex[:8]}",
        labels={vbox.LABEL_SESSION: "test-privileges", vbox.LABEL_OWNER: vbox.owner_label()},
        environment={},
        privileges=mode,
    )
    return EngineContainer.start(docker_client, spec)


def _granted(docker_client: DockerClient, mode: str) -> dict[str, str]:
    box = _box(docker_client, mode)
    try:
        result = box.exec(["sh", "-c", SHOW], 30)
    finally:
        box.remove()
    assert result.exit_code == 0, result.stderr
    return dict(line.replace(":\t", "=").split("=", 1) for line in result.stdout.splitlines())


@pytest.mark.parametrize("mode", ["all-caps", "all-caps-own-pid"])
def test_all_caps_grants_what_criu_needs(docker_client: DockerClient, mode: str) -> None:
    seen = _granted(docker_client, mode)
    effective = int(seen["CapEff"], 16)
    missing = set(privileges.local_missing_capabilities())
    for name in ("SYS_ADMIN", "SYS_PTRACE", "NET_ADMIN", "SYS_CHROOT", "DAC_READ_SEARCH"):
        bit = privileges.CAPABILITIES.index(name)
        assert name in missing or effective >> bit & 1, f"{mode}: {name} not granted ({seen['CapEff']})"
    assert seen["Seccomp"] == "0", "seccomp must be unconfined for CRIU"
    assert seen.get("ns_last_pid") == "writable", "/proc/sys must be unmasked (systempaths=unconfined)"
    if mode == "all-caps-own-pid":
        assert seen["init"] in ("docker-init", "tini"), seen  # own PID namespace: Docker's init is PID 1
    else:
        assert seen["init"] not in ("docker-init", "tini", "sleep"), seen  # the host's PID 1


def test_host_namespaces_grants_no_extra_capability(docker_client: DockerClient) -> None:
    seen = _granted(docker_client, "host-namespaces")
    assert not int(seen["CapEff"], 16) >> privileges.CAPABILITIES.index("SYS_ADMIN") & 1
    assert seen["Seccomp"] != "0" and "ns_last_pid" not in seen


@pytest.mark.parametrize("mode", ["all-caps", "all-caps-own-pid"])
def test_the_process_listing_speaks_the_box_s_pid_numbers(docker_client: DockerClient, mode: str) -> None:
    """``spawn`` returns the PID as the box sees it; ``processes()`` (``docker top``: host PIDs) must list the same
    number, or session membership and cleanup audits find nothing under the container's own PID namespace."""
    box = _box(docker_client, mode)
    try:
        pid = box.spawn(["sleep", "300"], "/tmp/sleeper.log")
        listed = {p["pid"]: p for p in box.processes()}
        assert pid in listed and "sleep 300" in listed[pid]["args"], (pid, listed)
        assert listed[pid]["sid"] == pid, "spawn starts its own session: the listing's sid is the box's too"
    finally:
        box.remove()
