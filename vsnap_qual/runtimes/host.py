"""The host runtime (``--vsnap-runtime=host``): a lane without Docker, for GPU hosts that have none (Slurm, HPC,
a contributor's own environment).

A lane is a long-lived *holder* process in a mount namespace of its own (``unshare --mount``), the analogue of a
lane container's ``sleep infinity``. Inside that namespace only, a tmpfs covers ``/vsnap`` and the lane's
directories are bind-mounted where the steps expect them (``/vsnap/work``, ``/vsnap/control``, the probe read-only
at ``/vsnap/probe``, the model cache read-only at ``/vsnap/hf``), and a tmpfs of the lane's own is ``/dev/shm``.
PID, IPC and network namespaces are the host's, as with the Docker runtime's host namespaces, so CRIU restores
the captured host PIDs. Every command runs through ``nsenter --target HOLDER --mount``; the lane's processes are
exactly those in the holder's mount namespace (identified by its inode, never by name, whatever their environment
says); the lane token in their environment only guards a sweep of dead lanes.

An *environment restart* (the host analogue of ``docker restart``) ends every process of the lane, clears its
``/dev/shm`` and starts a new holder in a fresh mount namespace and process session; ``/vsnap/work`` (the
artifact) survives, as a container's filesystem does.

Needs root (mount namespaces, CRIU) and util-linux's ``unshare`` and ``nsenter``. Each lane writes
``<root>/<name>/lane.json`` (owner, holder PID and start time, namespace inode): :func:`sweep` removes the lanes
of owners that are gone.
"""

from __future__ import annotations

import array
import base64
import contextlib
import hashlib
import json
import os
import platform
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from vsnap_qual.box import (
    HOST_GRACE_S,
    Bind,
    BoxSpec,
    ExecResult,
    ImageInfo,
    ProcessRow,
    RuntimeFailure,
    bounded,
    listening_ports,
    owner_alive,
    owner_label,
)
from vsnap_qual.cli.diagnostics import CheckResult
from vsnap_qual.config import ParsedOptions, QualConfig
from vsnap_qual.contract import CONTROL
from vsnap_qual.control import MountedControlDir
from vsnap_qual.model import CpuSample
from vsnap_qual.overlay import OverlayFile
from vsnap_qual.run import engine_check, package_probe
from vsnap_qual.run import gpus as gpus_mod
from vsnap_qual.run.preflight_result import PreflightError, PreflightResult, lane_gpu_result
from vsnap_qual.runtimes import DEFAULT_HOST_ROOT, EngineOptionError, RuntimeSettings, procfs
from vsnap_qual.runtimes.procfs import ProcInfo, parse_stat, proc_info, processes_in_mount_namespace
from vsnap_qual.runtimes.shell import ShellBox

DEFAULT_ROOT = DEFAULT_HOST_ROOT
MOUNT_POINT = "/vsnap"
LANE_TOKEN = "VSNAP_HOST_LANE"


def no_vllm_message(option: str, python: str, done: subprocess.CompletedProcess[str], info: Mapping[str, Any]) -> str:
    """Why ``--vsnap-python`` cannot be a target, in words: the probe ran and found no vllm (with what the Python
    is), or the probe itself failed (its last words)."""
    fix = "give the Python of an environment where vllm is installed (e.g. .../venv/bin/python)"
    if info:
        what = f"Python {info.get('python') or '?'}" + ("" if info.get("torch") else ", no torch either")
        return f"{option}: vllm is not installed for {python} ({what}); {fix}"
    said = (done.stderr or done.stdout).strip()[-300:] or "no output"
    return f"{option}: {python} could not run the package probe (exit {done.returncode}): {said}; {fix}"


class HostRuntimeFailure(RuntimeFailure):
    """The host runtime could not do what a step asked (start a lane, run a command, list processes)."""


