"""One fake lane for the unit tests, no Docker at all: a lane's shape (``vsnap_qual.lane.LaneRun``: its spec,
configuration, recorder, state, peers, ports, box, control directory and its five services) over the in-memory box
(:class:`tests.support.memory_box.MemoryBox`, whose named operations are recorded here), each service answering as
the test scripts it through the lane's own fields. The lifecycle's steps (``vsnap_qual.lane.protocols``) and the
fault layer (``vsnap_qual.faults.FaultLane``) run on it unchanged: :func:`lifecycle_lane` and :func:`fault_lane`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tests.support.memory_box import MemoryBox
from vsnap_qual import options
from vsnap_qual.box import Bind, BoxSpec, ExecResult, RuntimeFailure, ShmHolders
from vsnap_qual.config import LaneSpec, QualConfig
from vsnap_qual.contract import ARTIFACT, CONTROL, WORK
from vsnap_qual.control import MountedControlDir
from vsnap_qual.engine import boundaries, prefix_cache, shapes
from vsnap_qual.engine.client import HEALTH_TIMEOUT, CanaryOutput
from vsnap_qual.evidence import EvidenceStore
from vsnap_qual.faults import FaultLane
from vsnap_qual.lane.audit import ServerHandle
from vsnap_qual.lane.exits import ExitWatch
from vsnap_qual.lane.protocols import FreshBoxLane, RestoreRun, UnitLane
from vsnap_qual.lane.state import ArtifactState, FaultState, LifecycleState, Peers
from vsnap_qual.model import (
    ApiAnswer,
    ApiChoice,
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
from vsnap_qual.recorder import StepEvidence, StepRecorder
from vsnap_qual.run.configure import build_config

S = TypeVar("S", bound=ArtifactState)

#: vLLM's canary as the fake engine answers it (``CanaryOutput``)
REF = CanaryOutput("The capital of France is", [12095], " Paris", -0.42)
#: a cleanup audit that found nothing left
AUDIT_OK = CleanupAudit(pids_gone=True, ports_closed=True, gpu_idle=None, link_remaps_equal=True, ok=True)
#: the ordinary engine's port (every other port is a restored one's)
ORDINARY_PORT = 8000


def digests(**shas: str | None) -> dict[str, Digest]:
    """Parameter digests by name (a None sha256: unobservable)."""
    return {name: Digest(sha256=sha, shape=[2], dtype="float16") for name, sha in shas.items()}


def manifest(**over: Any) -> dict[str, Any]:
    """vLLM's manifest as the fake lane's ``inspect`` prints it, with ``over`` changed."""
    found = {
        "schema_version": 1,
        "boundary": "post-engine-init-reloadable-state-released",
        "model": "org/m",
        "served_model_name": "org/m",
        "model_revision": "r" * 40,
        "tokenizer_revision": "r" * 40,
        "oracle_sampled_token_logprob": -0.42,
        "artifact_bytes": 123,
        "process_tree": [10, 11],
        "cuda_holders": [11],
        "oracle_token_ids": [12095],
        "oracle_text": " Paris",
    }
    return {**found, **over}


@functools.cache
def _base_config() -> QualConfig:
    parsed = options.parse_standalone(
        ["--vsnap-image=img:head", "--vsnap-model=org/m", f"--vsnap-revision={'a' * 40}", "--vsnap-gpus=none"], env={}
    )
    return build_config(parsed, Path(tempfile.gettempdir()))


def fake_config(**changes: Any) -> QualConfig:
    """The fake lane's configuration: a validated one with ``changes`` (and a ``timeouts`` of its own)."""
    base = _base_config()
    # the manifest's revisions (``manifest``), which no option accepts (not a hex commit)
    revisions = {"revision": "r" * 40, "tokenizer_revision": "r" * 40}
    return dataclasses.replace(base, **{"timeouts": dict(base.timeouts), **revisions, **changes})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RecordingBox(MemoryBox):
    """The in-memory box, its named operations recorded in ``log`` (a fault test asserts their order). Two things
    a test scripts besides: a write that fails (``fail_writes``), and the one command the fault sequence runs itself,
    its follow-up restore (``exec``: exit 1 unless ``on_exec`` answers). It says it has a shell (a fault kind that
    needs one runs on it); its ``sh`` records the script and runs nothing, unless a test runs the script itself."""

    has_shell = True

    def __init__(self, spec: BoxSpec, log: list[Any]) -> None:
        super().__init__(spec)
        self.log = log
        self.fail_writes = False
        self._copying = False
        self.on_exec: Callable[[list[str], float], ExecResult] | None = None

    def sh(self, script: str, timeout: float = 60.0, env: Any = None) -> ExecResult:
        self.log.append(("sh", script))
        return ExecResult(["sh", "-c", script], 0, "", "", 0.0, 0.0)

    def write_bytes(self, path: str, data: bytes) -> None:
        self.log.append(("write", path))
        if self.fail_writes:
            raise RuntimeFailure(f"cannot write {path}")
        super().write_bytes(path, data)

    def copy_tree(self, source: str, target: str, *, replace: bool = False) -> None:
        self.log.append(("copy", source, target, replace))
        self._copying = True  # its own removal of the target is part of it, not a removal of the caller's
        try:
            super().copy_tree(source, target, replace=replace)
        finally:
            self._copying = False

    def remove_path(self, path: str) -> None:
        if not self._copying:
            self.log.append(("remove", path))
        super().remove_path(path)

    def signal(self, pids: list[int], signame: str, *, strict: bool = False) -> bool:
        self.log.append(("signal", list(pids), signame))
        return super().signal(pids, signame, strict=strict)

    def watch_listener(self, port: int, marker: str, log_path: str) -> int:
        self.log.append(("watch", log_path))
        return super().watch_listener(port, marker, log_path)

    def hold_port(self, port: int, log_path: str) -> int:
        self.log.append(("hold", log_path))
        return super().hold_port(port, log_path)

    def digest_tree(self, path: str) -> str:
        self.log.append("digest")
        return super().digest_tree(path)

    def exec(self, argv: list[str], timeout: float, *, env: Any = None, log: Path | None = None) -> ExecResult:
        self.log.append(("exec", " ".join(argv)))
        if self.on_exec is not None:
            return self.on_exec(argv, timeout)
        return ExecResult(argv, 1, "", "the follow-up restore is not run here", 0.0, 0.0)


