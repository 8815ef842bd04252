"""Reference-image performance (figures and ratios against the issue's budgets; never timed tests):

1. cold build: debootstrap base + both flavours, from an empty .deb cache, under throw-away tags
   (budget 300 s on 2 cores);
2. cached rebuild: the same build again, nothing changed (budget 10 s);
3. create + restore on the reference: `vllm snapshot create` then `vllm snapshot restore` in one lane
   (budget 15 s), plus the ordinary `vllm serve` readiness for comparison.

Run: ``python bench/bench_reference.py [--skip-cold] [--keep-images]`` (``make bench`` runs every benchmark).
Without --skip-cold it builds `vsnap-bench-debian:bookworm` / `vsnap-bench-reference:{head,base}` and removes
them afterwards, so images in use by others are never touched.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
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
BUDGETS = {"cold_build_s": 300.0, "cached_rebuild_s": 10.0, "create_plus_restore_s": 15.0}


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


def wait_health(port: int, deadline_s: float = 120) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"no health on port {port}")


def lifecycle(image: str) -> dict[str, float]:
    """Seconds for ordinary serve readiness, create, restore (exit 0 = public canary passed)."""
    name = f"vsnap-bench-lane-{os.getpid()}"
    docker(
        "run",
        "-d",
        "--name",
        name,
        "--pid=host",
        "--ipc=host",
        "--network=host",
        "--user",
        "0",
        "-e",
        "VLLM_NO_USAGE_STATS=1",
        "-e",
        "HF_HUB_OFFLINE=1",
        "--entrypoint",
        "sleep",
        image,
        "infinity",
    )
    try:
        docker("exec", name, "mkdir", "-p", "-m", "0700", "/vsnap/work")
        port = free_port()
        started = time.perf_counter()
        docker(
            "exec",
            "-d",
            name,
            "sh",
            "-c",
            f"echo $$ > /tmp/serve.pid; exec vllm serve {' '.join(ENGINE_ARGS)} "
            f"--host 127.0.0.1 --port {port} > /tmp/serve.log 2>&1",
        )
        wait_health(port)
        serve_ready = time.perf_counter() - started
        docker("exec", name, "sh", "-c", "kill $(cat /tmp/serve.pid)")
        create = timed(
            [
                "docker",
                "exec",
                name,
                "vllm",
                "snapshot",
                "create",
                *ENGINE_ARGS,
                "--snapshot-dir",
                "/vsnap/work/artifact",
            ]
        )
        restore = timed(
            [
                "docker",
                "exec",
                name,
                "vllm",
                "snapshot",
                "restore",
                "/vsnap/work/artifact",
                "--host",
                "127.0.0.1",
                "--port",
                str(free_port()),
            ]
        )
    finally:
        docker("rm", "-f", name, check=False)
    return {
        "serve_ready_s": serve_ready,
        "create_s": create,
        "restore_s": restore,
        "create_plus_restore_s": create + restore,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-cold", action="store_true", help="measure only the cached build and lifecycle")
    parser.add_argument("--keep-images", action="store_true", help="keep the vsnap-bench-* images")
    options = parser.parse_args()
    figures: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}}
    if options.skip_cold:
        env = {}
        image = "vsnap-reference:head"
        figures["cached_rebuild_s"] = timed(["bash", str(BUILD)])
    else:
        env = {
            "VSNAP_BASE_IMAGE": "vsnap-bench-debian:bookworm",
            "VSNAP_REFERENCE_IMAGE": "vsnap-bench-reference",
        }
        image = "vsnap-bench-reference:head"
        with tempfile.TemporaryDirectory(prefix="vsnap-bench-debs-") as debs:
            figures["cold_build_s"] = timed(["bash", str(BUILD)], {**env, "VSNAP_DEBOOTSTRAP_CACHE": debs})
        figures["cached_rebuild_s"] = timed(["bash", str(BUILD)], env)
    try:
        figures.update(lifecycle(image))
    finally:
        if not options.skip_cold and not options.keep_images:
            docker(
                "rmi",
                "vsnap-bench-reference:head",
                "vsnap-bench-reference:base",
                "vsnap-bench-debian:bookworm",
                check=False,
            )
    for key, budget in BUDGETS.items():
        if key in figures:
            ratio = figures[key] / budget
            print(
                f"{key:24s} {figures[key]:8.2f} s   budget {budget:6.1f} s   ratio {ratio:5.2f} "
                f"{'ok' if ratio <= 1 else 'OVER'}"
            )
    for key in ("serve_ready_s", "create_s", "restore_s"):
        print(f"{key:24s} {figures[key]:8.2f} s")
    print(json.dumps({key: round(value, 3) if isinstance(value, float) else value for key, value in figures.items()}))
    return 0 if all(figures.get(key, 0) <= budget for key, budget in BUDGETS.items()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
