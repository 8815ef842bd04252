"""Runs inside a container of the criu kit (stdlib only; Python 3.11 and 3.13): a real criu dump and restore of a
small Python process that holds a listening TCP socket and a counter in memory. Prints one JSON line.

    criu_driver.py [--dump-plugin-dir D] [--restore-plugin-dir D] [--dump-env K=V]... [--dump-path-prepend DIR]
                   [--no-restore]

The target answers each connection with "<token> <pid> <counter>" and counts up, so the answers before the dump
and after the restore show whether the same process (same PID, same memory) is serving again.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

TARGET = r"""
import os, socket, sys, uuid
token = uuid.uuid4().hex
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
s.listen(8)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(s.getsockname()[1]))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
counter = 0
while True:
    c, _ = s.accept()
    counter += 1
    c.sendall(f"{token} {os.getpid()} {counter}\n".encode())
    c.close()
"""


def ask(port: int) -> str | None:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            return c.makefile().readline().strip()
    except OSError:
        return None


def wait_for(predicate: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def log_lines(path: str, keys: tuple[str, ...]) -> list[str]:
    if not os.path.exists(path):
        return []
    with open(path, errors="replace") as f:
        return [line.rstrip() for line in f if any(k in line for k in keys)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump-plugin-dir")
    ap.add_argument("--restore-plugin-dir")
    ap.add_argument("--dump-env", action="append", default=[])
    ap.add_argument("--dump-path-prepend")
    ap.add_argument("--no-restore", action="store_true")
    args = ap.parse_args()
    # A child subreaper: the restored process (criu restore -d leaves it orphaned) becomes this driver's child, so
    # the driver reaps it at the end, also on hosts whose init never reaps.
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER

    work = tempfile.mkdtemp(prefix="criu-driver.")
    images = os.path.join(work, "images")
    os.mkdir(images)
    port_file = os.path.join(work, "port")
    res: dict[str, object] = {}
    with open(os.path.join(work, "target.out"), "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", TARGET, port_file],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            cwd=work,
        )
    pid = proc.pid
    res["target_pid"] = pid
    try:
        if not wait_for(lambda: os.path.exists(port_file), 30):
            res["error"] = "target did not start"
            return emit(res)
        with open(port_file) as f:
            port = int(f.read())
        res["before"] = ask(port)

        keys = ("cuda_plugin", "Error", "Warn", "plugin", "Dumping", "Restor", "cuda-checkpoint")
        dump = ["criu", "dump", "-t", str(pid), "-D", images, "-v4", "-o", "dump.log"]
        if args.dump_plugin_dir:
            dump += ["-L", args.dump_plugin_dir]
        env = dict(os.environ)
        env.update(kv.split("=", 1) for kv in args.dump_env)
        if args.dump_path_prepend:
            env["PATH"] = args.dump_path_prepend + ":" + env["PATH"]
        p = subprocess.run(dump, capture_output=True, text=True, env=env, timeout=120)
        res["dump_rc"] = p.returncode
        res["dump_stderr"] = p.stderr[-2000:]
        res["dump_log"] = log_lines(os.path.join(images, "dump.log"), keys)
        if p.returncode != 0:
            res["alive_after_failed_dump"] = alive(pid)
            res["answer_after_failed_dump"] = ask(port)
            return emit(res)
        proc.wait(timeout=30)  # reap: the dump killed it, and the restore needs its PID free
        res["gone_after_dump"] = not os.path.exists(f"/proc/{pid}")
        res["answer_after_dump"] = ask(port)
        if args.no_restore:
            return emit(res)

        restore = ["criu", "restore", "-D", images, "-d", "-v4", "-o", "restore.log"]
        if args.restore_plugin_dir:
            restore += ["-L", args.restore_plugin_dir]
        p = subprocess.run(restore, capture_output=True, text=True, timeout=120)
        res["restore_rc"] = p.returncode
        res["restore_stderr"] = p.stderr[-2000:]
        res["restore_log"] = log_lines(os.path.join(images, "restore.log"), keys)
        res["alive_after_restore"] = alive(pid)
        res["after"] = ask(port) if res["alive_after_restore"] else None
        return emit(res)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
        if proc.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired, ChildProcessError):
                proc.wait(timeout=10)
        wait_for(lambda: not alive(pid), 10)
        with contextlib.suppress(ChildProcessError):  # the restored process, reparented here
            while os.waitpid(-1, os.WNOHANG) != (0, 0):
                pass


def emit(res: dict[str, object]) -> int:
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
