"""The lane toolset: ``LaneRun`` implements the steps' toolset (``steps.LaneTools``) on one long-lived box per
lane: a Docker container through ``runtime`` (the only module that talks to Docker), or, with
``--vsnap-runtime=host``, a host lane of ``host_runtime`` (processes in a mount namespace of their own). Both boxes
offer the same commands (exec, spawn, processes, restart, ...), so nothing below the lane start knows which."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from vsnap_qual import checks, engine, model, overlay, probe_copy
from vsnap_qual.config import PORT_NAMES, QualConfig
from vsnap_qual.engine import CanaryOutput
from vsnap_qual.evidence import utc_now
from vsnap_qual.host_runtime import Bind as HostBind
from vsnap_qual.host_runtime import HostLane, HostSpec, host_environment
from vsnap_qual.overlay import OverlayFile
from vsnap_qual.recorder import StepRecorder
from vsnap_qual.runtime import (
    LABEL_LANE,
    LABEL_OWNER,
    LABEL_SESSION,
    Bind,
    Client,
    ContainerSpec,
    EngineContainer,
    ExecResult,
    ImageInfo,
    free_ports,
    listening_ports,
    owner_label,
)
from vsnap_qual.steps import (
    ARTIFACT,
    CONTROL,
    WORK,
    LaneTools,
    RestoreRun,
    ServerHandle,
    StepFailed,
    canary_plan,
    skip_if_limitation,
    vllm_reason,
)


def ci_build(environ: Mapping[str, str]) -> model.CiBuild | None:
    """The CI build this run belongs to, from the CI's own variables; None outside CI."""
    if environ.get("BUILDKITE_BUILD_URL"):
        build = model.CiBuild(provider="buildkite", build_url=environ["BUILDKITE_BUILD_URL"])
        commit, branch = environ.get("BUILDKITE_COMMIT"), environ.get("BUILDKITE_BRANCH")
    elif environ.get("GITHUB_RUN_ID") and environ.get("GITHUB_REPOSITORY"):
        server = environ.get("GITHUB_SERVER_URL") or "https://github.com"
        url = f"{server.rstrip('/')}/{environ['GITHUB_REPOSITORY']}/actions/runs/{environ['GITHUB_RUN_ID']}"
        if environ.get("GITHUB_RUN_ATTEMPT"):
            url += f"/attempts/{environ['GITHUB_RUN_ATTEMPT']}"
        build = model.CiBuild(provider="github-actions", build_url=url)
        commit, branch = environ.get("GITHUB_SHA"), environ.get("GITHUB_REF_NAME")
    elif environ.get("CI_JOB_URL"):
        build = model.CiBuild(provider="gitlab", build_url=environ["CI_JOB_URL"])
        commit, branch = environ.get("CI_COMMIT_SHA"), environ.get("CI_COMMIT_REF_NAME")
    else:
        return None
    if commit:
        build["commit"] = commit
    if branch:
        build["branch"] = branch
    return build


LINK_REMAPS = "find /dev/shm -maxdepth 1 -name 'link_remap.*' -printf '%p|%D|%i|%m|%s\\n' | sort"


