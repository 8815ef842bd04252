"""Checks that run before any lane starts; each failure names the option and the fix. The checks every runtime
shares are here; what only a runtime can check (its engines, GPUs, the overlay's targets) is its ``preflight``."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

from vsnap_qual import overlay as overlay_mod
from vsnap_qual.box import port_is_free
from vsnap_qual.config import QualConfig
from vsnap_qual.overlay import OverlayFile
from vsnap_qual.run.preflight_result import PreflightError, PreflightResult
from vsnap_qual.runtimes import Runtime

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")


def writable_dir_problem(path: Path) -> str | None:
    """Why the directory ``path`` cannot be created and written (with the fix's words left to the caller), or None;
    checked without creating it: the nearest existing directory on its path takes a test file, removed."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        if existing == path:
            return f"{path} is a file, not a directory"
        return f"{path} cannot be created: {existing} is not a directory"
    try:
        probe = existing / f".vsnap-write-test-{uuid.uuid4().hex}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        return f"{path} is not writable ({exc.strerror or exc})"
    return None


def check_report_dir(path: Path) -> None:
    """The report directory can be created and written (nothing is written there before the run's first lane
    starts)."""
    problem = writable_dir_problem(path)
    if problem:
        raise PreflightError(f"--vsnap-report-dir: {problem}; choose a writable directory")


def model_cache_problems(cache: Path, model: str, revision: str) -> list[str]:
    """What a cached model at ``revision`` lacks (Hugging Face hub cache layout)."""
    hub = cache if any(cache.glob("models--*")) else cache / "hub"
    repo = hub / ("models--" + model.replace("/", "--"))
    snap = repo / "snapshots" / revision
    if not repo.is_dir():
        return [f"{model} is not in the cache ({repo} missing)"]
    if not snap.is_dir():
        have = sorted(p.name for p in (repo / "snapshots").glob("*")) if (repo / "snapshots").is_dir() else []
        return [f"{model} has no snapshot at revision {revision} (cached revisions: {have or 'none'})"]
    problems = []
    if not (snap / "config.json").is_file():
        problems.append("config.json missing")
    index = snap / "model.safetensors.index.json"
    if index.is_file():
        try:
            listed = set(json.loads(index.read_text())["weight_map"].values())
        except (ValueError, KeyError):
            listed = set()
            problems.append("model.safetensors.index.json is unreadable")
        problems += [f"{name} (listed by the index) missing" for name in sorted(listed) if not (snap / name).exists()]
    elif not any(p.name.endswith(WEIGHT_SUFFIXES) for p in snap.iterdir()):
        problems.append("no weight file (*.safetensors/*.bin)")
    if not any((snap / name).exists() for name in TOKENIZER_FILES):
        problems.append(f"no tokenizer file ({', '.join(TOKENIZER_FILES)})")
    broken = [p.name for p in snap.iterdir() if p.is_symlink() and not p.exists()]
    problems += [f"{name} is a broken link (blob missing)" for name in broken]
    return problems


IO_URING_SYSCTL = Path("/proc/sys/kernel/io_uring_disabled")
IO_URING_FIX = "as root: sysctl -w kernel.io_uring_disabled=2 (scripts/docker-up.sh does it on CI machines)"


def io_uring_problem(value: str | None) -> str | None:
    """Why ``kernel.io_uring_disabled`` blocks snapshots, or None. vLLM's processes create io_uring instances
    unless the host disables them for everyone (2; 1 still lets root in the container through), and CRIU cannot
    dump io_uring state; vLLM's own e2e requires 2."""
    if value is None:
        return None  # kernels without io_uring
    if value.strip() != "2":
        return (
            f"kernel.io_uring_disabled is {value.strip()} on this host; snapshot create needs 2 "
            "(CRIU cannot dump io_uring state, vLLM's e2e requires 2)"
        )
    return None


def check_io_uring(sysctl: Path | None = None) -> None:
    sysctl = sysctl or IO_URING_SYSCTL
    value = sysctl.read_text() if sysctl.exists() else None
    problem = io_uring_problem(value)
    if problem:
        raise PreflightError(f"host: {problem}. Fix: {IO_URING_FIX}")


def run_preflight(config: QualConfig, runtime: Runtime) -> PreflightResult:
    """Everything checkable before a lane starts. Cheap, pure checks first; the runtime's last."""
    check_report_dir(config.report_dir)
    check_io_uring()
    for port in _fixed_ports(config):
        if not port_is_free(port):
            raise PreflightError(f"--vsnap-port-base: port {port} is in use; pick another base or 0 (free ports)")
    if config.model_cache is not None:
        revisions = dict.fromkeys((config.revision, config.tokenizer_revision))
        problems = [p for r in revisions for p in model_cache_problems(config.model_cache, config.model, r)]
        if problems:
            raise PreflightError(
                f"--vsnap-model-cache: {config.model_cache} is incomplete for {config.model}: "
                + "; ".join(problems)
                + ". Download the whole repository at that revision, e.g. "
                f"`hf download {config.model} --revision {config.revision}`"
            )
    files: list[OverlayFile] = []
    if config.overlay is not None:
        try:
            files = overlay_mod.collect(config.overlay, config.overlay_ref, config.overlay_files)
        except overlay_mod.OverlayError as exc:
            raise PreflightError(f"--vsnap-overlay: {exc}") from None
    result = runtime.preflight(config, files)
    check_overlay_compiles(files, (result.packages.get(config.image) or {}).get("python"))
    if config.cpu_smoke:
        lane_gpus = result.lane_gpus or {"all": result.gpus}
        with_gpu = {runner: gpus for runner, gpus in lane_gpus.items() if gpus != "none"}
        if with_gpu:
            raise PreflightError(
                f"--vsnap-cpu-smoke: lanes would get GPUs ({', '.join(f'{r}: {g}' for r, g in with_gpu.items())}); CPU "
                "smoke mode declares sleep mode on vLLM's CPU platform and is refused on a GPU lane: use "
                "--vsnap-gpus=none"
            )
    check_expectations(config, result, runtime)
    return result


def check_overlay_compiles(files: list[OverlayFile], target_python: str | None) -> None:
    """Every overlaid file compiles (``compile``, as ``py_compile`` does, writing no bytecode into the checkout):
    the engine imports each one, and a syntax error would otherwise stop the first lane's engine minutes in.
    Judged by this Python, so only when it is not older than the arm's (``target_python``, from the package probe;
    unknown: judged) — a newer syntax this Python lacks is not the overlay's error."""
    here = sys.version_info[:2]
    if target_python:
        try:
            there = tuple(int(part) for part in target_python.split(".")[:2])
        except ValueError:
            there = here
        if there > here:
            return
    for file in files:
        try:
            source = file.host_path.read_bytes()
            compile(source, str(file.host_path), "exec", dont_inherit=True)
        except SyntaxError as exc:
            where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
            text = f": {exc.text.strip()}" if exc.text and exc.text.strip() else ""
            raise PreflightError(
                f"--vsnap-overlay: {file.relative} does not compile ({where}: {exc.msg}{text}); the engine imports "
                f"every overlaid file: fix {file.host_path} or leave it out of the overlay"
            ) from None
        except (OSError, ValueError) as exc:
            raise PreflightError(f"--vsnap-overlay: {file.relative} cannot be read ({exc})") from None


def check_expectations(config: QualConfig, result: PreflightResult, runtime: Runtime) -> None:
    """``auto`` expectations need a ``vllm/snapshot`` package to read (the lanes choose head or base from it,
    ``package_probe.detected_behaviour``); an arm whose vLLM has none cannot make snapshots at all."""
    head_option, base_option = runtime.engine_options
    arms = (
        (config.image, config.expect, head_option, "--vsnap-expect"),
        (config.base_image, config.base_expect, base_option, "--vsnap-base-expect"),
    )
    for ref, expect, option, expect_option in arms:
        info = result.packages.get(ref or "") or {}
        if ref and expect == "auto" and info.get("snapshot_behaviour") == "none":
            raise PreflightError(
                f"{option}: the vllm of {ref} ({info.get('vllm') or 'unknown version'}, {info.get('package_dir')}) "
                f"has no vllm/snapshot package, so it cannot make snapshots and {expect_option}=auto has nothing to "
                "read: qualify an image whose vLLM has `vllm snapshot` (0.31 or later)"
            )


def _fixed_ports(config: QualConfig) -> list[int]:
    return [p for lane in config.lanes for p in (config.fixed_ports(lane) or {}).values()]
