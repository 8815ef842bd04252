"""Host runtime operations for local snapshots: the child launch, process inventory, CRIU dump/restore (real
CRIU with its CUDA plugin and cuda-checkpoint, found on PATH and in CRIU_CUDA_PLUGIN_DIR as vLLM finds them),
identity, manifest, pinning and cleanup."""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import select
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

from vllm.logger import init_logger
from vllm.snapshot.manifest import (
    IDENTITY_FIELDS,
    ReadyMarker,
    SnapshotManifest,
    SnapshotRuntimeIdentity,
    ValidationError,
    _fsync_directory,
    _write_json_atomic,
    parse_json,
    validate_artifact_root,
    validation_path,
    write_manifest_atomic,
)
from vllm.snapshot.types import Oracle

logger = init_logger(__name__)


class SnapshotCreateError(RuntimeError):
    """Snapshot creation did not produce a complete artifact."""


class SnapshotRestoreError(RuntimeError):
    """Snapshot restore failed."""


CRIU_OPTIONS = ("--shell-job", "--ext-unix-sk", "--tcp-established", "--link-remap", "--file-locks")
CRIU_LOG_TAIL_BYTES = 8192
CACHE_LOCKED = "locked"
CACHE_UNREADABLE = "unreadable"
CACHE_REMEDY = "recreate the snapshot or restore with the same cache state"
IDENTITY_ENV_PREFIXES = ("VLLM_", "CUDA_", "NCCL_", "TORCH_", "TRITON_")
IDENTITY_ENV_EXCLUDED = frozenset({"VLLM_API_KEY", "VLLM_SNAPSHOT_TIMEOUT_S"})


def _error_detail(error: BaseException) -> str:
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def _close_pidfds(handles: Iterable[tuple[int, int]]) -> None:
    for _pid, pidfd in handles:
        with suppress(OSError):
            os.close(pidfd)


def _generated_cache_prefixes() -> tuple[str, ...]:
    """Prefixes of generated caches (VLLM_CACHE_ROOT, Triton, FlashInfer, Inductor) an engine may hold."""
    from vllm import envs

    inductor = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    roots = [
        envs.cache_root(),
        os.environ.get("TRITON_CACHE_DIR") or "~/.triton/cache",
        "~/.cache/flashinfer",
    ]
    if inductor:
        roots.append(inductor)
    prefixes = tuple(f"{os.path.realpath(os.path.expanduser(root)).rstrip(os.sep)}{os.sep}" for root in roots)
    if inductor:
        return prefixes
    return (*prefixes, os.path.join(os.path.realpath(tempfile.gettempdir()), "torchinductor_"))


@dataclass(frozen=True)
class ProcessInventory:
    root_pid: int
    process_tree: tuple[int, ...]
    cuda_holders: tuple[int, ...]
    gpu_uuid: str
    external_cache_files: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class _TcpSocket:
    family: str
    local: str
    remote: str
    inode: int


def _process_comm(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "comm").read_text().strip()
    except OSError:
        return "unknown"


def _decode_endpoint(family: str, raw: str) -> str:
    address, _, port_hex = raw.partition(":")
    port = int(port_hex, 16)
    if family == "AF_INET":
        return f"{socket.inet_ntop(socket.AF_INET, struct.pack('<I', int(address, 16)))}:{port}"
    words = [int(address[index : index + 8], 16) for index in (0, 8, 16, 24)]
    return f"[{socket.inet_ntop(socket.AF_INET6, struct.pack('<4I', *words))}]:{port}"


def _validate_tcp_connections(records: tuple[_TcpSocket, ...], owners: dict[int, int]) -> None:
    """An established connection is allowed only when its peer is also a socket of the tree."""
    owned = [record for record in records if record.inode in owners]
    endpoints = {(record.family, record.local, record.remote) for record in owned}
    offenders = [record for record in owned if (record.family, record.remote, record.local) not in endpoints]
    if not offenders:
        return
    named = "; ".join(
        f"pid {owners[record.inode]} ({_process_comm(owners[record.inode])}) "
        f"{_decode_endpoint(record.family, record.local)} -> {_decode_endpoint(record.family, record.remote)}"
        for record in offenders[:5]
    )
    more = f" (+{len(offenders) - 5} more)" if len(offenders) > 5 else ""
    raise SnapshotCreateError(f"snapshot tree has an external established TCP connection: {named}{more}")