class FakeLane(Generic[S]):
    """A lane whose services answer from its fields (see each service). ``calls`` records the lifecycle's service
    calls, ``log`` the fault layer's (and the box's named operations)."""

    def __init__(self, state: S, control: Path, config: QualConfig, spec: LaneSpec) -> None:
        control.mkdir(parents=True, exist_ok=True)
        self.state = state
        self.config = config
        self.spec = spec
        self.peers = Peers()
        self.control_host = control
        self.work = control.parent / "work"
        self.control = MountedControlDir(control)
        self.log: list[Any] = []
        self.calls: list[str] = []
        spec_of_box = BoxSpec(
            name=f"fake-{spec.name}", engine=spec.image, image_id="memory:fake", labels={}, environment={},
            binds=[Bind(CONTROL, control, read_only=False)],
        )  # fmt: skip
        self.box = RecordingBox(spec_of_box, self.log)
        self.ports = {"fault": _free_port()}
        store = EvidenceStore(control.parent / "report", deferred=True)
        self.recorder = StepRecorder(spec=spec, store=store, purpose="lifecycle")
        self.environment = FakeEnvironment(self)
        self.servers = FakeServers(self)
        self.api = FakeEngineApi(self)
        self.cli = FakeSnapshotCli(self)
        self.overlay = FakeOverlayUnit(self)
        # ---- what the engine answers (the lifecycle) --------------------------------------------------------
        self.digests_after = digests(a="1", b="2")  # every restored server's parameter digests
        self.kv_restored: int | None = 4096  # every restored server's KV capacity
        self.decode_after = 390.0  # tokens/s of every restored server's fixed generation
        self.prefix_hits_after = True  # whether a restored server's prefix cache hits the repeated prompt
        self.canary_answers: list[CanaryOutput] | None = None  # what every server answers the canary plan (else REF)
        #: each LoRA adapter's answer (its logprob offset from the base model's), and whether restores dropped them
        self.adapter_shift: dict[str, float] = {}
        self.adapters_dropped = False
        self.shape_calls: list[int] = []
        self.wrong_shape: str | None = None  # a shape the restored engine answers wrong (its second request)
        self.unsteady_shape: str | None = None  # a shape the ordinary engine answers differently each time
        self.api_calls: list[list[str]] = []  # the API checks' requests asked, per call (their names)
        self.wrong_api: str | None = None  # an API request the restored engine answers wrong (its third token)
        self.unserved_api: set[str] = set()  # API paths the engine does not serve (404 on every server)
        # issue 44 items 2 and 3: the series' counters a restored server moves not at all, its memory's growth per
        # request (KiB; the ordinary engine's 0), whether a restored engine serves /metrics; whether a request sent
        # while recovery is held is taken (and answered 200), what the request in flight at the stop gets
        self.counters_frozen_after: set[str] = set()
        self.rss_growth_after_kb = 0
        self.metrics_served = True
        self.recovery_taken = False
        self.stop_answer: tuple[str, int | None, int | None] = ("answered", 200, 48)
        self.boundary_calls: list[tuple[int, str, int]] = []
        self.leftovers: list[LeftoverProcess] = []  # what every stop found still alive past the grace
        self.probes_until_death: int | None = None  # the restored server dies after this many liveness looks
        #: box looks at the processes whose answer is wrong ("none of them") though they live (a lost answer)
        self.wrong_looks = 0
        #: how long the restored server's /health takes to answer (None: at once): an ask that waits less fails
        self.health_late_s: float | None = None
        self.health_asks: list[float] = []  # each /health ask's deadline
        self.inspected: dict[str, Any] = manifest()  # what inspect prints after the inspect step
        self.start_times: dict[int, str] = {}  # a PID's start time now (else "100")
        self.gpu_listed: set[int] | None = None  # nvidia-smi's compute apps after a restore (None: no GPU)
        #: what the next restores answer (None: a restore that exits 0 and binds half a second in)
        self.restore_answer: RestoreRun | None = None
        self.shm_named: list[str] = []  # the /dev/shm files the artifact's images name (existing at create)
        self.shm_gone: set[str] = set()  # of those, the ones gone now
        #: /dev/shm as the create finds it before and leaves it after (names), which of them a process holds, and
        #: whether the box sees every process that could (None from ``shm_unheld``: it does not)
        self.shm_listed: list[set[str]] = []
        self.shm_held: set[str] = set()
        self.sees_every_holder = True
        self.shm_unread: list[str] = []  # processes the holder look cannot read ("PID comm")
        self.files: dict[str, str] = {}  # artifact files other than the manifest
        self.junit: str | None = None  # what the unit command writes to $VSNAP_JUNIT
        # ---- the faulted command (the fault layer) ----------------------------------------------------------
        self.stderr = "Error: restore lock held"  # the faulted command's words (it exits 1)
        self.on_restore: Callable[[FakeLane[S]], None] | None = None  # what happens while it runs
        self.armed_at_restore: dict[str, Any] | None = None  # faults/armed.json as it started

    def configure(self, **changes: Any) -> None:
        """The lane's configuration with ``changes`` (a ``QualConfig`` is frozen)."""
        self.config = dataclasses.replace(self.config, **changes)

    @contextlib.contextmanager
    def fresh_box(self) -> Iterator[FakeLane[S]]:
        self.calls.append("fresh box")
        try:
            yield self
        finally:
            self.calls.append("fresh box removed")

    def alive_now(self) -> bool:
        """One liveness look at the restored server (``probes_until_death`` counts them down)."""
        if self.probes_until_death is None:
            return True
        self.probes_until_death -= 1
        return self.probes_until_death >= 0

    @property
    def dead(self) -> bool:
        """Whether the restored server has died (its processes gone), without a look of its own."""
        return self.probes_until_death is not None and self.probes_until_death < 0

    def ran(self, stdout: str = "", code: int = 0) -> ExecResult:
        """A command that just ended (the observation window counts from its end)."""
        now = time.time()
        return ExecResult(["vllm"], code, stdout, "", now - 1.0, now)

    def faulted(self, rec: StepEvidence[object], argv: list[str], env: dict[str, str] | None) -> ExecResult:
        """The faulted command: ``on_restore`` runs while it does; it exits 1 with ``stderr``."""
        self.log.append(("command", argv[:3], dict(env or {})))
        armed = self.control_host / "faults" / "armed.json"
        self.armed_at_restore = json.loads(armed.read_text()) if armed.exists() else None
        if self.on_restore:
            self.on_restore(self)
        rec.exit_code = 1
        return ExecResult(argv, 1, "", self.stderr, 0.0, 0.25)


