"""The identity drifts (``vsnap_qual/faults/kinds/identity.py``), run for real on this machine: each drift's prepare
script, its launch and its record run here as they run in a box (``env``, ``unshare -m`` with a bind mount, ``setarch``,
a ``vllm`` dist-info on ``PYTHONPATH``, the ``nvidia-smi`` and ``criu`` wrappers), around a stand-in ``vllm`` that
computes the identity fields the way vLLM's ``runtime.current_identity`` does and refuses as ``validate_identity`` does.
Each drift must change exactly its field, be seen by the restore's own process, and be judged held; without its launch,
the same restore sees the manifest's value and the drift did not hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from vsnap_qual.contract import CONTROL, WORK
from vsnap_qual.faults.kinds import identity as drifts

STAND_IN = """#!{python}
import hashlib, importlib.metadata as m, json, os, platform, subprocess, sys

def identity(manifest):
    env = sorted(
        [k, hashlib.sha256(k.encode() + b"\\0" + v.encode()).hexdigest()]
        for k, v in os.environ.items() if k.startswith(("VLLM_", "CUDA_", "NCCL_", "TORCH_", "TRITON_"))
    )
    try:
        version = m.version("vllm")
    except m.PackageNotFoundError:
        version = "none"
    query = ["nvidia-smi", "--query-gpu=name,uuid,driver_version", "--format=csv,noheader,nounits",
             "--id=" + manifest.get("gpu_uuid", "")]
    gpu = [x.strip() for x in subprocess.run(query, capture_output=True, text=True).stdout.split(",", 2)]
    criu = subprocess.run(["criu", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return {{"environment": env, "host_id": open("/etc/machine-id").read().strip(),
            "kernel_release": platform.release(), "vllm_version": version, "gpu_uuid": gpu[1],
            "driver_version": gpu[2], "criu_version": criu}}

path = os.environ["VSNAP_TEST_MANIFEST"]
if sys.argv[1:] == ["identity"]:
    print(json.dumps(identity({{"gpu_uuid": "GPU-0"}})))
    sys.exit(0)
manifest = json.load(open(path))
now = identity(manifest)
differing = [k for k in now if now[k] != manifest[k]]
if differing:
    print("SnapshotCompatibilityError: snapshot mismatch: " + ", ".join(differing), file=sys.stderr)
    sys.exit(1)
print("restored")
"""

NVIDIA_SMI = """#!/bin/sh
case "$*" in *--query-gpu=driver_version*) echo "570.86.15";; *) echo "Sim GPU, GPU-0, 570.86.15";; esac
"""
CRIU = "#!/bin/sh\necho 'Version: 4.2.1'\necho 'GitID: v4.2.1'\n"


class Local:
    """This machine as the box: ``/vsnap/work`` and ``/vsnap/control`` mapped into a temporary directory."""

    def __init__(self, root: Path) -> None:
        self.work, self.control, self.bin = root / "work", root / "control", root / "bin"
        for d in (self.work, self.control / "faults", self.bin):
            d.mkdir(parents=True)
        tools = (("vllm", STAND_IN.format(python=sys.executable)), ("nvidia-smi", NVIDIA_SMI), ("criu", CRIU))
        for name, text in tools:
            (self.bin / name).write_text(text)
            (self.bin / name).chmod(0o755)
        info = root / "probe" / "vllm-0.32.0+cpu.dist-info"  # the installed vLLM's metadata
        info.mkdir(parents=True)
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n")
        self.manifest_path = root / "manifest.json"
        self.env = {
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "VLLM_NO_USAGE_STATS": "1",
            "VLLM_USE_V2_MODEL_RUNNER": "0",
            "PYTHONPATH": str(root / "probe"),
            "VSNAP_TEST_MANIFEST": str(self.manifest_path),
        }
        self.manifest_path.write_text("{}")
        made = self.run(["vllm", "identity"])
        assert made.returncode == 0, made.stderr
        self.manifest: dict[str, Any] = json.loads(made.stdout)
        self.manifest_path.write_text(json.dumps(self.manifest))

    def local(self, text: str) -> str:
        return text.replace(WORK, str(self.work)).replace(CONTROL, str(self.control))

    def run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        argv = [self.local(a) for a in argv]
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60, check=False)

    def prepare(self, drift: drifts.Drift) -> drifts.Prepared | str:
        done = self.run(["sh", "-c", drift.prepare_script(self.manifest)])
        assert done.returncode == 0, done.stderr
        return drifts.parse_prepared(drift, done.stdout, self.manifest)

    def seen(self) -> str | None:
        path = self.control / drifts.SEEN
        return path.read_text() if path.exists() else None


@pytest.fixture
def box(tmp_path: Path) -> Local:
    return Local(tmp_path)


@pytest.mark.skipif(os.geteuid() != 0, reason="the host drift's mount namespace needs root (CI and dev machines are)")
@pytest.mark.parametrize("drift_id", sorted(drifts.DRIFTS))
def test_each_drift_changes_exactly_its_field_as_the_restore_sees_it(box: Local, drift_id: str) -> None:
    drift = drifts.DRIFTS[drift_id]
    prepared = box.prepare(drift)
    assert isinstance(prepared, drifts.Prepared), prepared
    done = box.run(drifts.restore_command(prepared, 8123))
    assert done.returncode == 1, done.stdout + done.stderr
    assert drifts.named_fields(done.stderr) == [drift.field], done.stderr
    seen = box.seen()
    assert seen is not None and drifts.held(drift, box.manifest, seen), seen
    if drift.field != "environment":  # what the restore saw is what the harness presented
        assert seen.strip() == prepared.presented
    # the same restore without the drift's launch: it sees the manifest's value, restores, and nothing held
    plain = drifts.Prepared(drift, (), prepared.record, prepared.presented)
    (box.control / drifts.SEEN).unlink()
    done = box.run(drifts.restore_command(plain, 8123))
    assert done.returncode == 0 and "restored" in done.stdout, done.stderr
    assert not drifts.held(drift, box.manifest, box.seen())


def test_a_drift_not_recorded_did_not_hold(box: Local) -> None:
    for drift in drifts.DRIFTS.values():
        assert not drifts.held(drift, box.manifest, None)
    assert not drifts.held(drifts.DRIFTS["host"], box.manifest, "")
    assert not drifts.held(drifts.DRIFTS["kernel"], box.manifest, "Traceback\nPackageNotFoundError: vllm\n")


def test_a_box_without_the_tool_cannot_present_the_drift_and_says_why(box: Local) -> None:
    (box.bin / "nvidia-smi").unlink()
    box.env["PATH"] = f"{box.bin}:/usr/bin:/bin"  # no nvidia-smi anywhere
    answer = box.prepare(drifts.DRIFTS["gpu"])
    assert answer == "the box has no nvidia-smi: vLLM reads this identity from it"


def test_environment_drifts_need_a_variable_the_create_fingerprinted(box: Local) -> None:
    manifest = {**box.manifest, "environment": [["VLLM_USE_V2_MODEL_RUNNER", "x"]]}
    done = box.run(["sh", "-c", drifts.DRIFTS["env-removed"].prepare_script(manifest)])
    answer = drifts.parse_prepared(drifts.DRIFTS["env-removed"], done.stdout, manifest)
    assert isinstance(answer, str) and "holds none of VLLM_NO_USAGE_STATS" in answer


def test_another_version_stays_a_version_of_the_same_build() -> None:
    assert drifts.other_version("0.32.0+cpu") == "0.32.0+cpu.vsnapdrift"  # vLLM's CPU detection reads "cpu"
    assert drifts.other_version("0.33.0") == "0.33.0+vsnapdrift"