class LocalSnapshotTools:
    """Host-owned CRIU and cuda-checkpoint operations."""

    def __init__(self) -> None:
        self.criu = shutil.which("criu") or "criu"
        self.cuda_checkpoint = shutil.which("cuda-checkpoint") or "cuda-checkpoint"
        self.nvidia_smi = shutil.which("nvidia-smi") or "nvidia-smi"
        plugin_dir = os.environ.get("CRIU_CUDA_PLUGIN_DIR", "")
        self.plugin_dir = Path(plugin_dir) if plugin_dir else None
        self.shm_dir = Path("/dev/shm")
        self.timeout_s = float(os.environ.get("VLLM_SNAPSHOT_TIMEOUT_S", "900"))
        if not 0 < self.timeout_s < float("inf"):
            raise ValueError("VLLM_SNAPSHOT_TIMEOUT_S must be a positive finite number")
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._restored: dict[int, tuple[tuple[int, int], ...]] = {}

    # -- helpers ------------------------------------------------------------------------------------------
    def _privileged(self) -> list[str]:
        return [] if os.geteuid() == 0 else ["sudo", "-n"]

    def _run(self, command: list[str], *, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(command, check=True, capture_output=True, text=True, timeout=timeout or self.timeout_s)

    def _sha256(self, path: Path) -> str:
        digest = hashlib.sha256()
        with path.open("rb") as source:
            for chunk in iter(lambda: source.read(1 << 20), b""):
                digest.update(chunk)
        return digest.hexdigest()

    # -- preflight ----------------------------------------------------------------------------------------
    def preflight(self, action: str, artifact: Path) -> None:
        if platform.system() != "Linux" or platform.machine() != "x86_64":
            raise RuntimeError("snapshot requires Linux x86_64")
        if action == "restore" and (
            not callable(getattr(os, "pidfd_open", None)) or not callable(getattr(signal, "pidfd_send_signal", None))
        ):
            raise RuntimeError("snapshot requires Linux pidfd support")
        for command in (self.criu, self.cuda_checkpoint, self.nvidia_smi):
            if shutil.which(command) is None:
                raise RuntimeError(f"snapshot dependency not found: {command}")
        if self.plugin_dir is None:
            raise RuntimeError("CRIU_CUDA_PLUGIN_DIR is required")
        if not (self.plugin_dir / "cuda_plugin.so").is_file():
            raise RuntimeError(f"CRIU CUDA plugin not found in {self.plugin_dir}")
        if os.geteuid() != 0:
            self._run(["sudo", "-n", "true"], timeout=5)
        validate_artifact_root(artifact, creating=action != "restore")

    # -- create -------------------------------------------------------------------------------------------
    def launch_child(self, workdir: Path, engine_argv: tuple[str, ...]) -> int:
        command = [
            sys.executable,
            "-m",
            "vllm.snapshot.server",
            "--ready-file",
            str(workdir / "ready.json"),
            "--release-file",
            str(workdir / "release.json"),
            "--release-timeout-s",
            str(self.timeout_s),
            "--",
            *engine_argv,
        ]
        environment = os.environ.copy()
        environment.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
        environment.setdefault("NCCL_IB_DISABLE", "1")
        with (workdir / "child.log").open("wb") as log_file:
            process = subprocess.Popen(
                command,
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._children[process.pid] = process
        return process.pid

    def wait_ready(self, workdir: Path, root_pid: int) -> Oracle:
        ready_file = workdir / "ready.json"
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if ready_file.is_file() and ready_file.stat().st_size:
                try:
                    marker = ReadyMarker.validate(parse_json(ready_file.read_text()))
                except ValidationError as error:
                    raise SnapshotCreateError(f"snapshot ready marker invalid: {validation_path(error)}") from error
                return Oracle(marker.token_ids, marker.text, marker.sampled_token_logprob)
            process = self._children.get(root_pid)
            exited = process is not None and os.waitid(os.P_PID, root_pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            alive = True
            try:
                os.kill(root_pid, 0)
            except ProcessLookupError:
                alive = False
            if exited or not alive:
                log = (workdir / "child.log").read_text(errors="replace")
                raise SnapshotCreateError(f"snapshot child exited before ready:\n{log}")
            time.sleep(0.05)
        raise SnapshotCreateError("snapshot child did not become ready before timeout")

    def _tree_pids(self, root_pid: int) -> tuple[int, ...]:
        children: dict[int, list[int]] = {}
        for row in self._run(["ps", "-eo", "pid=,ppid="]).stdout.splitlines():
            pid, parent = map(int, row.split())
            children.setdefault(parent, []).append(pid)
        found: list[int] = []
        stack = [root_pid]
        while stack:
            pid = stack.pop()
            if pid not in found:
                found.append(pid)
                stack.extend(children.get(pid, []))
        return tuple(found)

    def _cuda_rows(self) -> tuple[str, ...]:
        output = self._run(
            [self.nvidia_smi, "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader,nounits"]
        ).stdout
        return tuple(line for line in output.splitlines() if line.strip())

    def _descriptor_targets(self, pid: int) -> tuple[str, ...]:
        directory = Path("/proc") / str(pid) / "fd"
        try:
            descriptors = tuple(directory.iterdir())
        except FileNotFoundError as error:
            raise SnapshotCreateError(f"snapshot process exited during descriptor inventory: {pid}") from error
        targets: list[str] = []
        for descriptor in descriptors:
            with suppress(FileNotFoundError):
                targets.append(os.readlink(descriptor))
        return tuple(targets)

    def _descriptor_inventory(self, tree: tuple[int, ...]) -> tuple[tuple[int, ...], dict[int, int]]:
        io_uring: list[int] = []
        owners: dict[int, int] = {}
        for pid in tree:
            targets = self._descriptor_targets(pid)
            if "anon_inode:[io_uring]" in targets:
                io_uring.append(pid)
            for target in targets:
                if target.startswith("/dev/infiniband/"):
                    raise SnapshotCreateError(
                        "snapshot process has open InfiniBand/RDMA state that CRIU cannot capture: "
                        f"pid {pid}, {target}. If NCCL owns it, use NCCL_IB_DISABLE=1. Close other "
                        "RDMA clients "
                        "before snapshot creation."
                    )
                if target.startswith("socket:[") and target.endswith("]"):
                    owners.setdefault(int(target[len("socket:[") : -1]), pid)
        return tuple(io_uring), owners

    def _tcp_records(self) -> tuple[_TcpSocket, ...]:
        records: list[_TcpSocket] = []
        for family, table in (("AF_INET", Path("/proc/net/tcp")), ("AF_INET6", Path("/proc/net/tcp6"))):
            if not table.exists():
                continue
            for row in table.read_text().splitlines()[1:]:
                columns = row.split()
                if columns[3] == "01":
                    records.append(_TcpSocket(family, columns[1], columns[2], int(columns[9])))
        return tuple(records)

    def _cache_fingerprint(self, path: Path) -> str | None:
        try:
            if not stat.S_ISREG(path.stat().st_mode):
                return None
        except OSError:
            return None
        if path.name.endswith(".lock"):
            return CACHE_LOCKED
        try:
            return self._sha256(path)
        except OSError:
            return CACHE_UNREADABLE

    def _external_cache_files(self, tree: tuple[int, ...], artifact: Path) -> tuple[tuple[str, str], ...]:
        prefixes = _generated_cache_prefixes()
        inside = f"{os.path.abspath(artifact)}{os.sep}"
        candidates: set[str] = set()
        for pid in tree:
            for target in self._descriptor_targets(pid):
                if target.endswith(" (deleted)") or target.startswith(inside):
                    continue
                if target.endswith(".lock") or target.startswith(prefixes):
                    candidates.add(target)
        recorded = ((path, self._cache_fingerprint(Path(path))) for path in sorted(candidates))
        return tuple((path, fingerprint) for path, fingerprint in recorded if fingerprint is not None)

    def _gpu_uuid_for(self, pids: tuple[int, ...], rows: tuple[str, ...]) -> str:
        matches: set[str] = set()
        try:
            for line in rows:
                pid, uuid = (item.strip() for item in line.split(",", 1))
                if int(pid) in pids:
                    matches.add(uuid)
        except (TypeError, ValueError) as error:
            raise SnapshotCreateError("could not identify the GPU used by the snapshot process tree") from error
        if len(matches) != 1:
            raise SnapshotCreateError("snapshot process tree must use exactly one identifiable GPU")
        return matches.pop()

    def inventory(self, root_pid: int, artifact: Path) -> ProcessInventory:
        tree = self._tree_pids(root_pid)
        rows = self._cuda_rows()
        holders = tuple(pid for pid in sorted({int(row.split(",", 1)[0]) for row in rows}) if pid in tree)
        if not holders:
            raise SnapshotCreateError("snapshot tree has no CUDA-holding process")
        io_uring, owners = self._descriptor_inventory(tree)
        if io_uring:
            raise SnapshotCreateError(
                "snapshot tree owns io_uring state that CRIU cannot dump; set "
                "kernel.io_uring_disabled=1 before "
                "starting an unprivileged vLLM process, or use =2 to disable it host-wide "
                f"(pids: {', '.join(map(str, io_uring))})"
            )
        _validate_tcp_connections(self._tcp_records(), owners)
        return ProcessInventory(
            root_pid=root_pid,
            process_tree=tree,
            cuda_holders=holders,
            gpu_uuid=self._gpu_uuid_for(holders, rows),
            external_cache_files=self._external_cache_files(tree, artifact),
        )

    def _criu(self, action: str, artifact: Path, arguments: list[str]) -> None:
        if self.plugin_dir is None:
            raise RuntimeError("CRIU_CUDA_PLUGIN_DIR is required")
        path = f"{Path(self.cuda_checkpoint).parent}:{os.environ.get('PATH', '')}"
        fd_map = str(artifact / "ignored-nvidia-fds.tsv")
        command = [
            *self._privileged(),
            "env",
            f"PATH={path}",
            f"VLLM_SNAPSHOT_IGNORED_FD_MAP={fd_map}",
            f"RIG_CRIU_IGNORED_FD_MAP={fd_map}",
            self.criu,
            action,
            "-L",
            str(self.plugin_dir),
            *arguments,
        ]
        try:
            self._run(command)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
            self._log_criu_diagnostics(error, action, artifact)
            raise

    def _log_criu_diagnostics(
        self, error: subprocess.CalledProcessError | subprocess.TimeoutExpired, action: str, artifact: Path
    ) -> None:
        def tail(value: str | bytes) -> str:
            text = value.decode(errors="replace") if isinstance(value, bytes) else value
            return text[-CRIU_LOG_TAIL_BYTES:]

        for name in ("stdout", "stderr"):
            value = getattr(error, name, None)
            if value:
                logger.error("CRIU %s (tail):\n%s", name, tail(value))
        log_path = artifact / "images" / f"{action}.log"
        try:
            result = self._run(
                [*self._privileged(), "tail", "-c", str(CRIU_LOG_TAIL_BYTES), "--", str(log_path)], timeout=5
            )
            if result.stdout:
                logger.error("CRIU %s.log (tail):\n%s", action, tail(result.stdout))
        except BaseException as diagnostic:
            logger.error("CRIU %s.log unavailable: %s", action, tail(_error_detail(diagnostic)))

    def _link_remap_names(self) -> set[str]:
        try:
            entries = tuple(self.shm_dir.iterdir())
        except OSError as error:
            raise SnapshotCreateError(
                f"could not inventory CRIU link remaps in {self.shm_dir}: {_error_detail(error)}"
            ) from error
        return {
            entry.name
            for entry in entries
            if entry.name.startswith("link_remap.") and entry.name.removeprefix("link_remap.").isdigit()
        }

    def _capture_link_remaps(self, artifact: Path, names: set[str]) -> None:
        if not names:
            return
        destination = artifact / "link-remaps"
        destination.mkdir(mode=0o700)
        for name in sorted(names):
            source = self.shm_dir / name
            source_fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                info = os.fstat(source_fd)
                if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
                    raise SnapshotCreateError(f"invalid CRIU link remap: {source}")
                target_fd = os.open(destination / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(target_fd, "wb") as target, os.fdopen(os.dup(source_fd), "rb") as contents:
                    shutil.copyfileobj(contents, target)
                    target.flush()
                    os.fsync(target.fileno())
            finally:
                os.close(source_fd)
            source.unlink()

    def _rollback_link_remaps(self, created: dict[str, tuple[int, int]]) -> None:
        for name, identity in created.items():
            target = self.shm_dir / name
            try:
                info = target.lstat()
            except FileNotFoundError:
                continue
            if (info.st_dev, info.st_ino) == identity:
                target.unlink()

    def _restore_link_remaps(self, artifact: Path) -> dict[str, tuple[int, int]]:
        source_dir = artifact / "link-remaps"
        if not source_dir.exists():
            return {}
        created: dict[str, tuple[int, int]] = {}
        try:
            for source in sorted(source_dir.iterdir()):
                if (
                    not source.name.startswith("link_remap.")
                    or not source.name.removeprefix("link_remap.").isdigit()
                    or source.is_symlink()
                    or not source.is_file()
                ):
                    raise SnapshotRestoreError(f"invalid saved link remap: {source}")
                payload = source.read_bytes()
                target = self.shm_dir / source.name
                try:
                    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                except FileExistsError as error:
                    try:
                        existing = target.read_bytes()
                    except OSError:
                        raise SnapshotRestoreError(f"conflicting CRIU link remap exists: {target}") from error
                    info = target.lstat()
                    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or existing != payload:
                        raise SnapshotRestoreError(f"conflicting CRIU link remap exists: {target}") from error
                    continue
                info = os.fstat(descriptor)
                created[source.name] = (info.st_dev, info.st_ino)
                with os.fdopen(descriptor, "wb") as output:
                    output.write(payload)
                    output.flush()
                    os.fsync(output.fileno())
        except BaseException:
            self._rollback_link_remaps(created)
            raise
        return created

    def _record_child_log_size(self, artifact: Path) -> None:
        size = (artifact / "child.log").stat().st_size
        descriptor = os.open(
            artifact / "child.log.snapshot-size", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600
        )
        with os.fdopen(descriptor, "wb") as output:
            output.write(f"{size}\n".encode())
            output.flush()
            os.fsync(output.fileno())

    def _reset_child_log(self, artifact: Path) -> None:
        with os.fdopen(os.open(artifact / "child.log.snapshot-size", os.O_RDONLY | os.O_NOFOLLOW)) as source:
            size = int(source.read().strip())
        if size < 0:
            raise SnapshotRestoreError("captured child log size is invalid")
        descriptor = os.open(artifact / "child.log", os.O_WRONLY | os.O_NOFOLLOW)
        try:
            info = os.fstat(descriptor)
            if not stat.S_ISREG(info.st_mode) or info.st_size < size:
                raise SnapshotRestoreError("captured child log is invalid")
            os.ftruncate(descriptor, size)
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def dump(self, workdir: Path, inventory: ProcessInventory) -> None:
        images = workdir / "images"
        images.mkdir(mode=0o700)
        (workdir / "ignored-nvidia-fds.tsv").touch(mode=0o600)
        before = self._link_remap_names()
        try:
            self._criu(
                "dump",
                workdir,
                [
                    "--tree",
                    str(inventory.root_pid),
                    "--images-dir",
                    str(images),
                    "--log-file",
                    "dump.log",
                    *CRIU_OPTIONS,
                ],
            )
            self._capture_link_remaps(workdir, self._link_remap_names() - before)
        except BaseException as primary:
            try:
                after = self._link_remap_names()
            except BaseException as cleanup_error:
                raise SnapshotCreateError(
                    f"snapshot dump failed: {_error_detail(primary)}; remap cleanup inventory failed: "
                    f"{_error_detail(cleanup_error)}"
                ) from primary
            for name in after - before:
                (self.shm_dir / name).unlink(missing_ok=True)
            raise
        self._record_child_log_size(workdir)

    def verify_dead(self, inventory: ProcessInventory) -> None:
        process = self._children.get(inventory.root_pid)
        if process is not None:
            process.wait(timeout=10)
        # Deviation from vLLM 0.33.0, which checks `os.kill(pid, 0)` once: CRIU's SIGKILL races the exit of a
        # large process (and its reaping by a subreaper), so a single look can see a dying PID and report
        # "process survived CRIU dump". The reference gives the tree 2 s to be gone (docker/reference/README.md).
        deadline = time.monotonic() + 2.0
        for pid in inventory.process_tree:
            while True:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                if time.monotonic() > deadline:
                    raise SnapshotCreateError(f"process survived CRIU dump: {pid}")
                time.sleep(0.01)
        self._children.pop(inventory.root_pid, None)

    # -- identity and manifest ----------------------------------------------------------------------------
    def _version(self, command: list[str]) -> str:
        try:
            result = self._run(command, timeout=10)
        except subprocess.CalledProcessError as error:
            return str(error.stdout or error.stderr).splitlines()[0]
        return result.stdout.splitlines()[0] if result.stdout else "unknown"

    def _plugin_identity(self) -> tuple[tuple[str, str], ...]:
        if self.plugin_dir is None:
            return ()
        return tuple(
            (f"snapshot_plugin_sha256:{path.name}", self._sha256(path)) for path in sorted(self.plugin_dir.glob("*.so"))
        )

    def _torch_identity(self) -> tuple[str, str]:
        version = importlib.metadata.version("torch")
        spec = importlib.util.find_spec("torch")
        locations = spec and spec.submodule_search_locations
        if not locations:
            raise RuntimeError("installed torch package could not be located")
        version_path = Path(next(iter(locations))) / "version.py"
        # Parsed, not imported: the snapshot CLI stays import-light.
        tree = ast.parse(version_path.read_text(), filename=str(version_path))
        cuda_runtime = ""
        for statement in tree.body:
            target = value = None
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                target, value = statement.targets[0], statement.value
            elif isinstance(statement, ast.AnnAssign):
                target, value = statement.target, statement.value
            if isinstance(target, ast.Name) and target.id == "cuda" and value is not None:
                cuda_runtime = str(ast.literal_eval(value) or "")
                break
        return version, cuda_runtime

    def _gpu_identity(self, gpu_uuid: str) -> tuple[str, str, str]:
        output = self._run(
            [
                self.nvidia_smi,
                "--query-gpu=name,uuid,driver_version",
                "--format=csv,noheader,nounits",
                f"--id={gpu_uuid}",
            ]
        ).stdout.strip()
        name, uuid, driver = (item.strip() for item in output.split(",", 2))
        return name, uuid, driver

    def _environment_identity(self) -> tuple[tuple[str, str], ...]:
        environment = os.environ.copy()
        environment.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
        environment.setdefault("NCCL_IB_DISABLE", "1")
        selected = sorted(
            (key, hashlib.sha256(key.encode() + b"\0" + value.encode()).hexdigest())
            for key, value in environment.items()
            if key.startswith(IDENTITY_ENV_PREFIXES) and key not in IDENTITY_ENV_EXCLUDED
        )
        return (*selected, *self._plugin_identity())

    def current_identity(self, gpu_uuid: str) -> SnapshotRuntimeIdentity:
        gpu_name, gpu_uuid, driver_version = self._gpu_identity(gpu_uuid)
        torch_version, cuda_runtime = self._torch_identity()
        return SnapshotRuntimeIdentity(
            vllm_version=importlib.metadata.version("vllm"),
            python_version=platform.python_version(),
            torch_version=torch_version,
            cuda_runtime=cuda_runtime,
            driver_version=driver_version,
            criu_version=self._version([self.criu, "--version"]),
            cuda_checkpoint_sha256=self._sha256(Path(self.cuda_checkpoint)),
            kernel_release=platform.release(),
            host_id=Path("/etc/machine-id").read_text().strip(),
            gpu_name=gpu_name,
            gpu_uuid=gpu_uuid,
            environment=self._environment_identity(),
        )

    @staticmethod
    def redact_argv(engine_argv: tuple[str, ...]) -> tuple[str, ...]:
        """`--api-key X Y` -> `***` per value; `--api-key=X` / `--hf-token` likewise (abbreviations too)."""
        redacted = list(engine_argv)
        redacting_keys = False
        for index, argument in enumerate(redacted):
            option, separator, _ = argument.partition("=")
            normalized = option.replace("_", "-")
            if len(normalized) > 2 and "--api-key".startswith(normalized):
                redacting_keys = not separator
                if separator:
                    redacted[index] = f"{option}=***"
            elif len(normalized) > 2 and "--hf-token".startswith(normalized):
                if separator:
                    redacted[index] = f"{option}=***"
                elif index + 1 < len(redacted):
                    redacted[index + 1] = "***"
                redacting_keys = False
            elif argument.startswith("-"):
                redacting_keys = False
            elif redacting_keys:
                redacted[index] = "***"
        return tuple(redacted)

    def _artifact_bytes(self, workdir: Path) -> int:
        return sum(path.stat().st_size for path in workdir.rglob("*") if path.is_file())

    def make_manifest(
        self,
        args: argparse.Namespace,
        engine_argv: tuple[str, ...],
        inventory: ProcessInventory,
        oracle: Oracle,
        workdir: Path,
    ) -> SnapshotManifest:
        from vllm.config.model import get_served_model_name

        identity = self.current_identity(inventory.gpu_uuid)
        revision = str(getattr(args, "revision", None) or "")
        source_model = str(getattr(args, "model_tag", None) or args.model)
        values = {name: getattr(identity, name) for name in IDENTITY_FIELDS}
        return SnapshotManifest(
            **values,
            schema_version=1,
            boundary="post-engine-init-reloadable-state-released",
            created_at=datetime.now(UTC).isoformat(),
            artifact_bytes=self._artifact_bytes(workdir),
            model=source_model,
            served_model_name=str(get_served_model_name(source_model, getattr(args, "served_model_name", None))),
            model_revision=revision,
            tokenizer_revision=str(getattr(args, "tokenizer_revision", None) or revision),
            engine_argv=self.redact_argv(engine_argv),
            process_tree=inventory.process_tree,
            cuda_holders=inventory.cuda_holders,
            external_cache_files=inventory.external_cache_files,
            oracle_token_ids=oracle.token_ids,
            oracle_text=oracle.text,
            oracle_sampled_token_logprob=oracle.sampled_token_logprob,
        )

    def publish(self, workdir: Path, manifest: SnapshotManifest) -> None:
        write_manifest_atomic(workdir, manifest)
        _fsync_directory(workdir.parent)

    def abort_create(self, root_pid: int) -> None:
        process = self._children.get(root_pid)
        if process is None:
            return
        with suppress(ProcessLookupError):
            os.killpg(root_pid, signal.SIGKILL)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired as error:
            raise SnapshotCreateError(f"snapshot child process group {root_pid} survived SIGKILL") from error
        self._children.pop(root_pid, None)

    # -- restore ------------------------------------------------------------------------------------------
    def _verify_external_cache_files(self, manifest: SnapshotManifest) -> None:
        for path, fingerprint in manifest.external_cache_files:
            target = Path(path)
            if not target.is_file():
                raise SnapshotRestoreError(f"external cache file vanished since capture: {path}; {CACHE_REMEDY}")
            if fingerprint in (CACHE_LOCKED, CACHE_UNREADABLE):
                continue
            try:
                current = self._sha256(target)
            except OSError as error:
                raise SnapshotRestoreError(
                    f"external cache file is unreadable since capture: {path}; {CACHE_REMEDY}"
                ) from error
            if current != fingerprint:
                raise SnapshotRestoreError(f"external cache file changed since capture: {path}; {CACHE_REMEDY}")

    def restore(self, artifact: Path, manifest: SnapshotManifest) -> int:
        # Best effort before mutation; CRIU stays authoritative about PIDs.
        for pid in manifest.process_tree:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            except PermissionError:
                pass
            except Exception as error:
                raise SnapshotRestoreError(f"captured PID availability probe failed: {pid}") from error
            raise SnapshotRestoreError(f"captured PID is already occupied: {pid}")
        self._verify_external_cache_files(manifest)
        expected_root_pid = manifest.process_tree[0]
        (artifact / "release.json").unlink(missing_ok=True)
        pidfile = artifact / "restored.pid"
        pidfile.unlink(missing_ok=True)
        self._reset_child_log(artifact)
        staged = self._restore_link_remaps(artifact)
        try:
            self._criu(
                "restore",
                artifact,
                [
                    "--images-dir",
                    str(artifact / "images"),
                    "--log-file",
                    "restore.log",
                    *CRIU_OPTIONS,
                    "--restore-detached",
                    "--pidfile",
                    str(pidfile),
                ],
            )
            # Pin before reading the PID file so that a failure between restore and the read cannot orphan the
            # tree.
            self._pin_restored_tree(artifact, manifest.process_tree, manifest.cuda_holders)
            restored = self._read_restored_pid(pidfile)
            if restored != expected_root_pid:
                raise SnapshotRestoreError("restored PID does not match the captured process tree")
        except BaseException as error:
            self._abort_failed_restore(artifact, expected_root_pid, staged, error)
        return restored

    def _read_restored_pid(self, pidfile: Path) -> int:
        try:
            payload = self._run([*self._privileged(), "cat", str(pidfile)]).stdout
        except Exception as error:
            raise SnapshotRestoreError("restored PID file is missing") from error
        match = re.fullmatch(r"([1-9][0-9]{0,9})\n?", payload)
        if match is None or int(match.group(1)) > 2**31 - 1:
            raise SnapshotRestoreError("restored PID file is invalid")
        return int(match.group(1))

    def _process_state(self, pid: int) -> tuple[int, int, int, int]:
        """(ppid, pgid, sid, start time) from /proc/<pid>/stat."""
        payload = (Path("/proc") / str(pid) / "stat").read_text()
        end = payload.rfind(")")
        columns = payload[end + 2 :].split()
        if end < 0 or len(columns) < 20:
            raise ValueError(f"invalid process state for PID {pid}")
        return int(columns[1]), int(columns[2]), int(columns[3]), int(columns[19])

    def _process_states(self) -> dict[int, tuple[int, int, int, int]]:
        states: dict[int, tuple[int, int, int, int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with suppress(OSError, ValueError):
                    states[int(entry.name)] = self._process_state(int(entry.name))
        return states

    def _process_command(self, pid: int) -> tuple[str, ...]:
        payload = (Path("/proc") / str(pid) / "cmdline").read_bytes()
        return tuple(os.fsdecode(item) for item in payload.split(b"\0") if item)

    def _pidfd_exited(self, pidfd: int) -> bool:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN | select.POLLHUP | select.POLLERR)
        return any(self._exit_event(event) for _fd, event in poller.poll(0))

    def _exit_event(self, event: int) -> bool:
        if event & (select.POLLERR | select.POLLNVAL):
            raise SnapshotRestoreError("restored process pidfd poll failed")
        return bool(event & (select.POLLIN | select.POLLHUP))

    def _pin_restored_tree(self, artifact: Path, tree: tuple[int, ...], holders: tuple[int, ...]) -> None:
        """Hold a pidfd on every restored process and check it is exactly the captured session."""
        root = tree[0]
        expected = set(tree)
        if not holders or not set(holders) <= expected:
            raise SnapshotRestoreError("captured CUDA holders are outside the captured process tree")
        if root in self._restored:
            raise SnapshotRestoreError("restored PID already has a pinned transaction")
        handles: list[tuple[int, int]] = []
        try:
            for pid in tree:
                handles.append((pid, os.pidfd_open(pid)))
            by_pid = dict(handles)
            if any(self._pidfd_exited(pidfd) for _pid, pidfd in handles):
                raise SnapshotRestoreError("restored process exited during verification")
            root_state = self._process_state(root)
            if root_state[1:3] != (root, root):
                raise SnapshotRestoreError("restored root is not the session and process-group leader")
            command = self._process_command(root)
            release_file = str(artifact / "release.json")
            pairs = [command[index : index + 2] for index in range(len(command) - 1)]
            if ("-m", "vllm.snapshot.server") not in pairs or ("--release-file", release_file) not in pairs:
                raise SnapshotRestoreError("restored root command does not match the snapshot barrier")
            if self._process_state(root) != root_state or self._pidfd_exited(handles[0][1]):
                raise SnapshotRestoreError("restored PID changed during verification")
            first = self._process_states()
            session = {pid for pid, state in first.items() if state[2] == root}
            if not set(holders) <= session:
                raise SnapshotRestoreError("restored session is missing captured CUDA holders")
            if session != expected:
                raise SnapshotRestoreError("restored session does not match the captured process tree")
            for pid in tree[1:]:
                if self._process_state(pid) != first[pid] or self._pidfd_exited(by_pid[pid]):
                    raise SnapshotRestoreError("restored process tree changed during verification")
            second = self._process_states()
            if {pid for pid, state in second.items() if state[2] == root} != expected or any(
                second[pid] != first[pid] for pid in tree
            ):
                raise SnapshotRestoreError("restored process tree changed during verification")
            if any(self._pidfd_exited(pidfd) for _pid, pidfd in handles):
                raise SnapshotRestoreError("restored process exited during verification")
        except BaseException as error:
            _close_pidfds(handles)
            if isinstance(error, SnapshotRestoreError) or not isinstance(error, Exception):
                raise
            raise SnapshotRestoreError("restored process tree could not be pinned") from error
        self._restored[root] = tuple(handles)

    def _abort_failed_restore(
        self, artifact: Path, root_pid: int, staged: dict[str, tuple[int, int]], primary: BaseException
    ) -> NoReturn:
        secondary: list[str] = []
        try:
            _write_json_atomic(artifact / "release.json", {"release": False}, overwrite=True)
        except BaseException as error:
            secondary.append(f"abort marker failed: {_error_detail(error)}")
        if root_pid in self._restored:
            try:
                self.cleanup(root_pid)
            except BaseException as error:
                secondary.append(f"restore cleanup failed: {_error_detail(error)}")
        try:
            self._rollback_link_remaps(staged)
        except BaseException as error:
            secondary.append(f"remap rollback failed: {_error_detail(error)}")
        if secondary:
            raise SnapshotRestoreError(
                f"snapshot restore failed: {_error_detail(primary)}; " + "; ".join(secondary)
            ) from primary
        raise primary

    def release(self, artifact: Path, host: str | None, port: int) -> None:
        if not 1 <= port <= 65535:
            raise SnapshotRestoreError(f"snapshot restore port is invalid: {port}")
        family = socket.AF_INET6 if host and ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host or "", port))
            except OSError as error:
                raise SnapshotRestoreError(
                    f"snapshot restore address is already in use: {host or '0.0.0.0'}:{port}"
                ) from error
        _write_json_atomic(artifact / "release.json", {"release": True, "host": host, "port": port}, overwrite=True)

    def _connect_host(self, host: str | None) -> str:
        if not host or host == "0.0.0.0":
            return "127.0.0.1"
        return "::1" if host == "::" else host

    def wait_listener(self, root_pid: int, host: str | None, port: int) -> None:
        deadline = time.monotonic() + self.timeout_s
        address = self._connect_host(host)
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((address, port), timeout=1):
                    return
            except OSError as error:
                handles = self._restored.get(root_pid)
                if handles is None or self._pidfd_exited(handles[0][1]):
                    raise SnapshotRestoreError("restored process exited before binding HTTP") from error
                time.sleep(0.1)
        raise SnapshotRestoreError("restored HTTP listener did not become ready")

    def request_oracle(self, host: str | None, port: int, manifest: SnapshotManifest) -> Oracle:
        address = self._connect_host(host)
        url_host = f"[{address}]" if ":" in address else address
        payload = json.dumps(
            {
                "model": manifest.served_model_name,
                "prompt": "The capital of France is",
                "min_tokens": 1,
                "max_tokens": 1,
                "temperature": 0,
                "seed": 0,
                "logprobs": 0,
                "return_token_ids": True,
            }
        ).encode()
        request = urllib.request.Request(
            f"http://{url_host}:{port}/v1/completions",
            data=payload,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            body = json.load(response)
        choice = body["choices"][0]
        try:
            return Oracle(
                token_ids=tuple(choice["token_ids"]),
                text=choice["text"],
                sampled_token_logprob=choice["logprobs"]["token_logprobs"][0],
            )
        except ValueError as error:
            raise SnapshotRestoreError("snapshot HTTP canary must return exactly one finite token logprob") from error
        except (IndexError, KeyError, TypeError) as error:
            raise SnapshotRestoreError("snapshot HTTP canary response is missing sampled token logprob") from error

    def cleanup(self, root_pid: int) -> None:
        handles = self._restored.get(root_pid)
        if handles is None:
            raise SnapshotRestoreError("no pinned restore transaction for cleanup")
        try:
            for _pid, pidfd in handles:
                with suppress(ProcessLookupError):
                    signal.pidfd_send_signal(pidfd, signal.SIGTERM, None, 0)
            time.sleep(min(0.5, self.timeout_s))
            for _pid, pidfd in handles:
                with suppress(ProcessLookupError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL, None, 0)
        except BaseException as error:
            raise SnapshotRestoreError(f"restored process cleanup is incomplete: {_error_detail(error)}") from error
        poller = select.poll()
        for _pid, pidfd in handles:
            poller.register(pidfd, select.POLLIN | select.POLLHUP | select.POLLERR)
        pending = {pidfd for _pid, pidfd in handles}
        deadline = time.monotonic() + self.timeout_s
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SnapshotRestoreError("restored process cleanup is incomplete")
            for pidfd, event in poller.poll(max(1, int(remaining * 1000))):
                if self._exit_event(event):
                    pending.discard(pidfd)
                    with suppress(KeyError, OSError):
                        poller.unregister(pidfd)
        self._restored.pop(root_pid)
        _close_pidfds(handles)

    def complete_restore(self, root_pid: int) -> None:
        handles = self._restored.pop(root_pid, None)
        if handles is None:
            raise SnapshotRestoreError("no pinned restore transaction to complete")
        _close_pidfds(handles)
