"""Helpers of the real-vLLM tier: the lane container, exec, the served engine, HTTP (no fixtures here)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import re
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PROBE_ROOT = REPO / "vsnap_qual" / "probe"
IMAGE = os.environ.get("VSNAP_REAL_IMAGE", "vsnap-vllm-cpu:0.32.0")
SITE = "/opt/vllm/lib/python3.11/site-packages"
OVERLAY_MODULE = "vllm.snapshot.runtime"
OVERLAY_IMAGE_PATH = f"{SITE}/vllm/snapshot/runtime.py"
OVERLAY_COMMENT = b"\n# vsnap-qual real-tier overlay: a harmless added comment\n"
CONTROL = "/vsnap/control"
READY_TIMEOUT_S = 420.0
KV_LOG_RE = re.compile(r"(GPU|CPU) KV cache size: ([0-9,]+) tokens")


@dataclass
class Exec:
    exit_code: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


@dataclass
class RealContainer:
    """The lane container: real vLLM CPU image, probe mounted, one overlaid ``vllm/snapshot`` file."""

    container: Any
    control: Path
    overlay_host: Path
    overlay_sha256: str
    image_sha256: str
    labels: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)

    @property
    def model(self) -> str:
        return self.labels["ai.vsnap.model"]

    @property
    def revision(self) -> str:
        return self.labels["ai.vsnap.model-revision"]

    def lane_env(self, **overrides: str) -> dict[str, str]:
        env = dict(self.env)
        env.update(overrides)
        return env

    def run(self, argv: list[str], timeout_s: float = 300.0, *, env: dict[str, str] | None = None) -> Exec:
        """``docker exec`` wrapped in coreutils ``timeout``; stdout and stderr kept apart."""
        t0 = time.monotonic()
        result = self.container.exec_run(
            ["timeout", "-k", "10", str(int(timeout_s)), *argv],
            environment=env if env is not None else self.env,
            demux=True,
        )
        out, err = result.output
        return Exec(
            exit_code=result.exit_code,
            stdout=(out or b"").decode("utf-8", "replace"),
            stderr=(err or b"").decode("utf-8", "replace"),
            seconds=time.monotonic() - t0,
        )

    def spawn(self, script: str, env: dict[str, str] | None = None) -> None:
        self.container.exec_run(["sh", "-c", script], environment=env or self.env, detach=True)

    def engine_args(self, dtype: str | None = None) -> list[str]:
        return [
            self.model,
            "--revision", self.revision,
            "--tokenizer-revision", self.revision,
            "--dtype", dtype or self.labels.get("ai.vsnap.model-dtype", "float32"),
            "--max-model-len", "512",
            "--worker-extension-cls", "vsnap_probe.digest.DigestExtension",
            "--enforce-eager",
        ]  # fmt: skip

    def probe_files(self, prefix: str) -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) for p in sorted((self.control / "probe").glob(f"{prefix}-*.json"))]


def connect_docker() -> Any:
    try:
        # importlib: a checkout's top-level docker/ folder would otherwise shadow the SDK for type checkers.
        docker = importlib.import_module("docker")
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as exc:
        pytest.fail(f"the real tier needs a running Docker engine (make docker): {exc}")
    return client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- the served engine --------------------------------------------------------------------------------------------


def http(method: str, url: str, body: Any = None, timeout: float = 300.0) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        status = exc.code
    text = raw.decode("utf-8", "replace")
    try:
        return status, json.loads(text) if text else None
    except ValueError:
        return status, text


@dataclass
class Served:
    real: RealContainer
    port: int
    log_name: str
    ready_seconds: float
    dirty: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return (self.real.control / self.log_name).read_text(errors="replace")

    def rpc(self, method: str, **kwargs: Any) -> tuple[int, Any]:
        body: dict[str, Any] = {"method": method}
        if kwargs:
            body["kwargs"] = kwargs
        return http("POST", f"{self.url}/collective_rpc", body)

    def canary(self) -> dict[str, Any]:
        status, body = http(
            "POST",
            f"{self.url}/v1/completions",
            {
                "model": self.real.model,
                "prompt": "The capital of France is",
                "max_tokens": 1,
                "min_tokens": 1,
                "temperature": 0,
                "seed": 0,
                "logprobs": 0,
                "return_token_ids": True,
            },
        )
        assert status == 200, body
        choice = body["choices"][0]
        return {
            "token_ids": choice["token_ids"],
            "text": choice["text"],
            "logprob": choice["logprobs"]["token_logprobs"][0],
        }

    def api_server_pid(self) -> int | None:
        for rec in self.real.probe_files("loaded"):
            if rec["role"] == "api_server" and "serve" in rec["cmdline"] and str(self.port) in rec["cmdline"]:
                return int(rec["pid"])
        return None

    def stop(self) -> None:
        pid = self.api_server_pid()
        if pid is not None:
            self.real.run(["kill", "-TERM", str(pid)], timeout_s=10)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and self.real.run(["kill", "-0", str(pid)], timeout_s=10).exit_code == 0:
                time.sleep(0.5)


def start_server(real: RealContainer, dtype: str | None = None) -> Served:
    for name in ("probe", "faults"):
        for p in (real.control / name).glob("*.json"):
            p.unlink()
    port = free_port()
    log_name = f"serve-{port}.log"
    argv = ["vllm", "serve", *real.engine_args(dtype), "--host", "127.0.0.1", "--port", str(port)]
    real.spawn(" ".join(argv) + f" > {CONTROL}/{log_name} 2>&1")
    t0 = time.monotonic()
    served = Served(real=real, port=port, log_name=log_name, ready_seconds=0.0)
    while time.monotonic() - t0 < READY_TIMEOUT_S:
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{served.url}/health", timeout=5) as resp:
            if resp.status == 200:
                served.ready_seconds = time.monotonic() - t0
                return served
        time.sleep(1)
    tail = served.log()[-4000:] if (real.control / log_name).exists() else "(no log)"
    pytest.fail(f"vllm serve did not become ready in {READY_TIMEOUT_S:.0f} s; log tail:\n{tail}")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
