"""Checks that run before any engine container starts; each failure names the option and the fix."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vsnap_qual import gpus as gpus_mod
from vsnap_qual import host_runtime, runtime
from vsnap_qual import overlay as overlay_mod
from vsnap_qual.config import Lane, QualConfig
from vsnap_qual.overlay import OverlayFile
from vsnap_qual.steps import PACKAGE_PROBE

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")


class PreflightError(Exception):
    """Bad input found before anything started; the message names the option and the fix."""


@dataclass
class PreflightResult:
    """What preflight learned and the lanes need: images, package layout, GPUs, overlay."""

    gpus: str  # the first runner lane's GPUs (all lanes' when they share them); per lane: gpus_for
    images: dict[str, str] = field(default_factory=dict)  # ref -> image id
    packages: dict[str, dict[str, Any]] = field(default_factory=dict)  # ref -> package probe output
    overlay: list[OverlayFile] = field(default_factory=list)
    lane_gpus: dict[str, str] = field(default_factory=dict)  # runner -> "none" | "all" | "GPU-<uuid>"

    def gpus_for(self, lane: Lane) -> str:
        """The GPUs of ``lane``: its runner's own GPU under ``--vsnap-gpus=auto`` (or a list), else the shared value."""
        return self.lane_gpus.get(lane.runner, self.gpus)

    def to_json(self) -> str:
        return json.dumps(
            {
                "gpus": self.gpus,
                "lane_gpus": self.lane_gpus,
                "images": self.images,
                "packages": self.packages,
                "overlay": [
                    {"relative": f.relative, "host_path": str(f.host_path), "sha256": f.sha256} for f in self.overlay
                ],
            }
        )

    @classmethod
    def from_json(cls, text: str) -> PreflightResult:
        data = json.loads(text)
        files = [OverlayFile(f["relative"], Path(f["host_path"]), f["sha256"]) for f in data["overlay"]]
        return cls(
            gpus=data["gpus"],
            images=data["images"],
            packages=data["packages"],
            overlay=files,
            lane_gpus=data.get("lane_gpus") or {},
        )


def check_report_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test-{uuid.uuid4().hex}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise PreflightError(
            f"--vsnap-report-dir: {path} is not writable ({exc.strerror}); choose a writable directory"
        ) from None


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


