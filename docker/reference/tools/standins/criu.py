#!/usr/bin/python3
"""CRIU stand-in of the vsnap reference image (it is not CRIU).

`criu dump --tree PID --images-dir D ...` asks every process of the tree, through its checkpoint agent, to
write its engine state into D, records the process tree (pids, sids, cmdlines, environments, stdio targets)
and the sha256 of every image file, then kills the tree. `criu restore --images-dir D --pidfile F
--restore-detached ...` verifies every image file, starts the root again under its captured PID, session and
environment (the root rebuilds its engine core under its captured PID), waits until the tree reports
restored, and writes F. Logs go to D/<--log-file>.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

VERSION = "Version: 4.2.1+vsnapref (CRIU stand-in, no process checkpointing)"


class CriuError(Exception):
    pass


class Log:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.started = time.monotonic()

    def __call__(self, level: str, message: str) -> None:
        line = f"({time.monotonic() - self.started:.6f}) {level}: {message}\n"
        if self.path is not None:
            with self.path.open("a") as output:
                output.write(line)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def process_info(pid: int) -> dict[str, object]:
    proc = Path("/proc") / str(pid)
    stat_text = (proc / "stat").read_text()
    fields = stat_text[stat_text.rfind(")") + 2 :].split()
    environ = [
        item.decode(errors="surrogateescape") for item in (proc / "environ").read_bytes().split(b"\0") if item
    ]
    fds = {}
    for fd in ("0", "1", "2"):
        try:
            fds[fd] = os.readlink(proc / "fd" / fd)
        except OSError:
            fds[fd] = os.devnull
    return {
        "pid": pid,
        "ppid": int(fields[1]),
        "pgid": int(fields[2]),
        "sid": int(fields[3]),
        "cmdline": [
            item.decode(errors="surrogateescape")
            for item in (proc / "cmdline").read_bytes().split(b"\0")
            if item
        ],
        "cwd": os.readlink(proc / "cwd"),
        "environ": environ,
        "fds": fds,
    }


def tree_of(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(text[text.rfind(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, stack = [], [root]
    while stack:
        pid = stack.pop(0)
        if pid not in found:
            found.append(pid)
            stack.extend(sorted(children.get(pid, [])))
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return False
    return state[state.rfind(")") + 2] != "Z"


def dump(options: argparse.Namespace, log: Log) -> None:
    from vllm._vsnapref.checkpoint import request

    images = Path(options.images_dir)
    if not alive(options.tree):
        raise CriuError(f"Can't dump tree {options.tree}: no such process")
    pids = tree_of(options.tree)
    log("Info", f"Dumping processes (pid: {options.tree}, tree: {pids})")
    processes = [process_info(pid) for pid in pids]
    files: list[str] = []
    for info in processes:
        pid = int(info["pid"])  # type: ignore[call-overload]
        try:
            reply = request(pid, {"op": "dump", "images_dir": str(images), "stdout": info["fds"]["1"]}, 120)  # type: ignore[index]
        except OSError as error:
            raise CriuError(f"process {pid} has no checkpoint agent ({error})") from error
        if not reply.get("ok"):
            raise CriuError(f"process {pid} failed to dump: {reply.get('error')}")
        files.extend(reply["files"])
        log("Info", f"Dumped process {pid}: {', '.join(reply['files'])}")
    (images / "pstree.img").write_text(
        json.dumps({"root": options.tree, "processes": processes}, sort_keys=True)
    )
    files.append("pstree.img")
    # Children first, each reaped by its parent, then the root (whose parent, the snapshot controller, reaps
    # it): CRIU leaves no process of the dumped tree behind.
    parents = {int(info["pid"]): int(info["ppid"]) for info in processes}  # type: ignore[call-overload]
    for pid in reversed(pids):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if pid != options.tree:
            with contextlib.suppress(OSError):
                request(parents[pid], {"op": "reap", "pid": pid}, 30)
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            raise CriuError("dumped tree did not die")
        time.sleep(0.02)
    inventory = {
        name: {"sha256": sha256(images / name), "size": (images / name).stat().st_size} for name in files
    }
    (images / "inventory.img").write_text(json.dumps(inventory, sort_keys=True))
    for name in (*files, "inventory.img"):
        os.chmod(images / name, 0o600)
    log("Info", "Dumping finished successfully")


def restore(options: argparse.Namespace, log: Log) -> None:
    from vllm._vsnapref.checkpoint import RESTORE_ENV, RESTORE_PID_ENV, request, spawn_with_pid

    images = Path(options.images_dir)
    try:
        inventory = json.loads((images / "inventory.img").read_text())
    except (OSError, ValueError) as error:
        raise CriuError(f"cannot read inventory.img: {error}") from error
    for name, record in sorted(inventory.items()):
        path = images / name
        if not path.is_file() or path.stat().st_size != record["size"] or sha256(path) != record["sha256"]:
            raise CriuError(f"image {name} is missing or corrupt")
    tree = json.loads((images / "pstree.img").read_text())
    root = next(entry for entry in tree["processes"] if entry["pid"] == tree["root"])
    for entry in tree["processes"]:
        if alive(entry["pid"]):
            raise CriuError(f"Can't fork for {entry['pid']}: File exists")
    (images / "pid-map.img").unlink(missing_ok=True)
    environment = dict(item.split("=", 1) for item in root["environ"] if "=" in item)
    environment[RESTORE_ENV] = str(images)
    environment[RESTORE_PID_ENV] = str(root["pid"])
    targets = dict(root["fds"])
    if os.environ.get(
        "VSNAPREF_RESTORE_STDERR"
    ):  # debugging aid: the restored root otherwise logs to /dev/null
        targets["1"] = targets["2"] = os.environ["VSNAPREF_RESTORE_STDERR"]
    streams = [open(targets[fd], "rb" if fd == "0" else "ab") for fd in ("0", "1", "2")]  # noqa: SIM115

    def spawn() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            root["cmdline"],
            cwd=root["cwd"],
            env=environment,
            stdin=streams[0],
            stdout=streams[1],
            stderr=streams[2],
            start_new_session=True,
        )

    def discard(process: subprocess.Popen[bytes]) -> None:
        process.kill()
        process.wait()

    try:
        process = spawn_with_pid(root["pid"], spawn, discard)
    except RuntimeError as error:
        raise CriuError(str(error)) from error
    finally:
        for stream in streams:
            stream.close()
    log("Info", f"Restored root task {process.pid}")
    captured = [entry["pid"] for entry in tree["processes"]]
    deadline = time.monotonic() + options.timeout
    while True:
        if process.poll() is not None:
            raise CriuError(f"restored task {process.pid} exited with code {process.returncode}")
        try:
            reply = request(process.pid, {"op": "status"}, 5)
        except OSError:
            reply = {}
        if reply.get("restored") and len(tree_of(process.pid)) == len(captured):
            break
        if time.monotonic() > deadline:
            process.kill()
            raise CriuError("restored tree did not come up")
        time.sleep(0.05)
    restored = {captured[0]: process.pid}
    children = tree["processes"][1:]
    for entry in children:
        # The reference tree is the snapshot server and its engine core; the root reports where it put it.
        single = len(children) == 1 and reply.get("engine_pid")
        restored[entry["pid"]] = int(reply["engine_pid"]) if single else entry["pid"]
    if sorted(restored) != sorted(captured):
        process.kill()
        raise CriuError(f"restored tree does not match the captured tree {captured}")
    moved = {old: new for old, new in restored.items() if old != new}
    for old, new in sorted(moved.items()):
        log("Warn", f"PID {old} restored as {new}: ns_last_pid is not writable (needs CAP_SYS_ADMIN)")
    # Read by the reference's snapshot runtime to pin the restored tree (real CRIU restores the same PIDs).
    (images / "pid-map.img").write_text(json.dumps({str(old): new for old, new in restored.items()}))
    if options.pidfile:
        Path(options.pidfile).write_text(str(process.pid))
    log("Info", f"Restore finished successfully. Tasks resumed. Tree: {sorted(restored.values())}")


def main() -> int:
    if sys.argv[1:] in (["--version"], ["-V"]):
        print(VERSION)
        print("GitID: vsnapref")
        return 0
    parser = argparse.ArgumentParser(prog="criu")
    parser.add_argument("action", choices=("dump", "restore", "check"))
    parser.add_argument("-L", "--libdir")
    parser.add_argument("-t", "--tree", type=int)
    parser.add_argument("-D", "--images-dir")
    parser.add_argument("-o", "--log-file")
    parser.add_argument("--pidfile")
    parser.add_argument("--restore-detached", "-d", action="store_true")
    for flag in (
        "--shell-job",
        "--ext-unix-sk",
        "--tcp-established",
        "--link-remap",
        "--file-locks",
        "--leave-running",
    ):
        parser.add_argument(flag, action="store_true")
    options = parser.parse_args()
    options.timeout = float(os.environ.get("VLLM_SNAPSHOT_TIMEOUT_S", "900"))
    if options.action == "check":
        print("Looks good.")
        return 0
    images = Path(options.images_dir or ".")
    log_path = None
    if options.log_file:
        log_path = Path(options.log_file) if os.path.isabs(options.log_file) else images / options.log_file
    log = Log(log_path)
    try:
        if options.action == "dump":
            if not options.tree:
                raise CriuError("--tree is required")
            dump(options, log)
        else:
            restore(options, log)
    except CriuError as error:
        log("Error", str(error))
        word = "Dumping" if options.action == "dump" else "Restoring"
        log("Error", f"{word} FAILED.")
        print(f"Error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
