"""A lane's engine servers: the ordinary ``vllm serve`` started and waited for, a restored server found, either
stopped strictly and audited; their processes, how they end, and what they wrote. Implements
:class:`vsnap_qual.lane.protocols.Servers` over a box."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from vsnap_qual.box import Box, ControlDir
from vsnap_qual.config import LaneSpec, QualConfig
from vsnap_qual.contract import ARTIFACT, CONTROL
from vsnap_qual.engine import client
from vsnap_qual.lane import audit, exits
from vsnap_qual.lane.audit import ServerHandle
from vsnap_qual.lane.state import ArtifactState
from vsnap_qual.model import CleanupAudit, LeftoverProcess, ServeRecord
from vsnap_qual.probe.vsnap_probe import control_files
from vsnap_qual.recorder import StepEvidence, StepRecorder
from vsnap_qual.vllm_words import StepFailed, skip_if_limitation, vllm_reason


class ServeFailed(StepFailed):
    """``vllm serve`` never became ready; its server (started, perhaps still running) is ``handle``."""

    def __init__(self, message: str, handle: ServerHandle) -> None:
        super().__init__(message)
        self.handle = handle


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


@dataclass(frozen=True, kw_only=True)
class LaneServers:
    """The servers of one lane's box."""

    box: Box
    control: ControlDir
    #: the control directory on this machine (the ordinary server's log is kept from there)
    control_root: Path
    recorder: StepRecorder
    config: QualConfig
    spec: LaneSpec
    #: the ordinary server's port
    port: int
    scope: audit.AuditScope
    #: the lane's artifact (a restored tree's CUDA holders are its manifest's)
    artifact: ArtifactState
    #: whether the lane has a GPU whose compute apps can be listed
    has_gpu: bool

    def serve(self, rec: StepEvidence[ServeRecord]) -> ServerHandle:
        """Start an ordinary ``vllm serve`` and wait until ``/health`` answers (:class:`ServeFailed` when it never
        does); its start is recorded in the step's results (:class:`model.ServeRecord`), as is vLLM's reason where
        it died first."""
        port = self.port
        host, reach = self.box.endpoint(port)
        argv = ["vllm", "serve", *self.config.engine_argv(self.spec), "--host", "127.0.0.1", "--port", str(port)]
        rec.argv = argv
        log_name = f"{control_files.LOGS_DIR}/ordinary-{int(time.time())}.log"
        self.recorder.keep_log(rec, self.control_root / log_name)
        started = time.time()
        with client.ListenerWatch(reach, host) as watch:
            root = self.box.spawn(argv, f"{CONTROL}/{log_name}")
            handle = ServerHandle(port=port, root_pid=root, log_in_box=f"{CONTROL}/{log_name}")

            def died() -> str | None:
                if self.alive([root]):
                    return None
                text = self.control.read_text(log_name) or ""
                rec.results["vllm_reason"] = vllm_reason(text)
                skip_if_limitation(
                    rec.results["vllm_reason"], cpu_smoke=self.config.cpu_smoke, variant=self.spec.variant
                )
                return f"vllm serve exited before it was ready: {vllm_reason(text)}\nlog tail:\n{text[-3000:]}"

            try:
                with self.recorder.engine_wait():
                    ready, _ = client.wait_until_measured(
                        lambda: client.health_ok(reach, host), self.config.timeouts["serve"], abort=died
                    )
            except client.EngineError as exc:
                raise ServeFailed(str(exc), handle) from None
        rec.results["ready_seconds"] = round(ready - started, 3)
        if watch.notice_latency is not None:
            rec.results["notice_latency_s"] = round(watch.notice_latency, 4)
        if watch.first_bound is not None:
            rec.results["bind_to_ready_s"] = round(max(0.0, ready - watch.first_bound), 4)
        handle.pids = audit.session_pids(self.box, root)
        return handle

    def stop(self, handle: ServerHandle) -> list[LeftoverProcess]:
        """The strict stop: SIGTERM the tree, leftovers after ``--vsnap-cleanup-grace`` recorded and killed."""
        manifest = self.artifact.manifest
        # the manifest's CUDA holders hold the GPU when the server is the snapshot's restored tree
        holders = manifest.get("cuda_holders") or [] if handle.root_pid in (manifest.get("process_tree") or []) else []
        with self.recorder.engine_wait():
            return audit.strict_stop(self.box, handle, self.config.cleanup_grace, [int(p) for p in holders])

    def audit(self, pids: list[int], ports: list[int], grace: float | None = None) -> CleanupAudit:
        """The audit with the lane's grace, or ``grace`` (0: one look, nothing waited for)."""
        scope = self.scope if grace is None else dataclasses.replace(self.scope, grace=grace)
        return audit.cleanup_audit(self.box, scope, pids, ports)

    def alive(self, pids: list[int]) -> list[int]:
        """Which of ``pids`` still exist (one round trip)."""
        return self.box.look(pids)[0] if pids else []

    def identify(self, pids: list[int]) -> dict[int, str]:
        return self.box.identify(pids)

    def gpu_apps(self) -> set[int] | None:
        """The PIDs nvidia-smi lists as compute apps, seen from the lane; None when the lane has no GPU."""
        if not self.has_gpu:
            return None
        apps = self.box.gpu_apps()
        if apps is None:
            raise StepFailed(f"{self.spec.name}: the lane has GPUs but no nvidia-smi to list their compute apps")
        return apps

    def gpu_memory(self, pids: list[int]) -> int | None:
        """The GPU memory the compute apps among ``pids`` use together, MiB; None when the lane has no GPU or
        ``nvidia-smi`` cannot say."""
        if not self.has_gpu:
            return None
        used = self.box.gpu_memory()
        return None if used is None else sum(mib for pid, mib in used.items() if pid in set(pids))

    def restored_server(self, port: int) -> ServerHandle | None:
        text = self.box.read_text(f"{ARTIFACT}/restored.pid").strip()
        if not text.isdigit():
            return None
        root = int(text)
        return ServerHandle(port=port, root_pid=root, pids=audit.session_pids(self.box, root))

    def listening(self, port: int) -> bool:
        return audit.port_listening(self.box, port)

    def watch_exits(self, pids: list[int]) -> exits.ExitWatch:
        """How these processes end (the kernel's process events), where their PIDs are the host's."""
        if self.box.host_pid_namespace:
            return exits.ExitWatch(pids)
        return exits.ExitWatch(pids, why_not="the box has a PID namespace of its own")

    def restored_log_tail(self, lines: int = 40) -> str:
        """What the restored engine wrote since the restore (the artifact's ``child.log`` past its snapshot size,
        to which vLLM cuts it before every restore), last lines: never the create's own output."""
        size = self.box.read_text(f"{ARTIFACT}/child.log.snapshot-size")
        return written_since_snapshot(self.box.read_bytes(f"{ARTIFACT}/child.log"), size, lines)

    def server_log(self, rec: StepEvidence[object]) -> str:
        """The ordinary server's log (the step's first log file)."""
        return (self.recorder.store.report_dir / rec.logs[0]).read_text(errors="replace")
