"""What the reference image ships: real CRIU 4.2.1 from the criu kit with its CUDA plugin and cuda-checkpoint where
vLLM looks for them, and a simulated nvidia-smi that says so, last on PATH so that a host's real one wins."""

from __future__ import annotations

import docker
import pytest

from tests.reference.refsupport import Lane, LaneFactory


@pytest.mark.docker
def test_real_criu_and_where_the_gpu_is_simulated(lane_factory: LaneFactory, reference_images: dict[str, str]) -> None:
    lane: Lane = lane_factory("head")
    assert lane.exec(["criu", "--version"]).stdout.splitlines()[0] == "Version: 4.2.1"
    check = lane.exec(["criu", "check"])
    assert check.code == 0 and "Looks good." in check.stdout + check.stderr, check.stdout + check.stderr
    script = "for c in criu cuda-checkpoint nvidia-smi; do command -v $c; done; echo $CRIU_CUDA_PLUGIN_DIR"
    located = lane.sh(script).stdout.split()
    assert located == [
        "/opt/vsnap-criu/sbin/criu",
        "/opt/vsnap-criu/bin/cuda-checkpoint",
        "/opt/vsnap/sim/bin/nvidia-smi",
        "/opt/vsnap-criu/lib/criu",
    ]
    # CRIU's own plugin, an ELF shared object (not a placeholder); cuda-checkpoint lists --action for the plugin.
    assert lane.sh("head -c 4 $CRIU_CUDA_PLUGIN_DIR/cuda_plugin.so").stdout == "\x7fELF"
    assert "--action" in lane.exec(["cuda-checkpoint", "--help"]).stdout
    # No GPU here: the simulated nvidia-smi names itself and its simulated device; the image label says so.
    assert "simulated GPU" in lane.exec(["nvidia-smi", "-L"]).stdout
    assert "stand-in" in lane.exec(["nvidia-smi"]).stdout
    image = docker.from_env().images.get(reference_images["head"])
    assert image.labels["ai.vsnap.simulated"] == "gpu"
    # A real nvidia-smi (the NVIDIA container runtime mounts /usr/bin/nvidia-smi) shadows the simulated one.
    assert lane.sh("printf '#!/bin/sh\\necho real\\n' > /usr/bin/nvidia-smi && chmod +x /usr/bin/nvidia-smi").code == 0
    assert lane.sh("command -v nvidia-smi; nvidia-smi").stdout.split() == ["/usr/bin/nvidia-smi", "real"]
