"""Digest checks (``torch_checks.py``) on the host's torch and inside the images with torch 1.13 and 2.13."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PROBE_ROOT = HERE.parents[1] / "vsnap_qual" / "probe"
CHECK_NAMES = sorted(
    line.split("(")[0].removeprefix("def ")
    for line in (HERE / "torch_checks.py").read_text().splitlines()
    if line.startswith("def check_")
)


@pytest.mark.parametrize("name", CHECK_NAMES)
def test_digest_on_host_torch(name: str) -> None:
    pytest.importorskip("torch")
    from tests.probe import torch_checks

    getattr(torch_checks, name)()


def _image_present(image: str) -> bool:
    if shutil.which("docker") is None:
        return False
    proc = subprocess.run(["docker", "image", "inspect", image], capture_output=True, timeout=30)
    return proc.returncode == 0


@pytest.mark.docker
@pytest.mark.parametrize(
    ("image", "python", "torch_major"),
    [
        ("vsnap-debian:bookworm", "python3", "1."),
        pytest.param("vsnap-vllm-cpu:0.32.0", "/opt/vllm/bin/python", "2.", marks=pytest.mark.real),
    ],
)
def test_digest_in_image_torch(image: str, python: str, torch_major: str) -> None:
    if not _image_present(image):
        pytest.fail(f"image {image} is not built (make reference / make vllm-cpu)")
    proc = subprocess.run(
        [
            "docker", "run", "--rm", "--network=none",
            "-v", f"{PROBE_ROOT}:/vsnap/probe:ro",
            "-v", f"{HERE / 'torch_checks.py'}:/checks/torch_checks.py:ro",
            "-e", "PYTHONPATH=/vsnap/probe",
            image, python, "/checks/torch_checks.py",
        ],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"torch {torch_major}")
    assert proc.stdout.count("\nok check_") == len(CHECK_NAMES)
