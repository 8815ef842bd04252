"""Reference-image performance: figures, side by side in one run, medians of n >= 3 (never timed tests).

1. cold build (unless --skip-cold): the trixie base by debootstrap from an empty .deb cache plus both
   flavours, under throw-away tags (the criu kit image is reused as it is: it is docker/criu's own build);
2. cached rebuild: docker/reference/build.sh again, nothing changed;
3. image sizes: the reference image, its base and the criu kit (`docker image inspect` .Size);
4. per round, in one `all-caps` lane (what real CRIU needs on this host): the ready time of an ordinary cold start
   (`vllm serve` until /health answers), `vllm snapshot create` (real `criu dump` of the tree), the CRIU image size,
   and the ready time of a restore (`vllm snapshot restore` until it exits 0: by then CRIU has restored the tree,
   the listener is bound and the public canary matched; /health is then checked once).

The page-cache state is recorded: `--page-cache warm` (default) measures as the machine is; `--page-cache dropped`
writes 3 to /proc/sys/vm/drop_caches (root) before every cold start and every restore.

Run: ``python bench/bench_reference.py [--rounds 3] [--skip-cold] [--page-cache warm|dropped] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "docker" / "reference" / "build.sh"
REVISION = "7f3a9c2e5b1d4086a2e4c6b8d0f1a3c5e7092b4d"
ENGINE_ARGS = [
    "vsnap/tiny-qwen3",
    "--revision",
    REVISION,
    "--tokenizer-revision",
    REVISION,
    "--dtype",
    "float16",
    "--max-model-len",
    "512",
    "--gpu-memory-utilization",
    "0.5",
]
ARTIFACT = "/vsnap/work/artifact"
KIT = "vsnap-criu-kit:4.2.1"


def timed(command: list[str], env: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, env={**os.environ, **(env or {})}, timeout=1800)
    return time.perf_counter() - started


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def docker(*args: str, check: bool = True) -> str:
    return subprocess.run(["docker", *args], check=check, capture_output=True, text=True, timeout=600).stdout.strip()


def image_size(image: str) -> int:
    return int(docker("image", "inspect", "--format", "{{.Size}}", image))


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def wait_health(port: int, deadline_s: float = 180) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if healthy(port):
            return
        time.sleep(0.02)
    raise RuntimeError(f"no health on port {port}")


def drop_caches(page_cache: str) -> None:
    if page_cache == "dropped":
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")


def all_caps_flags() -> list[str]:
    """`--vsnap-privileges=all-caps` as docker CLI flags (every capability the host's bounding set has)."""
    from vsnap_qual.runtimes.privileges import container_settings, local_missing_capabilities

    settings = container_settings("all-caps", local_missing_capabilities())
    flags = ["--pid=host", "--ipc=host", "--network=host", "--security-opt", "systempaths=unconfined"]
    flags += [f"--cap-add={cap}" for cap in settings.cap_add] + [f"--cap-drop={cap}" for cap in settings.cap_drop]
    for option in settings.security_opt:
        flags += ["--security-opt", option]
    return flags


def rounds(image: str, count: int, page_cache: str) -> list[dict[str, float]]:
    """Each round: ordinary cold start, create, restore, in one lane; the lane is removed at the end."""
    name = f"vsnap-bench-lane-{os.getpid()}"
    docker(
        "run", "-d", "--name", name, "--label", "ai.vsnap.test=bench-reference", *all_caps_flags(),
        "--user", "0", "-e", "VLLM_NO_USAGE_STATS=1", "-e", "HF_HUB_OFFLINE=1",
        "--entrypoint", "sleep", image, "infinity",
    )  # fmt: skip
    results: list[dict[str, float]] = []
    try:
        docker("exec", name, "mkdir", "-p", "-m", "0700", "/vsnap/work")
        for _ in range(count):
            port = free_port()
            drop_caches(page_cache)
            started = time.perf_counter()
            docker(
                "exec", "-d", name, "sh", "-c",
                f"echo $$ > /tmp/serve.pid; exec vllm serve {' '.join(ENGINE_ARGS)} "
                f"--host 127.0.0.1 --port {port} > /tmp/serve.log 2>&1",
            )  # fmt: skip
            wait_health(port)
            cold_ready = time.perf_counter() - started
            docker(
                "exec",
                name,
                "sh",
                "-c",
                "kill $(cat /tmp/serve.pid); while kill -0 $(cat /tmp/serve.pid); do sleep 0.05; done",
            )
            create = timed(
                ["docker", "exec", name, "vllm", "snapshot", "create", *ENGINE_ARGS, "--snapshot-dir", ARTIFACT]
            )
            images_bytes = int(docker("exec", name, "du", "-sb", f"{ARTIFACT}/images").split()[0])
            manifest = json.loads(docker("exec", name, "cat", f"{ARTIFACT}/manifest.json"))
            port = free_port()
            drop_caches(page_cache)
            restore_ready = timed(
                [
                    "docker",
                    "exec",
                    name,
                    "vllm",
                    "snapshot",
                    "restore",
                    ARTIFACT,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                ]
            )
            if not healthy(port):
                raise RuntimeError("restore exited 0 but the restored server does not answer /health")
            root = docker("exec", name, "cat", f"{ARTIFACT}/restored.pid")
            if int(root) != manifest["process_tree"][0]:
                raise RuntimeError(f"restored root PID {root} is not the captured {manifest['process_tree'][0]}")
            docker(
                "exec", name, "sh", "-c",
                f"for s in TERM KILL; do for p in $(ps -eo pid=,sid= | awk '$2=={root} {{print $1}}'); do "
                f"kill -$s $p 2>/dev/null; done; sleep 0.5; done; rm -rf {ARTIFACT}",
            )  # fmt: skip
            results.append(
                {
                    "cold_start_ready_s": cold_ready,
                    "create_s": create,
                    "restore_ready_s": restore_ready,
                    "criu_images_bytes": float(images_bytes),
                    "artifact_bytes": float(manifest["artifact_bytes"]),
                }
            )
    finally:
        docker("rm", "-f", name, check=False)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="lifecycle rounds (medians; at least 3)")
    parser.add_argument("--skip-cold", action="store_true", help="no cold build (cached rebuild and lifecycle only)")
    parser.add_argument("--page-cache", choices=("warm", "dropped"), default="warm")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    options = parser.parse_args()
    if options.rounds < 3:
        parser.error("--rounds must be at least 3 (medians of n >= 3)")
    if options.page_cache == "dropped" and os.geteuid() != 0:
        parser.error("--page-cache dropped needs root (it writes /proc/sys/vm/drop_caches)")
    figures: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "kernel": platform.release()},
        "page_cache": options.page_cache,
        "rounds": options.rounds,
    }
    image = "vsnap-reference:head"
    if not options.skip_cold:
        env = {"VSNAP_BASE_IMAGE": "vsnap-bench-debian:trixie", "VSNAP_REFERENCE_IMAGE": "vsnap-bench-reference"}
        try:
            with tempfile.TemporaryDirectory(prefix="vsnap-bench-debs-") as debs:
                figures["cold_build_s"] = timed(["bash", str(BUILD)], {**env, "VSNAP_DEBOOTSTRAP_CACHE": debs})
            figures["cached_rebuild_s"] = timed(["bash", str(BUILD)], env)
        finally:
            docker(
                "rmi", "vsnap-bench-reference:head", "vsnap-bench-reference:base", "vsnap-bench-debian:trixie",
                check=False,
            )  # fmt: skip
    else:
        figures["cached_rebuild_s"] = timed(["bash", str(BUILD)])
    figures["image_bytes"] = {
        "vsnap-reference:head": image_size(image),
        "vsnap-debian:trixie": image_size("vsnap-debian:trixie"),
        KIT: image_size(KIT),
    }
    samples = rounds(image, options.rounds, options.page_cache)
    figures["samples"] = samples
    figures["median"] = {key: statistics.median(sample[key] for sample in samples) for key in samples[0]}
    median = figures["median"]
    print(f"page cache: {options.page_cache}; rounds: {options.rounds} (medians; one lane, all-caps)")
    for key in ("cold_build_s", "cached_rebuild_s"):
        if key in figures:
            print(f"{key:24s} {figures[key]:8.2f} s")
    print(f"{'cold_start_ready_s':24s} {median['cold_start_ready_s']:8.2f} s   (vllm serve until /health)")
    print(f"{'restore_ready_s':24s} {median['restore_ready_s']:8.2f} s   (vllm snapshot restore until exit 0)")
    print(f"{'restore / cold start':24s} {median['restore_ready_s'] / median['cold_start_ready_s']:8.2f}")
    print(f"{'create_s':24s} {median['create_s']:8.2f} s")
    print(f"{'criu_images':24s} {median['criu_images_bytes'] / 2**20:8.1f} MiB per snapshot")
    for name, size in figures["image_bytes"].items():
        print(f"{'image ' + name:24s} {size / 2**20:8.1f} MiB")
    text = json.dumps(figures, indent=2, sort_keys=True)
    if options.json:
        options.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
