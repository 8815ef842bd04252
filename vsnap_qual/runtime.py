"""The container runtime: the only module that talks to Docker (through the docker SDK, never the CLI).

One long-lived container per lane (``sleep infinity``); every engine command is a ``docker exec`` bounded twice:
by coreutils ``timeout`` inside the container and by a host-side deadline. Containers carry session labels so a
sweep can remove leftovers of killed sessions.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import socket
import tarfile
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types
from docker.client import DockerClient
from docker.models.containers import Container, _create_container_args

from vsnap_qual import privileges, procfs

LABEL_SESSION = "ai.vsnap.session"
LABEL_LANE = "ai.vsnap.lane"
LABEL_OWNER = "ai.vsnap.owner"  # "<hostname>:<pid>" of the pytest process that owns the container
HOST_GRACE_S = 8.0  # host deadline = in-container timeout + 8 s (a step fails within budget + 10 s)


class RuntimeFailure(RuntimeError):
    """Docker could not do what a step asked; the message says what and how to fix it."""


def connect(timeout: float = 30.0) -> DockerClient:
    """A client for the local engine, or a ``RuntimeFailure`` saying how to start one."""
    try:
        client = DockerClient.from_env(timeout=int(timeout))
        client.ping()
    except docker.errors.DockerException as exc:
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise RuntimeFailure(
            f"Docker engine unreachable at {host} ({exc.__class__.__name__}). Start it (this project: "
            "`bash scripts/docker-up.sh`; elsewhere `sudo systemctl start docker`) or set DOCKER_HOST."
        ) from None
    return client


def nvidia_runtime_present(client: DockerClient) -> bool:
    info = client.info()
    if "nvidia" in (info.get("Runtimes") or {}):
        return True
    return bool(info.get("CDISpecDirs")) and any(Path(d).glob("nvidia*") for d in info["CDISpecDirs"])


def resolve_image(client: DockerClient, ref: str, pull_timeout: float = 900.0) -> Any:
    """The local image for ``ref``; pulls explicitly with a deadline when absent (never a silent pull)."""
    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.APIError as exc:
        raise RuntimeFailure(f"cannot look up image {ref!r}: {exc.explanation}") from None
    outcome: dict[str, Any] = {}

    def pull() -> None:
        try:
            outcome["image"] = client.images.pull(ref)
        except docker.errors.DockerException as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=pull, daemon=True)
    worker.start()
    worker.join(pull_timeout)
    if worker.is_alive():
        raise RuntimeFailure(f"image {ref!r} is not local and pulling it did not finish in {pull_timeout:.0f} s")
    if "error" in outcome:
        err = outcome["error"]
        detail = getattr(err, "explanation", None) or str(err)
        raise RuntimeFailure(
            f"image {ref!r} is not present locally and could not be pulled ({detail}). Build or load it "
            "first (for the reference engine: `make reference`), or `docker login` to its registry."
        )
    return outcome["image"]


Client = DockerClient  # the runtime's client type, for annotations elsewhere (no Docker import needed there)


def engine_version(client: DockerClient) -> str | None:
    """The Docker engine's version string."""
    return client.version().get("Version")


def docker_root(client: DockerClient) -> str:
    return str(client.info().get("DockerRootDir", "/var/lib/docker"))


@dataclass(frozen=True)
class ImageInfo:
    """What the harness records and checks of an image (no Docker object leaves this module)."""

    id: str
    repo_digests: list[str]
    labels: dict[str, str]
    platform: str


def image_info(image: Any) -> ImageInfo:
    attrs = image.attrs or {}
    return ImageInfo(
        id=str(image.id),
        repo_digests=list(attrs.get("RepoDigests") or []),
        labels=dict(image.labels or {}),
        platform=f"{attrs.get('Os')}/{attrs.get('Architecture')}",
    )


def local_image(client: DockerClient, ref: str) -> ImageInfo | None:
    """The local image ``ref`` (an ID or a name), or None when it is not present; never pulls."""
    try:
        return image_info(client.images.get(ref))
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        raise RuntimeFailure(f"cannot look up image {ref!r}: {exc.explanation}") from None


@dataclass(frozen=True)
class OneShot:
    """What a one-shot container printed."""

    exit_code: int | None  # None: it did not finish in time (it was removed)
    stdout: str
    stderr: str
    timed_out: bool = False


