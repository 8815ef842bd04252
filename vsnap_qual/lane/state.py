"""What a lane's steps hand on to each other, apart by purpose: the lifecycle's (:class:`LifecycleState`: the
ordinary reference, the inspect output, the restored server, the snapshot's KV) and the fault lane's own
bookkeeping (:class:`FaultState`: captured thread IDs, expectation, artifact files, timings), both with what every
artifact a lane makes needs (:class:`ArtifactState`); and what the lanes of one process hand each other
(:class:`Peers`: the head arm's answers the base arm is judged against; handed on through the session's
``lane.handoff`` where the two arms run at once in processes of their own, issue 45)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from vsnap_qual import procedure
from vsnap_qual.engine import shapes
from vsnap_qual.lane.artifact_files import ArtifactFiles
from vsnap_qual.lane.audit import ServerHandle
from vsnap_qual.lane.handoff import Handoff
from vsnap_qual.model import (
    ApiRecord,
    Behaviour,
    Canary,
    DecodeSpeed,
    Digest,
    InspectChange,
    PrefixCacheProbe,
    RecoveryDeadline,
    ServingSeries,
    ShapeRecord,
    UnitOutcome,
)

#: what a lane's lifecycle measures for its fault lane (:attr:`Peers.measured`): the create command's seconds, and
#: each restore's seconds until its HTTP listener was bound (recovery runs before the bind)
Measure = Literal["create", "restore-ready"]


@dataclass
class OrdinaryReference:
    """What the ordinary ``vllm serve`` answered: every restore (and the base arm) is compared with it."""

    canary: list[Canary]
    digests: dict[str, Digest]
    kv_tokens: int | None
    #: the request shapes' requests and the ordinary engine's answers (None: no shapes asked for)
    shape_requests: list[shapes.Request] = field(default_factory=list)
    shapes: ShapeRecord | None = None
    #: the fixed generation's speed (None: not measured, ``--vsnap-decode-runs=0``)
    decode: DecodeSpeed | None = None
    #: the canaries asked through each LoRA adapter the lane serves (``--lora-modules`` of a variant)
    adapters: dict[str, list[Canary]] = field(default_factory=dict)
    #: the prefix-cache prompt asked twice (``vsnap_qual.engine.prefix_cache``)
    prefix: PrefixCacheProbe | None = None
    #: the API checks' requests and answers (``vsnap_qual.engine.api_checks``)
    api: ApiRecord | None = None
    #: the fixed request series (``vsnap_qual.engine.serving_series``)
    series: ServingSeries | None = None


@dataclass
class InspectChanged:
    """The first step after which ``vllm snapshot inspect`` printed something else, and what changed."""

    step: str
    changes: dict[str, InspectChange]


@dataclass
class ArtifactState:
    """What a lane keeps of the artifact it made last, whatever its purpose."""

    #: the artifact's manifest: ``vllm snapshot inspect``'s output in the lifecycle, ``manifest.json`` in the
    #: fault lane (vLLM's manifest, any JSON it prints)
    manifest: dict[str, Any] = field(default_factory=dict)
    #: the /dev/shm files the lane's (latest) artifact needs from outside it (``artifact_deps.outside_files``)
    outside_files: list[str] = field(default_factory=list)
    #: every such file of every artifact the lane made: removed when the lane's box goes (with host IPC they
    #: would stay in the host's /dev/shm, hundreds of MB each, until reboot)
    shm_owned: set[str] = field(default_factory=set)


@dataclass
class LifecycleState(ArtifactState):
    """What a lifecycle lane's steps hand on to each other."""

    ordinary: OrdinaryReference | None = None
    inspect_sha256: str | None = None
    #: inspect's exact output (a later change is said by field, or as order or spacing only, with the diff)
    inspect_text: str | None = None
    inspect_changed: InspectChanged | None = None
    #: the server the lane runs now (the restored one a later step stops), if any
    server: ServerHandle | None = None
    kv_snapshot: int | None = None
    #: the artifact's regular files' sizes summed just after create, before anything touched it (the manifest's
    #: ``artifact_bytes`` must say the same: ``checks.inspect_checks``)
    files_bytes: int | None = None


