"""The qualification with ``--vsnap-runtime=host`` on this CPU machine, as the GPU tier runs it on a GPU host: the
reference engine installed on the host (scripts/host-reference.sh), real CRIU from the criu kit, no container.
Root only (CI and the dev machines are root); the kit tarball comes from the kit image `make test` builds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from tests import harness_child

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.docker,  # only to export the criu kit from its image
    pytest.mark.skipif(os.geteuid() != 0, reason="host lanes need root"),
]


@dataclass(frozen=True)
class HostTarget:
    """How to qualify the reference engine installed on this host: its options, the environment (the criu kit on
    PATH), and the folder holding the engine and the kit."""

    options: list[str]
    env: dict[str, str]
    base: Path


@pytest.fixture(scope="module")
def host_target(tmp_path_factory: pytest.TempPathFactory) -> HostTarget:
    """The reference engine (head and base) for this Python, the criu kit unpacked, and the options to use."""
    base = tmp_path_factory.mktemp("host-target")
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    export = ["bash", str(ROOT / "docker" / "criu" / "export.sh"), str(base)]
    subprocess.run(export, check=True, timeout=1200, env={**os.environ, "VSNAP_CRIU_EXPORT_PYTHONS": python})
    with tarfile.open(base / "vsnap-criu-kit.tar.gz") as tar:
        tar.extractall(base, filter="tar")
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "host-reference.sh"), sys.executable, str(base / "ref")],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    kit = base / "vsnap-criu"
    path = os.pathsep.join([str(kit / "sbin"), str(kit / "bin"), os.environ["PATH"], str(base / "ref" / "sim" / "bin")])
    return HostTarget(
        options=done.stdout.split(),
        env={**os.environ, "PATH": path, "CRIU_CUDA_PLUGIN_DIR": str(kit / "lib" / "criu")},
        base=base,
    )


def _qualify(target: HostTarget, report: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable, "-m", "pytest", "-c", os.devnull, "-p", "vsnap_qual", "-p", "no:cacheprovider",
        f"--rootdir={ROOT}", f"--confcutdir={ROOT}", str(ROOT / "suites"), *target.options,
        f"--vsnap-report-dir={report}", "--vsnap-fault-timeout=20", "-q", *args,
    ]  # fmt: skip
    return harness_child.run(cmd, cwd=ROOT, timeout=1500, env=target.env)


def _records(report: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (report / "evidence.jsonl").read_text().splitlines()]


def test_host_runtime_lifecycle_with_real_criu_passes(host_target: HostTarget, tmp_path: Path) -> None:
    report = tmp_path / "report"
    done = _qualify(host_target, report, "--vsnap-runners=v1", "-k", "not compare", "-m", "not fault")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    results = json.loads((report / "results.json").read_text())
    assert results["verdict"]["status"] == "pass", results["verdict"]
    records = _records(report)
    env = next(r for r in records if r["kind"] == "environment")
    assert str(env["container_id"]).startswith("host-lane:"), "no container: a host lane"
    assert env["image"]["labels"]["ai.vsnap.runtime"] == "host"
    assert "Version: 4.2.1" in str(env["versions"]["criu"])
    steps = {r["step"]: r for r in records if r["kind"] == "step" and r.get("lane") == "v1-head"}
    tree = steps["inspect"]["results"]["manifest"]["process_tree"]
    for n in (1, 2):  # real CRIU: the restored tree is the captured one, PID for PID, across the restart
        assert steps[f"restore-{n}"]["results"]["root_pid"] == tree[0]
        assert set(tree) <= set(steps[f"restore-{n}"]["results"]["pids"])
    assert not list(Path("/var/tmp/vsnap-lanes").glob("vsnap-*-v1-head-*")), "the lane was removed"


def test_a_lora_variant_restores_its_adapter_on_the_host_runtime(host_target: HostTarget, tmp_path: Path) -> None:
    """Issue 28's LoRA variant with the adapter scripts/host-reference.sh generates, as the GPU tier runs it."""
    adapter = host_target.base / "ref" / "adapters" / "tiny-lora"
    lora = f"lora=--enable-lora --max-lora-rank 8 --lora-modules tiny-lora={adapter}"
    report = tmp_path / "report"
    done = _qualify(
        host_target, report, "--vsnap-runners=v1", f"--vsnap-variant={lora}", "-m", "not fault",
        "-k", "v1-head-lora and (ordinary or create or inspect or restore_1)",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    steps = {r["step"]: r for r in _records(report) if r["kind"] == "step" and r.get("lane") == "v1-head-lora"}
    assert steps["ordinary"]["results"]["adapters"]["tiny-lora"]["path"] == str(adapter)
    compared = steps["restore-1"]["results"]["adapter_compare"]["tiny-lora"]
    assert compared and all(c["ok"] for c in compared)


def test_host_runtime_judges_injected_failures(host_target: HostTarget, tmp_path: Path) -> None:
    report = tmp_path / "report"
    # cancel-sigterm before pid-occupied: the base behaviour leaves the released restored tree alive after
    # SIGTERM (recorded, not judged); the harness must kill it and wait until its PIDs are free, or the later
    # faults' restores meet "captured PID is already occupied" (seen on the H200)
    faults = "fault_artifact or cancel-sigterm or pid-occupied or image-truncated or wake-raise"
    done = _qualify(host_target, report, "--vsnap-runners=v1", "-m", "fault", "-k", faults)
    assert (report / "results.json").exists(), done.stdout[-4000:] + done.stderr[-2000:]
    results = json.loads((report / "results.json").read_text())
    ran = [r for r in _records(report) if r["kind"] == "step" and str(r["step"]).startswith("fault:")]
    assert {r["step"] for r in ran} == {
        "fault:cancel-sigterm", "fault:pid-occupied", "fault:image-truncated", "fault:wake-raise"
    }  # fmt: skip
    assert {r["arm"] for r in ran} == {"head", "base"}, "both expectation tables are exercised"
    assert done.returncode == 0, done.stdout[-4000:]
    assert all(r["outcome"] == "passed" for r in ran), [r.get("message") for r in ran]
    assert results["verdict"]["status"] == "pass"
    sigterm = {r["arm"]: r["results"] for r in ran if r["step"] == "fault:cancel-sigterm"}
    for arm, res in sigterm.items():  # whatever the engine left, nothing of it is left for the next fault
        follow = res["followup_restore"]
        assert follow["exit_code"] == 0 and follow["canary_ok"], (arm, follow)
        assert "still_held" not in (res.get("captured_id_waits") or {}).get("after_fault", {}), (arm, res)


CHAOS_PLUGIN = '''"""Removes the checkout gpu-tier.sh was started from, as the session starts (before any lane); records
at the end whether the docker SDK was ever imported (the host runtime must not need it: the H200 has none)."""
import json
import os
import shutil
import sys


def pytest_sessionstart(session):
    shutil.rmtree(os.environ["VSNAP_TIER_DOOMED"])


def pytest_unconfigure(config):
    with open(os.environ["VSNAP_TIER_MODULES"], "w") as out:
        json.dump(sorted(m for m in sys.modules if m == "docker" or m.startswith("docker.")), out)
'''


def test_gpu_tier_runs_on_when_its_checkout_is_replaced(host_target: HostTarget, tmp_path: Path) -> None:
    """On the H200 the device tool re-sends the checkout with each call, under a tier that outlives one call: lanes
    started before had their probe emptied and their directory deleted, and the next fresh engine died (oneMKL
    "Cannot load .../libtorch_cpu.so"). gpu-tier.sh runs from its own copy in the prefix; here the checkout it
    was started from is removed as the qualification session starts, and the lane's ordinary engine still runs."""
    checkout = tmp_path / "checkout"
    ignore = shutil.ignore_patterns(".git", ".venv", "build", "reports", "__pycache__", ".*_cache")
    shutil.copytree(ROOT, checkout, ignore=ignore)
    (checkout / "tier_chaos.py").write_text(CHAOS_PLUGIN)
    (checkout / "COMMIT").write_text("c0ffee\n")  # an exported tree names its commit (no .git here)
    carry = tmp_path / "carry"
    carry.mkdir()
    (carry / "vsnap-criu-kit.tar.gz").symlink_to(host_target.base / "vsnap-criu-kit.tar.gz")
    out, prefix = tmp_path / "out", tmp_path / "prefix"
    env = {**os.environ, "PYTHON": sys.executable, "PREFIX": str(prefix), "VSNAP_GPU_TIER_RUNNERS": "v1",
           "VSNAP_GPU_MEMORY_UTILIZATION": "0.5",  # the harness default: the tier's 0.05 is for an H200's 141 GB
           "VSNAP_TIER_DOOMED": str(checkout), "VSNAP_TIER_MODULES": str(tmp_path / "modules.json")}  # fmt: skip
    tier = [
        "bash", str(checkout / "scripts" / "gpu-tier.sh"), str(carry), str(out),
        "-p", "tier_chaos", "-k", "head and ordinary",
    ]  # fmt: skip
    done = harness_child.run(tier, cwd=tmp_path, timeout=1200, env=env)
    assert not checkout.exists(), "the session started: its checkout was removed"
    assert (out / "report" / "results.json").exists(), done.stdout[-4000:] + done.stderr[-3000:]
    records = _records(out / "report")
    steps = [r for r in records if r["kind"] == "step"]
    assert [(r["lane"], r["step"], r["outcome"]) for r in steps] == [("v1-head", "ordinary", "passed")], steps
    plan = next(r for r in records if r["kind"] == "plan")
    assert str(prefix / "src" / "suites") in str(plan["selection"]), "the harness ran from the prefix's copy"
    host = (out / "host.txt").read_text()
    assert "commit: c0ffee (exported tree)" in host, host
    assert json.loads((tmp_path / "modules.json").read_text()) == [], "the GPU tier imported the docker SDK"


PROBE_CHAOS_PLUGIN = '''"""Removes the --vsnap-probe-dir tree after the first lane started (as a re-sent tree would)."""
import os
import shutil

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    shutil.rmtree(os.environ["VSNAP_PROBE_DOOMED"], ignore_errors=True)
'''


def test_a_probe_removed_after_the_lane_started_does_not_reach_the_lane(
    host_target: HostTarget, tmp_path: Path
) -> None:
    """Lanes bind the session's copy of the probe in the report directory, not the harness's files: here the probe
    tree given by --vsnap-probe-dir is removed after the lane has started, before its ordinary engine is served,
    and the engine still loads the digest extension from the copy, whose digest the session record keeps."""
    from vsnap_qual.run.probe_copy import BUILT_IN, tree_digest

    probe = tmp_path / "probe"
    shutil.copytree(BUILT_IN, probe, ignore=shutil.ignore_patterns("__pycache__"))
    digest, files = tree_digest(probe)
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "probe_chaos.py").write_text(PROBE_CHAOS_PLUGIN)
    target = replace(host_target, env={**host_target.env, "VSNAP_PROBE_DOOMED": str(probe), "PYTHONPATH": str(plugins)})
    report = tmp_path / "report"
    done = _qualify(target, report, "--vsnap-runners=v1", f"--vsnap-probe-dir={probe}", "-p", "probe_chaos",
                    "-k", "head and ordinary")  # fmt: skip
    assert not probe.exists(), "the chaos plugin removed the probe tree"
    records = _records(report)
    steps = [r for r in records if r["kind"] == "step"]
    ran = [(r["lane"], r["step"], r["outcome"]) for r in steps]
    assert ran == [("v1-head", "ordinary", "passed")], ([r.get("message") for r in steps], done.stdout[-3000:])
    session = next(r for r in records if r["kind"] == "session")
    assert session["probe"] == {"source": str(probe), "path": "probe", "sha256": digest, "files": files}
    assert tree_digest(report / "probe") == (digest, files), "the copy is the probe the lanes bound"
