"""The lane as its steps see it: one narrow protocol per service of a lane (:class:`Environment`, :class:`Servers`,
:class:`EngineApi`, :class:`SnapshotCli`, :class:`OverlayUnit`), and per kind of step the services and state that
step reads (:class:`ReferenceLane`, :class:`ServingLane`, :class:`FreshBoxLane`, :class:`OverlayLane`,
:class:`UnitLane`). ``lane.LaneRun`` implements them over any runtime's box; the unit tests' fake lane implements
the same members and the steps run on it unchanged. The fault layer's lane (``faults.FaultLane``) is written against
the same service protocols."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from vsnap_qual.box import ExecResult, ShmHolders
from vsnap_qual.config import LaneSpec, QualConfig
from vsnap_qual.contract import ARTIFACT
from vsnap_qual.engine import shapes
from vsnap_qual.engine.client import HEALTH_TIMEOUT, CanaryOutput
from vsnap_qual.lane.audit import ServerHandle
from vsnap_qual.lane.exits import ExitWatch
from vsnap_qual.lane.state import LifecycleState, Peers
from vsnap_qual.model import (
    ApiAnswer,
    ApiRequest,
    BoundaryRequest,
    Canary,
    CleanupAudit,
    DecodeSpeed,
    Digest,
    FreshImport,
    KeptAdapter,
    LeftoverProcess,
    OverlayFileResult,
    PrefixCacheProbe,
    ServeRecord,
    ServingSeries,
)
from vsnap_qual.overlay import OverlayFile
from vsnap_qual.recorder import StepEvidence


@dataclass(frozen=True)
class RestoreRun:
    """One ``vllm snapshot restore`` and when its listener first accepted a connection."""

    result: ExecResult
    port: int
    first_bound: float | None
    #: the request sent while its recovery was held (``restore(..., during_hold=...)``; issue 44 item 3)
    held: BoundaryRequest | None = None


# ---- the services ------------------------------------------------------------------------------------------------
class Environment(Protocol):
    """The lane's box as an environment: which it is, its restart, the GPU it has."""

    @property
    def gpu_uuid(self) -> str | None:
        """The GPU this lane's snapshot must name: the one requested, else the only one it sees (None: no GPU)."""

    def id(self) -> str:
        """The box's identity (a container's ID): the same before and after a restart."""

    def restart(self) -> None:
        """Stop and start the same box."""


class Servers(Protocol):
    """The engine servers of a lane: started, stopped and audited, their processes and logs."""

    def serve(self, rec: StepEvidence[ServeRecord]) -> ServerHandle:
        """Start an ordinary ``vllm serve`` and wait until ``/health`` answers."""

    def stop(self, handle: ServerHandle) -> list[LeftoverProcess]:
        """The strict stop: SIGTERM the tree, leftovers after ``--vsnap-cleanup-grace`` recorded and killed."""

    def audit(self, pids: list[int], ports: list[int], grace: float | None = None) -> CleanupAudit:
        """The cleanup audit with the lane's grace, or ``grace`` (0: one look, nothing waited for)."""

    def alive(self, pids: list[int]) -> list[int]:
        """Which of ``pids`` still exist (one round trip)."""

    def identify(self, pids: list[int]) -> dict[int, str]:
        """Each live PID's start time (a process is its PID and its start time)."""

    def gpu_apps(self) -> set[int] | None:
        """The PIDs nvidia-smi lists as compute apps, seen from the lane; None when the lane has no GPU."""

    def gpu_memory(self, pids: list[int]) -> int | None:
        """The GPU memory the compute apps among ``pids`` use together, MiB; None when the lane has no GPU."""

    def restored_server(self, port: int) -> ServerHandle | None:
        """The restored server (``restored.pid``'s tree) listening on ``port``; None without ``restored.pid``."""

    def listening(self, port: int) -> bool:
        """Whether something listens on ``port`` in the box."""

    def watch_exits(self, pids: list[int]) -> ExitWatch:
        """How these processes end (the kernel's process events), where their PIDs are the host's."""

    def restored_log_tail(self, lines: int = 40) -> str:
        """What the restored engine wrote since the restore, last lines."""

    def server_log(self, rec: StepEvidence[object]) -> str:
        """The ordinary server's log (the step's first log file)."""


