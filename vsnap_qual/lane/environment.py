"""A lane's box and its environment: what the box binds, the box itself from the runtime, its baseline and its
``environment`` evidence, its restart, a fresh box of the same lane, and its removal. Every command a lane runs
runs in the one environment :func:`lane_environment` gives (create and restore must fingerprint alike)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shlex
import tempfile
from collections.abc import Iterator, Set
from dataclasses import dataclass, field
from pathlib import Path

from vsnap_qual import model, overlay
from vsnap_qual.box import Bind, Box, BoxFacts, BoxSpec, ImageInfo, free_ports, lane_labels
from vsnap_qual.clock import utc_now
from vsnap_qual.config import PORT_NAMES, LaneSpec, QualConfig
from vsnap_qual.contract import ARTIFACT, CHECKOUT, CONTROL, MODEL_CACHE, PROBE, SMOKE, WORK, Purpose
from vsnap_qual.control import MountedControlDir
from vsnap_qual.lane import audit
from vsnap_qual.overlay import OverlayFile
from vsnap_qual.recorder import StepRecorder
from vsnap_qual.run import probe_copy
from vsnap_qual.run.ci_build import ci_build
from vsnap_qual.run.package_probe import PackageInfo
from vsnap_qual.runtimes import Runtime
from vsnap_qual.vllm_words import StepFailed

log = logging.getLogger("vsnap_qual")


def lane_environment(config: QualConfig, spec: LaneSpec) -> dict[str, str]:
    """The one environment of every command in a lane (create and restore must fingerprint alike)."""
    env = {
        "VLLM_USE_V2_MODEL_RUNNER": spec.v2_flag,
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


@dataclass(kw_only=True)
class LaneEnvironment:
    """One lane's box (from its runtime) and what it was started from; knows nothing of the runtime that made it."""

    config: QualConfig
    spec: LaneSpec
    recorder: StepRecorder
    runtime: Runtime
    #: the overlaid files the box binds (none on an arm without the overlay)
    overlay: list[OverlayFile]
    session_id: str
    #: the lane's ports by use (``config.PORT_NAMES``), chosen as it starts
    ports: dict[str, int] = field(default_factory=dict)
    gpu_uuid: str | None = None  # the lane's GPU (the requested one, else the only one visible)
    gpus_requested: bool = False
    package_dir: str | None = None
    #: what the lane's boxes are started from (kept for a fresh box of the same lane)
    image_info: ImageInfo | None = None
    package_info: PackageInfo | None = None
    gpus: str = "none"
    container: Box | None = None
    #: the lane's control directory on this machine (``report/lanes/<lane>-<purpose>``), bound into the box
    control_root: Path | None = None
    scope: audit.AuditScope | None = None
    #: the name of the lane's box (``BoxSpec.name``), once started
    box_name: str | None = None

    @property
    def box(self) -> Box:
        if self.container is None:
            raise StepFailed(f"{self.spec.name}: no lane box (lane start failed)")
        return self.container

    @property
    def audit_scope(self) -> audit.AuditScope:
        if self.scope is None:
            raise StepFailed(f"{self.spec.name}: no audit baseline (lane start failed)")
        return self.scope

    def id(self) -> str:
        return self.box.id

    def restart(self) -> None:
        with self.recorder.engine_wait():
            self.box.restart()

    # ---- start -----------------------------------------------------------------------------------------------
    def binds(self) -> list[Bind]:
        probe = probe_copy.session_copy(self.recorder.store.report_dir)
        if not probe.is_dir():
            raise StepFailed(f"{self.spec.name}: no probe copy at {probe} (the session start makes it)")
        assert self.control_root is not None
        binds = [Bind(PROBE, probe, read_only=True), Bind(CONTROL, self.control_root, read_only=False)]
        if self.config.cpu_smoke:
            smoke = probe_copy.smoke_copy(self.recorder.store.report_dir)
            if not smoke.is_dir():
                raise StepFailed(f"{self.spec.name}: no CPU smoke platform copy at {smoke} (made at session start)")
            binds.append(Bind(SMOKE, smoke, read_only=True))
        if self.config.unit_command and self.config.overlay is not None:
            binds.append(Bind(CHECKOUT, self.config.overlay, read_only=True))
        cache = self.config.model_cache
        if cache is not None:
            target = f"{MODEL_CACHE}/hub" if any(cache.glob("models--*")) else MODEL_CACHE
            binds.append(Bind(target, cache, read_only=True))
        return binds

    def overlay_binds(self) -> list[Bind]:
        if not (self.spec.overlaid and self.overlay):
            return []
        assert self.package_dir is not None
        return [Bind(item.image_path(self.package_dir), item.host_path, read_only=True) for item in self.overlay]

    def start(self, image: ImageInfo, package_info: PackageInfo, gpus: str) -> None:
        """Start the lane's box (through the runtime) and record the environment evidence."""
        self.image_info, self.package_info, self.gpus = image, package_info, gpus
        self.gpus_requested = gpus != "none"
        self.package_dir = package_info.get("package_dir")
        self.ports = self.config.fixed_ports(self.spec) or dict(
            zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=False)
        )
        self.start_box(self.recorder.purpose)

    def start_box(self, purpose: Purpose, *, private_ipc: bool = False, adopts: str | None = None) -> None:
        """The box itself: its control directory, the box from the runtime, its baseline and its evidence."""
        assert self.image_info is not None and self.package_info is not None
        self.control_root = self.recorder.store.report_dir / "lanes" / f"{self.spec.name}-{purpose}"
        MountedControlDir(self.control_root).create([f.module for f in self.overlay] if self.spec.overlaid else [])
        spec = BoxSpec(
            name=f"vsnap-{self.session_id}-{self.spec.name}-{purpose}",
            engine=self.spec.image,
            image_id=self.image_info.id,
            labels=lane_labels(self.session_id, self.spec.name),
            environment=lane_environment(self.config, self.spec),
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
            lane=self.spec.name,
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
            runner=self.spec.column,
            arm=self.spec.arm,
            lane=self.spec.name,
            image={
                "ref": self.spec.image,
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
            environment=lane_environment(self.config, self.spec),
            overlaid=self.spec.overlaid,
            worker=os.environ.get("PYTEST_XDIST_WORKER", "main"),
            purpose=purpose,
        )
        if self.spec.variant:
            record["variant"] = self.spec.variant.name
        if self.spec.overlaid and self.config.overlay is not None:
            record["overlay_checkout"] = overlay.checkout_state(self.config.overlay, self.config.overlay_ref)
        build = ci_build(os.environ)
        if build:
            record["ci"] = build
        self.recorder.store.write(record)

    # ---- a fresh box, and the end --------------------------------------------------------------------------
    @contextlib.contextmanager
    def fresh_box(self, owned: Set[str]) -> Iterator[LaneEnvironment]:
        """A new box of this lane's image (the same environment, probe, model cache, overlay and GPU) with an IPC
        namespace and an empty ``/dev/shm`` of its own, holding nothing of this lane but a copy of its artifact:
        what a new pod or node that starts from the artifact alone looks like. Removed after, with the ``/dev/shm``
        files in ``owned`` (what the fresh box's artifacts need, gathered while it lives)."""
        fresh = dataclasses.replace(self, container=None, control_root=None, scope=None)
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
            fresh.remove(owned)

    def remove(self, owned: Set[str] = frozenset()) -> None:
        """Remove the lane's box, and ``owned``: the /dev/shm files its artifacts needed (they outlive the box where
        its /dev/shm is the host's)."""
        if self.container is None:
            return
        files = sorted(owned)
        try:
            if files:
                removed = self.container.sh("rm -f -- " + " ".join(shlex.quote(p) for p in files), 60)
                code = removed.exit_code
                log.info("%s: removed its artifacts' /dev/shm files %s (exit %s)", self.spec.name, files, code)
        except Exception as exc:  # the box goes all the same
            log.warning("%s: cannot remove its artifacts' /dev/shm files %s: %s", self.spec.name, files, exc)
        finally:
            self.container.remove()