class FakeEnvironment:
    def __init__(self, lane: FakeLane[Any]) -> None:
        self.lane = lane
        self.gpu_uuid: str | None = None

    def id(self) -> str:
        return "env-1"

    def restart(self) -> None:
        self.lane.calls.append("restart")


class FakeServers:
    def __init__(self, lane: FakeLane[Any]) -> None:
        self.lane = lane

    def serve(self, rec: StepEvidence[ServeRecord]) -> ServerHandle:
        self.lane.calls.append("serve")
        return ServerHandle(port=ORDINARY_PORT, root_pid=10, pids=[10, 11])

    def stop(self, handle: ServerHandle) -> list[LeftoverProcess]:
        self.lane.calls.append(f"stop {handle.port}")
        return list(self.lane.leftovers)

    def audit(self, pids: list[int], ports: list[int], grace: float | None = None) -> CleanupAudit:
        self.lane.calls.append(f"audit {pids}")
        self.lane.log.append(("audit", ports))
        return CleanupAudit(**AUDIT_OK, ports_open=[], lane=self.lane.spec.name)

    def alive(self, pids: list[int]) -> list[int]:
        if not self.lane.alive_now():
            return []
        if self.lane.wrong_looks:
            self.lane.wrong_looks -= 1
            return []
        return list(pids)

    def identify(self, pids: list[int]) -> dict[int, str]:
        return {} if self.lane.dead else {p: self.lane.start_times.get(p, "100") for p in pids}

    def gpu_apps(self) -> set[int] | None:
        return self.lane.gpu_listed

    def gpu_memory(self, pids: list[int]) -> int | None:
        return None if self.lane.gpu_listed is None else 0

    def restored_server(self, port: int) -> ServerHandle | None:
        return ServerHandle(port=port, root_pid=20, pids=[20, 21])

    def listening(self, port: int) -> bool:
        return True

    def watch_exits(self, pids: list[int]) -> ExitWatch:
        return ExitWatch(pids, why_not="a fake lane")

    def restored_log_tail(self, lines: int = 40) -> str:
        return "EngineCore: killed"

    def server_log(self, rec: StepEvidence[object]) -> str:
        return "INFO GPU KV cache size: 4,096 tokens"


