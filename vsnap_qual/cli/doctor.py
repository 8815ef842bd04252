"""``vsnap-qual doctor``: host and image checks that catch, in seconds, what stalls a real qualification.

Each check prints one line: ``PASS``, ``FAIL`` or ``SKIP``, what it saw, and the fix. A check is *required*
when the run needs it (GPU checks only when GPUs are requested). Exit code: 0 when every required check
passed, 1 when one failed, 2 for bad options.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from vsnap_qual import options, runtimes
from vsnap_qual.box import port_is_free
from vsnap_qual.cli.diagnostics import CheckResult
from vsnap_qual.config import ParsedOptions
from vsnap_qual.contract import RUNNERS
from vsnap_qual.run import gpus as gpus_mod
from vsnap_qual.run.preflight import IO_URING_FIX, IO_URING_SYSCTL, io_uring_problem, model_cache_problems
from vsnap_qual.runtimes import DEFAULT_HOST_ROOT, RuntimeSettings

__all__ = ["CheckResult", "main", "run_checks"]


def _smi(args: list[str]) -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def run_checks(opts: ParsedOptions) -> list[CheckResult]:
    """Every doctor check for the given (parsed) ``--vsnap-*`` options: the runtime's own (it answers, its
    privileges, the arms' engines) and the host's (GPUs, io_uring, model cache, ports)."""
    runtime = runtimes.create(
        str(opts.get("vsnap_runtime") or runtimes.DEFAULT),
        RuntimeSettings(host_root=opts.get("vsnap_host_root") or DEFAULT_HOST_ROOT),
    )
    first = runtime.reachable()
    out: list[CheckResult] = [first]
    add = out.append
    if first.status == "FAIL":
        return out
    gpus = opts.get("vsnap_gpus") or "auto"
    has_gpu = runtime.gpu_capable()
    want_gpu = gpus != "none" and (gpus != "auto" or has_gpu)
    out.extend(runtime.doctor(opts, want_gpu))
    out.extend(_gpu_checks(want_gpu))
    if want_gpu:
        add(_lane_gpus(gpus, tuple(opts.get("vsnap_runners") or RUNNERS), has_gpu))
    out.append(_io_uring())
    cache, model, revision = opts.get("vsnap_model_cache"), opts.get("vsnap_model"), opts.get("vsnap_revision")
    if cache and model and revision:
        problems = model_cache_problems(Path(cache), model, revision)
        add(
            CheckResult(
                "model cache",
                "FAIL" if problems else "PASS",
                "; ".join(problems) or f"{model} complete at {revision[:12]}",
                f"hf download {model} --revision {revision}",
            )
        )
    else:
        add(
            CheckResult(
                "model cache", "SKIP", "no --vsnap-model-cache: the image's own HF_HOME is used", required=False
            )
        )
    base = int(opts.get("vsnap_port_base") or 0)
    if base:
        busy = [p for p in range(base, base + 40) if not port_is_free(p)]
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
