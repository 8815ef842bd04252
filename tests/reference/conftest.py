"""Fixtures for the reference image's fidelity tests: the images (built by docker/reference/build.sh), lanes
(long-lived `sleep infinity` containers driven with `docker exec`, as the harness drives them) and the real
vLLM 0.33.0 snapshot sources (downloaded from PyPI with pip, cached)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import docker
import pytest

from tests.reference.refsupport import (
    BUILD_SH,
    CACHE,
    REAL_VLLM_VERSION,
    REFPLUG,
    Lane,
    LaneFactory,
    RealVllm,
    _run_lane_container,
)

if TYPE_CHECKING:
    from docker.models.containers import Container


@pytest.fixture(scope="session")
def reference_images() -> dict[str, str]:
    """`vsnap-reference:head` and `:base` (repository: `$VSNAP_REFERENCE_IMAGE`), built (or found up to date) by
    docker/reference/build.sh."""
    if os.environ.get("VSNAP_REFERENCE_NO_BUILD") != "1":
        subprocess.run(["bash", str(BUILD_SH)], check=True, timeout=1200)
    client = docker.from_env()
    repository = os.environ.get("VSNAP_REFERENCE_IMAGE", "vsnap-reference")
    images = {flavour: f"{repository}:{flavour}" for flavour in ("head", "base")}
    for image in images.values():
        client.images.get(image)
    return images


@pytest.fixture(scope="session")
def lane_factory(reference_images: dict[str, str]) -> Iterator[LaneFactory]:
    """Start lanes: user 0, in the harness's `all-caps` privileges mode (host pid/ipc/network, every capability
    the host can grant, seccomp/AppArmor unconfined: what real CRIU needs), or another mode by name."""
    client = docker.from_env()
    session = uuid.uuid4().hex[:8]
    started: list[Container] = []

    def start(
        flavour: str,
        control_dir: Path | None = None,
        environment: dict[str, str] | None = None,
        privileges: str = "all-caps",
    ) -> Lane:
        env = {
            "VLLM_SERVER_DEV_MODE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_USE_V2_MODEL_RUNNER": "1",
            "PYTHONPATH": "/vsnap/refplug",
            **(environment or {}),
        }
        mounts = [docker.types.Mount("/vsnap/refplug", str(REFPLUG), type="bind", read_only=True)]
        if control_dir is not None:
            control_dir.mkdir(parents=True, exist_ok=True)
            mounts.append(docker.types.Mount("/vsnap/control", str(control_dir), type="bind"))
            env["REFPLUG_DIR"] = "/vsnap/control/refplug"
        name = f"vsnap-reftest-{session}-{flavour}-{len(started)}"
        container = _run_lane_container(client, reference_images[flavour], name, session, env, mounts, privileges)
        started.append(container)
        lane = Lane(container, flavour)
        assert lane.sh("mkdir -p -m 0700 /vsnap/work").code == 0
        return lane

    yield start
    for container in started:
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True)


@pytest.fixture(scope="session")
def real_vllm() -> RealVllm:
    """vLLM 0.33.0's `vllm/snapshot/manifest.py` and `vllm/entrypoints/cli/snapshot.py`, from the PyPI wheel
    (`pip download --no-deps`), plus a cached venv with pydantic to load them in isolation."""
    root = CACHE / f"real-vllm-{REAL_VLLM_VERSION}"
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # xdist workers share the cache
        return _prepare_real_vllm(root)


def _prepare_real_vllm(root: Path) -> RealVllm:
    sources = root / "sources"
    venv = root / "venv"
    wanted = ("vllm/snapshot/manifest.py", "vllm/snapshot/types.py", "vllm/entrypoints/cli/snapshot.py")
    if not all((sources / name).is_file() for name in wanted):
        wheels = root / "wheels"
        download = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                f"vllm=={REAL_VLLM_VERSION}",
                "-d",
                str(wheels),
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if download.returncode != 0:
            pytest.skip(f"cannot download vllm=={REAL_VLLM_VERSION}: {download.stderr.strip()[-300:]}")
        wheel = next(wheels.glob(f"vllm-{REAL_VLLM_VERSION}-*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            for name in wanted:
                target = sources / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(name))
        wheel.unlink()
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        install = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "pydantic>=2.9"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if install.returncode != 0:
            pytest.skip(f"cannot install pydantic: {install.stderr.strip()[-300:]}")
    return RealVllm(python, sources)