@dataclass
class HostSpec:
    """What a host lane looks like: the lane's box spec, where its directories go, how large its /dev/shm is."""

    name: str
    labels: dict[str, str]
    environment: dict[str, str]
    binds: list[Bind] = field(default_factory=list)
    root: Path = DEFAULT_ROOT
    shm_size: str = "8g"
    #: lane tokens of other lanes whose restored trees live in this one (a fresh box restores another lane's
    #: artifact: its processes carry that lane's token, restored from the dump)
    adopted_tokens: tuple[str, ...] = ()


HOST_ENV_DROP = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTEST_", "VSNAP_", "COV_CORE_")


def host_environment(python: str, lane_env: dict[str, str], gpus: str) -> dict[str, str]:
    """The environment of every command of a host lane: this process's environment (the user's PATH with criu,
    ``CRIU_CUDA_PLUGIN_DIR``, CUDA settings, ...) less the harness's own and Python-path variables, the lane's
    variables on top, and the qualified Python's directory first on PATH (its ``vllm`` and ``python3``)."""
    env = {k: v for k, v in os.environ.items() if not any(k == d or k.startswith(d) for d in HOST_ENV_DROP)}
    env.update(lane_env)
    env["PATH"] = os.pathsep.join([str(Path(python).parent), env.get("PATH", os.defpath)])
    if gpus.startswith("GPU-"):
        env["CUDA_VISIBLE_DEVICES"] = gpus
    elif gpus == "none":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def holder_pythonpath() -> str:
    """Where the holder's Python finds ``vsnap_qual.runtimes.host_holder``: the directory holding this package (the
    lane's Python need not have vsnap-qual installed: the GPU tier runs the harness from a copy on ``PYTHONPATH``)."""
    import vsnap_qual

    return str(Path(vsnap_qual.__file__).resolve().parents[1])


def same_python(a: str, b: str) -> bool:
    """Whether two Python paths run the same environment: the same path, or one interpreter reached by two names
    in one bin directory (``python``, ``python3``). A venv's ``python`` links to its base interpreter, so two venvs'
    resolve to one file: only names in one directory count as one environment."""
    first, second = Path(a).absolute(), Path(b).absolute()
    if first == second:
        return True
    return first.parent == second.parent and os.path.realpath(first) == os.path.realpath(second)


