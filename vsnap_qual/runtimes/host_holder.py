"""The host lane's namespace holder: a child subreaper that runs the lane's commands (``python -m
vsnap_qual.runtimes.host_holder SOCKET READY``, started by ``host_runtime`` inside the lane's mount namespace).

Every lane process descends from it, so orphans (a detached server, a CRIU-restored tree whose parent exited)
are reparented to it and reaped here, whatever the host's init does (some never reap). It is the analogue of a
container's init and shim. Protocol, one connection per command on a Unix socket: the client sends one JSON line
``{"argv": [...], "env": {...}}`` with three descriptors (stdin, stdout, stderr) attached (SCM_RIGHTS); the
holder answers ``{"pid": N}`` once started and ``{"exit": CODE}`` when the command ends (CODE < 0: killed by that
signal), or ``{"error": "..."}``. Standard library only.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import json
import os
import socket
import sys
import threading
import time

PR_SET_CHILD_SUBREAPER = 36
MAX_REQUEST = 1 << 20

_lock = threading.Lock()
_commands: dict[int, socket.socket] = {}  # command pid -> the connection waiting for its exit


def _recv_request(conn: socket.socket) -> tuple[dict[str, object], list[int]]:
    fds = array.array("i")
    data = b""
    while not data.endswith(b"\n"):
        # close-on-exec from the start: a descriptor meant for one command must never leak into another
        msg, ancdata, _flags, _addr = conn.recvmsg(
            MAX_REQUEST, socket.CMSG_LEN(3 * fds.itemsize), socket.MSG_CMSG_CLOEXEC
        )
        if not msg:
            raise ConnectionError("request ended early")
        data += msg
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return json.loads(data), list(fds)


def _send(conn: socket.socket, payload: dict[str, object]) -> None:
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps(payload).encode() + b"\n")


def _serve(conn: socket.socket) -> None:
    fds: list[int] = []
    try:
        request, fds = _recv_request(conn)
        if len(fds) != 3:
            raise ValueError(f"expected 3 descriptors, got {len(fds)}")
        argv = [str(a) for a in request["argv"]]  # type: ignore[attr-defined]
        env = {str(k): str(v) for k, v in request["env"].items()}  # type: ignore[attr-defined]
        actions = [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(fds)]
        # Under the lock: the reaper (which takes it too) can neither miss this child's exit nor answer
        # {"exit"} before {"pid"} has been sent, however fast the command ends.
        with _lock:
            try:
                # its own process group, so that a deadline can end the command and its children together
                pid = os.posix_spawnp(argv[0], argv, env, file_actions=actions, setpgroup=0)
            except OSError as exc:
                raise RuntimeError(f"cannot run {argv[0]}: {exc.strerror}") from None
            _send(conn, {"pid": pid})
            _commands[pid] = conn
    except Exception as exc:  # noqa: BLE001
        _send(conn, {"error": str(exc)})
        conn.close()
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _reap_forever() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            time.sleep(0.02)  # no child yet
            continue
        except InterruptedError:
            continue
        with _lock:
            conn = _commands.pop(pid, None)
        if conn is not None:  # one of our commands; anything else is an orphan, reaped and forgotten
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            _send(conn, {"exit": code})
            conn.close()


def main(socket_path: str, ready_path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit(f"host_holder: prctl(PR_SET_CHILD_SUBREAPER) failed: errno {ctypes.get_errno()}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(socket_path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(socket_path)
    os.chmod(socket_path, 0o600)
    server.listen(64)
    threading.Thread(target=_reap_forever, daemon=True).start()
    with open(ready_path, "w") as ready:
        ready.write(f"{os.getpid()}\n")
    while True:
        conn, _ = server.accept()
        threading.Thread(target=_serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