class EngineApi(Protocol):
    """What the lane asks of its engine over HTTP at the box's endpoint, the engine's time accounted."""

    @property
    def served_model(self) -> str:
        """The model name the engine serves (``--served-model-name``, else the model)."""

    def health(self, port: int, timeout: float = HEALTH_TIMEOUT) -> bool:
        """Whether ``/health`` answers 200 within ``timeout`` seconds."""

    def canaries(self, port: int, model: str | None = None) -> list[CanaryOutput]:
        """The canary plan's answers, from the served model or through ``model`` (a LoRA adapter's name)."""

    def digests(self, port: int) -> dict[str, Digest]:
        """The parameter and buffer digests (``/collective_rpc``)."""

    def kv(self, port: int, log_text: str | None = None) -> tuple[int | None, str]:
        """KV capacity in tokens from ``/metrics``, else from ``log_text`` when given; and where it came from."""

    def shape_answers(self, port: int, requests: list[shapes.Request]) -> dict[str, list[Canary]]:
        """The request shapes' answers (the concurrent ones all in flight at once)."""

    def api_answers(self, port: int, requests: Sequence[ApiRequest]) -> dict[str, ApiAnswer]:
        """The API checks' requests answered, by name (one with no answer at all recorded as such)."""

    def decode_speed(self, port: int) -> DecodeSpeed | None:
        """The fixed generation's speed; None when ``--vsnap-decode-runs=0``."""

    def prefix_cache(self, port: int, canary_ids: list[int]) -> PrefixCacheProbe:
        """The prefix-cache prompt asked twice, vLLM's counters read around each ask."""

    def keep_adapter(self, name: str, path: str) -> KeptAdapter:
        """A LoRA adapter's files kept with the evidence, with their sha256."""

    def serving_series(
        self, port: int, canary_ids: list[int], gpu_mib: Callable[[], int | None] | None
    ) -> ServingSeries:
        """The fixed request series: vLLM's counters around it, the engine's memory after each request."""

    def in_flight(self, port: int) -> bool | None:
        """Whether the engine reports a request running now (``vllm:num_requests_running``); None: not reported."""

    def boundary_request(
        self, port: int, prompt: str, max_tokens: int, started: float
    ) -> tuple[BoundaryRequest, list[int] | None]:
        """One greedy completion across a boundary, and what came of it (``vsnap_qual.engine.boundaries.send``)."""