class FakeEngineApi:
    def __init__(self, lane: FakeLane[Any]) -> None:
        self.lane = lane

    @property
    def served_model(self) -> str:
        return self.lane.config.model

    def health(self, port: int, timeout: float = HEALTH_TIMEOUT) -> bool:
        self.lane.health_asks.append(timeout)
        late = self.lane.health_late_s
        return self.lane.alive_now() and (late is None or timeout >= late)

    def canaries(self, port: int, model: str | None = None) -> list[CanaryOutput]:
        lane = self.lane
        if lane.canary_answers is not None:
            return list(lane.canary_answers)
        if model is None or (lane.adapters_dropped and port != ORDINARY_PORT):  # dropped: the base model answers
            return [REF]
        return [dataclasses.replace(REF, logprob=REF.logprob + lane.adapter_shift[model])]

    def digests(self, port: int) -> dict[str, Digest]:
        return digests(a="1", b="2") if port == ORDINARY_PORT else self.lane.digests_after

    def kv(self, port: int, log_text: str | None = None) -> tuple[int | None, str]:
        return (4096, "log") if log_text else (self.lane.kv_restored, "metrics")

    def shape_answers(self, port: int, requests: list[shapes.Request]) -> dict[str, list[Canary]]:
        """Each request's answer from what it asks (the same every time), unless the restored engine is told
        to answer one shape wrong (``wrong_shape``) or the ordinary engine to be unsteady in one."""
        lane = self.lane
        lane.shape_calls.append(port)

        def ask(r: shapes.Request) -> CanaryOutput:
            base = sum(map(ord, r.label)) + r.seed + int(r.temperature * 10)
            ids = [base + i for i in range(r.max_tokens)]
            if port != ORDINARY_PORT and r.shape == lane.wrong_shape and r.index == 1:
                ids[2] += 1  # the third token differs
            if port == ORDINARY_PORT and r.shape == lane.unsteady_shape:
                ids[0] += len(lane.shape_calls)  # another answer each time
            return CanaryOutput(r.label, ids, "t", -0.5, [-0.5] * r.max_tokens)

        return shapes.send(requests, ask)

    def api_answers(self, port: int, requests: Sequence[ApiRequest]) -> dict[str, ApiAnswer]:
        """Each API request's answer from what it asks (the same every time: a greedy answer of three tokens
        that ends by EOS, id 0, where a request pushes it up), unless the restored engine is told to answer one
        wrong (``wrong_api``) or the engine serves its path not at all (``unserved_api``)."""
        lane = self.lane
        lane.api_calls.append([r["name"] for r in requests])

        def answer(r: ApiRequest) -> ApiAnswer:
            if r["path"] in lane.unserved_api:
                return ApiAnswer(status=404, error="Not Found")
            if r["path"] in ("/v1/models", "/tokenize"):
                return ApiAnswer(status=200, fields={"asked": json.dumps(r["body"], sort_keys=True)})
            body = r["body"] or {}
            ids = [5, 6, 7]
            finish, reason = "length", None
            if body.get("logit_bias"):
                ids, finish = [0], "stop"
            elif r["check"] == "chat":
                ids, finish = [5, 0], "stop"  # the chat template's answer ends by EOS
            elif body.get("stop"):
                ids, finish, reason = [5, 6], "stop", body["stop"][0]  # type: ignore[index]
            if port != ORDINARY_PORT and r["name"] == lane.wrong_api:
                ids = [*ids[:2], 99]
            text = "".join(chr(97 + i % 26) * 2 for i in ids)
            choice = ApiChoice(index=0, text=text, token_ids=ids, finish_reason=finish, stop_reason=reason)
            return ApiAnswer(status=200, choices=[choice], usage={"completion_tokens": len(ids)})

        return {r["name"]: answer(r) for r in requests}

    def decode_speed(self, port: int) -> DecodeSpeed | None:
        rate = 400.0 if port == ORDINARY_PORT else self.lane.decode_after
        return DecodeSpeed(tokens=64, runs_tps=[rate] * 3, median_tps=rate)

    def prefix_cache(self, port: int, canary_ids: list[int]) -> PrefixCacheProbe:
        """Every server asked the prompt afresh: the second ask hits its two full blocks (unless told not to)."""
        counted = {"queries": 0.0, "hits": 0.0}
        hits = port == ORDINARY_PORT or self.lane.prefix_hits_after

        def ask(ids: list[int]) -> CanaryOutput:
            counted["hits"] += 32.0 if counted["queries"] and hits else 0.0
            counted["queries"] += len(ids)
            return CanaryOutput("<ids>", [7, 8], "t", -0.5, [-0.5, -0.25])

        def metrics() -> str:
            return (
                'vllm:cache_config_info{block_size="16"} 1.0\n'
                f"vllm:prefix_cache_queries_total {counted['queries']}\n"
                f"vllm:prefix_cache_hits_total {counted['hits']}\n"
            )

        return prefix_cache.measure(ask, metrics, canary_ids, 512)

    def serving_series(
        self, port: int, canary_ids: list[int], gpu_mib: Callable[[], int | None] | None
    ) -> ServingSeries:
        """Six asks of a 40-token prompt: the counters move alike on every server (unless a restored one is told
        to keep some still), the memory grows by ``rss_growth_after_kb`` per request after a restore."""
        lane = self.lane
        if not lane.metrics_served:
            return ServingSeries(requests=0, counters={}, rss_kb=[], not_applicable="GET /metrics: HTTP 404: Not Found")
        moved = {"prompt_tokens": 240.0, "generation_tokens": 24.0, "requests": 6.0,
                 "prefix_cache_queries": 240.0, "prefix_cache_hits": 160.0}  # fmt: skip
        growth = 0 if port == ORDINARY_PORT else lane.rss_growth_after_kb
        if port != ORDINARY_PORT:
            moved = {k: 0.0 if k in lane.counters_frozen_after else v for k, v in moved.items()}
        rss = [2_000_000 + growth * i + (300 if i % 2 else 0) for i in range(6)]
        return ServingSeries(requests=6, prompt_tokens=40, max_tokens=4, counters=moved, rss_kb=rss)

    def in_flight(self, port: int) -> bool | None:
        return True

    def boundary_request(
        self, port: int, prompt: str, max_tokens: int, started: float
    ) -> tuple[BoundaryRequest, list[int] | None]:
        lane = self.lane
        lane.boundary_calls.append((port, prompt, max_tokens))
        if max_tokens >= boundaries.STOP_TOKENS:  # the stop's request (sized by the measured speed)
            outcome, status, tokens = lane.stop_answer
            record = BoundaryRequest(sent_s=0.0, ended_s=0.5, accepted=outcome != "refused")
            record["outcome"] = outcome  # type: ignore[typeddict-item]
            if status is not None:
                record["status"] = status
            if tokens is not None:
                record["tokens"] = tokens
            return record, None
        if lane.recovery_taken:
            ids = list(REF.token_ids)
            return BoundaryRequest(
                sent_s=0.1, ended_s=0.2, accepted=True, outcome="answered", status=200, tokens=1
            ), ids
        refused = BoundaryRequest(sent_s=0.1, ended_s=0.1, accepted=False, outcome="refused", detail="nothing listened")
        return refused, None

    def keep_adapter(self, name: str, path: str) -> KeptAdapter:
        self.lane.calls.append(f"keep adapter {name}")
        return KeptAdapter(path=path, files={"adapter_config.json": "ab" * 32}, kept=f"adapters/v1-head/{name}")


