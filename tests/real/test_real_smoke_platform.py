"""The CPU smoke platform (``vsnap_qual/smoke``) as the harness will use it: bound into a plain image container and put
on ``PYTHONPATH``, never installed. vLLM finds it through its ``vllm.platform_plugins`` entry point (the dist-info on
``PYTHONPATH``) and resolves vLLM's own ``CpuPlatform`` with sleep mode declared available; where a CUDA device is
visible it refuses, loudly, before vLLM can use it. Run against both images of the head/base pair."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.real.realtier import IMAGE, connect_docker

SMOKE = Path(__file__).resolve().parents[2] / "vsnap_qual" / "smoke"
PROBE = (
    "from importlib.metadata import entry_points\n"
    "from vllm.platforms import current_platform as p\n"
    "from vllm.platforms.cpu import CpuPlatform\n"
    "eps = entry_points(group='vllm.platform_plugins')\n"
    "print('entry points', sorted(f'{e.name}={e.value}@{e.dist._path}' for e in eps))\n"
    "print('platform', type(p).__module__, type(p).__qualname__, isinstance(p, CpuPlatform), "
    "p.is_sleep_mode_available())\n"
)


# Both images of the head/base pair (`make vllm-cpu` builds both); a missing one fails, as everywhere in this tier.
IMAGES = sorted({IMAGE, "vsnap-vllm-cpu:0.32.0", "vsnap-vllm-cpu:0.31.0"})


def run(image: str, script: str, **env: str) -> tuple[int, str]:
    client = connect_docker()
    try:
        client.images.get(image)
    except Exception:
        pytest.fail(f"image {image} is not built; run `make vllm-cpu`")
    container = client.containers.run(
        image,
        ["sh", "-c", script],
        detach=True,
        network_mode="none",
        user="0",
        labels={"ai.vsnap.test": "real-tier"},
        environment={"PYTHONPATH": "/vsnap/smoke", **env},
        volumes={str(SMOKE): {"bind": "/vsnap/smoke", "mode": "ro"}},
    )
    try:
        code = container.wait(timeout=240)["StatusCode"]
        return code, container.logs().decode("utf-8", "replace")
    finally:
        container.remove(force=True)


@pytest.mark.parametrize("image", IMAGES)
def test_bound_smoke_platform_is_vllms_cpu_platform_with_sleep_mode(image: str) -> None:
    code, out = run(image, f'python3 -c "{PROBE}"')
    assert code == 0, out[-3000:]
    # found through the dist-info on PYTHONPATH (nothing installed in the image), and vLLM resolved it
    assert "entry points ['vsnap_cpu_sleep=vsnap_cpu_sleep:platform@/vsnap/smoke/vsnap_cpu_sleep-1.dist-info']" in out
    assert "platform vsnap_cpu_sleep CpuSleepPlatform True True" in out


@pytest.mark.parametrize("image", IMAGES)
def test_smoke_platform_refuses_when_a_cuda_device_is_visible(image: str) -> None:
    # A character device node where the NVIDIA driver puts one (what `docker run --gpus` exposes).
    code, out = run(image, f'mknod /dev/nvidia0 c 195 0 && python3 -c "{PROBE}"')
    assert code == 1, out[-3000:]
    assert (
        "RuntimeError: vsnap-qual CPU smoke platform (vsnap_cpu_sleep) refused: a CUDA device is visible "
        "(/dev/nvidia0)" in out
    )
    assert "platform vsnap_cpu_sleep" not in out


@pytest.mark.parametrize("image", IMAGES)
def test_without_the_smoke_platform_the_image_stops_at_vllms_sleep_mode_rule(image: str) -> None:
    code, out = run(image, f'PYTHONPATH= python3 -c "{PROBE}"')
    assert code == 0, out[-3000:]
    assert "entry points []" in out
    assert "platform vllm.platforms.cpu CpuPlatform True False" in out


@pytest.mark.parametrize("image", IMAGES)
def test_vllm_target_device_cpu_bypasses_every_platform_plugin(image: str) -> None:
    """Why the harness must leave VLLM_TARGET_DEVICE unset in smoke mode (vllm/platforms/__init__.py: an explicit
    CPU target is authoritative and no platform plugin is loaded)."""
    code, out = run(image, f'python3 -c "{PROBE}"', VLLM_TARGET_DEVICE="cpu")
    assert code == 0, out[-3000:]
    assert "platform vllm.platforms.cpu CpuPlatform True False" in out