def probe_package(
    client: Any, image_id: str, session: str, timeout: float, option: str = "--vsnap-image"
) -> dict[str, Any]:
    """Where the image's ``vllm`` package is installed, and its versions (a one-shot, network-less container,
    killed after ``timeout`` seconds)."""
    labels = {runtime.LABEL_SESSION: session, runtime.LABEL_OWNER: runtime.owner_label()}
    try:
        ran = runtime.run_oneshot(client, image_id, ["python3", "-c", PACKAGE_PROBE], labels, timeout)
    except runtime.RuntimeFailure as exc:
        raise PreflightError(f"{option}: {exc}") from None
    if ran.timed_out:
        raise PreflightError(
            f"{option}: {image_id[:19]}: locating vllm (python3 -c 'import importlib.util; …') did not finish in "
            f"{timeout:.0f} s; check that the image starts python3 promptly, or raise --vsnap-timeouts=exec=SECONDS"
        )
    if ran.exit_code != 0:
        raise PreflightError(
            f"{option}: {image_id[:19]} cannot run python3 to locate vllm (exit {ran.exit_code}): "
            f"{(ran.stderr or ran.stdout).strip()[-500:]!r}"
        )
    try:
        info = json.loads(ran.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise PreflightError(f"{option}: the vllm probe printed no JSON: {ran.stdout[-300:]!r}") from None
    if not info.get("package_dir"):
        raise PreflightError(f"{option}: the image has no importable vllm package")
    return dict(info)


def overlay_targets_exist(
    client: Any, image_id: str, package_dir: str, files: list[OverlayFile], session: str
) -> list[str]:
    """Overlay files whose package directory does not exist in the image (created, never started)."""
    labels = {runtime.LABEL_SESSION: session, runtime.LABEL_OWNER: runtime.owner_label(), "ai.vsnap.probe": "1"}
    wanted = {}
    for item in files:
        parent = str(Path(item.image_path(package_dir)).parent)
        if parent != package_dir:
            wanted[parent + "/__init__.py"] = f"{item.relative} (no package {parent} in the image)"
    missing = runtime.paths_missing_in_image(client, image_id, list(wanted), labels)
    return [wanted[path] for path in missing]


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


def run_preflight(config: QualConfig) -> PreflightResult:
    """Everything checkable before a lane starts. Cheap, pure checks first; Docker last."""
    check_report_dir(config.report_dir)
    check_io_uring()
    for port in _fixed_ports(config):
        if not runtime.port_is_free(port):
            raise PreflightError(f"--vsnap-port-base: port {port} is in use; pick another base or 0 (free ports)")
    if config.model_cache is not None:
        revisions = dict.fromkeys((config.revision, config.tokenizer_revision))
        problems = [p for r in revisions for p in model_cache_problems(config.model_cache, config.model, r)]
        if problems:
            raise PreflightError(
                f"--vsnap-model-cache: {config.model_cache} is incomplete for {config.model}: "
                + "; ".join(problems)
                + ". Download the whole repository at that revision, e.g. "
                f"`huggingface-cli download {config.model} --revision {config.revision}`"
            )
    files: list[OverlayFile] = []
    if config.overlay is not None:
        try:
            files = overlay_mod.collect(config.overlay, config.overlay_ref, config.overlay_files)
        except overlay_mod.OverlayError as exc:
            raise PreflightError(f"--vsnap-overlay: {exc}") from None
    if config.runtime == "host":
        return _host_preflight(config, files)
    try:
        client = runtime.connect()
    except runtime.RuntimeFailure as exc:
        raise PreflightError(str(exc)) from None
    has_nvidia = runtime.nvidia_runtime_present(client)
    if config.gpus not in ("auto", "none") and not has_nvidia:
        raise PreflightError(
            f"--vsnap-gpus={config.gpus}: Docker has no NVIDIA runtime or CDI spec; install the NVIDIA "
            "Container Toolkit, or run with --vsnap-gpus=none"
        )
    # the Docker daemon is assumed to run on this host (as for --vsnap-privileges): its GPUs are nvidia-smi's
    available = gpus_mod.host_gpus() if has_nvidia and config.gpus != "none" else None
    result = lane_gpu_result(config, has_nvidia, available, files)
    refs = [r for r in (config.image, config.base_image) if r]
    for ref in refs:
        option = "--vsnap-image" if ref == config.image else "--vsnap-base-image"
        try:
            image = runtime.resolve_image(client, ref, pull_timeout=config.timeouts["serve"])
        except runtime.RuntimeFailure as exc:
            raise PreflightError(f"{option}: {exc}") from None
        result.images[ref] = image.id
        result.packages[ref] = probe_package(client, image.id, config.run_id, config.timeouts["exec"], option)
    check_expectations(config, result)
    if files:
        package_dir = result.packages[config.image]["package_dir"]
        missing = overlay_targets_exist(client, result.images[config.image], package_dir, files, config.run_id)
        if missing:
            raise PreflightError(
                f"--vsnap-overlay: files that map to no module of the image's vllm package "
                f"({package_dir}): {', '.join(missing)}"
            )
    return result


def check_expectations(config: QualConfig, result: PreflightResult) -> None:
    """``auto`` expectations need a ``vllm/snapshot`` package to read (the lanes choose head or base from it,
    ``steps.detected_behaviour``); an arm whose vLLM has none cannot make snapshots at all."""
    runtime_host = config.runtime == "host"
    arms = (
        (config.image, config.expect, "--vsnap-python" if runtime_host else "--vsnap-image", "--vsnap-expect"),
        (
            config.base_image,
            config.base_expect,
            "--vsnap-base-python" if runtime_host else "--vsnap-base-image",
            "--vsnap-base-expect",
        ),
    )
    for ref, expect, option, expect_option in arms:
        info = result.packages.get(ref or "") or {}
        if ref and expect == "auto" and info.get("snapshot_behaviour") == "none":
            raise PreflightError(
                f"{option}: the vllm of {ref} ({info.get('vllm') or 'unknown version'}, {info.get('package_dir')}) "
                f"has no vllm/snapshot package, so it cannot make snapshots and {expect_option}=auto has nothing to "
                "read: qualify an image whose vLLM has `vllm snapshot` (0.31 or later)"
            )


def lane_gpu_result(
    config: QualConfig, present: bool, available: list[str] | None, files: list[OverlayFile]
) -> PreflightResult:
    """Each runner lane's GPUs (``gpus.assign``); two lanes that would run at once on one GPU are refused."""
    try:
        per_runner = gpus_mod.assign(config.gpus, config.runners, config.concurrent_runners, present, available)
    except gpus_mod.GpuError as exc:
        raise PreflightError(str(exc)) from None
    return PreflightResult(gpus=per_runner[config.runners[0]], overlay=files, lane_gpus=per_runner)


def host_gpus(requested: str, dev: Path = Path("/dev")) -> bool:
    """Whether host lanes can be given GPUs (NVIDIA device nodes); explicit GPUs without them are refused."""
    present = (dev / "nvidiactl").exists()
    if requested not in ("auto", "none") and not present:
        raise PreflightError(f"--vsnap-gpus={requested}: this host has no NVIDIA device (/dev/nvidiactl); use none")
    return present


def host_image_id(python: str, info: dict[str, Any]) -> str:
    """What stands for an image ID with the host runtime: the interpreter and the vllm it imports."""
    key = json.dumps([os.path.realpath(python), info.get("package_dir"), info.get("vllm"), info.get("torch")])
    return "host-python:" + hashlib.sha256(key.encode()).hexdigest()[:16]


def _host_preflight(config: QualConfig, files: list[OverlayFile]) -> PreflightResult:
    """The host runtime's checks: root and the tools lanes need, each Python's vllm, criu on the lanes' PATH."""
    problems = host_runtime.check_host(config.host_root)
    if problems:
        raise PreflightError("--vsnap-runtime=host: " + "; ".join(problems))
    present = host_gpus(config.gpus)
    # host lanes inherit this process's CUDA_VISIBLE_DEVICES (a scheduler's allocation): choose within it
    available = gpus_mod.host_gpus(honour_cuda_visible=True) if present and config.gpus != "none" else None
    result = lane_gpu_result(config, present, available, files)
    gpus = result.gpus
    for python, option in ((config.image, "--vsnap-python"), (config.base_image, "--vsnap-base-python")):
        if not python:
            continue
        env = host_runtime.host_environment(python, {}, gpus)
        try:
            done = subprocess.run(
                [python, "-c", PACKAGE_PROBE],
                capture_output=True,
                text=True,
                env=env,
                timeout=config.timeouts["exec"],
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise PreflightError(
                f"{option}: {python} did not locate vllm within {config.timeouts['exec']:.0f} s"
            ) from None
        try:
            info = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
        except (ValueError, IndexError):
            info = {}
        if not info.get("package_dir"):
            raise PreflightError(
                f"{option}: {python} cannot import vllm (exit {done.returncode}): "
                f"{(done.stderr or done.stdout).strip()[-300:]!r}; give the Python of an environment with vllm"
            )
        for tool in ("criu", "vllm"):
            if shutil.which(tool, path=env["PATH"]) is None:
                raise PreflightError(
                    f"{option}: {tool} not found on the lanes' PATH ({env['PATH']}); "
                    + (
                        "put the criu kit's sbin/ on PATH (docker/criu/export.sh)"
                        if tool == "criu"
                        else "install vllm into that Python's environment (its console script)"
                    )
                )
        result.images[python] = host_image_id(python, info)
        result.packages[python] = info
    check_expectations(config, result)
    return result


def _fixed_ports(config: QualConfig) -> list[int]:
    return [p for lane in config.lanes for p in (config.fixed_ports(lane) or {}).values()]