def check_engine(python: str, env: dict[str, str], config: QualConfig, overlay: list[OverlayFile], option: str) -> None:
    """Ask the arm's own Python (``run.engine_check``), in the lanes' environment: does it hold the model at the
    revisions when no ``--vsnap-model-cache`` is given, and does every overlaid file compile there."""
    model = None if config.model_cache is not None else config.model
    if model is None and not overlay:
        return
    paths = [(str(item.host_path), item.relative) for item in overlay]
    try:
        done = subprocess.run(
            [python, "-c", engine_check.SCRIPT, engine_check.request(model, paths)],
            capture_output=True,
            text=True,
            env={**env, **config.env},
            timeout=config.timeouts["exec"],
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise PreflightError(
            f"{option}: {python}: the engine check did not finish in {config.timeouts['exec']:.0f} s; raise "
            "--vsnap-timeouts=exec=SECONDS"
        ) from None
    engine_check.refuse(
        done.stdout,
        option=option,
        engine=f"Python {python}",
        model=model,
        revisions=(config.revision, config.tokenizer_revision),
    )


def check_host(root: Path = DEFAULT_ROOT) -> list[str]:
    """What this host lacks for host lanes (empty when nothing): checked before anything starts."""
    problems = []
    if os.geteuid() != 0:
        problems.append("host lanes need root (mount namespaces and CRIU): run as root")
    for tool in ("unshare", "nsenter", "mount", "umount", "timeout", "setsid"):
        if shutil.which(tool) is None:
            problems.append(f"{tool} not found on PATH (util-linux / coreutils)")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        problems.append(f"cannot create the lane root {root}: {exc.strerror}")
    return problems


class _Log:
    """An append-only log shared by the output pumps; closed by the last pump to finish, never under one."""

    def __init__(self, path: Path | None, header: str, writers: int) -> None:
        self._lock = threading.Lock()
        self._left = writers
        self._handle: IO[bytes] | None = path.open("ab") if path else None
        if self._handle:
            self._handle.write(header.encode())
            self._handle.flush()

    def write(self, chunk: bytes) -> None:
        with self._lock:
            if self._handle:
                self._handle.write(chunk)
                self._handle.flush()

    def done(self) -> None:
        with self._lock:
            self._left -= 1
            if self._left == 0 and self._handle:
                self._handle.close()
                self._handle = None


class HostLane(ShellBox):
    """A lane as host processes in a mount namespace of its own (a :class:`vsnap_qual.box.Box`)."""

    def __init__(self, spec: HostSpec) -> None:
        self.spec = spec
        self.dir = spec.root / spec.name
        self.holder: subprocess.Popen[bytes] | None = None
        self.holder_start: int | None = None
        self.namespace: str | None = None
        self.generation = 0
        # Every lane process carries this in its environment (CRIU-restored ones too: they were created in the
        # lane), so a reused mount-namespace inode can never make another process look like a lane member.
        self.token = f"{spec.name}-{uuid.uuid4().hex[:12]}"
        self.tokens = (self.token, *spec.adopted_tokens)
        self.socket = self.dir / "holder.sock"

    # -- life cycle -------------------------------------------------------------------------------------------
    @classmethod
    def start(cls, spec: HostSpec) -> HostLane:
        problems = check_host(spec.root)
        if problems:
            raise HostRuntimeFailure("; ".join(problems))
        lane = cls(spec)
        if lane.dir.exists():
            raise HostRuntimeFailure(f"lane directory {lane.dir} already exists (another run's lane?)")
        for sub in ("work", "shm"):
            (lane.dir / sub).mkdir(parents=True)
        (lane.dir / "work").chmod(0o700)  # vLLM requires a private (0700) parent of the artifact
        Path(MOUNT_POINT).mkdir(exist_ok=True)  # an empty mount point on the host; covered only inside lanes
        lane._mount_shm()
        try:
            lane._start_holder()
        except BaseException:
            lane.remove()
            raise
        return lane

    def _mount_shm(self) -> None:
        shm = self.dir / "shm"
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"mode=1777,size={self.spec.shm_size}", f"vsnap-shm-{self.spec.name}",
             str(shm)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise HostRuntimeFailure(f"cannot mount the lane's /dev/shm tmpfs on {shm}: {done.stderr.strip()}")

    def _umount_shm(self) -> None:
        shm = self.dir / "shm"
        if os.path.ismount(shm):
            subprocess.run(["umount", "-l", str(shm)], capture_output=True, check=False)

    def _setup_script(self, ready: Path) -> str:
        q = shlex.quote
        lines = [
            "set -e",
            f"mount -t tmpfs -o mode=0755 vsnap-lane {MOUNT_POINT}",
            f"mkdir -p {MOUNT_POINT}/work",
            f"mount --bind {q(str(self.dir / 'work'))} {MOUNT_POINT}/work",
            f"mount --bind {q(str(self.dir / 'shm'))} /dev/shm",
        ]
        for bind in self.spec.binds:
            kind = "-d" if bind.source.is_dir() else "-f"
            make = (
                f"mkdir -p {q(bind.target)}"
                if kind == "-d"
                else (f"mkdir -p {q(str(Path(bind.target).parent))} && touch {q(bind.target)}")
            )
            lines += [
                f"[ -e {q(bind.target)} ] || {{ {make}; }}",
                f"mount --bind {q(str(bind.source))} {q(bind.target)}",
            ]
            if bind.read_only:
                lines.append(f"mount -o remount,bind,ro {q(bind.target)}")
        holder = [sys.executable, "-m", "vsnap_qual.runtimes.host_holder", str(self.socket), str(ready)]
        lines.append(f"exec {shlex.join(holder)}")
        return "\n".join(lines)

    def _start_holder(self) -> None:
        self.generation += 1
        ready = self.dir / f"holder-{self.generation}.ready"
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        log = (self.dir / "holder.log").open("ab")
        try:
            self.holder = subprocess.Popen(
                ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", self._setup_script(ready)],
                # Every lane process inherits the holder's working directory: "/" (a container's, without a
                # WORKDIR), never the caller's. A caller's directory can vanish mid-run (a CI checkout replaced
                # under a running job): then getcwd() fails in every fresh engine, and oneMKL aborts at its first
                # call with "Cannot load .../libtorch_cpu.so" (seen on the H200; evidence/gpu/README.md).
                cwd="/",
                env={
                    **self.spec.environment,
                    LANE_TOKEN: self.token,
                    "PYTHONPATH": holder_pythonpath(),  # the holder is this package's
                },
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            log.close()
        deadline = time.monotonic() + 30
        while not ready.exists():
            if self.holder.poll() is not None:
                raise HostRuntimeFailure(
                    f"lane {self.spec.name}: the namespace holder exited ({self.holder.returncode}) while setting "
                    f"up its mounts: {(self.dir / 'holder.log').read_text(errors='replace')[-2000:]}"
                )
            if time.monotonic() > deadline:
                raise HostRuntimeFailure(f"lane {self.spec.name}: the namespace holder did not get ready in 30 s")
            time.sleep(0.01)
        info = proc_info(self.holder.pid)
        if info is None:
            raise HostRuntimeFailure(f"lane {self.spec.name}: the namespace holder vanished")
        self.holder_start = info.start_time
        self.namespace = info.mount_namespace
        (self.dir / "lane.json").write_text(
            json.dumps(
                {
                    "name": self.spec.name,
                    "labels": self.spec.labels,
                    "owner": owner_label(),
                    "holder_pid": self.holder.pid,
                    "holder_start": self.holder_start,
                    "mount_namespace": self.namespace,
                    "token": self.token,
                    "tokens": list(self.tokens),
                }
            )
        )

    def _kill_all(self, timeout: float = 30.0) -> None:
        """SIGKILL every process of the lane and wait until each is gone and reaped (by the holder, their
        subreaper), then end the holder itself."""
        deadline = time.monotonic() + timeout
        holder = self.holder.pid if self.holder is not None else None
        killed: dict[int, int] = {}
        while True:
            members = [m for m in self._members() if m.pid != holder]
            for info in members:
                killed[info.pid] = info.start_time
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(info.pid, signal.SIGKILL)
            # A killed process leaves its PID behind until it is reaped; a restore needs the captured PIDs free.
            unreaped = [pid for pid, start in killed.items() if _same_process(pid, start)]
            if not members and not unreaped:
                break
            if time.monotonic() > deadline:
                raise HostRuntimeFailure(
                    f"lane {self.spec.name}: processes survive SIGKILL or stay unreaped: "
                    f"{sorted({m.pid for m in members} | set(unreaped))}"
                )
            time.sleep(0.02)
        if self.holder is not None and self.holder.poll() is None:
            self.holder.kill()
            self.holder.wait(10)

    def _members(self) -> list[ProcInfo]:
        """While its holder lives, the lane is its mount namespace: every process in it, whatever its environment
        says (a restored tree carries the token of the lane it was created in; a process may clear its
        environment). The lane tokens only guard a sweep of dead lanes, whose namespace inode may be reused."""
        if self.namespace is None:
            return []
        return processes_in_mount_namespace(self.namespace)

    def cpu_sample(self) -> CpuSample | None:
        """Read here, from the lane's members (its mount namespace): the host's other processes are not the
        engine's, though they share its cgroup."""
        return procfs.cpu_sample([m.pid for m in self._members()])

    def restart(self, stop_timeout: int = 20) -> None:
        """The environment restart: every lane process gone, its /dev/shm emptied, a fresh namespace holder."""
        self._kill_all(stop_timeout + 10)
        self._umount_shm()
        self._mount_shm()
        self._start_holder()

    def remove(self) -> None:
        with contextlib.suppress(HostRuntimeFailure):
            self._kill_all()
        self._umount_shm()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- the box --------------------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return f"lane {self.spec.name}"

    @property
    def id(self) -> str:
        return f"host-lane:{self.spec.name}"

    @property
    def host_pid_namespace(self) -> bool:
        return True

    @property
    def connect_proves_listener(self) -> bool:
        return True  # the host's network namespace: a connect reaches the listener itself

    def endpoint(self, port: int) -> tuple[str, int]:
        return "127.0.0.1", port

    def control(self) -> MountedControlDir:
        source = next((b.source for b in self.spec.binds if b.target == CONTROL), None)
        if source is None:
            raise HostRuntimeFailure(f"lane {self.spec.name}: no control directory bound at {CONTROL}")
        return MountedControlDir(source)

    @property
    def running(self) -> bool:
        return self.holder is not None and self.holder.poll() is None

    def _connect(self) -> socket.socket:
        if not self.running:
            raise HostRuntimeFailure(f"lane {self.spec.name} is not running (its namespace holder is gone)")
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(str(self.socket))
        except OSError as exc:
            conn.close()
            raise HostRuntimeFailure(f"lane {self.spec.name}: cannot reach its holder: {exc.strerror}") from None
        return conn

    def exec(
        self,
        argv: list[str],
        timeout: float,
        *,
        env: Mapping[str, str] | None = None,
        log: Path | None = None,
    ) -> ExecResult:
        """Run ``argv`` in the lane (a child of its holder) to completion under ``timeout``; stream output to
        ``log`` as it comes."""
        limit = max(timeout, 1.0)
        request = {
            "argv": bounded(argv, timeout),
            "env": {**self.spec.environment, **(env or {}), LANE_TOKEN: self.token},
        }
        conn = self._connect()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        null = os.open(os.devnull, os.O_RDONLY)
        started = time.time()
        try:
            conn.sendmsg(
                [json.dumps(request).encode() + b"\n"],
                [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [null, out_w, err_w]).tobytes())],
            )
        finally:
            for fd in (null, out_w, err_w):
                os.close(fd)
        sink = _Log(log, f"$ {shlex.join(argv)}\n", writers=2)
        out: list[bytes] = []
        err: list[bytes] = []

        def pump(fd: int, chunks: list[bytes]) -> None:
            try:
                for chunk in iter(lambda: os.read(fd, 65536), b""):
                    chunks.append(chunk)
                    sink.write(chunk)
            finally:
                os.close(fd)
                sink.done()

        readers = [
            threading.Thread(target=pump, args=(out_r, out), daemon=True),
            threading.Thread(target=pump, args=(err_r, err), daemon=True),
        ]
        for reader in readers:
            reader.start()
        replies = conn.makefile("r")
        conn.settimeout(limit + 10 + HOST_GRACE_S)
        code: int | None = None
        host_deadline = False
        pid: int | None = None
        try:
            first = json.loads(replies.readline() or "{}")
            if "error" in first or "pid" not in first:
                raise HostRuntimeFailure(f"lane {self.spec.name}: {first.get('error', 'holder gave no answer')}")
            pid = int(first["pid"])
            code = int(json.loads(replies.readline() or '{"exit": null}')["exit"])
        except TimeoutError:
            host_deadline = True
            if pid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
        except (TypeError, ValueError):
            code = None  # the holder died mid-command
        finally:
            replies.close()
            conn.close()
        for reader in readers:  # a detached child may keep a pipe open: read what came, do not wait for it
            reader.join(2.0)
        if host_deadline:
            code = None  # abandoned at the harness's deadline, as a `docker exec` is
        elif code is not None and code < 0:
            code = 128 - code  # killed by a signal: report it as a shell (and `docker exec`) does
        return ExecResult.gathered(argv, code, out, err, started)

    def _local_work(self, path: str) -> Path:
        """The directory of this machine that is ``path`` under the lane's ``/vsnap/work``."""
        work = f"{MOUNT_POINT}/work"
        if path != work and not path.startswith(work + "/"):
            raise HostRuntimeFailure(f"lane {self.spec.name}: only {work} is exported and imported, not {path}")
        return self.dir / "work" / path[len(work) :].lstrip("/")

    def export_tree(self, path: str, into: Path) -> None:
        local = self._local_work(path)
        if not local.is_dir():
            raise HostRuntimeFailure(f"lane {self.spec.name} has no {path} to export")
        with tarfile.open(into, "w") as tar:
            tar.add(local, arcname=local.name)

    def import_tree(self, archive: Path, parent: str) -> None:
        local = self._local_work(parent)
        local.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            if hasattr(tarfile, "tar_filter"):  # Python 3.10.12+: say so, modes and owners kept (root)
                tar.extractall(local, filter="tar")
            else:  # pragma: no cover - older 3.10
                tar.extractall(local)  # noqa: S202  (our own archive of our own lane)

    def read_bytes(self, path: str) -> bytes | None:
        """A file's bytes as the lane sees it, or None when it does not exist (or is not a regular file)."""
        done = self.exec(["sh", "-c", 'test -f "$1" && exec base64 -w0 -- "$1"', "read", path], 60)
        return base64.b64decode(done.stdout) if done.exit_code == 0 else None

    def processes(self) -> list[ProcessRow]:
        """The lane's processes (its mount namespace only), with pid, ppid, sid, stat, args; fails closed."""
        if not self.running:
            raise HostRuntimeFailure(f"lane {self.spec.name}: cannot list processes, its namespace holder is gone")
        return [ProcessRow(pid=p.pid, ppid=p.ppid, sid=p.sid, stat=p.state, args=p.args) for p in self._members()]

    def listening_ports(self) -> set[int]:
        """TCP ports in LISTEN state (the host's network namespace, which the lane shares)."""
        text = ""
        for name in ("tcp", "tcp6"):
            with contextlib.suppress(OSError):
                text += Path(f"/proc/net/{name}").read_text()
        return listening_ports(text)


