"""Helpers shared by the reference image's fidelity tests (a module of its own, because `conftest` is a
module name other test directories use too)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import docker

from vsnap_qual.box import LABEL_OWNER, LABEL_SESSION, owner_label
from vsnap_qual.runtimes.privileges import container_settings, local_missing_capabilities

if TYPE_CHECKING:
    from docker.client import DockerClient
    from docker.models.containers import Container
    from docker.types import Mount

REPO = Path(__file__).resolve().parents[2]
BUILD_SH = REPO / "docker" / "reference" / "build.sh"
REFPLUG = Path(__file__).resolve().parent / "refplug"
MODEL = "vsnap/tiny-qwen3"
REVISION = "7f3a9c2e5b1d4086a2e4c6b8d0f1a3c5e7092b4d"
ENGINE_ARGS = [
    MODEL,
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
    "--worker-extension-cls",
    "refplug.Digests",
]
ARTIFACT = "/vsnap/work/artifact"
CANARY_PROMPTS = (
    "The capital of France is",
    "The quick brown fox jumps over the",
    "Water boils at a temperature of",
    "Once upon a time there was a",
    "The largest planet in our solar system is",
)
LABEL = "ai.vsnap.test"
REAL_VLLM_VERSION = "0.33.0"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "vsnap-qual"


class LaneFactory(Protocol):
    """The ``lane_factory`` fixture: start a lane of ``flavour`` (head, base) in a harness privileges mode."""

    def __call__(
        self,
        flavour: str,
        control_dir: Path | None = None,
        environment: dict[str, str] | None = None,
        privileges: str = "all-caps",
    ) -> Lane: ...


@dataclass
class ExecResult:
    code: int
    stdout: str
    stderr: str


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Lane:
    """One long-lived engine container of a flavour; every command runs through `docker exec` + `timeout`."""

    def __init__(self, container: Container, flavour: str) -> None:
        self.container = container
        self.flavour = flavour

    def exec(self, argv: list[str], timeout: float = 300, env: dict[str, str] | None = None) -> ExecResult:
        api = self.container.client.api
        command = ["timeout", "-k", "5", str(int(timeout)), *argv]
        created = api.exec_create(self.container.id, command, environment=env or {}, stdout=True, stderr=True)
        out, err = api.exec_start(created["Id"], demux=True)
        code = api.exec_inspect(created["Id"])["ExitCode"]
        return ExecResult(int(code), (out or b"").decode(errors="replace"), (err or b"").decode(errors="replace"))

    def sh(self, script: str, timeout: float = 300, env: dict[str, str] | None = None) -> ExecResult:
        return self.exec(["sh", "-c", script], timeout, env)

    def background(self, script: str) -> None:
        api = self.container.client.api
        created = api.exec_create(self.container.id, ["sh", "-c", script])
        api.exec_start(created["Id"], detach=True)

    def read(self, path: str) -> str:
        result = self.exec(["cat", path], 30)
        assert result.code == 0, result.stderr
        return result.stdout

    def stop_session(self, pid: int) -> None:
        """SIGTERM then SIGKILL to every process whose session is ``pid`` (how a restored server stops)."""
        script = (
            f"for s in TERM KILL; do for p in $(ps -eo pid=,sid= | awk '$2=={pid} {{print $1}}'); do "
            f"kill -$s $p 2>/dev/null; done; sleep 1; done"
        )
        self.sh(script, 30)

    def restart(self) -> None:
        self.container.restart(timeout=5)
        self.container.reload()


def http_json(port: int, path: str, body: dict[str, Any] | None = None, timeout: float = 60) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        raw = response.read()
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode()


def completion(port: int, prompt: str) -> dict[str, Any]:
    body = {
        "model": MODEL,
        "prompt": prompt,
        "max_tokens": 1,
        "min_tokens": 1,
        "temperature": 0,
        "seed": 0,
        "logprobs": 0,
        "return_token_ids": True,
    }
    choice = http_json(port, "/v1/completions", body)["choices"][0]
    return {
        "token_ids": choice["token_ids"],
        "text": choice["text"],
        "logprob": choice["logprobs"]["token_logprobs"][0],
    }


def digests(port: int) -> dict[str, str]:
    results = http_json(port, "/collective_rpc", {"method": "refplug_digests"})["results"]
    assert len(results) == 1
    return dict(results[0])


def wait_health(port: int, deadline_s: float = 120) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"engine on port {port} did not become healthy")


def create_artifact(lane: Lane, extra_env: dict[str, str] | None = None) -> ExecResult:
    return lane.exec(["vllm", "snapshot", "create", *ENGINE_ARGS, "--snapshot-dir", ARTIFACT], 600, extra_env)


def restore(lane: Lane, port: int) -> ExecResult:
    return lane.exec(["vllm", "snapshot", "restore", ARTIFACT, "--host", "127.0.0.1", "--port", str(port)], 600)


def _run_lane_container(
    client: DockerClient,
    image: str,
    name: str,
    session: str,
    env: dict[str, str],
    mounts: list[Mount],
    privileges: str = "all-caps",
) -> Container:
    """Create and start a lane container in a harness privileges mode (`vsnap_qual.runtimes.privileges`): by default
    `all-caps`, what real CRIU needs on a host that refuses `--privileged` (host pid/ipc/network, every
    capability the host's bounding set has, seccomp/AppArmor unconfined, unmasked /proc paths: the CLI's
    `systempaths=unconfined` is empty MaskedPaths/ReadonlyPaths, which the SDK has no parameter for).
    `host-namespaces` gives Docker's default capabilities only (a host "without the capabilities")."""
    settings = container_settings(privileges, local_missing_capabilities())
    api = client.api
    host_config = api.create_host_config(
        pid_mode="host" if settings.host_pid else None,
        ipc_mode="host" if settings.host_ipc else None,
        network_mode="host" if settings.host_network else None,
        mounts=mounts,
        cap_add=list(settings.cap_add) or None,
        cap_drop=list(settings.cap_drop) or None,
        security_opt=list(settings.security_opt) or None,
        privileged=settings.privileged,
    )
    if settings.unmask_proc:
        host_config["MaskedPaths"] = []
        host_config["ReadonlyPaths"] = []
    try:
        created = api.create_container(
            image,
            entrypoint=["sleep", "infinity"],
            command=[],
            name=name,
            # the harness's own session and owner labels: if this test process is killed, the next
            # session's dead-owner sweep (vsnap_qual.docker_runtime.sweep) removes the container
            labels={LABEL: session, LABEL_SESSION: f"reftest-{session}", LABEL_OWNER: owner_label()},
            environment=env,
            user="0",
            detach=True,
            host_config=host_config,
        )
        api.start(created["Id"])
    except docker.errors.APIError:
        for stale in client.containers.list(all=True, filters={"name": name}):
            stale.remove(force=True)
        raise
    return client.containers.get(created["Id"])


@dataclass(frozen=True)
class RealVllm:
    """The snapshot sources of the released vllm wheel, and a Python that has pydantic to run them."""

    python: Path
    sources: Path

    def run(self, *arguments: str) -> Any:
        helper = Path(__file__).resolve().parent / "real_vllm_check.py"
        result = subprocess.run(
            [str(self.python), str(helper), str(self.sources), *arguments],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)
