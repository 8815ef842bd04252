"""A target says what it is through its own labels: an image's, or, for a Python (the host runtime), the ``ai.vsnap.*``
labels its vllm distribution declares. The reference engine's install declares the same labels as its image; the
harness reads them as it reads any target's (issue 26: the H200 runs of the reference read like real vLLM)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from vsnap_qual.run import package_probe
from vsnap_qual.run.preflight_result import PreflightResult
from vsnap_qual.runtimes import RuntimeSettings
from vsnap_qual.runtimes.host import HostRuntime

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docker" / "reference"


def _probe(site: Path) -> package_probe.PackageInfo:
    done = subprocess.run(
        [sys.executable, "-c", package_probe.SCRIPT], capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    info = package_probe.parse(done.stdout)
    assert info is not None, done.stdout
    return info


def _dockerfile_labels() -> dict[str, str]:
    text = (REFERENCE / "Dockerfile").read_text()
    return dict(re.findall(r'(ai\.vsnap\.[a-z-]+)="([^"$]*)"', text))


def test_a_python_with_the_reference_engine_installed_says_what_it_is(tmp_path: Path) -> None:
    site, bin_dir = tmp_path / "site", tmp_path / "bin"
    site.mkdir()
    subprocess.run(
        [sys.executable, str(REFERENCE / "tools" / "install_engine.py"), str(REFERENCE / "engine"), "head", str(site),
         str(bin_dir)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    info = _probe(site)
    image_labels = _dockerfile_labels()
    assert info.get("labels") == {k: image_labels[k] for k in ("ai.vsnap.engine", "ai.vsnap.simulated")}
    assert "(not vLLM)" in info["labels"]["ai.vsnap.engine"]
    python = str(tmp_path / "python")
    pre = PreflightResult(gpus="none", images={python: "id"}, packages={python: info})
    recorded = HostRuntime(RuntimeSettings()).image(python, pre)
    assert recorded.labels["ai.vsnap.engine"] == image_labels["ai.vsnap.engine"]
    assert recorded.labels["ai.vsnap.runtime"] == "host", "the runtime's own labels stay"


def test_a_vllm_without_labels_declares_none(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    (site / "vllm-0.32.0.dist-info").mkdir()
    (site / "vllm-0.32.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0\n")
    info = _probe(site)
    assert info["vllm"] == "0.32.0" and info.get("labels") == {}