def sweep(root: Path = DEFAULT_ROOT, owner: str | None = None, names: Iterable[str] | None = None) -> list[str]:
    """Remove host lanes: those of dead owners (default), or ``owner``'s. Processes are matched by the recorded
    mount namespace (and the holder by PID *and* start time), never by name."""
    removed: list[str] = []
    if not root.is_dir():
        return removed
    wanted = set(names) if names is not None else None
    for state_file in sorted(root.glob("*/lane.json")):
        try:
            state = json.loads(state_file.read_text())
        except (OSError, ValueError):
            continue
        if wanted is not None and state.get("name") not in wanted:
            continue
        if owner is not None:
            if state.get("owner") != owner:
                continue
        elif owner_alive(str(state.get("owner", ""))):
            continue
        namespace, tokens = state.get("mount_namespace"), state.get("tokens") or [state.get("token")]
        tokens = [t for t in tokens if t]
        for info in _lane_members(namespace, tokens) if namespace and tokens else []:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(info.pid, signal.SIGKILL)
        holder = proc_info(int(state.get("holder_pid", 0) or 0))
        if holder is not None and holder.start_time == state.get("holder_start"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(holder.pid, signal.SIGKILL)
        shm = state_file.parent / "shm"
        if os.path.ismount(shm):
            subprocess.run(["umount", "-l", str(shm)], capture_output=True, check=False)
        shutil.rmtree(state_file.parent, ignore_errors=True)
        removed.append(str(state.get("name")))
    return removed


def _lane_members(namespace: str, tokens: Sequence[str]) -> list[ProcInfo]:
    """The processes of the mount namespace ``namespace`` that carry one of the lane's tokens in their environment
    (its own; a restored tree: the token of the lane it was created in, which a fresh box adopts)."""
    markers = {f"{LANE_TOKEN}={token}".encode() for token in tokens}
    members = []
    for info in processes_in_mount_namespace(namespace):
        try:
            environ = (Path("/proc") / str(info.pid) / "environ").read_bytes()
        except OSError:
            continue
        if markers & set(environ.split(b"\0")):
            members.append(info)
    return members


def _same_process(pid: int, start_time: int) -> bool:
    """Whether ``pid`` still names the process that started at ``start_time`` (a zombie included)."""
    try:
        text = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return False
    return parse_stat(text)[4] == start_time


# ---- the runtime ------------------------------------------------------------------------------------------------
def host_gpus(requested: str, dev: Path = Path("/dev")) -> bool:
    """Whether host lanes can be given GPUs (NVIDIA device nodes); explicit GPUs without them are refused."""
    present = (dev / "nvidiactl").exists()
    if requested not in ("auto", "none") and not present:
        raise PreflightError(f"--vsnap-gpus={requested}: this host has no NVIDIA device (/dev/nvidiactl); use none")
    return present


def host_image_id(python: str, info: package_probe.PackageInfo) -> str:
    """What stands for an image ID with the host runtime: the interpreter and the vllm it imports."""
    key = json.dumps([os.path.realpath(python), info.get("package_dir"), info.get("vllm"), info.get("torch")])
    return "host-python:" + hashlib.sha256(key.encode()).hexdigest()[:16]


class HostRuntime:
    """``--vsnap-runtime=host``: each lane host processes of its arm's Python, in a mount namespace of its own."""

    name = "host"
    engine_options = ("--vsnap-python", "--vsnap-base-python")

    def __init__(self, settings: RuntimeSettings) -> None:
        self.settings = settings
        self.root = settings.host_root
        #: the token of each lane this runtime started, by box name (a fresh box adopts its lane's)
        self.tokens: dict[str, str] = {}

    def engines(self, parsed: ParsedOptions, default_python: str) -> tuple[str, str | None]:
        given = [f"--vsnap-{n}" for n in ("image", "base-image") if parsed.get("vsnap_" + n.replace("-", "_"))]
        if given:
            raise EngineOptionError(
                f"{', '.join(given)} cannot be used with --vsnap-runtime=host (no containers): the host runtime "
                "qualifies the vllm of --vsnap-python (and --vsnap-base-python for the base arm)"
            )
        # The arm's engine environment is its Python: the image fields carry its path through the evidence.
        base = parsed.get("vsnap_base_python")
        python = str(parsed.get("vsnap_python") or default_python)
        if base and same_python(python, str(base)):
            shown = "--vsnap-python" if parsed.get("vsnap_python") else "the Python running pytest"
            raise EngineOptionError(
                f"--vsnap-base-python is the Python under test ({shown}, {python}), so both arms would import the "
                "same vllm (on the host an overlay is the checkout that Python imports, not a mount): give the "
                "Python of an environment with the unmodified vllm your change is compared with, or drop "
                "--vsnap-base-python"
            )
        return python, str(base) if base else None

    def engine_problem(self, value: str) -> str | None:
        return None  # a Python: --vsnap-python's own parse checks it is an executable file

    def preflight(self, config: QualConfig, overlay: list[OverlayFile]) -> PreflightResult:
        """Root and the tools lanes need, each Python's vllm, criu and vllm on the lanes' PATH."""
        problems = check_host(self.root)
        if problems:
            raise PreflightError("--vsnap-runtime=host: " + "; ".join(problems))
        present = host_gpus(config.gpus)
        # host lanes inherit this process's CUDA_VISIBLE_DEVICES (a scheduler's allocation): choose within it
        available = gpus_mod.host_gpus(honour_cuda_visible=True) if present and config.gpus != "none" else None
        result = lane_gpu_result(config, present, available, overlay)
        for python, option in ((config.image, "--vsnap-python"), (config.base_image, "--vsnap-base-python")):
            if not python:
                continue
            env = host_environment(python, {}, result.gpus)
            try:
                done = subprocess.run(
                    [python, "-c", package_probe.SCRIPT],
                    capture_output=True,
                    text=True,
                    env=env,
                    timeout=config.timeouts["exec"],
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise PreflightError(
                    f"{option}: {python} did not locate vllm within {config.timeouts['exec']:.0f} s"
                ) from None
            info = (package_probe.parse(done.stdout) if done.returncode == 0 else None) or {}
            if not info.get("package_dir"):
                raise PreflightError(no_vllm_message(option, python, done, info))
            for tool in ("criu", "vllm"):
                if shutil.which(tool, path=env["PATH"]) is None:
                    raise PreflightError(
                        f"{option}: {tool} not found on the lanes' PATH ({env['PATH']}); "
                        + (
                            "put the criu kit's sbin/ on PATH (docker/criu/export.sh)"
                            if tool == "criu"
                            else "install vllm into that Python's environment (its console script)"
                        )
                    )
            result.images[python] = host_image_id(python, info)
            result.packages[python] = info
            check_engine(python, env, config, overlay if python == config.image else [], option)
        return result

    def image(self, ref: str, pre: PreflightResult) -> ImageInfo:
        """What the evidence records as the "image" of a host-runtime arm: its Python, the vllm it imports and the
        labels that vllm's distribution declares (``package_probe``: what the target says it is)."""
        info = pre.packages[ref]
        return ImageInfo(
            id=pre.images[ref],
            repo_digests=[],
            labels={
                **(info.get("labels") or {}),
                "ai.vsnap.runtime": "host",
                "ai.vsnap.python": os.path.realpath(ref),
                "ai.vsnap.vllm-package": str(info.get("package_dir")),
            },
            platform=f"host/{platform.machine()}",
        )

    def start(self, spec: BoxSpec) -> HostLane:
        # no overlay binds: on the host the checkout is what the Python imports (verified, not mounted)
        adopted = self.tokens.get(spec.adopts) if spec.adopts else None
        if spec.adopts and adopted is None:
            raise HostRuntimeFailure(f"{spec.name}: adopts the lane {spec.adopts}, which this runtime did not start")
        lane = HostLane.start(
            HostSpec(
                name=spec.name,
                labels=spec.labels,
                environment=host_environment(spec.engine, spec.environment, spec.gpus),
                binds=list(spec.binds),
                root=self.root,
                adopted_tokens=(adopted,) if adopted else (),
            )
        )
        self.tokens[spec.name] = lane.token
        return lane

    def sweep(self, *, session: str | None = None, owner: str | None = None) -> list[str]:
        # a session's lanes are its owner's (one lane directory per lane, owner recorded); with no owner, the
        # lanes of owners that are gone
        return sweep(self.root, owner=owner)

    def host_facts(self) -> dict[str, str | None]:
        return {"docker_version": None}

    def gpu_capable(self) -> bool:
        return (Path("/dev") / "nvidiactl").exists()

    def close(self) -> None:
        return None

    def reachable(self) -> CheckResult:
        problems = check_host(self.root)
        if problems:
            return CheckResult("host lanes", "FAIL", "; ".join(problems), "run as root with util-linux installed")
        return CheckResult("host lanes", "PASS", f"root, unshare and nsenter present; lanes under {self.root}")

    def doctor(self, opts: ParsedOptions, want_gpu: bool) -> list[CheckResult]:
        out = []
        for key, label in (("vsnap_python", "python"), ("vsnap_base_python", "base python")):
            python = opts.get(key) or (sys.executable if key == "vsnap_python" else None)
            if not python:
                continue
            env = host_environment(str(python), {}, "none")
            found = {tool: shutil.which(tool, path=env["PATH"]) for tool in ("criu", "vllm")}
            missing = [tool for tool, where in found.items() if where is None]
            out.append(
                CheckResult(
                    f"{label} tools",
                    "FAIL" if missing else "PASS",
                    f"missing on the lanes' PATH: {', '.join(missing)}" if missing else f"{found}",
                    "put the criu kit's sbin/ on PATH (docker/criu/export.sh) and install vllm into that Python",
                )
            )
        return out