class FakeSnapshotCli:
    def __init__(self, lane: FakeLane[Any]) -> None:
        self.lane = lane

    # ---- the lifecycle's commands ------------------------------------------------------------------------------
    def create(self, rec: StepEvidence[object]) -> ExecResult:
        return self.lane.ran()

    def inspect(self, rec: StepEvidence[object], name: str = "inspect") -> ExecResult:
        return self.lane.ran(json.dumps(manifest() if name == "inspect" else self.lane.inspected))

    def restore(
        self,
        rec: StepEvidence[object],
        step: str,
        during_hold: Callable[[int, float], BoundaryRequest] | None = None,
    ) -> RestoreRun:
        lane = self.lane
        lane.calls.append(step)
        if lane.restore_answer is not None:
            return lane.restore_answer
        result = lane.ran()
        port = ORDINARY_PORT + sum(c.startswith(("restore", "fresh-box")) for c in lane.calls)
        held = None
        if during_hold is not None:  # the hold began as the restore ran (``HeldRecovery``)
            held = during_hold(port, result.started)
            held.update({"boundary": "recovery", "held": True, "hold_s": boundaries.HOLD_S})
        return RestoreRun(result, port, result.started + 0.5, held)

    def artifact_file(self, name: str) -> str:
        return json.dumps(manifest()) if name == "manifest.json" else self.lane.files.get(name, "")

    def keep_child_log(self, rec: StepEvidence[object]) -> None:
        pass

    def snapshot_kv(self) -> int | None:
        return 4096

    def files_bytes(self) -> int:
        return int(manifest()["artifact_bytes"])

    def outside_files(self) -> list[str]:
        return list(self.lane.shm_named)

    def absent_files(self, paths: list[str]) -> list[str]:
        return [p for p in paths if p in self.lane.shm_gone]

    def claim_made_remaps(self, step: str) -> list[str]:
        return []

    def shm_names(self) -> set[str]:
        return self.lane.shm_listed.pop(0) if self.lane.shm_listed else set()

    def shm_unheld(self, names: list[str]) -> ShmHolders | None:
        lane = self.lane
        if not lane.sees_every_holder:
            return None
        return ShmHolders([n for n in names if n not in lane.shm_held], list(lane.shm_unread))

    # ---- the fault layer's commands ----------------------------------------------------------------------------
    def command(
        self, rec: StepEvidence[object], argv: list[str], timeout_key: str, env: dict[str, str] | None, name: str
    ) -> ExecResult:
        """The identity kind's launch and recording shell, run for real here: the lane's control directory and
        work directory are this test's, and ``vllm`` is a stand-in that fails the way a refusing engine does."""
        lane = self.lane
        lane.log.append(("command", argv[:1], dict(env or {})))
        bin_dir = lane.control_host / "bin"
        bin_dir.mkdir(exist_ok=True)
        (bin_dir / "vllm").write_text("#!/bin/sh\necho 'snapshot mismatch: environment' >&2\nexit 1\n")
        (bin_dir / "vllm").chmod(0o755)
        local = [a.replace(CONTROL, str(lane.control_host)).replace(WORK, str(lane.work)) for a in argv]
        full = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", **(env or {})}
        done = subprocess.run(local, env=full, capture_output=True, text=True, timeout=30)
        rec.exit_code = done.returncode
        return ExecResult(argv, done.returncode, done.stdout, done.stderr, 0.0, 0.1)

    def snapshot(
        self,
        rec: StepEvidence[object],
        action: str,
        *args: str,
        timeout_key: str,
        env: dict[str, str] | None = None,
        name: str | None = None,
    ) -> ExecResult:
        return self.lane.faulted(rec, ["vllm", "snapshot", action, name or action], env)

    def restore_at(
        self, rec: StepEvidence[object], port: int, name: str, env: dict[str, str] | None = None
    ) -> ExecResult:
        return self.lane.faulted(rec, ["vllm", "snapshot", "restore", name], env)

    def create_argv(self, target: str = ARTIFACT) -> list[str]:
        return ["--model", self.lane.config.model, "--snapshot-dir", target]