@dataclass
class FaultState(ArtifactState):
    """What a fault lane's steps hand on to each other."""

    #: every thread the fault artifact captured (its ``images/core-*.img``)
    captured_tids: set[int] = field(default_factory=set)
    #: the behaviour its faults are judged by, and why (probed once)
    expectation: tuple[Behaviour, str] | None = None
    #: the fault whose restore consumed the fault artifact (its outside files gone), if one did
    consumed_by: str | None = None
    #: the fault artifact's files and its pristine copy's (``artifact_files``), read once when it is made: every
    #: reset puts that copy back, so the digest before a fault that does not change the artifact itself is the
    #: copy's; the digest and the reset then read and copy only what changed
    artifact_files: ArtifactFiles | None = None
    #: the shortest seconds an unfaulted ``create`` and ``restore`` of the fault artifact took (what a random
    #: kill's offset is drawn over: ``faults.kinds.kill.draw``)
    timings: dict[str, float] = field(default_factory=dict)
    #: the recovery deadline the fault artifact was created with, and how it was chosen (``faults.deadline``):
    #: frozen at its create, waited out by the stall fault
    deadline: RecoveryDeadline | None = None
    #: the refusals whose follow-up restore waits for their group's (``faults.group``), in the order they ran
    deferred: list[str] = field(default_factory=list)

    def timed(self, command: str, seconds: float) -> None:
        """An unfaulted ``command`` took ``seconds``: the shortest seen is kept."""
        seconds = round(seconds, 3)
        self.timings[command] = min(self.timings.get(command, seconds), seconds)


@dataclass
class Peers:
    """What the lanes of one process hand each other, by lane name: the plugin gives one to every lane, so the base
    arm of a runner judges against what its head arm recorded. With ``handoff`` (lanes at once, each in a process
    of its own: ``--vsnap-overlap=lanes`` under ``-n``) the head arm's answers the base arm reads are also handed
    on through the session's shared directory, and a base arm in another process waits for them."""

    #: the ordinary references (the base arm compares its own with the head's)
    ordinary: dict[str, OrdinaryReference] = field(default_factory=dict)
    #: the unit step's outcomes (the base arm judges the head's)
    unit: dict[str, dict[str, UnitOutcome]] = field(default_factory=dict)
    #: what each lane's lifecycle measured, by lane and :data:`Measure`: the fault lane's recovery deadline is
    #: derived from its own lane's (``faults.deadline``)
    measured: dict[str, dict[Measure, list[float]]] = field(default_factory=dict)

    #: the session's shared directory, where lanes run at once in processes of their own (None: one process)
    handoff: Handoff | None = None

    def hand_ordinary(self, lane: str, reference: OrdinaryReference) -> None:
        """``lane``'s ordinary reference, for its own later steps and for the base arm (what ``steps.compare_arms``
        reads of it: the canaries, the digests, the KV capacity, the adapters' canaries)."""
        self.ordinary[lane] = reference
        if self.handoff is not None:
            handed = {"canary": reference.canary, "digests": reference.digests, "kv_tokens": reference.kv_tokens,
                      "adapters": reference.adapters}  # fmt: skip
            self.handoff.put(lane, "ordinary", handed)

    def head_ordinary(self, lane: str) -> tuple[OrdinaryReference | None, str]:
        """``lane``'s ordinary reference (the head arm's, asked by the base arm), and, when none, why."""
        if lane in self.ordinary:
            return self.ordinary[lane], ""
        if self.handoff is None:
            return None, "not recorded in this process"
        found, why = self.handoff.get(lane, "ordinary", procedure.ORDINARY)
        if found is None:
            return None, why
        return OrdinaryReference(
            canary=found["canary"], digests=found["digests"], kv_tokens=found["kv_tokens"], adapters=found["adapters"]
        ), ""

    def hand_unit(self, lane: str, outcomes: dict[str, UnitOutcome]) -> None:
        """``lane``'s unit outcomes per test id (the base arm judges the head arm's)."""
        self.unit[lane] = outcomes
        if self.handoff is not None:
            self.handoff.put(lane, "unit", outcomes)

    def head_unit(self, lane: str) -> tuple[dict[str, UnitOutcome] | None, str]:
        """``lane``'s unit outcomes (the head arm's, asked by the base arm), and, when none, why."""
        if lane in self.unit:
            return self.unit[lane], ""
        if self.handoff is None:
            return None, "not recorded in this process"
        found, why = self.handoff.get(lane, "unit", procedure.UNIT)
        return found, why

    def measure(self, lane: str, what: Measure, seconds: float) -> None:
        """``lane``'s lifecycle measured ``what`` taking ``seconds``."""
        self.measured.setdefault(lane, {}).setdefault(what, []).append(round(seconds, 3))
