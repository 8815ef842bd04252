"""What the fault layer needs of its lane, and nothing of the fault layer: the bottom of ``vsnap_qual.faults``, so
every module of it (and every kind's) imports this one and this one imports none of them."""

from __future__ import annotations

from typing import Protocol

from vsnap_qual.box import Box, ControlDir, ExecResult, ShmHolders
from vsnap_qual.config import Lane, QualConfig
from vsnap_qual.contract import ARTIFACT
from vsnap_qual.engine import client
from vsnap_qual.model import CleanupAudit, Digest
from vsnap_qual.recorder import StepEvidence, StepRecorder
from vsnap_qual.steps import LaneState, OrdinaryReference


class FaultLane(Protocol):
    """What the fault layer needs of its lane (``lane.LaneRun`` implements it; the unit tests' fake lane too). The
    fault code calls it ``lane``; its ``lane`` attribute is the lane's configuration (``config.Lane``)."""

    lane: Lane
    config: QualConfig
    recorder: StepRecorder
    state: LaneState
    ports: dict[str, int]
    #: the ordinary references this process recorded, by lane name (the lifecycle lane's is its fault lane's)
    peers: dict[str, OrdinaryReference]

    @property
    def box(self) -> Box: ...
    @property
    def control(self) -> ControlDir: ...
    @property
    def served_model(self) -> str: ...

    def endpoint(self, port: int) -> tuple[str, int]: ...
    def pid_alive(self, pid: int) -> bool: ...
    def canaries(self, port: int) -> list[client.CanaryOutput]: ...
    def digests(self, port: int) -> dict[str, Digest]: ...
    def command(
        self, rec: StepEvidence, argv: list[str], timeout_key: str, env: dict[str, str] | None, name: str
    ) -> ExecResult: ...
    def snapshot(
        self,
        rec: StepEvidence,
        action: str,
        *args: str,
        timeout_key: str,
        env: dict[str, str] | None = None,
        name: str | None = None,
    ) -> ExecResult: ...
    def restore(self, rec: StepEvidence, port: int, name: str, env: dict[str, str] | None = None) -> ExecResult: ...
    def create_argv(self, target: str = ARTIFACT) -> list[str]: ...
    def cleanup_audit(self, pids: list[int], ports: list[int], grace: float | None = None) -> CleanupAudit: ...
    def artifact_digest(self, artifact: str = ARTIFACT) -> str: ...
    def claim_made_remaps(self, step: str) -> list[str]: ...
    def shm_names(self) -> set[str]: ...
    def shm_unheld(self, names: list[str]) -> ShmHolders | None: ...