class FakeOverlayUnit:
    def __init__(self, lane: FakeLane[Any]) -> None:
        self.lane = lane
        self.files: list[OverlayFile] = []

    def imports(self) -> list[OverlayFileResult]:
        return []

    def fresh_import(self, module: str) -> FreshImport:
        return FreshImport(exit_code=0, path=None, sha256=None)

    def probe_loaded_pids(self) -> list[int]:
        return []

    def run_unit_command(self, rec: StepEvidence[object]) -> tuple[ExecResult, str | None, str | None]:
        lane = self.lane
        lane.calls.append("unit")
        return lane.ran(code=0 if lane.junit and "<failure" not in lane.junit else 1), lane.junit, "logs/u.xml"


def lifecycle_lane(control: Path | None = None, arm: str = "head") -> FakeLane[LifecycleState]:
    """A lifecycle lane (runner v1 on ``arm``) whose snapshot's KV capacity is 4,096 tokens; its control directory
    ``control``, else one of its own (removed with the lane)."""
    spec = LaneSpec("v1", "head" if arm == "head" else "base", f"img:{arm}", arm, arm == "head")
    config = fake_config(
        logprob_tolerance=1e-3, kv_tolerance=0.02, decode_tolerance=1.75,
        soak_s=0.0,  # one look, no waiting: the soak's rule is tested with a lane that dies on cue
        observe_s=0.0, request_shapes=(), concurrent_requests=3, max_model_len=64, canary_tokens=4,
        prompts=("p0", "p1"), cleanup_grace=5.0,
    )  # fmt: skip
    scratch = None if control is not None else Path(tempfile.mkdtemp(prefix="vsnap-fake-lane-"))
    lane = FakeLane(LifecycleState(kv_snapshot=4096), control or (scratch or Path()) / "control", config, spec)
    if scratch is not None:
        weakref.finalize(lane, shutil.rmtree, scratch, True)
    return lane


