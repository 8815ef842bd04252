"""A third runtime, in one module, registered from outside the harness: each lane's box lives in this process's
memory, and its "engine" is a small HTTP server thread per listening port that answers as vLLM's OpenAI server
does (``/health``, ``/v1/completions`` with token ids and logprobs, ``/collective_rpc`` digests, ``/metrics``).
``vllm snapshot create`` writes an artifact into the box's in-memory files, ``inspect`` prints its manifest,
``restore`` starts a server from it. The box has no shell: the lifecycle must need nothing but the declared
:class:`vsnap_qual.box.Box` methods. Ports are the box's own numbers; :meth:`MemoryBox.endpoint` maps each to a
real port of this machine (as a pod's service would), so the harness never assumes it connects to the box's port.

Used as a pytest plugin (``-p memory_runtime``): it registers ``--vsnap-runtime=memory`` at import. It is the proof
that the runtime seam holds (``tests/seam/test_third_runtime.py``), not a qualification target: its image labels
say so.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import shlex
import socketserver
import tarfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vsnap_qual import runtimes
from vsnap_qual.box import (
    BoxFacts,
    BoxSpec,
    ExecResult,
    ImageInfo,
    ProcessRow,
    RuntimeFailure,
    ShmEntry,
    Termination,
    TreeEntry,
    free_ports,
)
from vsnap_qual.contract import CONTROL, VLLM_CANARY_PROMPT
from vsnap_qual.control import MountedControlDir
from vsnap_qual.diagnostics import CheckResult
from vsnap_qual.package_probe import PackageInfo
from vsnap_qual.preflight_result import PreflightResult, lane_gpu_result

KV_TOKENS = 4096
PARAMETERS = ("model.embed_tokens.weight", "model.layers.0.mlp.down_proj.weight", "model.norm.weight")
LABELS = {
    "ai.vsnap.runtime": "memory",
    "ai.vsnap.simulated": "everything: an in-memory fake engine of tests/seam (proof of the runtime seam)",
}


def token_ids(prompt: str, n: int) -> list[int]:
    digest = hashlib.sha256(prompt.encode()).digest()
    return [digest[i % len(digest)] + 3 for i in range(n)]


def completion(prompt: str, n: int) -> dict[str, Any]:
    ids = token_ids(prompt, n)
    return {
        "choices": [
            {
                "text": "".join(chr(97 + i % 26) for i in ids),
                "token_ids": ids,
                "logprobs": {"token_logprobs": [-(i % 7) / 10.0 - 0.125 for i in ids]},
            }
        ]
    }


class _Engine(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        return

    def _send(self, code: int, payload: object | str) -> None:
        body = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, {})
        elif self.path == "/metrics":
            self._send(200, f'vllm:cache_config_info{{kv_cache_size_tokens="{KV_TOKENS}"}} 1.0\n')
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path == "/v1/completions":
            self._send(200, completion(str(body["prompt"]), int(body["max_tokens"])))
        elif self.path == "/collective_rpc":
            digests = {
                name: {"sha256": hashlib.sha256(name.encode()).hexdigest(), "shape": [2], "dtype": "float16",
                       "source": "parameter"}
                for name in PARAMETERS
            }  # fmt: skip
            self._send(200, {"results": [digests]})
        else:
            self._send(404, {"error": "not found"})


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class MemoryBox:
    """A lane's box held in memory (see the module's docstring)."""

    def __init__(self, spec: BoxSpec) -> None:
        self.spec = spec
        self.files: dict[str, bytes] = {}
        self.servers: dict[int, tuple[_Server, list[int]]] = {}  # box port -> (server, its tree)
        self.real_ports: dict[int, int] = {}  # box port -> this machine's port
        self.next_pid = 1000
        self.control_root = next(b.source for b in spec.binds if b.target == CONTROL)

    # -- identity ------------------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return f"memory box {self.spec.name}"

    @property
    def id(self) -> str:
        return f"memory:{self.spec.name}"

    host_pid_namespace = False
    connect_proves_listener = True

    def endpoint(self, port: int) -> tuple[str, int]:
        if port not in self.real_ports:
            (self.real_ports[port],) = free_ports(1)
        return "127.0.0.1", self.real_ports[port]

    def control(self) -> MountedControlDir:
        return MountedControlDir(self.control_root)

    # -- files ----------------------------------------------------------------------------------------------------
    def _local(self, path: str) -> Path | None:
        for bind in self.spec.binds:
            if path == bind.target or path.startswith(bind.target + "/"):
                return bind.source / path[len(bind.target) :].lstrip("/")
        return None

    def read_bytes(self, path: str) -> bytes | None:
        local = self._local(path)
        if local is not None:
            return local.read_bytes() if local.is_file() else None
        return self.files.get(path)

    def read_text(self, path: str) -> str:
        data = self.read_bytes(path)
        return "" if data is None else data.decode()

    def write(self, path: str, data: bytes, append: bool = False) -> None:
        local = self._local(path)
        if local is not None:
            local.parent.mkdir(parents=True, exist_ok=True)
            with local.open("ab" if append else "wb") as out:
                out.write(data)
        else:
            self.files[path] = (self.files.get(path, b"") if append else b"") + data

    def ensure_dir(self, path: str, mode: int = 0o700) -> None:
        return None

    def export_tree(self, path: str, into: Path) -> None:
        with tarfile.open(into, "w") as tar:
            for name, data in self.files.items():
                if name.startswith(path + "/"):
                    info = tarfile.TarInfo(name[len(path) - len(path.rsplit("/", 1)[-1]) :])
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))

    def import_tree(self, archive: Path, parent: str) -> None:
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                extracted = tar.extractfile(member)
                if extracted is not None:
                    self.files[f"{parent}/{member.name}"] = extracted.read()

    def remove_path(self, path: str) -> None:
        for name in [n for n in self.files if n == path or n.startswith(path + "/")]:
            del self.files[name]

    # -- the engine -----------------------------------------------------------------------------------------------
    def _serve(self, port: int, tree: list[int]) -> None:
        host, real = self.endpoint(port)
        server = _Server((host, real), _Engine)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.servers[port] = (server, tree)

    def _tree(self) -> list[int]:
        self.next_pid += 10
        return [self.next_pid, self.next_pid + 1, self.next_pid + 2]  # API server, engine core, worker

    def spawn(self, argv: list[str], log_path: str, *, env: Mapping[str, str] | None = None) -> int:
        if argv[:2] != ["vllm", "serve"]:
            raise RuntimeFailure(f"{self.name} runs no {argv[0]}")
        tree = self._tree()
        self._serve(int(argv[argv.index("--port") + 1]), tree)
        self.write(log_path, f"INFO GPU KV cache size: {KV_TOKENS:,} tokens\n".encode(), append=True)
        return tree[0]

    def exec(
        self, argv: list[str], timeout: float, *, env: Mapping[str, str] | None = None, log: Path | None = None
    ) -> ExecResult:
        started = time.time()
        code, stdout = 127, ""
        stderr = f"{self.name}: no {shlex.join(argv[:3])}"
        if argv[:2] == ["vllm", "snapshot"]:
            code, stdout, stderr = getattr(self, "_" + argv[2])(argv[3:])
        if log is not None:
            with log.open("a") as out:
                out.write(f"$ {shlex.join(argv)}\n{stdout}{stderr}")
        return ExecResult(list(argv), code, stdout, stderr, started, time.time())

    def _create(self, args: list[str]) -> tuple[int, str, str]:
        target = args[args.index("--snapshot-dir") + 1]
        model, revision = args[0], args[args.index("--revision") + 1]
        first = completion(VLLM_CANARY_PROMPT, 1)["choices"][0]
        tree = self._tree()
        manifest = {
            "schema_version": 1,
            "boundary": "post-engine-init-reloadable-state-released",
            "model": model,
            "served_model_name": model,
            "model_revision": revision,
            "tokenizer_revision": args[args.index("--tokenizer-revision") + 1],
            "oracle_token_ids": first["token_ids"],
            "oracle_text": first["text"],
            "oracle_sampled_token_logprob": first["logprobs"]["token_logprobs"][0],
            "artifact_bytes": 1234,
            "process_tree": tree,
            "cuda_holders": [tree[-1]],
        }
        log = f"INFO GPU KV cache size: {KV_TOKENS:,} tokens\n".encode()
        self.files[f"{target}/manifest.json"] = json.dumps(manifest, sort_keys=True).encode()
        self.files[f"{target}/child.log"] = log
        self.files[f"{target}/child.log.snapshot-size"] = f"{len(log)}\n".encode()
        return 0, "", ""

    def _inspect(self, args: list[str]) -> tuple[int, str, str]:
        manifest = self.files.get(f"{args[0]}/manifest.json")
        if manifest is None:
            return 1, "", f"SnapshotSecurityError: snapshot path does not exist: {args[0]}"
        return 0, json.dumps(json.loads(manifest), indent=2, sort_keys=True) + "\n", ""

    def _restore(self, args: list[str]) -> tuple[int, str, str]:
        artifact, port = args[0], int(args[args.index("--port") + 1])
        manifest = json.loads(self.files[f"{artifact}/manifest.json"])
        tree = [int(p) for p in manifest["process_tree"]]
        self._serve(port, tree)
        self.files[f"{artifact}/restored.pid"] = f"{tree[0]}\n".encode()
        return 0, "", ""

    # -- processes and listeners ----------------------------------------------------------------------------------
    def processes(self) -> list[ProcessRow]:
        rows = []
        for server, tree in self.servers.values():
            del server
            rows += [ProcessRow(pid=p, ppid=tree[0] if p != tree[0] else 1, sid=tree[0], stat="S", args="vllm")
                     for p in tree]  # fmt: skip
        return rows

    def listening_ports(self) -> set[int]:
        return set(self.servers)

    def look(self, pids: list[int]) -> tuple[list[int], set[int]]:
        live = {p["pid"] for p in self.processes()}
        return [p for p in pids if p in live], self.listening_ports()

    def identify(self, pids: list[int]) -> dict[int, str]:
        live = {p["pid"] for p in self.processes()}
        return {p: "100" for p in pids if p in live}

    def terminate(self, pids: list[int], grace: float) -> Termination:
        tree = tuple(TreeEntry(p, "100", "vllm") for p in pids if p in {r["pid"] for r in self.processes()})
        for port, (server, members) in list(self.servers.items()):
            if set(members) & set(pids):
                server.shutdown()
                server.server_close()
                del self.servers[port]
        return Termination(frozenset(), tree, ())

    def tasks_held(self, ids: set[int]) -> list[str]:
        return []

    def shm(self) -> list[ShmEntry]:
        return []

    def gpu_apps(self) -> set[int] | None:
        return None

    def facts(self, gpus: bool) -> BoxFacts:
        return BoxFacts(criu=None, cuda=None)

    def sh(self, script: str, timeout: float = 60.0, env: Mapping[str, str] | None = None) -> ExecResult:
        raise RuntimeFailure(f"{self.name} has no shell (asked: {script[:60]})")

    # -- the environment ------------------------------------------------------------------------------------------
    def restart(self, stop_timeout: int = 20) -> None:
        for server, _ in self.servers.values():
            server.shutdown()
            server.server_close()
        self.servers.clear()

    def remove(self) -> None:
        self.restart()


class MemoryRuntime:
    """``--vsnap-runtime=memory``."""

    name = "memory"
    engine_options = ("--vsnap-image", "--vsnap-base-image")

    def __init__(self, settings: runtimes.RuntimeSettings) -> None:
        self.settings = settings

    def engines(self, parsed: Mapping[str, Any], default_python: str) -> tuple[str, str | None]:
        base = parsed.get("vsnap_base_image")
        return str(parsed.get("vsnap_image") or ""), str(base) if base else None

    def preflight(self, config: Any, overlay: list[Any]) -> PreflightResult:
        result = lane_gpu_result(config, False, None, overlay)
        for ref in [r for r in (config.image, config.base_image) if r]:
            result.images[ref] = f"memory:{ref}"
            result.packages[ref] = PackageInfo(
                package_dir="/memory/vllm", vllm="0.0+memory", torch=None, python="3",
                snapshot_behaviour="base", snapshot_behaviour_reason="the in-memory engine",
            )  # fmt: skip
        return result

    def image(self, ref: str, pre: PreflightResult) -> ImageInfo:
        return ImageInfo(id=pre.images[ref], repo_digests=[], labels=dict(LABELS), platform="memory")

    def start(self, spec: BoxSpec) -> MemoryBox:
        return MemoryBox(spec)

    def sweep(self, *, session: str | None = None, owner: str | None = None) -> list[str]:
        return []

    def host_facts(self) -> dict[str, Any]:
        return {"docker_version": None}

    def reachable(self) -> CheckResult:
        return CheckResult("memory runtime", "PASS", "in this process")

    def doctor(self, opts: Mapping[str, Any], want_gpu: bool) -> list[CheckResult]:
        return []

    def gpu_capable(self) -> bool:
        return False

    def close(self) -> None:
        return None


runtimes.register("memory", MemoryRuntime)
