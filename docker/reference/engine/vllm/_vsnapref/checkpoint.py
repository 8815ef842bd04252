"""The checkpoint agent: the reference's stand-in for what CRIU reads from a frozen process.

Each snapshot-capable engine process serves an abstract Unix socket `@vsnapref-criu-<pid>`. The image's `criu`
stand-in connects to every process of the tree, asks it to write its state into the images directory, then
kills the tree. On restore, a process started with `VSNAPREF_RESTORE_IMAGES` rebuilds itself from those files.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESTORE_ENV = "VSNAPREF_RESTORE_IMAGES"
RESTORE_PID_ENV = "VSNAPREF_RESTORE_PID"
Handler = Callable[[dict[str, Any]], dict[str, Any]]


def socket_name(pid: int) -> bytes:
    return f"\0vsnapref-criu-{pid}".encode()


class CheckpointAgent:
    def __init__(self) -> None:
        # "reap": the parent collects a child the CRIU stand-in killed, so no zombie outlives the dump (an
        # orphaned zombie waits for whatever reaper the container has, which may be none).
        self.handlers: dict[str, Handler] = {
            "reap": lambda request: {"status": os.waitpid(request["pid"], 0)[1]}
        }
        self.lock = threading.Lock()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(socket_name(os.getpid()))
        self.server.listen(4)
        thread = threading.Thread(target=self._serve, name="vsnapref-criu-agent", daemon=True)
        thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            with connection:
                try:
                    request = json.loads(_read_line(connection))
                    handler = self.handlers[request["op"]]
                    with self.lock:
                        reply = {"ok": True, **handler(request)}
                except Exception as error:  # reported to the stand-in, which fails the dump
                    reply = {"ok": False, "error": f"{type(error).__name__}: {error}"}
                with contextlib.suppress(OSError):
                    connection.sendall(json.dumps(reply).encode() + b"\n")


def _read_line(connection: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


_agent: CheckpointAgent | None = None


def agent() -> CheckpointAgent:
    global _agent
    if _agent is None:
        _agent = CheckpointAgent()
    return _agent


def request(pid: int, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(timeout)
        connection.connect(socket_name(pid))
        connection.sendall(json.dumps(payload).encode() + b"\n")
        reply: dict[str, Any] = json.loads(_read_line(connection) or b'{"ok": false, "error": "no reply"}')
    return reply


def restore_images() -> tuple[Path, int] | None:
    """(images directory, captured PID) this process must restore from; forgotten so children do not
    inherit it. The captured PID names the process's files in the images."""
    images = os.environ.pop(RESTORE_ENV, None)
    captured = os.environ.pop(RESTORE_PID_ENV, None)
    if not images:
        return None
    return Path(images), int(captured) if captured else os.getpid()


def write_private(path: Path, payload: bytes) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as output:
        output.write(payload)
        output.flush()
        os.fsync(output.fileno())


def spawn_with_pid(target_pid: int | None, spawn: Callable[[], Any], kill: Callable[[Any], None]) -> Any:
    """Start a process (spawn() returns a handle with .pid) under target_pid the way CRIU restores
    PIDs: set the PID namespace's last PID to one below the target and fork, retrying when another fork wins.

    Writing /proc/sys/kernel/ns_last_pid needs CAP_SYS_ADMIN and a writable /proc/sys (e.g. docker
    --cap-add SYS_ADMIN --security-opt systempaths=unconfined). Without it the process gets whatever PID
    the kernel hands out; the CRIU stand-in then records the mapping (a documented deviation from CRIU)."""
    if target_pid is None:
        return spawn()
    # Other processes fork too (the host PID namespace is shared): a lost race is retried, and a PID held by a
    # short-lived stranger is waited for briefly before giving up as CRIU would ("File exists").
    deadline = time.monotonic() + 10
    while True:
        try:
            with open("/proc/sys/kernel/ns_last_pid", "w") as last_pid:
                last_pid.write(str(target_pid - 1))
        except OSError:
            return spawn()
        handle = spawn()
        if handle.pid == target_pid:
            return handle
        kill(handle)
        while _pid_exists(target_pid):
            if time.monotonic() > deadline:
                raise RuntimeError(f"cannot restore PID {target_pid}: it is already in use")
            time.sleep(0.02)
        if time.monotonic() > deadline:
            raise RuntimeError(f"cannot restore PID {target_pid}: lost the PID race until the deadline")


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