def fault_lane(control: Path) -> FakeLane[FaultState]:
    """A fault lane whose faulted command's result the test chooses (``on_restore``, ``stderr``), its control
    directory a real one of this test's, its box holding the fault artifact and its pristine copy."""
    (control / "faults").mkdir(parents=True, exist_ok=True)
    state = FaultState(manifest={"process_tree": [], "environment": [["VLLM_NO_USAGE_STATS", "h"]]})
    config = fake_config(
        model="m", cleanup_grace=0.1, fault_timeout=2.0,
        timeouts={"stop": 1.0, "restore": 30.0, "http": 2.0, "create": 30.0, "exec": 30.0, "inspect": 30.0},
    )  # fmt: skip
    lane = FakeLane(state, control, config, LaneSpec("v1", "head", "img:head", "head", True))
    lane.recorder.purpose = "faults"
    for artifact in (ARTIFACT, f"{WORK}/artifact.pristine"):
        lane.box.files[f"{artifact}/manifest.json"] = json.dumps(state.manifest).encode()
    return lane


if TYPE_CHECKING:  # mypy holds the fake lane to what the steps and the fault layer read of a lane

    def _is_a_lane(lifecycle: FakeLane[LifecycleState], faults: FakeLane[FaultState]) -> tuple[Any, ...]:
        steps_lane: FreshBoxLane = lifecycle
        unit_lane: UnitLane = lifecycle
        fault_layer_lane: FaultLane = faults
        return steps_lane, unit_lane, fault_layer_lane