@dataclass(kw_only=True)
class LaneRun(StepRecorder):
    """The Docker implementation of ``steps.LaneTools``: one lane's long-lived container, the commands run in
    it, and what the steps hand on to each other."""

    config: QualConfig
    client: Client | None  # None with the host runtime
    overlay: list[OverlayFile]
    session_id: str
    container: EngineContainer | HostLane | None = None
    package_dir: str | None = None
    control_host: Path | None = None
    ports: dict[str, int] = field(default_factory=dict)
    ordinary: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)
    captured_tids: set[int] = field(default_factory=set)  # every thread of the fault artifact (images/core-*.img)
    inspect_sha256: str | None = None
    link_remaps_baseline: str = ""
    server: ServerHandle | None = None
    kv_snapshot: int | None = None
    gpu_uuid: str | None = None  # the lane's GPU (the requested one, else the only one visible)
    gpus_requested: bool = False
    peers: dict[str, dict[str, Any]] = field(default_factory=dict)  # lane name -> ordinary results (same worker)

    @property
    def served_model(self) -> str:
        args = list(self.config.engine_args)
        if "--served-model-name" in args:
            return args[args.index("--served-model-name") + 1]
        return self.config.model

    @property
    def box(self) -> EngineContainer | HostLane:
        if self.container is None:
            raise StepFailed(f"{self.lane.name}: no lane box (lane start failed)")
        return self.container

    # ---- lane start ----------------------------------------------------------------------------------------
    def environment(self) -> dict[str, str]:
        """The one environment of every exec in this lane (create and restore must fingerprint alike)."""
        env = {
            "VLLM_USE_V2_MODEL_RUNNER": self.lane.v2_flag,
            "VLLM_SERVER_DEV_MODE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "PYTHONPATH": "/vsnap/probe",
            "VSNAP_CONTROL_DIR": CONTROL,
        }
        if self.config.model_cache is not None:
            env["HF_HOME"] = "/vsnap/hf"
        env.update(self.config.env)
        return env

    def mounts(self, overlay: bool = True) -> list[Bind]:
        assert self.control_host is not None
        probe = probe_copy.session_copy(self.store.report_dir)
        if not probe.is_dir():
            raise StepFailed(f"{self.lane.name}: no probe copy at {probe} (the session start makes it)")
        mounts = [
            Bind("/vsnap/probe", str(probe), read_only=True),
            Bind(CONTROL, str(self.control_host), read_only=False),
        ]
        cache = self.config.model_cache
        if cache is not None:
            target = "/vsnap/hf/hub" if any(cache.glob("models--*")) else "/vsnap/hf"
            mounts.append(Bind(target, str(cache), read_only=True))
        if overlay and self.lane.overlaid and self.overlay:
            assert self.package_dir is not None
            for item in self.overlay:
                mounts.append(Bind(item.image_path(self.package_dir), str(item.host_path), read_only=True))
        return mounts

    def start(self, image: ImageInfo, package_info: dict[str, Any], gpus: str) -> None:
        """Start the lane's long-lived container and record the environment evidence."""
        self.gpus_requested = gpus != "none"
        self.package_dir = package_info.get("package_dir")
        self.control_host = self.store.report_dir / "lanes" / f"{self.lane.name}-{self.purpose}"
        for sub in ("probe", "faults", "logs"):
            (self.control_host / sub).mkdir(parents=True, exist_ok=True)
        modules = [f.module for f in self.overlay] if self.lane.overlaid else []
        (self.control_host / "overlay.json").write_text(json.dumps({"modules": modules}))
        self.ports = self.config.fixed_ports(self.lane) or dict(
            zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=False)
        )
        name = f"vsnap-{self.session_id}-{self.lane.name}-{self.purpose}"
        labels = {LABEL_SESSION: self.session_id, LABEL_LANE: self.lane.name, LABEL_OWNER: owner_label()}
        if self.config.runtime == "host":
            self.container = HostLane.start(
                HostSpec(
                    name=name,
                    labels=labels,
                    environment=host_environment(self.lane.image, self.environment(), gpus),
                    # no overlay binds: on the host the checkout is what the Python imports (verified, not mounted)
                    binds=[HostBind(b.target, Path(b.source), b.read_only) for b in self.mounts(overlay=False)],
                    root=self.config.host_root,
                )
            )
        else:
            assert self.client is not None
            spec = ContainerSpec(
                image_id=image.id,
                name=name,
                labels=labels,
                environment=self.environment(),
                mounts=self.mounts(),
                privileges=self.config.privileges,
                gpus=gpus,
                ports=self.ports.values(),
            )
            self.container = EngineContainer.start(self.client, spec)
        self.box.sh(f"mkdir -p -m 0700 {WORK}", 30)
        self.link_remaps_baseline = self.box.sh(LINK_REMAPS, 30).stdout
        versions = dict(package_info)
        versions["criu"] = _first_line(self.box.sh("criu --version 2>/dev/null", 30).stdout) or None
        gpu: dict[str, Any] | None = None
        if gpus != "none":
            smi = self.box.sh(
                "nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv,noheader 2>/dev/null",
                30,
            )
            visible = parse_gpus(smi.stdout)
            if visible:
                gpu = {**visible[0], "count": len(visible)}
                versions["driver"] = visible[0]["driver"]
                # the GPU this lane's snapshot must name: the one requested, else the only one it sees
                self.gpu_uuid = gpus if gpus.startswith("GPU-") else (visible[0]["uuid"] if len(visible) == 1 else None)
        versions["cuda"] = self.box.sh("printenv CUDA_VERSION", 10).stdout.strip() or None
        record = model.EnvironmentRecord(
            kind="environment",
            time=utc_now(),
            runner=cast(model.Runner, self.lane.runner),
            arm=cast(model.Arm, self.lane.arm),
            lane=self.lane.name,
            image={
                "ref": self.lane.image,
                "id": image.id,
                "repo_digests": image.repo_digests,
                "labels": image.labels,
                "platform": image.platform,
            },
            container_id=self.box.id,
            versions=versions,
            gpu=gpu,
            package_dir=self.package_dir,
            ports=self.ports,
            environment=self.environment(),
            overlaid=self.lane.overlaid,
            worker=os.environ.get("PYTEST_XDIST_WORKER", "main"),
            purpose=cast(model.Purpose, self.purpose),
        )
        if self.lane.overlaid and self.config.overlay is not None:
            record["overlay_checkout"] = overlay.checkout_state(self.config.overlay, self.config.overlay_ref)
        build = ci_build(os.environ)
        if build:
            record["ci"] = build
        self.store.write(record)

    # ---- servers -------------------------------------------------------------------------------------------
    def _session_pids(self, root_pid: int) -> list[int]:
        procs = self.box.processes()
        sid = next((p["sid"] for p in procs if p["pid"] == root_pid), None)
        tree = {root_pid}
        changed = True
        while changed:
            changed = False
            for p in procs:
                if p["pid"] not in tree and (p["ppid"] in tree or (sid is not None and p["sid"] == sid)):
                    tree.add(p["pid"])
                    changed = True
        return sorted(pid for pid in tree if any(p["pid"] == pid for p in procs))

    def pid_alive(self, pid: int) -> bool:
        """Whether a process with this PID exists (``/proc``: needs no ``kill`` binary in the image)."""
        result = self.box.exec(["sh", "-c", f"test -d /proc/{int(pid)}"], 10)
        if result.exit_code not in (0, 1):
            raise StepFailed(f"cannot probe PID {pid} in the container: exit {result.exit_code} {result.tail()}")
        return result.exit_code == 0

    def _probe_state(self, pids: list[int]) -> tuple[list[int], set[int]]:
        """In one exec: which of ``pids`` exist, and the TCP ports listening in the container's namespace."""
        script = (
            "for p in " + " ".join(str(int(p)) for p in pids) + "; do [ -d /proc/$p ] && echo pid $p; done; "
            "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; true"
        )
        result = self.box.sh(script, 30)
        if result.exit_code != 0:
            raise StepFailed(f"cannot probe processes and ports in the container: {result.tail()}")
        alive = [int(line.split()[1]) for line in result.stdout.splitlines() if line.startswith("pid ")]
        return alive, listening_ports(result.stdout)

    def port_listening(self, port: int, listening: set[int] | None = None) -> bool:
        """A listener on the port, as seen in the container's network namespace (and from the host when the
        namespace is the host's; with published ports Docker's proxy answers even when nothing listens)."""
        if port in (self.box.listening_ports() if listening is None else listening):
            return True
        shared_network = self.config.runtime == "host" or self.config.privileges != "isolated"
        return shared_network and engine.port_open(port)

    def stop_server(self, handle: ServerHandle, grace: float = 20.0) -> None:
        """SIGTERM the server's whole tree, SIGKILL what is left after ``grace`` seconds."""
        pids = sorted(set(handle.pids) | set(self._session_pids(handle.root_pid)))
        if not pids:
            return
        listed = " ".join(str(p) for p in pids)
        polls = max(1, int(grace / 0.05))
        # one exec: TERM, wait (polling /proc every 50 ms) for the engine to shut down, then KILL what is left
        script = (
            f"kill -TERM {listed} 2>/dev/null; i=0; while [ $i -lt {polls} ]; do left=; "
            f'for p in {listed}; do [ -d /proc/$p ] && left=1; done; [ -z "$left" ] && break; '
            f"sleep 0.05; i=$((i+1)); done; kill -KILL {listed} 2>/dev/null; true"
        )
        with self.engine_wait():
            self.box.sh(script, grace + 15)
        handle.pids = pids

    def serve(self, record: dict[str, Any]) -> ServerHandle:
        """Start an ordinary ``vllm serve`` and wait until ``/health`` answers."""
        port = self.ports["ordinary"]
        argv = ["vllm", "serve", *self.config.engine_argv(), "--host", "127.0.0.1", "--port", str(port)]
        record["argv"] = argv
        log_rel = f"logs/ordinary-{int(time.time())}.log"
        host_log = self.control_host / log_rel if self.control_host else None
        if host_log:
            record["logs"].append(self.store.relative(host_log))
            self.last_logs.append(self.store.relative(host_log))
        started = time.time()
        with engine.ListenerWatch(port) as watch:
            root = self.box.spawn(argv, f"{CONTROL}/{log_rel}")
            handle = ServerHandle(port=port, root_pid=root, log_in_container=f"{CONTROL}/{log_rel}")

            def died() -> str | None:
                if self.pid_alive(root):
                    return None
                text = host_log.read_text(errors="replace") if host_log else ""
                record["results"]["vllm_reason"] = vllm_reason(text)
                skip_if_limitation(record["results"]["vllm_reason"])
                return f"vllm serve exited before it was ready: {vllm_reason(text)}\nlog tail:\n{text[-3000:]}"

            try:
                with self.engine_wait():
                    ready, _ = engine.wait_until_measured(
                        lambda: engine.health_ok(port), self.config.timeouts["serve"], abort=died
                    )
            except engine.EngineError as exc:
                self.server = handle
                raise StepFailed(str(exc)) from None
        record["results"]["ready_seconds"] = round(ready - started, 3)
        if watch.notice_latency is not None:
            record["results"]["notice_latency_s"] = round(watch.notice_latency, 4)
        if watch.first_bound is not None:
            record["results"]["bind_to_ready_s"] = round(max(0.0, ready - watch.first_bound), 4)
        handle.pids = self._session_pids(root)
        self.server = handle
        return handle

    # ---- observations ---------------------------------------------------------------------------------------
    def canaries(self, port: int) -> list[CanaryOutput]:
        timeout = self.config.timeouts["http"]
        with self.engine_wait():
            return [
                engine.completion(port, self.served_model, p, timeout=timeout, max_tokens=n)
                for p, n in canary_plan(self.config)
            ]

    def digests(self, port: int) -> dict[str, dict[str, Any]]:
        with self.engine_wait():
            return engine.param_digests(port, timeout=self.config.timeouts["http"])

    def kv_from_server(self, port: int, log_text: str) -> tuple[int | None, str]:
        with self.engine_wait():
            tokens = engine.kv_from_metrics(port)
        if tokens is not None:
            return tokens, "metrics"
        tokens = engine.kv_from_log(log_text)
        return tokens, "log" if tokens is not None else "unavailable"

    def overlay_report(self) -> list[dict[str, Any]]:
        """The overlaid modules as actually imported in each engine process (from the probe's reports)."""
        assert self.control_host is not None
        reports = []
        for path in sorted((self.control_host / "probe").glob("imports-*.json")):
            with contextlib.suppress(ValueError, OSError):
                reports.append(json.loads(path.read_text()))
        files = []
        for item in self.overlay:
            imported = [
                {
                    "pid": r.get("pid"),
                    "role": r.get("role"),
                    "path": r["modules"][item.module].get("path"),
                    "sha256": r["modules"][item.module].get("sha256"),
                }
                for r in reports
                if item.module in (r.get("modules") or {})
            ]
            ok = bool(imported) and all(i["sha256"] == item.sha256 for i in imported)  # refined in the step
            files.append(
                {
                    "host_path": str(item.host_path),
                    "relative": item.relative,
                    "module": item.module,
                    "image_path": item.image_path(self.package_dir or ""),
                    "host_sha256": item.sha256,
                    "imported": imported,
                    "ok": ok,
                }
            )
        return files

    def probe_loaded_pids(self) -> list[int]:
        assert self.control_host is not None
        return sorted(int(p.stem.split("-", 1)[1]) for p in (self.control_host / "probe").glob("loaded-*.json"))

    def cleanup_audit(self, pids: list[int], ports: list[int]) -> dict[str, Any]:
        """After a stop: recorded PIDs gone, ports closed, GPU idle, link-remap inventory at its baseline.

        Fails closed: an error while auditing (Docker cannot list processes, a probe exec fails) is a failed
        audit that names the error, never an audit that saw nothing."""
        try:
            return self._audit(pids, ports)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            return {
                "pids": pids,
                "ports": ports,
                "pids_gone": False,
                "ports_closed": False,
                "gpu_idle": None,
                "link_remaps_equal": False,
                "ok": False,
                "error": error,
                "detail": f"the audit itself failed: {error}",
            }

    def _audit(self, pids: list[int], ports: list[int]) -> dict[str, Any]:
        deadline = time.time() + self.config.cleanup_grace
        while True:
            alive, listening = self._probe_state(pids)
            open_ports = [p for p in ports if self.port_listening(p, listening)]
            if (not alive and not open_ports) or time.time() > deadline:
                break
            time.sleep(0.1)
        gpu_idle: bool | None = None
        if self.config.gpus != "none" and self.box.sh("command -v nvidia-smi", 10).exit_code == 0:
            apps = self.box.sh("nvidia-smi --query-compute-apps=pid --format=csv,noheader", 30)
            if apps.exit_code != 0:
                raise StepFailed(f"nvidia-smi cannot list compute apps: exit {apps.exit_code} {apps.tail()}")
            ours = set(pids) | {p["pid"] for p in self.box.processes()}  # other lanes may share the GPU
            busy = [int(x) for x in apps.stdout.split() if x.strip().isdigit() and int(x) in ours]
            gpu_idle = apps.exit_code == 0 and not busy
        listing = self.box.sh(LINK_REMAPS, 30)
        if listing.exit_code != 0:
            raise StepFailed(f"cannot list /dev/shm/link_remap.*: exit {listing.exit_code} {listing.tail()}")
        remaps = listing.stdout
        audit = {
            "pids": pids,
            "pids_alive": alive,
            "pids_gone": not alive,
            "ports": ports,
            "ports_open": open_ports,
            "ports_closed": not open_ports,
            "gpu_idle": gpu_idle,
            "link_remaps_equal": remaps == self.link_remaps_baseline,
        }
        audit.update(self.attribute_link_remaps(remaps))
        if not audit["link_remaps_equal"] and not audit["link_remaps_ours"]:
            audit["link_remaps_equal"] = True  # changed only by others (another lane or session): named, not ours
        audit["ok"] = checks.audit_ok(alive, open_ports, gpu_idle, bool(audit["link_remaps_equal"]))
        return audit

    # ---- the LaneTools protocol (what the steps use) ---------------------------------------------------------
    def stop(self, handle: ServerHandle) -> list[dict[str, Any]]:
        return self.stop_within(handle, self.config.cleanup_grace)

    def audit(self, pids: list[int], ports: list[int]) -> dict[str, Any]:
        return self.cleanup_audit(pids, ports)

    def server_log(self, record: dict[str, Any]) -> str:
        """The ordinary server's log (the step's first log file)."""
        return (self.store.report_dir / record["logs"][0]).read_text(errors="replace")

    def kv(self, port: int, log_text: str | None = None) -> tuple[int | None, str]:
        """KV capacity in tokens from ``/metrics``, else from ``log_text`` when given."""
        if log_text is not None:
            return self.kv_from_server(port, log_text)
        with self.engine_wait():
            tokens = engine.kv_from_metrics(port)
        return tokens, "metrics" if tokens is not None else "unavailable"

    def snapshot_create(self, record: dict[str, Any]) -> ExecResult:
        self.box.sh(f"rm -rf {ARTIFACT}", 60)
        return self.snapshot(record, "create", *self.create_argv(), timeout_key="create")

    def snapshot_inspect(self, record: dict[str, Any], name: str = "inspect") -> ExecResult:
        return self.snapshot(record, "inspect", ARTIFACT, timeout_key="inspect", name=name)

    def snapshot_restore(self, record: dict[str, Any], n: int) -> RestoreRun:
        port = self.ports[f"restore-{n}"]
        with engine.ListenerWatch(port) as watch:
            result = self.restore(record, port, name=f"restore-{n}")
        return RestoreRun(result, port, watch.first_bound)

    def artifact_file(self, name: str) -> str:
        return self.box.read_text(f"{ARTIFACT}/{name}")

    def keep_child_log(self, record: dict[str, Any]) -> None:
        self.store.write_text(self.log(record, "create-child"), self.artifact_file("child.log"))

    def restored_server(self, port: int) -> ServerHandle | None:
        root = self.restored_root()
        if root is None:
            return None
        return ServerHandle(port=port, root_pid=root, pids=self._session_pids(root))

    def listening(self, port: int) -> bool:
        return self.port_listening(port)

    def environment_id(self) -> str:
        return self.box.id

    def restart(self) -> None:
        with self.engine_wait():
            self.box.restart()

    def overlay_imports(self) -> list[dict[str, Any]]:
        return self.overlay_report()

    def fresh_import(self, module: str) -> dict[str, Any]:
        """A fresh interpreter's import of ``module``: exit code, its file and the file's sha256."""
        script = (
            f"import importlib, hashlib; m = importlib.import_module({module!r}); "
            "print(m.__file__); print(hashlib.sha256(open(m.__file__, 'rb').read()).hexdigest())"
        )
        fresh = self.box.exec(["python3", "-c", script], self.config.timeouts["exec"])
        lines = fresh.stdout.strip().splitlines()
        return {
            "exit_code": fresh.exit_code,
            "path": lines[0] if lines else None,
            "sha256": lines[1] if len(lines) > 1 else None,
        }

    # ---- snapshot commands ---------------------------------------------------------------------------------
    def snapshot(
        self,
        record: dict[str, Any],
        action: str,
        *args: str,
        timeout_key: str,
        env: dict[str, str] | None = None,
        name: str | None = None,
    ) -> ExecResult:
        argv = ["vllm", "snapshot", action, *args]
        record["argv"] = argv
        with self.engine_wait():
            return self._snapshot_exec(record, argv, timeout_key, env, name or action)

    def _snapshot_exec(
        self, record: dict[str, Any], argv: list[str], timeout_key: str, env: dict[str, str] | None, name: str
    ) -> ExecResult:
        result = self.box.exec(argv, self.config.timeouts[timeout_key], env=env, log=self.log(record, name))
        record["exit_code"] = result.exit_code
        return result

    def restore(self, record: dict[str, Any], port: int, name: str, env: dict[str, str] | None = None) -> ExecResult:
        """``vllm snapshot restore ARTIFACT --host 127.0.0.1 --port PORT`` as one recorded step command."""
        args = (ARTIFACT, "--host", "127.0.0.1", "--port", str(port))
        return self.snapshot(record, "restore", *args, timeout_key="restore", env=env, name=name)

    def create_argv(self) -> list[str]:
        return [*self.config.engine_argv(), "--snapshot-dir", ARTIFACT]

    def snapshot_kv(self, artifact: str = ARTIFACT) -> int | None:
        """KV capacity of a snapshot: profiled once at create, in ``child.log`` up to its snapshot size."""
        size_text = self.box.read_text(f"{artifact}/child.log.snapshot-size").strip()
        data = self.box.read_bytes(f"{artifact}/child.log") or b""
        if size_text.isdigit():
            data = data[: int(size_text)]
        return engine.kv_from_log(data.decode("utf-8", "replace"))

    def restored_root(self, artifact: str = ARTIFACT) -> int | None:
        text = self.box.read_text(f"{artifact}/restored.pid").strip()
        return int(text) if text.isdigit() else None

    def artifact_digest(self, artifact: str = ARTIFACT, exclude: tuple[str, ...] = ()) -> str:
        """A digest over the artifact's files (path, mode, content), minus the files restore may rewrite."""
        prune = " ".join(f"! -path {artifact}/{e}" for e in exclude)
        result = self.box.sh(
            f"cd {artifact} 2>/dev/null && find . -type f {prune.replace(artifact, '.')} -print0 | sort -z | "
            "xargs -0 -r sha256sum; find . -printf '%p %m\\n' | sort",
            120,
        )
        return hashlib.sha256(result.stdout.encode()).hexdigest()

    # ---- issue 13: strict stop, liveness, link-remap attribution (steps.LaneTools) ------------------------------
    def stop_within(self, handle: ServerHandle, grace: float) -> list[dict[str, Any]]:
        """SIGTERM the server's whole tree; what is still alive ``grace`` seconds later (same PID *and* start
        time) is a leftover: recorded with its command line and whether it holds the GPU, then SIGKILLed."""
        pids = sorted(set(handle.pids) | set(self._session_pids(handle.root_pid)))
        if not pids:
            return []
        listed = " ".join(str(int(p)) for p in pids)
        ident = "sed 's/.*) //' /proc/$p/stat | cut -d' ' -f1,20"  # state and start time (after the comm field)
        script = (
            "command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-compute-apps=pid --format=csv,noheader "
            "2>/dev/null | sed 's/^ */gpu /'; "
            f"for p in {listed}; do [ -r /proc/$p/stat ] && echo \"id $p $({ident}) $(tr '\\0' ' ' "
            '< /proc/$p/cmdline)"; done; '
            f"end=$(( $(date +%s%N) / 1000000 + {int(grace * 1000)} )); kill -TERM {listed} 2>/dev/null; "
            "while [ $(( $(date +%s%N) / 1000000 )) -lt $end ]; do left=; "
            f'for p in {listed}; do [ -r /proc/$p/stat ] && [ "$({ident} | cut -c1)" != Z ] && left=1; done; '
            '[ -z "$left" ] && break; sleep 0.05; done; '
            f'for p in {listed}; do [ -r /proc/$p/stat ] && echo "left $p $({ident})"; done; '
            f"kill -KILL {listed} 2>/dev/null; true"
        )
        with self.engine_wait():
            result = self.box.sh(script, grace + 30)
        handle.pids = pids
        gpu: set[int] = set()
        tree: dict[int, dict[str, Any]] = {}
        left: list[tuple[int, str, str]] = []
        for line in result.stdout.splitlines():
            parts = line.split()
            if parts[:1] == ["gpu"] and len(parts) > 1 and parts[1].isdigit():
                gpu.add(int(parts[1]))
            elif parts[:1] == ["id"] and len(parts) >= 4:
                tree[int(parts[1])] = {"pid": int(parts[1]), "start_time": parts[3], "cmdline": " ".join(parts[4:])}
            elif parts[:1] == ["left"] and len(parts) >= 4:
                left.append((int(parts[1]), parts[2], parts[3]))
        holders = (
            gpu | set(self.manifest.get("cuda_holders") or [])
            if handle.root_pid in (self.manifest.get("process_tree") or [])
            else gpu
        )
        leftovers = []
        for pid, state, start in left:
            known = tree.get(pid)
            if known is None or known["start_time"] != start or state == "Z":
                continue  # gone (a zombie, or the PID reused by another process)
            leftovers.append({**known, "gpu_holder": pid in holders, "state": state})
        handle.tree = [{**t, "gpu_holder": t["pid"] in holders} for t in tree.values()]
        return checks.order_leftovers(leftovers)

    def identify(self, pids: list[int]) -> dict[int, str]:
        """The start time (``/proc/PID/stat`` field 22) of each of ``pids`` that exists: with host PID
        namespaces a PID is reused by other processes, so "still alive" means the same PID *and* start time."""
        if not pids:
            return {}
        listed = " ".join(str(int(p)) for p in pids)
        start = "$(sed 's/.*) //' /proc/$p/stat | cut -d' ' -f20)"
        script = f'for p in {listed}; do [ -r /proc/$p/stat ] && echo "$p {start}"; done; true'
        found = {}
        for line in self.box.sh(script, 30).stdout.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit():
                found[int(parts[0])] = parts[1]
        return found

    def health(self, port: int) -> bool:
        with self.engine_wait():
            return engine.health_ok(port)

    def gpu_apps(self) -> set[int] | None:
        """The PIDs nvidia-smi lists as compute apps, seen from the lane; None when the lane has no GPU."""
        if self.gpu_uuid is None and not self.gpus_requested:
            return None
        listing = self.box.sh("nvidia-smi --query-compute-apps=pid --format=csv,noheader", 30)
        if listing.exit_code != 0:
            raise StepFailed(f"nvidia-smi cannot list compute apps: exit {listing.exit_code} {listing.tail()}")
        return {int(x) for x in listing.stdout.split() if x.strip().isdigit()}

    def alive(self, pids: list[int]) -> list[int]:
        """Which of ``pids`` still exist (one exec)."""
        return self._probe_state(pids)[0] if pids else []

    def restored_log_tail(self, lines: int = 40) -> str:
        """The restored engine's own output (the artifact's ``child.log``), last lines."""
        return self.box.sh(f"tail -n {int(lines)} {ARTIFACT}/child.log 2>/dev/null; true", 30).stdout

    def attribute_link_remaps(self, listing: str) -> dict[str, Any]:
        """Entries of ``/dev/shm/link_remap.*`` new since this lane's baseline, each attributed to the lane that
        first saw it appear (a claim file in the report directory, shared by every lane of the run): with host
        IPC namespaces ``/dev/shm`` is shared, so one lane's leak must not be reported as every lane's."""
        baseline = set(self.link_remaps_baseline.splitlines())
        new = [e for e in listing.splitlines() if e and e not in baseline]
        transient: list[str] = []
        deadline = time.time() + self.config.cleanup_grace
        while new and time.time() < deadline:
            # /dev/shm is the host's: another CRIU dump in flight (another lane, session or tool) has its link
            # remaps there for a moment. A leak stays; an entry that goes within the grace was not a leak.
            time.sleep(0.5)
            now = set(self.box.sh(LINK_REMAPS, 30).stdout.splitlines())
            transient += [e for e in new if e not in now]
            new = [e for e in new if e in now]
        claims = self.store.report_dir / "lanes" / "link-remaps"
        claims.mkdir(parents=True, exist_ok=True)
        ours: list[str] = []
        others: dict[str, list[str]] = {}
        for entry in new:
            claim = claims / entry.replace("/", "_").replace("|", "_")
            try:
                with open(claim, "x") as fh:
                    fh.write(self.lane.name)
                owner = self.lane.name
            except FileExistsError:
                owner = claim.read_text().strip() or "?"
            (ours.append(entry) if owner == self.lane.name else others.setdefault(owner, []).append(entry))
        return {
            "lane": self.lane.name,
            "link_remaps_new": new,
            "link_remaps_ours": ours,
            "link_remaps_others": others,
            "link_remaps_transient": transient,
        }


def parse_gpus(csv: str) -> list[dict[str, Any]]:
    """``nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv,noheader`` rows."""
    rows = []
    for line in csv.strip().splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) >= 4 and cols[1].startswith("GPU-"):
            mib = cols[3].split()[0]
            rows.append(
                {"name": cols[0], "uuid": cols[1], "driver": cols[2], "memory_mib": int(mib) if mib.isdigit() else None}
            )
    return rows


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _docker_lane_is_a_lane_toolset(run: LaneRun) -> LaneTools:
    return run  # mypy checks here that LaneRun implements every LaneTools method with the same signature
