"""`vsnap-qual doctor` on this GPU-less host, against the reference image (real Docker, real image)."""

from __future__ import annotations

import subprocess

import pytest

from tests.integration.suite_helpers import REFERENCE_HEAD, ROOT

pytestmark = pytest.mark.docker


def _doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["vsnap-qual", "doctor", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_doctor_passes_docker_and_image_checks_and_names_the_missing_gpu_parts(reference_images: None) -> None:
    # all-caps: what real CRIU needs on a host that refuses --privileged (this project's machines do)
    done = _doctor(f"--vsnap-image={REFERENCE_HEAD}", "--vsnap-privileges=all-caps")
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout
    assert any(line.startswith("PASS docker engine") for line in lines)
    assert any(line.startswith(f"PASS image: {REFERENCE_HEAD}") for line in lines)
    assert any(line.startswith("PASS image vllm") for line in lines)
    assert any(line.startswith("SKIP nvidia container runtime") and "no GPU" in line for line in lines)
    assert lines[-1].startswith("doctor: PASS")


def test_doctor_fails_when_gpus_are_requested_on_a_host_without_them(reference_images: None) -> None:
    done = _doctor(f"--vsnap-image={REFERENCE_HEAD}", "--vsnap-gpus=all")
    assert done.returncode == 1
    assert "FAIL nvidia container runtime" in done.stdout
    assert "install the NVIDIA Container Toolkit" in done.stdout


def test_doctor_rejects_bad_options_with_exit_2() -> None:
    done = _doctor("--vsnap-revision=main")
    assert done.returncode == 2 and "--vsnap-revision" in done.stdout


def test_doctor_reports_a_missing_image() -> None:
    done = _doctor("--vsnap-image=vsnap-no-such-image:never", "--vsnap-gpus=none")
    assert done.returncode == 1 and "FAIL image: vsnap-no-such-image:never is not present locally" in done.stdout
    assert "so the image checks did not run" in done.stdout and "`docker pull vsnap-no-such-image:never`" in done.stdout