def run_oneshot(
    client: DockerClient, image: str, argv: list[str], labels: Mapping[str, str], timeout: float
) -> OneShot:
    """Run ``argv`` in a fresh network-less container of ``image`` (entrypoint cleared, root) and remove it;
    past ``timeout`` seconds the container is killed and removed and ``timed_out`` is set. Docker errors
    (the image cannot start) raise ``RuntimeFailure``."""
    try:
        container = client.containers.create(
            image, argv, entrypoint=[], network_mode="none", labels=dict(labels), user="0", detach=True
        )
    except docker.errors.DockerException as exc:
        raise RuntimeFailure(f"cannot create a container of {image[:19]}: {exc}") from None
    try:
        container.start()
        try:
            code = int(container.wait(timeout=timeout).get("StatusCode", -1))
        except Exception:  # requests' ReadTimeout (or a dropped connection): it did not finish in time
            return OneShot(None, "", "", timed_out=True)
        stdout = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        stderr = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
        return OneShot(code, stdout, stderr)
    except docker.errors.DockerException as exc:
        raise RuntimeFailure(f"cannot run {argv[0]} in {image[:19]}: {exc}") from None
    finally:
        remove_container(container)


def paths_missing_in_image(
    client: DockerClient, image: str, paths: Iterable[str], labels: Mapping[str, str]
) -> list[str]:
    """Which of ``paths`` do not exist in ``image`` (read from a created, never started container)."""
    container = client.containers.create(image, entrypoint=["true"], labels=dict(labels))
    missing = []
    try:
        for path in paths:
            try:
                container.get_archive(path)
            except docker.errors.NotFound:
                missing.append(path)
    finally:
        remove_container(container)
    return missing


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct free ports (all sockets held open until every port is chosen)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def listening_ports(proc_net_tcp: str) -> set[int]:
    """The LISTEN ports of a ``/proc/net/tcp{,6}`` listing (other lines are ignored)."""
    ports = set()
    for line in proc_net_tcp.splitlines():
        cols = line.split()
        if len(cols) > 3 and cols[3] == "0A" and ":" in cols[1]:
            ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


def exec_timed_out(code: int | None, seconds: float, timeout: float) -> bool:
    """Whether an exec wrapped in coreutils ``timeout`` ran out of time: abandoned by the host deadline
    (``code`` None), ``timeout``'s own 124, or 137 (its ``--kill-after`` SIGKILL) only once the deadline had
    passed; a 137 before it is a process killed by someone else (OOM killer, a stop), not a timeout."""
    if code is None:
        return True
    return code == 124 or (code == 137 and seconds >= timeout)


@dataclass(frozen=True)
class ExecResult:
    """One finished in-container command."""

    argv: list[str]
    exit_code: int | None  # None: the host deadline passed and the exec was abandoned
    stdout: str
    stderr: str
    started: float
    ended: float
    timed_out: bool = False

    @property
    def seconds(self) -> float:
        return self.ended - self.started

    def tail(self, lines: int = 30) -> str:
        text = (self.stderr or self.stdout).rstrip()
        return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True)
class Bind:
    """A host path bind-mounted at ``target`` in a lane (no Docker type leaves this module)."""

    target: str
    source: str
    read_only: bool = True


def _docker_mount(mount: Bind | Any) -> Any:
    """A :class:`Bind` as the SDK's mount (a ready ``docker.types.Mount`` passes through unchanged)."""
    if isinstance(mount, Bind):
        return docker.types.Mount(mount.target, mount.source, type="bind", read_only=mount.read_only)
    return mount


@dataclass
class ContainerSpec:
    """What a lane's container looks like; built by the suite from the config."""

    image_id: str
    name: str
    labels: dict[str, str]
    environment: dict[str, str]
    mounts: list[Bind] = field(default_factory=list)
    privileges: str = "privileged"
    gpus: str = "none"  # "none" | "all" | "GPU-<uuid>"
    ports: Iterable[int] = ()


