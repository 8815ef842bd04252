"""Real-vLLM tier: fixtures around one long-lived ``vsnap-vllm-cpu`` container (``sleep infinity`` + ``docker exec``).

Every test here carries the ``real`` marker (``make test-real`` selects ``-m real``; ``make test`` deselects it).
The image is built by ``make vllm-cpu`` (``docker/vllm-cpu/build.sh``); a missing image or Docker engine is a
failure, not a skip: the tier must never pass without having touched real vLLM.

Heavy work runs serially on purpose (2 shared cores): one ``vllm serve`` per session, started lazily, restarted
only after a test that deliberately changed its weights; the V2 / snapshot commands are short and run while the
server is idle.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.real.realtier import (
    CONTROL,
    IMAGE,
    OVERLAY_COMMENT,
    OVERLAY_IMAGE_PATH,
    OVERLAY_MODULE,
    PROBE_ROOT,
    RealContainer,
    Served,
    connect_docker,
    start_server,
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.real)


@pytest.fixture(scope="session")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealContainer]:
    client = connect_docker()
    try:
        image = client.images.get(IMAGE)
    except Exception:
        pytest.fail(f"image {IMAGE} is not built; run `make vllm-cpu` (bash docker/vllm-cpu/build.sh)")
    labels = dict(image.labels or {})
    work = Path(tempfile.mkdtemp(prefix="vsnap-real-", dir=str(tmp_path_factory.getbasetemp())))
    control = work / "control"
    (control / "probe").mkdir(parents=True)
    (control / "faults").mkdir()
    original = client.containers.run(IMAGE, ["cat", OVERLAY_IMAGE_PATH], remove=True, network_mode="none")
    overlay = work / "overlay" / "runtime.py"
    overlay.parent.mkdir()
    overlay.write_bytes(original + OVERLAY_COMMENT)
    (control / "overlay.json").write_text(
        json.dumps({"modules": [OVERLAY_MODULE, "vllm.snapshot.controller", "vllm.snapshot.manifest"]})
    )
    # Host pid/ipc/network as the harness does, without --privileged (some Docker hosts refuse it; nothing here
    # needs it: CRIU never runs on a CPU-only machine).
    container = client.containers.run(
        IMAGE,
        ["sleep", "infinity"],
        detach=True,
        network_mode="host",
        pid_mode="host",
        ipc_mode="host",
        user="0",
        labels={"ai.vsnap.test": "real-tier"},
        volumes={
            str(PROBE_ROOT): {"bind": "/vsnap/probe", "mode": "ro"},
            str(control): {"bind": CONTROL, "mode": "rw"},
            str(overlay): {"bind": OVERLAY_IMAGE_PATH, "mode": "ro"},
        },
    )
    env = {
        "VLLM_USE_V2_MODEL_RUNNER": "0",
        "VLLM_SERVER_DEV_MODE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "PYTHONPATH": "/vsnap/probe",
        "VSNAP_CONTROL_DIR": CONTROL,
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }
    rc = RealContainer(
        container=container,
        control=control,
        overlay_host=overlay,
        overlay_sha256=hashlib.sha256(overlay.read_bytes()).hexdigest(),
        image_sha256=hashlib.sha256(original).hexdigest(),
        labels=labels,
        env=env,
    )
    try:
        yield rc
    finally:
        with contextlib.suppress(Exception):
            container.remove(force=True)
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="session")
def server_slot(real: RealContainer) -> Iterator[dict[str, Served]]:
    slot: dict[str, Served] = {}
    yield slot
    if "served" in slot:
        slot["served"].stop()


@pytest.fixture
def served(real: RealContainer, server_slot: dict[str, Served]) -> Served:
    """A ready V1 ``vllm serve`` of the tiny model (shared; restarted if a test perturbed its weights)."""
    current = server_slot.get("served")
    if current is not None and current.dirty:
        current.stop()
        current = None
    if current is None:
        current = start_server(real)
        server_slot["served"] = current
    return current
