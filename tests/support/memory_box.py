"""The in-memory box of the third runtime (``tests/seam/memory_runtime.py``), shared with the unit tests' fake lane
(``tests/support/fake_lane.py``): a lane's box held in this process's memory, whose "engine" is a small HTTP server
thread per listening port that answers as vLLM's OpenAI server does (``/health``, ``/v1/completions`` with token
ids and logprobs, ``/collective_rpc`` digests, ``/metrics``). ``vllm snapshot create`` writes an artifact into the
box's in-memory files, ``inspect`` prints its manifest, ``restore`` starts a server from it. The box has no shell:
what runs on it needs nothing but the declared :class:`vsnap_qual.box.Box` methods (its named operations included).
Ports are the box's own numbers; :meth:`MemoryBox.endpoint` maps each to a real port of this machine (as a pod's
service would), so the harness never assumes it connects to the box's port.

The engine honours the contract the probe's hooks implement (``docs/design.md`` §3, ``vsnap_probe/faults.py``) as
the reference engine does (``docker/reference/README.md``): a create and a restore run for a moment, phase by phase,
their processes listed as a real command's (the ``timeout`` wrapper, the command, CRIU, the restored tree) and
ended by a signal as one would be; ``faults/armed.json`` is read when each hooked worker method runs during a
restore's recovery (or a create's sleep), the ``fired-<point>-<pid>.json`` record written as the hook acts. A failed
recovery of the head behaviour (``memory:head``) writes ``error.json`` with its phase and never binds HTTP; the base
behaviour (``memory:base``, as released) has no checkpoint hooks, binds HTTP before its public canary and writes no
``error.json``. A restore refuses a manifest it cannot read and a captured PID that is taken before any mutation, a
port in use after CRIU, a short core image in CRIU's words.
"""

from __future__ import annotations

import fnmatch
import hashlib
import http.server
import io
import json
import shlex
import socket
import socketserver
import tarfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vsnap_qual.box import (
    BoxFacts,
    BoxSpec,
    DirEntry,
    ExecResult,
    ProcessRow,
    RuntimeFailure,
    ShmEntry,
    ShmHolders,
    Termination,
    ThreadWaits,
    TreeEntry,
    free_ports,
)
from vsnap_qual.contract import CONTROL, VLLM_CANARY_PROMPT
from vsnap_qual.control import MountedControlDir
from vsnap_qual.model import CpuSample
from vsnap_qual.probe.vsnap_probe import control_files

KV_TOKENS = 4096
PARAMETERS = ("model.embed_tokens.weight", "model.layers.0.mlp.down_proj.weight", "model.norm.weight")
#: how long each phase of a create or a restore takes (a signal ends it at once): long enough for a kill drawn over
#: the command's duration to find it listed, short enough for a suite
PHASE_S = 0.06
#: the bytes of one process's CRIU core image: a shorter one is refused as CRIU refuses a truncated image
CORE_BYTES = 4096
#: the recovery deadline frozen into an artifact at create (``VLLM_SNAPSHOT_TIMEOUT_S``, vLLM's default 900 s)
DEADLINE_FILE = "release-timeout"
SIGNALS = {"KILL": 9, "TERM": 15, "INT": 2}


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


class Stopped(Exception):
    """A signal ended the running command's phase (its name)."""

    def __init__(self, signame: str) -> None:
        super().__init__(signame)
        self.signame = signame


@dataclass
class Running:
    """A create or restore while it runs: its wrapper and command PIDs, the signal it received."""

    wrapper: int
    root: int
    signalled: threading.Event = field(default_factory=threading.Event)
    signame: str = ""

    def phase(self, seconds: float = PHASE_S) -> None:
        """One phase of the command: ended at once by a signal (:class:`Stopped`)."""
        if self.signalled.wait(seconds):
            raise Stopped(self.signame)