def gpu_device_requests(gpus: str) -> list[Any]:
    """Docker's device request for a lane's GPUs (``PreflightResult.gpus_for``): ``all``, one GPU by its UUID
    (the lane's own under ``--vsnap-gpus=auto``), or none."""
    if gpus == "all":
        return [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if gpus.startswith("GPU-"):
        if "," in gpus:
            raise RuntimeFailure(f"a lane gets one GPU, not {gpus!r} (gpus.assign gives each runner lane one)")
        return [docker.types.DeviceRequest(device_ids=[gpus], capabilities=[["gpu"]])]
    return []


def container_kwargs(spec: ContainerSpec) -> dict[str, Any]:
    """Docker SDK arguments for the spec's privileges mode (see ``vsnap_qual.privileges``)."""
    settings = privileges.container_settings(spec.privileges, privileges.local_missing_capabilities())
    kwargs: dict[str, Any] = {}
    if settings.privileged:
        kwargs["privileged"] = True
    if settings.cap_add:
        kwargs["cap_add"] = list(settings.cap_add)
    if settings.cap_drop:
        kwargs["cap_drop"] = list(settings.cap_drop)
    if settings.security_opt:
        kwargs["security_opt"] = list(settings.security_opt)
    if settings.host_pid:
        kwargs["pid_mode"] = "host"
    else:
        kwargs["init"] = True  # `sleep infinity` as PID 1 would never reap the engine's orphans
    if settings.host_ipc:
        kwargs["ipc_mode"] = "host"
    if settings.host_network:
        kwargs["network_mode"] = "host"
    else:
        kwargs["ports"] = {f"{p}/tcp": ("127.0.0.1", p) for p in spec.ports}
    return kwargs


def create_container(client: DockerClient, kwargs: dict[str, Any], unmask_proc: bool = False) -> Container:
    """``client.containers.create(**kwargs)``; with ``unmask_proc`` also empty MaskedPaths/ReadonlyPaths (what
    the CLI's ``--security-opt systempaths=unconfined`` sends; the SDK has no parameter for it), so that
    ``/proc/sys`` (e.g. ``kernel/ns_last_pid``) is writable inside the container."""
    if not unmask_proc:
        return client.containers.create(**kwargs)
    args = _create_container_args({"command": None, **kwargs, "version": client.api._version})
    args["host_config"]["MaskedPaths"] = []
    args["host_config"]["ReadonlyPaths"] = []
    created = client.api.create_container(**args)
    return client.containers.get(created["Id"])


class ShellBox:
    """What every lane box (a container, a host lane) builds on its own ``exec`` and ``read_bytes``: a shell
    script, a detached process, a file as text."""

    box_name: str

    def exec(
        self,
        argv: list[str],
        timeout: float,
        *,
        env: Mapping[str, str] | None = None,
        log: Path | None = None,
        stdin_null: bool = True,
    ) -> ExecResult:
        raise NotImplementedError

    def read_bytes(self, path: str) -> bytes | None:
        raise NotImplementedError

    def sh(self, script: str, timeout: float = 60.0, env: Mapping[str, str] | None = None) -> ExecResult:
        return self.exec(["sh", "-c", script], timeout, env=env)

    def spawn(self, argv: list[str], log_path: str, *, env: Mapping[str, str] | None = None) -> int:
        """Start ``argv`` detached in its own session, output to ``log_path`` (as the box sees it); its PID."""
        pidfile = f"{log_path}.pid"
        script = (
            f'mkdir -p "$(dirname {shlex.quote(log_path)})"; '
            f"setsid {shlex.join(argv)} </dev/null >>{shlex.quote(log_path)} 2>&1 & "
            f"echo $! > {shlex.quote(pidfile)}"
        )
        result = self.exec(["sh", "-c", script], 30.0, env=env)
        if result.exit_code != 0:
            raise RuntimeFailure(f"could not start {argv[0]} in {self.box_name}: {result.tail()}")
        return int(self.read_text(pidfile).strip())

    def read_text(self, path: str) -> str:
        data = self.read_bytes(path)
        return "" if data is None else data.decode("utf-8", "replace")


def container_pids(procs: list[dict[str, Any]], proc: Path = procfs.PROC) -> list[dict[str, Any]]:
    """``docker top``'s rows (host PIDs) as the container's own PID namespace numbers them: pid and sid from
    each process's ``NSpid``/``NSsid``; ppid through the same map (0 for a parent outside the container, as the
    container's PID 1 sees it). A process gone meanwhile is left out; no ``NSpid`` fails closed."""
    mapped: dict[int, tuple[int, int]] = {}
    for item in procs:
        try:
            ids = procfs.innermost_ids(item["pid"], proc)
        except ValueError as exc:
            raise RuntimeFailure(str(exc)) from None
        if ids is not None:
            mapped[item["pid"]] = ids
    return [
        {**item, "pid": mapped[item["pid"]][0], "sid": mapped[item["pid"]][1],
         "ppid": mapped[item["ppid"]][0] if item["ppid"] in mapped else 0}
        for item in procs
        if item["pid"] in mapped
    ]  # fmt: skip


class EngineContainer(ShellBox):
    """A long-lived ``sleep infinity`` container in which every engine command is executed."""

    def __init__(self, client: DockerClient, container: Container, spec: ContainerSpec) -> None:
        self.client = client
        self.container = container
        self.spec = spec
        self.box_name = spec.name

    @classmethod
    def start(cls, client: DockerClient, spec: ContainerSpec) -> EngineContainer:
        kwargs: dict[str, Any] = {
            "image": spec.image_id,
            "entrypoint": ["sleep", "infinity"],
            "command": [],
            "name": spec.name,
            "labels": spec.labels,
            "environment": spec.environment,
            "mounts": [_docker_mount(m) for m in spec.mounts],
            "user": "0",
            "detach": True,
            "stop_signal": "SIGKILL",  # sleep ignores nothing useful; the engine tree is reaped by the kill
        }
        kwargs.update(container_kwargs(spec))
        requests = gpu_device_requests(spec.gpus)
        if requests:
            kwargs["device_requests"] = requests
        try:
            settings = privileges.container_settings(spec.privileges)
            container = create_container(client, kwargs, unmask_proc=settings.unmask_proc)
            container.start()
            container.reload()
        except docker.errors.DockerException as exc:
            hint = ""
            if "apply caps" in str(exc) or "operation not permitted" in str(exc):
                hint = (
                    " — this Docker host refuses these privileges; rerun with --vsnap-privileges=all-caps "
                    "(every capability the host can grant; `vsnap-qual doctor` says which modes this host allows)"
                )
            with contextlib.suppress(Exception):
                remove_container(client.containers.get(spec.name))
            raise RuntimeFailure(f"could not start container {spec.name}: {exc}{hint}") from None
        return cls(client, container, spec)

    @property
    def id(self) -> str:
        return str(self.container.id)

    def reload(self) -> None:
        self.container.reload()

    @property
    def running(self) -> bool:
        self.container.reload()
        return bool(self.container.status == "running")

    def attrs(self) -> dict[str, Any]:
        self.container.reload()
        return dict(self.container.attrs)

    def exec(
        self,
        argv: list[str],
        timeout: float,
        *,
        env: Mapping[str, str] | None = None,
        log: Path | None = None,
        stdin_null: bool = True,
    ) -> ExecResult:
        """Run ``argv`` to completion under ``timeout``; stream output to ``log`` as it comes."""
        wrapped = ["timeout", "--signal=TERM", "--kill-after=10", f"{max(timeout, 1.0):.0f}s", *argv]
        api = self.client.api
        started = time.time()
        exec_id = api.exec_create(self.id, wrapped, environment=dict(env or {}), user="0", stdout=True, stderr=True)[
            "Id"
        ]
        out: list[bytes] = []
        err: list[bytes] = []
        handle = log.open("ab") if log else None
        if handle:
            handle.write(f"$ {shlex.join(argv)}\n".encode())
            handle.flush()

        def pump() -> None:
            # The pump owns the log: it closes it when the stream ends, even after the host deadline abandoned
            # the exec (closing it from the caller would race a write still in flight).
            try:
                for chunk_out, chunk_err in api.exec_start(exec_id, stream=True, demux=True):
                    for chunk, sink in ((chunk_out, out), (chunk_err, err)):
                        if chunk:
                            sink.append(chunk)
                            if handle:
                                handle.write(chunk)
                                handle.flush()
            finally:
                if handle:
                    handle.close()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        reader.join(timeout + HOST_GRACE_S)
        abandoned = reader.is_alive()
        code: int | None = None
        if not abandoned:
            code = api.exec_inspect(exec_id).get("ExitCode")
        ended = time.time()
        return ExecResult(
            argv=list(argv),
            exit_code=code,
            stdout=b"".join(out).decode("utf-8", "replace"),
            stderr=b"".join(err).decode("utf-8", "replace"),
            started=started,
            ended=ended,
            timed_out=exec_timed_out(code, ended - started, timeout),
        )

    def read_bytes(self, path: str) -> bytes | None:
        """A file's bytes from the container, or None when it does not exist."""
        try:
            stream, _ = self.container.get_archive(path)
        except docker.errors.NotFound:
            return None
        buffer = io.BytesIO(b"".join(stream))
        with tarfile.open(fileobj=buffer) as tar:
            member = tar.next()
            if member is None or not member.isfile():
                return None
            extracted = tar.extractfile(member)
            return extracted.read() if extracted else None

    def processes(self) -> list[dict[str, Any]]:
        """This container's processes (its cgroup only, even with pid=host), with pid, ppid, sid, stat, args.

        Fails closed: when Docker cannot list them this raises ``RuntimeFailure`` (an empty list would tell a
        stop or a leftover audit that nothing is running)."""
        try:
            top = self.container.top(ps_args="-eo pid,ppid,sid,stat,args")
        except docker.errors.DockerException as exc:
            raise RuntimeFailure(f"cannot list the processes of {self.spec.name}: {exc}") from None
        titles = [t.upper() for t in top.get("Titles") or []]
        procs = []
        for row in top.get("Processes") or []:
            item = dict(zip(titles, row, strict=False))
            try:
                procs.append(
                    {
                        "pid": int(item["PID"]),
                        "ppid": int(item["PPID"]),
                        "sid": int(item["SID"]),
                        "stat": item.get("STAT", ""),
                        "args": item.get("COMMAND", item.get("ARGS", "")),
                    }
                )
            except (KeyError, ValueError):
                continue
        return container_pids(procs) if self.spec_own_pid_namespace else procs

    @property
    def spec_own_pid_namespace(self) -> bool:
        """Whether the container has a PID namespace of its own (``docker top`` then lists host PIDs, while
        everything else in the box, ``spawn`` and ``/proc`` inside, speaks the container's)."""
        mode = (self.container.attrs.get("HostConfig") or {}).get("PidMode") or ""
        return mode != "host"

    def listening_ports(self) -> set[int]:
        """TCP ports in LISTEN state as seen inside the container's network namespace."""
        return listening_ports(self.sh("cat /proc/net/tcp /proc/net/tcp6 2>/dev/null", 20.0).stdout)

    def restart(self, stop_timeout: int = 20) -> None:
        """Stop and start the same container (same ID, same filesystem)."""
        self.container.stop(timeout=stop_timeout)
        self.container.start()
        self.container.reload()

    def remove(self) -> None:
        remove_container(self.container)


def remove_container(container: Container) -> None:
    try:
        container.remove(force=True, v=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if exc.status_code != 409:  # removal already in progress
            raise


def owner_label() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_alive(owner: str) -> bool:
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's session: not ours to judge
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep(client: DockerClient, session: str | None = None, owner: str | None = None) -> list[str]:
    """Remove labelled containers: a session's (``session`` given; only ``owner``'s when that is given too,
    as an xdist worker must not remove its siblings' lanes) or, with no session, those of dead owners.

    Other processes remove their containers while this one lists (an xdist sibling's teardown): the listing
    is one API call (no per-container inspect that could meet a vanished container) and a container already
    gone counts as removed by its owner, not as an error."""
    removed = []
    filters = {"label": f"{LABEL_SESSION}={session}" if session else LABEL_SESSION}
    for entry in client.api.containers(all=True, filters=filters):
        labels = entry.get("Labels") or {}
        labelled_owner = labels.get(LABEL_OWNER, "")
        if session is None and owner_alive(labelled_owner):
            continue
        if owner is not None and labelled_owner != owner:
            continue
        name = (entry.get("Names") or [entry["Id"][:12]])[0].lstrip("/")
        try:
            client.api.remove_container(entry["Id"], force=True, v=True)
        except docker.errors.NotFound:
            continue  # it vanished between the listing and the removal: its owner removed it
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # removal already in progress
                raise
        removed.append(name)
    return removed