class SnapshotCli(Protocol):
    """The snapshot commands as a user types them, each recorded in its step, and the artifact they leave: its
    files, the ``/dev/shm`` files it needs from outside, the link remaps its dump made."""

    def command(
        self, rec: StepEvidence[object], argv: list[str], timeout_key: str, env: dict[str, str] | None, name: str
    ) -> ExecResult:
        """One recorded engine command of the step (its own log, its exit code in the evidence)."""

    def snapshot(
        self,
        rec: StepEvidence[object],
        action: str,
        *args: str,
        timeout_key: str,
        env: dict[str, str] | None = None,
        name: str | None = None,
    ) -> ExecResult:
        """``vllm snapshot ACTION ARGS`` as one recorded step command."""

    def restore_at(
        self, rec: StepEvidence[object], port: int, name: str, env: dict[str, str] | None = None
    ) -> ExecResult:
        """``vllm snapshot restore ARTIFACT --host 127.0.0.1 --port PORT`` as one recorded step command."""

    def create_argv(self, target: str = ARTIFACT) -> list[str]:
        """``vllm snapshot create``'s arguments for ``target``: the lane's engine arguments."""

    def create(self, rec: StepEvidence[object]) -> ExecResult:
        """``vllm snapshot create`` of the lane's artifact (what was there before removed)."""

    def inspect(self, rec: StepEvidence[object], name: str = "inspect") -> ExecResult:
        """``vllm snapshot inspect`` of the lane's artifact."""

    def restore(
        self,
        rec: StepEvidence[object],
        step: str,
        during_hold: Callable[[int, float], BoundaryRequest] | None = None,
    ) -> RestoreRun:
        """``vllm snapshot restore`` on ``step``'s port, its listener watched from the harness; with
        ``during_hold``, its recovery held at the probe's point and ``during_hold(port, began)`` asked once it held."""

    def artifact_file(self, name: str) -> str:
        """A file of the artifact as text (empty when it has none)."""

    def keep_child_log(self, rec: StepEvidence[object]) -> None:
        """The create's ``child.log`` kept with the step's logs."""

    def snapshot_kv(self) -> int | None:
        """KV capacity of a snapshot: profiled once at create, in ``child.log`` up to its snapshot size."""

    def files_bytes(self) -> int:
        """The sizes of the artifact's regular files summed, but ``manifest.json``'s (written after it counted)."""

    def outside_files(self) -> list[str]:
        """The ``/dev/shm`` files the artifact needs and does not carry."""

    def absent_files(self, paths: list[str]) -> list[str]:
        """Which of ``paths`` are gone from the box."""

    def claim_made_remaps(self, step: str) -> list[str]:
        """The link remaps the artifact names, claimed as this lane's ``step``'s."""

    def shm_names(self) -> set[str]:
        """The names in the box's ``/dev/shm`` now."""

    def shm_unheld(self, names: list[str]) -> ShmHolders | None:
        """Which of these ``/dev/shm`` names no process holds; None where the box cannot see every holder."""


class OverlayUnit(Protocol):
    """The user's checkout in the lane: its overlaid files as the engine imported them, and its unit command."""

    @property
    def files(self) -> list[OverlayFile]:
        """The overlaid files (none on an arm without the overlay)."""

    def imports(self) -> list[OverlayFileResult]:
        """The overlaid modules as actually imported in each engine process (from the probe's reports)."""

    def fresh_import(self, module: str) -> FreshImport:
        """A fresh interpreter's import of ``module``: exit code, its file and the file's sha256."""

    def probe_loaded_pids(self) -> list[int]:
        """The engine processes the probe was loaded in."""

    def run_unit_command(self, rec: StepEvidence[object]) -> tuple[ExecResult, str | None, str | None]:
        """The unit command: its result, its JUnit's text and where it is kept (None, None: it wrote none)."""


# ---- what each kind of step reads of its lane ---------------------------------------------------------------------
class ReferenceLane(Protocol):
    """What a step that compares recorded references reads: the lane, the run's configuration, the lane's state
    and its peers' (``steps.compare_arms``)."""

    @property
    def spec(self) -> LaneSpec: ...
    @property
    def config(self) -> QualConfig: ...
    @property
    def state(self) -> LifecycleState: ...
    @property
    def peers(self) -> Peers: ...


class ServingLane(ReferenceLane, Protocol):
    """What a step that runs the engine reads: the references, and the environment, servers, engine API and
    snapshot commands (the ordinary reference, create, inspect, the restores, the restart)."""

    @property
    def environment(self) -> Environment: ...
    @property
    def servers(self) -> Servers: ...
    @property
    def api(self) -> EngineApi: ...
    @property
    def cli(self) -> SnapshotCli: ...


class FreshBoxLane(ServingLane, Protocol):
    """A serving lane that can start a fresh box of itself (``steps.fresh_box_restore``)."""

    def fresh_box(self) -> AbstractContextManager[ServingLane]:
        """A new box of the lane's image holding nothing of it but a copy of its artifact; removed after."""


class OverlayLane(Protocol):
    """What the overlay step reads: the checkout's files in the lane."""

    @property
    def overlay(self) -> OverlayUnit: ...


class UnitLane(OverlayLane, Protocol):
    """What the unit step reads: the checkout's command, the lane and its peers' outcomes."""

    @property
    def spec(self) -> LaneSpec: ...
    @property
    def config(self) -> QualConfig: ...
    @property
    def peers(self) -> Peers: ...
