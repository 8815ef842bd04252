"""What the fault layer needs of its lane, and nothing of the fault layer: the bottom of ``vsnap_qual.faults``, so
every module of it (and every kind's) imports this one and this one imports none of them."""

from __future__ import annotations

from typing import Protocol

from vsnap_qual.box import Box, ControlDir
from vsnap_qual.config import LaneSpec, QualConfig
from vsnap_qual.lane.protocols import EngineApi, Servers, SnapshotCli
from vsnap_qual.lane.state import FaultState, Peers
from vsnap_qual.recorder import StepRecorder


class FaultLane(Protocol):
    """What the fault layer needs of its lane (``lane.LaneRun`` implements it; the unit tests' fake lane too): the
    lane's servers, engine API and snapshot commands, its own state, its box and control directory."""

    @property
    def spec(self) -> LaneSpec: ...
    @property
    def config(self) -> QualConfig: ...
    @property
    def recorder(self) -> StepRecorder: ...
    @property
    def state(self) -> FaultState: ...
    @property
    def ports(self) -> dict[str, int]: ...
    #: the ordinary references this process recorded (the lifecycle lane's is its fault lane's)
    @property
    def peers(self) -> Peers: ...
    @property
    def box(self) -> Box: ...
    @property
    def control(self) -> ControlDir: ...
    @property
    def servers(self) -> Servers: ...
    @property
    def api(self) -> EngineApi: ...
    @property
    def cli(self) -> SnapshotCli: ...