class MemoryBox:
    """A lane's box held in memory (see the module's docstring)."""

    def __init__(self, spec: BoxSpec) -> None:
        self.spec = spec
        self.files: dict[str, bytes] = {}
        self.dirs: set[str] = set()
        self.servers: dict[int, tuple[_Server, list[int]]] = {}  # box port -> (server, its tree)
        self.real_ports: dict[int, int] = {}  # box port -> this machine's port
        self.rows: dict[int, ProcessRow] = {}  # processes other than the servers' (commands, trees, helpers)
        self.running: dict[int, Running] = {}  # a running command's wrapper and command PIDs -> it
        self.blockers: dict[int, socket.socket] = {}  # a port holder's PID -> its listening socket
        self.watches: dict[int, tuple[int, str]] = {}  # a listener watch's PID -> (box port, marker path)
        self.lock = threading.RLock()
        self.next_pid = 1000
        self.control_root = next(b.source for b in spec.binds if b.target == CONTROL)
        self.behaviour = "base" if spec.engine.endswith(":base") else "head"

    # -- identity ------------------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return f"memory box {self.spec.name}"

    @property
    def id(self) -> str:
        return f"memory:{self.spec.name}"

    host_pid_namespace = False
    connect_proves_listener = True
    has_shell = False

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
        self.dirs.add(path)

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
        self.dirs -= {d for d in self.dirs if d == path or d.startswith(path + "/")}

    # -- named operations -----------------------------------------------------------------------------------------
    def _is_dir(self, path: str) -> bool:
        return path in self.dirs or any(n.startswith(path + "/") for n in self.files)

    def exists(self, path: str) -> bool:
        local = self._local(path)
        if local is not None:
            return local.exists()
        return path in self.files or self._is_dir(path)

    def list_dir(self, path: str, glob: str = "*", depth: int | None = 1) -> list[DirEntry]:
        if not self._is_dir(path):
            raise RuntimeFailure(f"cannot list {path} in {self.name}: no such directory")
        found: dict[str, DirEntry] = {}
        below = [n[len(path) + 1 :] for n in [*self.files, *self.dirs] if n.startswith(path + "/")]
        for relative in below:
            parts = relative.split("/")
            for level in range(1, len(parts) + 1):  # the directories on the way are entries too
                entry = "/".join(parts[:level])
                full = f"{path}/{entry}"
                if depth is not None and level > depth or not fnmatch.fnmatchcase(parts[level - 1], glob):
                    continue
                is_file = full in self.files
                found[entry] = DirEntry(entry, "f" if is_file else "d", len(self.files[full]) if is_file else 0)
        return sorted(found.values(), key=lambda e: e.path)

    def copy_tree(self, source: str, target: str, *, replace: bool = False) -> None:
        if not self._is_dir(source):
            raise RuntimeFailure(f"cp: cannot stat '{source}': No such file or directory")
        if replace:
            self.remove_path(target)
        for name in [n for n in self.files if n.startswith(source + "/")]:
            self.files[target + name[len(source) :]] = self.files[name]
        self.dirs |= {target + d[len(source) :] for d in self.dirs if d == source or d.startswith(source + "/")}
        self.dirs.add(target)

    def truncate(self, path: str, size: int) -> None:
        if path not in self.files:
            raise RuntimeFailure(f"cannot truncate {path} in {self.name}: no such file")
        self.files[path] = self.files[path][:size].ljust(size, b"\0")

    def write_bytes(self, path: str, data: bytes) -> None:
        self.write(path, data)

    def digest_tree(self, path: str) -> str:
        h = hashlib.sha256()
        for name in sorted(n for n in self.files if n.startswith(path + "/")):  # relative: a copy digests alike
            h.update(name[len(path) :].encode() + b"\0" + hashlib.sha256(self.files[name]).digest())
        return h.hexdigest()

    def signal(self, pids: list[int], signame: str, *, strict: bool = False) -> bool:
        with self.lock:
            known = {p["pid"] for p in self.processes()}
            for pid in pids:
                self._signal(pid, signame)
        return not strict or all(pid in known for pid in pids)

    def _signal(self, pid: int, signame: str) -> None:
        """What one signal does to one process of the box (every signal the harness sends ends what it reaches,
        but a running command decides how it ends)."""
        running = self.running.get(pid)
        if running is not None:  # the command (or its wrapper) decides how it ends
            running.signame = running.signame or signame
            running.signalled.set()
            return
        if pid in self.blockers:
            self.blockers.pop(pid).close()
        self.watches.pop(pid, None)
        for port, (_, tree) in list(self.servers.items()):
            if pid in tree:
                self._stop_server(port)
        row = self.rows.pop(pid, None)
        if row is not None:
            for member in [p for p, r in self.rows.items() if r["sid"] == pid and p not in self.running]:
                del self.rows[member]  # a session leader's death ends what a tree of ours holds

    def wchan(self, pids: list[int]) -> dict[int, str]:
        live = {p["pid"] for p in self.processes()}
        return {pid: "do_epoll_wait" if pid in live else "gone" for pid in pids}

    def thread_waits(self, pids: list[int]) -> dict[int, ThreadWaits]:
        live = {p["pid"] for p in self.processes()}
        return {pid: ThreadWaits(("do_epoll_wait",), int(time.monotonic() * 100)) for pid in pids if pid in live}

    def hold_port(self, port: int, log_path: str) -> int:
        if port in self.listening_ports():
            raise RuntimeFailure(f"port {port} is in use in {self.name}")
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(self.endpoint(port))
        sock.listen(1)
        pid = self._pid()
        with self.lock:
            self.blockers[pid] = sock
            self.rows[pid] = ProcessRow(pid=pid, ppid=1, sid=pid, stat="S", args=f"python3 -c hold port {port}")
        self._listening(port)
        return pid

    def watch_listener(self, port: int, marker: str, log_path: str) -> int:
        pid = self._pid()
        with self.lock:
            self.watches[pid] = (port, marker)
        self._listening(port)
        return pid

    def _listening(self, port: int) -> None:
        """A socket listens on the box's ``port`` now: every watch of it writes its marker (and ends)."""
        with self.lock:
            if port not in self.listening_ports():
                return
            for pid, (watched, marker) in list(self.watches.items()):
                if watched == port:
                    self.write(marker, f"{time.time()!r}\n".encode(), append=True)
                    del self.watches[pid]

    # -- the engine -----------------------------------------------------------------------------------------------
    def _pid(self) -> int:
        with self.lock:
            self.next_pid += 1
            return self.next_pid

    def _serve(self, port: int, tree: list[int]) -> None:
        host, real = self.endpoint(port)
        server = _Server((host, real), _Engine)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        with self.lock:
            self.servers[port] = (server, tree)
            for pid in tree:
                self.rows.pop(pid, None)  # listed as the server's now
        self._listening(port)

    def _stop_server(self, port: int) -> None:
        with self.lock:
            server, _ = self.servers.pop(port)
        server.shutdown()
        server.server_close()

    def _tree(self) -> list[int]:
        with self.lock:
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
            running = self._start(argv, timeout)
            try:
                code, stdout, stderr = getattr(self, "_" + argv[2])(
                    argv[3:], running, {**self.spec.environment, **(env or {})}
                )
            finally:
                self._end(running)
        if log is not None:
            with log.open("a") as out:
                out.write(f"$ {shlex.join(argv)}\n{stdout}{stderr}")
        return ExecResult(list(argv), code, stdout, stderr, started, time.time())

    def _start(self, argv: list[str], timeout: float) -> Running:
        """The command listed as the harness's exec starts it: coreutils ``timeout``, then the command."""
        running = Running(self._pid(), self._pid())
        wrapped = f"timeout --signal=TERM --kill-after=10 {max(timeout, 1.0):.0f}s {shlex.join(argv)}"
        with self.lock:
            self.running[running.wrapper] = self.running[running.root] = running
            self.rows[running.wrapper] = ProcessRow(
                pid=running.wrapper, ppid=1, sid=running.wrapper, stat="S", args=wrapped
            )
            self.rows[running.root] = ProcessRow(
                pid=running.root, ppid=running.wrapper, sid=running.wrapper, stat="S", args=shlex.join(argv)
            )
        return running

    def _end(self, running: Running) -> None:
        """The command has ended: it and its children (CRIU, the snapshot child) are gone; a tree it restored in a
        session of its own is not."""
        with self.lock:
            for pid in [running.wrapper, running.root]:
                self.running.pop(pid, None)
            for pid in [p for p, r in self.rows.items() if r["ppid"] in (running.wrapper, running.root)]:
                del self.rows[pid]
            self.rows.pop(running.wrapper, None)
            self.rows.pop(running.root, None)

    def _child(self, running: Running, pid: int, args: str, own_session: bool = False) -> None:
        with self.lock:
            sid = pid if own_session else running.wrapper
            self.rows[pid] = ProcessRow(pid=pid, ppid=running.root, sid=sid, stat="S", args=args)

    def _armed(self) -> dict[str, Any] | None:
        text = self.control().read_text(control_files.ARMED)
        return json.loads(text) if text else None

    def _fires(self, point: str, method: str, pid: int, **extra: Any) -> bool:
        """The probe's hook on ``method``: True (and its fired record written) when ``point`` is armed."""
        armed = self._armed()
        if not armed or armed.get("point") != point:
            return False
        record = {"point": point, "pid": pid, "method": method, "args": [], "kwargs": {}, "time": time.time(), **extra}
        self.control().write_json(control_files.fired(point, pid), record)
        return True

    def _create(self, args: list[str], running: Running, env: Mapping[str, str]) -> tuple[int, str, str]:
        target = args[args.index("--snapshot-dir") + 1]
        model, revision = args[0], args[args.index("--revision") + 1]
        tree = self._tree()
        self.remove_path(target)
        self.dirs.add(target)
        log = f"INFO GPU KV cache size: {KV_TOKENS:,} tokens\n".encode()
        self.files[f"{target}/child.log"] = log
        try:
            running.phase()  # the controller alone: preflight, its private target
            self._child(running, tree[0], f"python3 -m vllm.snapshot.server --ready-file {target}/ready.json")
            for pid in tree[1:]:
                self._child(running, pid, "python3 -m vllm.v1.engine.core")
            running.phase()  # the snapshot child starts and sleeps
            if self._fires("sleep-raise", "sleep", tree[-1]):
                self.remove_path(target)  # the failed create removes its target
                return 1, "", "RuntimeError: snapshot child exited before ready\n"
            self._child(running, self._pid(), f"/usr/sbin/criu dump --tree {tree[0]} --images-dir {target}/images")
            running.phase()  # criu dump writes the images
            for pid in tree:
                self.files[f"{target}/images/core-{pid}.img"] = f"core of {pid}".encode().ljust(CORE_BYTES, b".")
            running.phase()
        except Stopped as stop:  # no handler for any signal: the default action, the target as it was left
            return 128 + SIGNALS.get(stop.signame, 15), "", ""
        first = completion(VLLM_CANARY_PROMPT, 1)["choices"][0]
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
            "process_tree": tree,
            "cuda_holders": [tree[-1]],
        }
        self.files[f"{target}/{DEADLINE_FILE}"] = env.get("VLLM_SNAPSHOT_TIMEOUT_S", "900").encode()
        self.files[f"{target}/child.log.snapshot-size"] = f"{len(log)}\n".encode()
        # vLLM's count: every regular file under the artifact at manifest time
        manifest["artifact_bytes"] = sum(len(v) for k, v in self.files.items() if k.startswith(f"{target}/"))
        self.files[f"{target}/manifest.json"] = json.dumps(manifest, sort_keys=True).encode()  # published last
        return 0, "", ""

    def _inspect(self, args: list[str], running: Running, env: Mapping[str, str]) -> tuple[int, str, str]:
        if not self._is_dir(args[0]):
            return 1, "", f"SnapshotSecurityError: snapshot path does not exist: {args[0]}"
        manifest = self.files.get(f"{args[0]}/manifest.json")
        if manifest is None:
            return 1, "", f"SnapshotManifestError: no manifest.json in {args[0]}: not a published snapshot"
        try:
            return 0, json.dumps(json.loads(manifest), indent=2, sort_keys=True) + "\n", ""
        except ValueError as exc:
            return 1, "", f"SnapshotManifestError: invalid snapshot manifest: {exc}"

    def _restore(self, args: list[str], running: Running, env: Mapping[str, str]) -> tuple[int, str, str]:
        artifact, port = args[0], int(args[args.index("--port") + 1])
        # before any mutation: the manifest, the captured PIDs
        try:
            manifest = json.loads(self.files[f"{artifact}/manifest.json"])
            if manifest.get("schema_version") != 1:
                raise ValueError(f"schema_version {manifest.get('schema_version')!r} is not 1")
        except (KeyError, ValueError) as exc:
            return 1, "", f"vllm.snapshot.manifest.SnapshotManifestError: invalid snapshot manifest: {exc}\n"
        tree = [int(p) for p in manifest["process_tree"]]
        live = {p["pid"] for p in self.processes()}
        taken = [pid for pid in tree if pid in live]
        if taken:
            return 1, "", f"vllm.snapshot.runtime.SnapshotRestoreError: captured PID is already occupied: {taken[0]}\n"
        for name in ("error.json", "restored.pid"):
            self.files.pop(f"{artifact}/{name}", None)
        deadline = float(self.files.get(f"{artifact}/{DEADLINE_FILE}", b"900"))
        try:
            running.phase()  # the controller's preflight
            self._child(running, self._pid(), f"/usr/sbin/criu restore --images-dir {artifact}/images")
            running.phase()  # CRIU restores the tree under its captured PIDs
            short = [
                (name, len(data)) for name, data in sorted(self.files.items())
                if name.startswith(f"{artifact}/images/core-") and len(data) < CORE_BYTES
            ]  # fmt: skip
            if short:
                name, length = short[0]
                said = f"(00.1) Error (criu/protobuf.c:72): Read {length} bytes while {CORE_BYTES} expected from {name}"
                return (
                    1,
                    f"CRIU restore.log (tail):\n{said}\nRestoring FAILED.\n",
                    "SnapshotRestoreError: criu failed\n",
                )
            with self.lock:
                for i, pid in enumerate(tree):
                    self.rows[pid] = ProcessRow(
                        pid=pid,
                        ppid=1 if i == 0 else tree[0],
                        sid=tree[0],
                        stat="S",
                        args="python3 -m vllm.snapshot.server" if i == 0 else "vllm worker",
                    )
            if port in self.listening_ports():
                self._stop_tree(tree)
                return 1, "", f"vllm.snapshot.runtime.SnapshotRestoreError: restore port {port} is already in use\n"
            self.files[f"{artifact}/restored.pid"] = f"{tree[0]}\n".encode()
            failed = self._recover(artifact, tree, running, deadline)
            if failed is not None:
                self._stop_tree(tree)
                return 1, "", failed
            self._serve(port, tree)
            running.phase()  # the public canary
            if self.behaviour == "base" and self._perturbed:
                self._stop_server(port)
                return 1, "", "RuntimeError: snapshot oracle mismatch: the restored engine answered otherwise\n"
        except Stopped as stop:
            return self._stopped(stop.signame, tree)
        return 0, "", ""

    _perturbed = False

    def _recover(self, artifact: str, tree: list[int], running: Running, deadline: float) -> str | None:
        """The restored worker's recovery, hook by hook (``vsnap_probe.faults.POINTS``); its failure in the words the
        controller prints (None: recovered). The head behaviour records the phase in ``error.json``."""
        worker = tree[-1]
        self._perturbed = False
        steps = [("recovery: restore communicators", "checkpoint_restore")] if self.behaviour == "head" else []
        steps += [("recovery: restore memory", "wake_up"), ("recovery: synchronize device", "synchronize_device")]
        for phase, method in steps:
            raised = None  # the exception the worker raised, as its line says it
            if method == "checkpoint_restore" and self._fires("communicators-raise", method, worker):
                raised = "RuntimeError: vsnap fault: communicators-raise"
            if method == "wake_up":
                armed = self._armed() or {}
                if self._fires("wake-stall", method, worker, stall_s=armed.get("stall_s")):
                    stall = float(armed.get("stall_s") or 600.0)
                    running.phase(min(stall, deadline) if self.behaviour == "head" else stall)
                    if self.behaviour == "head" and stall > deadline:
                        raised = f"TimeoutError: recovery exceeded VLLM_SNAPSHOT_TIMEOUT_S={deadline:g}"
                if self._fires("wake-raise", method, worker):
                    raised = "RuntimeError: vsnap fault: wake-raise"
                if self._fires("canary-perturb", method, worker, parameter=PARAMETERS[-1], delta=1000.0):
                    self._perturbed = True
            if raised is not None:
                if self.behaviour == "head":
                    kind, _, words = raised.partition(": ")
                    error = {"error": words, "error_type": kind, "phase": phase}
                    self.files[f"{artifact}/error.json"] = json.dumps(error, sort_keys=True).encode()
                return f"{raised}\nSnapshotRestoreError: restored process exited before binding HTTP\n"
            running.phase(PHASE_S / 3)
        if self.behaviour == "head" and self._perturbed:  # the private canary, before HTTP is bound
            error = {"error": "snapshot oracle mismatch", "error_type": "RuntimeError", "phase": "recovery: canary"}
            self.files[f"{artifact}/error.json"] = json.dumps(error, sort_keys=True).encode()
            return "RuntimeError: snapshot oracle mismatch\nSnapshotRestoreError: restored process exited before HTTP\n"
        return None

    def _stopped(self, signame: str, tree: list[int]) -> tuple[int, str, str]:
        """A restore a signal ended: SIGKILL leaves what it had restored; SIGTERM (head: ``SystemExit``, as the head
        restore raises on it) and SIGINT (``KeyboardInterrupt``) run the cleanup, which ends the pinned tree; the
        base behaviour's SIGTERM is its default action and leaves the tree to run on."""
        if signame == "KILL" or signame == "TERM" and self.behaviour == "base":
            return 128 + SIGNALS[signame], "", ""
        self._stop_tree(tree)
        raised = "KeyboardInterrupt" if signame == "INT" else "SystemExit: 143"
        return 1, "", f"{raised}\nSnapshotRestoreError: restore interrupted; the restored tree was terminated\n"

    def _stop_tree(self, tree: list[int]) -> None:
        with self.lock:
            for port, (_, members) in list(self.servers.items()):
                if set(members) & set(tree):
                    self._stop_server(port)
            for pid in tree:
                self.rows.pop(pid, None)

    # -- processes and listeners ----------------------------------------------------------------------------------
    def processes(self) -> list[ProcessRow]:
        with self.lock:
            rows = list(self.rows.values())
            for _, tree in self.servers.values():
                rows += [ProcessRow(pid=p, ppid=tree[0] if p != tree[0] else 1, sid=tree[0], stat="S", args="vllm")
                         for p in tree]  # fmt: skip
        return rows

    def listening_ports(self) -> set[int]:
        with self.lock:
            held = {self._blocked_port(sock) for sock in self.blockers.values()}
            return set(self.servers) | held

    def _blocked_port(self, sock: socket.socket) -> int:
        real = int(sock.getsockname()[1])
        return next(port for port, mapped in self.real_ports.items() if mapped == real)

    def look(self, pids: list[int]) -> tuple[list[int], set[int]]:
        live = {p["pid"] for p in self.processes()}
        return [p for p in pids if p in live], self.listening_ports()

    def identify(self, pids: list[int]) -> dict[int, str]:
        live = {p["pid"] for p in self.processes()}
        return {p: "100" for p in pids if p in live}

    def terminate(self, pids: list[int], grace: float, *, kill: bool = True) -> Termination:
        tree = tuple(TreeEntry(p, "100", "vllm") for p in pids if p in {r["pid"] for r in self.processes()})
        for pid in pids:
            self._signal(pid, "TERM")
        return Termination(frozenset(), tree, ())

    def tasks_held(self, ids: set[int]) -> list[str]:
        live = {p["pid"] for p in self.processes()}
        return [f"{pid} vllm S {pid} 1" for pid in sorted(ids & live)]

    def shm(self) -> list[ShmEntry]:
        return []

    def shm_unheld(self, names: list[str]) -> ShmHolders:
        return ShmHolders(list(names), [])  # no process of this box holds a /dev/shm file

    def cpu_sample(self) -> CpuSample | None:
        return None  # the box cannot tell: its engine is threads of this process

    def gpu_apps(self) -> set[int] | None:
        return None

    def gpu_memory(self) -> dict[int, int] | None:
        return None

    def facts(self, gpus: bool) -> BoxFacts:
        return BoxFacts(criu=None, cuda=None)

    def sh(self, script: str, timeout: float = 60.0, env: Mapping[str, str] | None = None) -> ExecResult:
        raise RuntimeFailure(f"{self.name} has no shell (asked: {script[:60]})")

    # -- the environment ------------------------------------------------------------------------------------------
    def restart(self, stop_timeout: int = 20) -> None:
        with self.lock:
            for port in list(self.servers):
                self._stop_server(port)
            for sock in self.blockers.values():
                sock.close()
            self.blockers.clear()
            self.rows.clear()
            self.watches.clear()

    def remove(self) -> None:
        self.restart()
