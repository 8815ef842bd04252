"""A lane: one runner on one image arm, in one long-lived box, for one purpose (the lifecycle, or the injected
failures on an artifact of its own). :class:`LaneRun` implements the steps' toolset (``steps.LaneTools``) and the
fault layer's (``faults.FaultLane``) over any runtime's :class:`vsnap_qual.box.Box`: it *has* a recorder (one
evidence record per step), a box and the state its steps hand on, and knows nothing of the runtime that made the
box.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import shlex
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from vsnap_qual import artifact_deps, audit, exits, model, overlay, probe_copy
from vsnap_qual.artifact_files import ArtifactFilesError
from vsnap_qual.box import (
    Bind,
    Box,
    BoxFacts,
    BoxSpec,
    ControlDir,
    ExecResult,
    ImageInfo,
    ShmHolders,
    free_ports,
    lane_labels,
)
from vsnap_qual.ci_build import ci_build
from vsnap_qual.clock import utc_now
from vsnap_qual.config import PORT_NAMES, Lane, QualConfig
from vsnap_qual.contract import (
    ARTIFACT,
    CHECKOUT,
    CONTROL,
    MODEL_CACHE,
    PROBE,
    SMOKE,
    VLLM_CANARY_PROMPT,
    WORK,
    Purpose,
    restore_argv,
)
from vsnap_qual.control import MountedControlDir, read_json_files
from vsnap_qual.engine import adapters, decode_speed, prefix_cache, shapes
from vsnap_qual.engine import client as engine
from vsnap_qual.engine.client import CanaryOutput
from vsnap_qual.model import (
    Canary,
    CleanupAudit,
    DecodeSpeed,
    Digest,
    FreshImport,
    KeptAdapter,
    LeftoverProcess,
    OverlayFileResult,
    PrefixCacheProbe,
    UnitOutcome,
)
from vsnap_qual.overlay import OverlayFile
from vsnap_qual.package_probe import PackageInfo
from vsnap_qual.probe.vsnap_probe import control_files
from vsnap_qual.recorder import StepEvidence, StepRecorder
from vsnap_qual.runtimes import Runtime
from vsnap_qual.steps import LaneState, OrdinaryReference, RestoreRun, ServerHandle, canary_plan
from vsnap_qual.vllm_words import StepFailed, skip_if_limitation, vllm_reason

log = logging.getLogger("vsnap_qual")


def lane_environment(config: QualConfig, lane: Lane) -> dict[str, str]:
    """The one environment of every command in a lane (create and restore must fingerprint alike)."""
    env = {
        "VLLM_USE_V2_MODEL_RUNNER": lane.v2_flag,
        "VLLM_SERVER_DEV_MODE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        # the smoke platform after the probe: vLLM finds both through their dist-info on the path
        "PYTHONPATH": f"{PROBE}:{SMOKE}" if config.cpu_smoke else PROBE,
        "VSNAP_CONTROL_DIR": CONTROL,
    }
    if config.model_cache is not None:
        env["HF_HOME"] = MODEL_CACHE
    env.update(config.env)
    return env


def written_since_snapshot(data: bytes | None, size_text: str, lines: int) -> str:
    """The last ``lines`` of ``child.log`` past its snapshot size (what the restored tree wrote); when the size is
    unknown, the last lines of the whole file, said so."""
    if data is None:
        return "(no child.log in the artifact)"
    size = size_text.strip()
    if not size.isdigit():
        tail = "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])
        return f"(child.log.snapshot-size unreadable: the whole log's tail)\n{tail}"
    since = data[int(size) :].decode("utf-8", "replace")
    if not since.strip():
        return "(the restored tree wrote nothing to child.log after the restore)"
    return "\n".join(since.splitlines()[-lines:])


@dataclass(kw_only=True)
class LaneRun:
    """One lane's box, the commands run in it, and what its steps hand on to each other."""

    config: QualConfig
    lane: Lane
    recorder: StepRecorder
    runtime: Runtime
    overlay: list[OverlayFile]
    session_id: str
    #: the ordinary references of the lanes this process ran (the base arm compares with the head's)
    peers: dict[str, OrdinaryReference] = field(default_factory=dict)
    #: the unit step's outcomes of the lanes this process ran (the base arm judges the head's)
    unit_peers: dict[str, dict[str, UnitOutcome]] = field(default_factory=dict)
    state: LaneState = field(default_factory=LaneState)
    container: Box | None = None
    #: the lane's control directory on this machine (``report/lanes/<lane>-<purpose>``), bound into the box
    control_root: Path | None = None
    package_dir: str | None = None
    ports: dict[str, int] = field(default_factory=dict)
    gpu_uuid: str | None = None  # the lane's GPU (the requested one, else the only one visible)
    gpus_requested: bool = False
    scope: audit.AuditScope | None = None
    #: the name of the lane's box (``BoxSpec.name``), once started
    box_name: str | None = None
    #: what the lane's boxes are started from (kept for a fresh box of the same lane)
    image_info: ImageInfo | None = None
    package_info: PackageInfo | None = None
    gpus: str = "none"

    @property
    def served_model(self) -> str:
        args = self.config.engine_argv(self.lane)
        if "--served-model-name" in args:
            return args[args.index("--served-model-name") + 1]
        return self.config.model

    @property
    def box(self) -> Box:
        if self.container is None:
            raise StepFailed(f"{self.lane.name}: no lane box (lane start failed)")
        return self.container

    @property
    def control(self) -> ControlDir:
        """The control directory as the box's runtime reaches it."""
        return self.box.control()

    @property
    def audit_scope(self) -> audit.AuditScope:
        if self.scope is None:
            raise StepFailed(f"{self.lane.name}: no audit baseline (lane start failed)")
        return self.scope

    # ---- lane start ----------------------------------------------------------------------------------------
    def binds(self) -> list[Bind]:
        probe = probe_copy.session_copy(self.recorder.store.report_dir)
        if not probe.is_dir():
            raise StepFailed(f"{self.lane.name}: no probe copy at {probe} (the session start makes it)")
        assert self.control_root is not None
        binds = [Bind(PROBE, probe, read_only=True), Bind(CONTROL, self.control_root, read_only=False)]
        if self.config.cpu_smoke:
            smoke = probe_copy.smoke_copy(self.recorder.store.report_dir)
            if not smoke.is_dir():
                raise StepFailed(f"{self.lane.name}: no CPU smoke platform copy at {smoke} (made at session start)")
            binds.append(Bind(SMOKE, smoke, read_only=True))
        if self.config.unit_command and self.config.overlay is not None:
            binds.append(Bind(CHECKOUT, self.config.overlay, read_only=True))
        cache = self.config.model_cache
        if cache is not None:
            target = f"{MODEL_CACHE}/hub" if any(cache.glob("models--*")) else MODEL_CACHE
            binds.append(Bind(target, cache, read_only=True))
        return binds

    def overlay_binds(self) -> list[Bind]:
        if not (self.lane.overlaid and self.overlay):
            return []
        assert self.package_dir is not None
        return [Bind(item.image_path(self.package_dir), item.host_path, read_only=True) for item in self.overlay]

    def start(self, image: ImageInfo, package_info: PackageInfo, gpus: str) -> None:
        """Start the lane's box (through the runtime) and record the environment evidence."""
        self.image_info, self.package_info, self.gpus = image, package_info, gpus
        self.gpus_requested = gpus != "none"
        self.package_dir = package_info.get("package_dir")
        self.ports = self.config.fixed_ports(self.lane) or dict(
            zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=False)
        )
        self.start_box(self.recorder.purpose)

    def start_box(self, purpose: Purpose, *, private_ipc: bool = False, adopts: str | None = None) -> None:
        """The box itself: its control directory, the box from the runtime, its baseline and its evidence."""
        assert self.image_info is not None and self.package_info is not None
        self.control_root = self.recorder.store.report_dir / "lanes" / f"{self.lane.name}-{purpose}"
        MountedControlDir(self.control_root).create([f.module for f in self.overlay] if self.lane.overlaid else [])
        spec = BoxSpec(
            name=f"vsnap-{self.session_id}-{self.lane.name}-{purpose}",
            engine=self.lane.image,
            image_id=self.image_info.id,
            labels=lane_labels(self.session_id, self.lane.name),
            environment=lane_environment(self.config, self.lane),
            binds=self.binds(),
            overlay_binds=self.overlay_binds(),
            privileges=self.config.privileges,
            gpus=self.gpus,
            ports=tuple(self.ports.values()),
            purpose=purpose,
            private_ipc=private_ipc,
            adopts=adopts,
        )
        self.container = self.runtime.start(spec)
        self.box_name = spec.name
        self.box.ensure_dir(WORK, 0o700)
        facts = self.box.facts(gpus=self.gpus != "none")
        self.scope = audit.AuditScope(
            lane=self.lane.name,
            grace=self.config.cleanup_grace,
            gpus=self.config.gpus != "none",
            claims=self.recorder.store.report_dir / "lanes" / "link-remaps",
            link_remaps_baseline=audit.link_remaps(self.box.shm()),
        )
        self.record_environment(purpose, facts)

    def record_environment(self, purpose: Purpose, facts: BoxFacts) -> None:
        assert self.image_info is not None and self.package_info is not None
        image, gpus = self.image_info, self.gpus
        versions: dict[str, str | None] = {k: v for k, v in self.package_info.items() if isinstance(v, str | None)}
        versions["criu"] = facts.criu
        gpu: model.Gpu | None = None
        if facts.gpus:
            first = facts.gpus[0]
            gpu = {"name": first.name, "uuid": first.uuid, "driver": first.driver,
                   "memory_mib": first.memory_mib, "count": len(facts.gpus)}  # fmt: skip
            versions["driver"] = first.driver
            # the GPU this lane's snapshot must name: the one requested, else the only one it sees
            self.gpu_uuid = gpus if gpus.startswith("GPU-") else (first.uuid if len(facts.gpus) == 1 else None)
        versions["cuda"] = facts.cuda
        record = model.EnvironmentRecord(
            kind="environment",
            time=utc_now(),
            runner=self.lane.column,
            arm=self.lane.arm,
            lane=self.lane.name,
            image={
                "ref": self.lane.image,
                "id": image.id,
                "repo_digests": image.repo_digests,
                "labels": image.labels,
                "platform": image.platform,
            },
            container_id=self.box.id,
            versions=dict(versions),
            gpu=gpu,
            package_dir=self.package_dir,
            ports=self.ports,
            environment=lane_environment(self.config, self.lane),
            overlaid=self.lane.overlaid,
            worker=os.environ.get("PYTEST_XDIST_WORKER", "main"),
            purpose=purpose,
        )
        if self.lane.variant:
            record["variant"] = self.lane.variant.name
        if self.lane.overlaid and self.config.overlay is not None:
            record["overlay_checkout"] = overlay.checkout_state(self.config.overlay, self.config.overlay_ref)
        build = ci_build(os.environ)
        if build:
            record["ci"] = build
        self.recorder.store.write(record)

    def remove(self) -> None:
        """Remove the lane's box, and the /dev/shm files its artifacts needed (they outlive the box where its
        /dev/shm is the host's)."""
        if self.container is None:
            return
        owned = sorted(self.state.shm_owned)
        try:
            if owned:
                removed = self.container.sh("rm -f -- " + " ".join(shlex.quote(p) for p in owned), 60)
                code = removed.exit_code
                log.info("%s: removed its artifacts' /dev/shm files %s (exit %s)", self.lane.name, owned, code)
        except Exception as exc:  # the box goes all the same
            log.warning("%s: cannot remove its artifacts' /dev/shm files %s: %s", self.lane.name, owned, exc)
        finally:
            self.container.remove()

    @contextlib.contextmanager
    def fresh_box(self) -> Iterator[LaneRun]:
        """A new box of this lane's image (the same environment, probe, model cache, overlay and GPU) with an IPC
        namespace and an empty ``/dev/shm`` of its own, holding nothing of this lane but a copy of its artifact:
        what a new pod or node that starts from the artifact alone looks like. Removed after."""
        # a state of its own: what the fresh box records (and removes) is not the lane's
        state = dataclasses.replace(self.state, shm_owned=set())
        fresh = dataclasses.replace(self, container=None, control_root=None, scope=None, state=state)
        try:
            # the trees it restores were created in this lane's box: they are the fresh box's own processes
            fresh.start_box("fresh-box", private_ipc=True, adopts=self.box_name)
            with tempfile.TemporaryDirectory(prefix="vsnap-artifact-") as scratch:
                archive = Path(scratch) / "artifact.tar"
                with self.recorder.engine_wait():  # the artifact's bytes, moved as a deployment would
                    self.box.export_tree(ARTIFACT, archive)
                    fresh.box.import_tree(archive, WORK)
            yield fresh
        finally:
            fresh.remove()

    # ---- servers -------------------------------------------------------------------------------------------
    def endpoint(self, port: int) -> tuple[str, int]:
        return self.box.endpoint(port)

    def pid_alive(self, pid: int) -> bool:
        """Whether a process with this PID exists in the box."""
        return bool(self.box.look([pid])[0])

    def serve(self, rec: StepEvidence) -> ServerHandle:
        """Start an ordinary ``vllm serve`` and wait until ``/health`` answers."""
        port = self.ports["ordinary"]
        host, reach = self.endpoint(port)
        argv = ["vllm", "serve", *self.config.engine_argv(self.lane), "--host", "127.0.0.1", "--port", str(port)]
        rec.argv = argv
        log_name = f"{control_files.LOGS_DIR}/ordinary-{int(time.time())}.log"
        assert self.control_root is not None
        self.recorder.keep_log(rec, self.control_root / log_name)
        started = time.time()
        with engine.ListenerWatch(reach, host) as watch:
            root = self.box.spawn(argv, f"{CONTROL}/{log_name}")
            handle = ServerHandle(port=port, root_pid=root, log_in_box=f"{CONTROL}/{log_name}")

            def died() -> str | None:
                if self.pid_alive(root):
                    return None
                text = self.control.read_text(log_name) or ""
                rec.results["vllm_reason"] = vllm_reason(text)
                skip_if_limitation(
                    rec.results["vllm_reason"], cpu_smoke=self.config.cpu_smoke, variant=self.lane.variant
                )
                return f"vllm serve exited before it was ready: {vllm_reason(text)}\nlog tail:\n{text[-3000:]}"

            try:
                with self.recorder.engine_wait():
                    ready, _ = engine.wait_until_measured(
                        lambda: engine.health_ok(reach, host), self.config.timeouts["serve"], abort=died
                    )
            except engine.EngineError as exc:
                self.state.server = handle
                raise StepFailed(str(exc)) from None
        rec.results["ready_seconds"] = round(ready - started, 3)
        if watch.notice_latency is not None:
            rec.results["notice_latency_s"] = round(watch.notice_latency, 4)
        if watch.first_bound is not None:
            rec.results["bind_to_ready_s"] = round(max(0.0, ready - watch.first_bound), 4)
        handle.pids = audit.session_pids(self.box, root)
        self.state.server = handle
        return handle

    def stop(self, handle: ServerHandle) -> list[LeftoverProcess]:
        """The strict stop: SIGTERM the tree, leftovers after ``--vsnap-cleanup-grace`` recorded and killed."""
        manifest = self.state.manifest
        # the manifest's CUDA holders hold the GPU when the server is the snapshot's restored tree
        holders = manifest.get("cuda_holders") or [] if handle.root_pid in (manifest.get("process_tree") or []) else []
        with self.recorder.engine_wait():
            return audit.strict_stop(self.box, handle, self.config.cleanup_grace, [int(p) for p in holders])

    def audit(self, pids: list[int], ports: list[int]) -> CleanupAudit:
        return self.cleanup_audit(pids, ports)

    def cleanup_audit(self, pids: list[int], ports: list[int], grace: float | None = None) -> CleanupAudit:
        """The audit with the lane's grace, or ``grace`` (0: one look, nothing waited for)."""
        scope = self.audit_scope if grace is None else dataclasses.replace(self.audit_scope, grace=grace)
        return audit.cleanup_audit(self.box, scope, pids, ports)

    def health(self, port: int) -> bool:
        with self.recorder.engine_wait():
            host, reach = self.endpoint(port)
            return engine.health_ok(reach, host)

    def gpu_apps(self) -> set[int] | None:
        """The PIDs nvidia-smi lists as compute apps, seen from the lane; None when the lane has no GPU."""
        if self.gpu_uuid is None and not self.gpus_requested:
            return None
        apps = self.box.gpu_apps()
        if apps is None:
            raise StepFailed(f"{self.lane.name}: the lane has GPUs but no nvidia-smi to list their compute apps")
        return apps

    def alive(self, pids: list[int]) -> list[int]:
        """Which of ``pids`` still exist (one round trip)."""
        return self.box.look(pids)[0] if pids else []

    def identify(self, pids: list[int]) -> dict[int, str]:
        return self.box.identify(pids)

    def restored_log_tail(self, lines: int = 40) -> str:
        """What the restored engine wrote since the restore (the artifact's ``child.log`` past its snapshot size,
        to which vLLM cuts it before every restore), last lines: never the create's own output."""
        size = self.box.read_text(f"{ARTIFACT}/child.log.snapshot-size")
        return written_since_snapshot(self.box.read_bytes(f"{ARTIFACT}/child.log"), size, lines)

    def server_log(self, rec: StepEvidence) -> str:
        """The ordinary server's log (the step's first log file)."""
        return (self.recorder.store.report_dir / rec.logs[0]).read_text(errors="replace")

    def restored_server(self, port: int) -> ServerHandle | None:
        root = self.restored_root()
        if root is None:
            return None
        return ServerHandle(port=port, root_pid=root, pids=audit.session_pids(self.box, root))

    def listening(self, port: int) -> bool:
        return audit.port_listening(self.box, port)

    # ---- observations through the engine's API ---------------------------------------------------------------
    def shape_answers(self, port: int, requests: list[shapes.Request]) -> dict[str, list[Canary]]:
        """The request shapes' answers (the concurrent ones all in flight at once)."""
        host, reach = self.endpoint(port)
        timeout = self.config.timeouts["http"]

        def ask(r: shapes.Request) -> CanaryOutput:
            prompt = r.prompt if isinstance(r.prompt, str) else list(r.prompt)
            return engine.completion(
                reach, self.served_model, prompt, host=host, timeout=timeout, max_tokens=r.max_tokens,
                temperature=r.temperature, top_p=r.top_p, seed=r.seed,
            )  # fmt: skip

        with self.recorder.engine_wait():
            return shapes.send(requests, ask)

    def canaries(self, port: int, model: str | None = None) -> list[CanaryOutput]:
        """The canary plan's answers, from the served model or through ``model`` (a LoRA adapter's name)."""
        host, reach = self.endpoint(port)
        timeout = self.config.timeouts["http"]
        with self.recorder.engine_wait():
            return [
                engine.completion(reach, model or self.served_model, p, host=host, timeout=timeout, max_tokens=n)
                for p, n in canary_plan(self.config)
            ]

    def keep_adapter(self, name: str, path: str) -> KeptAdapter:
        """A LoRA adapter's files copied from the box into the report (``adapters/<lane>/<name>/``), with their
        sha256: the adapter the run asked is kept with its evidence."""
        store = self.recorder.store
        target = store.report_dir / "adapters" / self.lane.name / name
        files: dict[str, str] = {}
        for file in adapters.ADAPTER_FILES:
            data = self.box.read_bytes(f"{path.rstrip('/')}/{file}") if path else None
            if data is None:
                continue
            target.mkdir(parents=True, exist_ok=True)
            (target / file).write_bytes(data)
            files[file] = hashlib.sha256(data).hexdigest()
        return KeptAdapter(path=path, files=files, kept=store.relative(target) if files else None)

    def _metrics(self, port: int) -> Callable[[], str]:
        """A reader of the engine's ``/metrics`` text (an answer of the engine's: its time is the engine's)."""
        host, reach = self.endpoint(port)

        def metrics() -> str:
            with self.recorder.engine_wait():
                return engine.metrics_text(reach, host, self.config.timeouts["http"])

        return metrics

    def decode_speed(self, port: int) -> DecodeSpeed | None:
        """The fixed generation's speed (``vsnap_qual.engine.decode_speed``); None when ``--vsnap-decode-runs=0``."""
        runs = self.config.decode_runs
        if runs <= 0:
            return None
        host, reach = self.endpoint(port)
        timeout = self.config.timeouts["http"]
        prompt = self.config.prompts[0] if self.config.prompts else VLLM_CANARY_PROMPT

        def generate() -> int:
            with self.recorder.engine_wait():
                answer = engine.completion(
                    reach, self.served_model, prompt, host=host, timeout=timeout, max_tokens=decode_speed.TOKENS
                )
            return len(answer.token_ids)

        # the CPU samples are the harness's own work (a probe of the box), not the engine's time
        return decode_speed.measure(generate, runs, self._metrics(port), sample=self.box.cpu_sample)

    def prefix_cache(self, port: int, canary_ids: list[int]) -> PrefixCacheProbe:
        """The prefix-cache prompt asked twice, vLLM's counters read around each ask
        (``vsnap_qual.engine.prefix_cache``)."""
        host, reach = self.endpoint(port)
        timeout = self.config.timeouts["http"]

        def ask(ids: list[int]) -> CanaryOutput:
            with self.recorder.engine_wait():
                return engine.completion(
                    reach, self.served_model, ids, host=host, timeout=timeout, max_tokens=prefix_cache.ASK_TOKENS
                )

        return prefix_cache.measure(ask, self._metrics(port), canary_ids, self.config.max_model_len)

    def digests(self, port: int) -> dict[str, Digest]:
        host, reach = self.endpoint(port)
        with self.recorder.engine_wait():
            return engine.param_digests(reach, host=host, timeout=self.config.timeouts["http"])

    def kv(self, port: int, log_text: str | None = None) -> tuple[int | None, str]:
        """KV capacity in tokens from ``/metrics``, else from ``log_text`` when given."""
        host, reach = self.endpoint(port)
        with self.recorder.engine_wait():
            tokens = engine.kv_from_metrics(reach, host=host)
        if tokens is not None:
            return tokens, "metrics"
        if log_text is None:
            return None, "unavailable"
        tokens = engine.kv_from_log(log_text)
        return tokens, "log" if tokens is not None else "unavailable"

    def snapshot_kv(self) -> int | None:
        """KV capacity of a snapshot: profiled once at create, in ``child.log`` up to its snapshot size."""
        size_text = self.box.read_text(f"{ARTIFACT}/child.log.snapshot-size").strip()
        data = self.box.read_bytes(f"{ARTIFACT}/child.log") or b""
        if size_text.isdigit():
            data = data[: int(size_text)]
        return engine.kv_from_log(data.decode("utf-8", "replace"))

    # ---- snapshot commands and the artifact ---------------------------------------------------------------
    def command(
        self, rec: StepEvidence, argv: list[str], timeout_key: str, env: dict[str, str] | None, name: str
    ) -> ExecResult:
        """One recorded engine command of the step (its own log, its exit code in the evidence)."""
        rec.argv = argv
        with self.recorder.engine_wait():
            result = self.box.exec(argv, self.config.timeouts[timeout_key], env=env, log=self.recorder.log(rec, name))
        rec.exit_code = result.exit_code
        return result

    def snapshot(
        self,
        rec: StepEvidence,
        action: str,
        *args: str,
        timeout_key: str,
        env: dict[str, str] | None = None,
        name: str | None = None,
    ) -> ExecResult:
        return self.command(rec, ["vllm", "snapshot", action, *args], timeout_key, env, name or action)

    def restore(self, rec: StepEvidence, port: int, name: str, env: dict[str, str] | None = None) -> ExecResult:
        """``vllm snapshot restore ARTIFACT --host 127.0.0.1 --port PORT`` as one recorded step command."""
        return self.command(rec, restore_argv(port), "restore", env, name)

    def create_argv(self, target: str = ARTIFACT) -> list[str]:
        return [*self.config.engine_argv(self.lane), "--snapshot-dir", target]

    def snapshot_create(self, rec: StepEvidence) -> ExecResult:
        self.box.remove_path(ARTIFACT)
        return self.snapshot(rec, "create", *self.create_argv(), timeout_key="create")

    def snapshot_inspect(self, rec: StepEvidence, name: str = "inspect") -> ExecResult:
        return self.snapshot(rec, "inspect", ARTIFACT, timeout_key="inspect", name=name)

    def snapshot_restore(self, rec: StepEvidence, step: str) -> RestoreRun:
        port = self.ports[step]
        host, reach = self.endpoint(port)
        with engine.ListenerWatch(reach, host) as watch:
            result = self.restore(rec, port, name=step)
        return RestoreRun(result, port, watch.first_bound)

    def artifact_file(self, name: str) -> str:
        return self.box.read_text(f"{ARTIFACT}/{name}")

    def outside_files(self) -> list[str]:
        return artifact_deps.outside_files(self.box)

    def shm_names(self) -> set[str]:
        """The names in the box's ``/dev/shm`` now."""
        return {entry.name for entry in self.box.shm()}

    def shm_unheld(self, names: list[str]) -> ShmHolders | None:
        """Which of these ``/dev/shm`` names no process the box can read holds, and which processes it cannot read
        (:class:`ShmHolders`); None where the box cannot see every process that may hold one (a PID namespace of
        its own: another lane's, or the host's, are not in it)."""
        return self.box.shm_unheld(names) if self.box.host_pid_namespace else None

    def watch_exits(self, pids: list[int]) -> exits.ExitWatch:
        """How these processes end (the kernel's process events), where their PIDs are the host's."""
        if self.box.host_pid_namespace:
            return exits.ExitWatch(pids)
        return exits.ExitWatch(pids, why_not="the box has a PID namespace of its own")

    def claim_made_remaps(self, step: str) -> list[str]:
        """The ``/dev/shm/link_remap.*`` paths the lane's artifact names (its dump made them), claimed for this
        lane's ``step`` in the run's claims, so a leak of them is this lane's whichever lane sees it first."""
        assert self.scope is not None
        made = [p for p in artifact_deps.named(self.box) if p.rsplit("/", 1)[-1].startswith(audit.LINK_REMAP)]
        audit.claim_made_remaps(self.scope, made, step)
        return made

    def absent_files(self, paths: list[str]) -> list[str]:
        return artifact_deps.absent(self.box, paths)

    def run_unit_command(self, rec: StepEvidence) -> tuple[ExecResult, str | None, str | None]:
        """The unit command with ``sh -c`` from the checkout, JUnit to the control directory: its result, the
        JUnit's text and where it is kept with the evidence (None, None when the command wrote none)."""
        name = "unit-junit.xml"
        self.control.remove(name)
        env = {"VSNAP_JUNIT": f"{CONTROL}/{name}", "PYTHONDONTWRITEBYTECODE": "1"}
        argv = ["sh", "-c", f"cd {CHECKOUT} && {self.config.unit_command}"]
        result = self.command(rec, argv, "exec", env, "unit")
        text = self.control.read_text(name)
        if text is None or not text.strip():
            return result, None, None
        kept = self.recorder.store.log_path(f"{self.lane.name}-{self.recorder.purpose}", "unit-junit", "xml")
        self.recorder.keep_log(rec, self.recorder.store.write_text(kept, text))
        return result, text, self.recorder.store.relative(kept)

    def keep_child_log(self, rec: StepEvidence) -> None:
        self.recorder.store.write_text(self.recorder.log(rec, "create-child"), self.artifact_file("child.log"))

    def restored_root(self, artifact: str = ARTIFACT) -> int | None:
        text = self.box.read_text(f"{artifact}/restored.pid").strip()
        return int(text) if text.isdigit() else None

    def artifact_digest(self, artifact: str = ARTIFACT) -> str:
        """A digest over the artifact's files (path, mode, content): the fault artifact's from its kept hashes
        (only the changed files read, :mod:`artifact_files`); one the box cannot read differs from every digest."""
        files = self.state.artifact_files
        if files is not None and artifact == files.artifact:
            try:
                return files.digest(self.box)
            except ArtifactFilesError as exc:
                return f"unreadable: {exc}"
        return self.box.digest_tree(artifact)

    # ---- the lane's environment ----------------------------------------------------------------------------
    def environment_id(self) -> str:
        return self.box.id

    def restart(self) -> None:
        with self.recorder.engine_wait():
            self.box.restart()

    def overlay_imports(self) -> list[OverlayFileResult]:
        """The overlaid modules as actually imported in each engine process (from the probe's reports)."""
        return overlay.imported(
            read_json_files(self.control, control_files.IMPORTS_GLOB), self.overlay, self.package_dir or ""
        )

    def fresh_import(self, module: str) -> FreshImport:
        """A fresh interpreter's import of ``module``: exit code, its file and the file's sha256."""
        script = (
            f"import importlib, hashlib; m = importlib.import_module({module!r}); "
            "print(m.__file__); print(hashlib.sha256(open(m.__file__, 'rb').read()).hexdigest())"
        )
        fresh = self.box.exec(["python3", "-c", script], self.config.timeouts["exec"])
        lines = fresh.stdout.strip().splitlines()
        return FreshImport(
            exit_code=fresh.exit_code,
            path=lines[0] if lines else None,
            sha256=lines[1] if len(lines) > 1 else None,
        )

    def probe_loaded_pids(self) -> list[int]:
        names = self.control.names(control_files.LOADED_GLOB)
        return sorted(pid for pid in (control_files.pid_of(n) for n in names) if pid is not None)
