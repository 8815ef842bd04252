"""A lane: one runner on one image arm, in one long-lived box, for one purpose (the lifecycle, or the injected
failures on an artifact of its own). :class:`LaneRun` composes the lane's services over its box, each a small class
over what it needs: its environment (:mod:`.environment`: the box, its start, restart and removal), its servers
(:mod:`.servers`), its engine's HTTP API (:mod:`.engine_api`), its snapshot commands and artifact
(:mod:`.snapshot_cli`), its checkout's overlay and unit command (:mod:`.overlay_unit`). The steps reach a service
(``lane.servers.serve(rec)``, ``lane.api.canaries(port)``, ``lane.cli.restore(rec, step)``) through the narrow
protocols of :mod:`.protocols`; the state its steps hand on is :mod:`.state`'s. Nothing here knows the runtime that
made the box.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from vsnap_qual.box import Box, ControlDir
from vsnap_qual.config import LaneSpec, QualConfig
from vsnap_qual.lane.engine_api import LaneEngineApi
from vsnap_qual.lane.environment import LaneEnvironment
from vsnap_qual.lane.overlay_unit import LaneOverlayUnit
from vsnap_qual.lane.servers import LaneServers
from vsnap_qual.lane.snapshot_cli import LaneSnapshotCli
from vsnap_qual.lane.state import ArtifactState, FaultState, LifecycleState, Peers
from vsnap_qual.recorder import StepRecorder

__all__ = ["FaultState", "LaneEnvironment", "LaneRun", "LifecycleState", "Peers"]

#: the state a lane's steps hand on: a lifecycle lane's, or a fault lane's
S = TypeVar("S", bound=ArtifactState)


@dataclass(frozen=True, kw_only=True)
class LaneRun(Generic[S]):
    """One lane: its configuration, its recorder, the state its steps hand on, its peers, and its services over
    its started box (:meth:`over`)."""

    spec: LaneSpec
    config: QualConfig
    recorder: StepRecorder
    state: S
    peers: Peers
    #: the lane's ports by use (``config.PORT_NAMES``)
    ports: dict[str, int]
    box: Box
    #: the control directory as the box's runtime reaches it
    control: ControlDir
    environment: LaneEnvironment
    servers: LaneServers
    api: LaneEngineApi
    cli: LaneSnapshotCli
    overlay: LaneOverlayUnit

    @classmethod
    def over(cls, environment: LaneEnvironment, state: S, peers: Peers) -> LaneRun[S]:
        """The lane's services over its environment's box, started (:meth:`LaneEnvironment.start`)."""
        box, recorder, config, spec = environment.box, environment.recorder, environment.config, environment.spec
        control = box.control()
        assert environment.control_root is not None
        return cls(
            spec=spec,
            config=config,
            recorder=recorder,
            state=state,
            peers=peers,
            ports=environment.ports,
            box=box,
            control=control,
            environment=environment,
            servers=LaneServers(
                box=box,
                control=control,
                control_root=environment.control_root,
                recorder=recorder,
                config=config,
                spec=spec,
                port=environment.ports["ordinary"],
                scope=environment.audit_scope,
                artifact=state,
                has_gpu=environment.gpu_uuid is not None or environment.gpus_requested,
            ),
            api=LaneEngineApi(box=box, recorder=recorder, config=config, spec=spec),
            cli=LaneSnapshotCli(
                box=box,
                recorder=recorder,
                config=config,
                spec=spec,
                ports=environment.ports,
                scope=environment.audit_scope,
            ),  # fmt: skip
            overlay=LaneOverlayUnit(
                box=box,
                control=control,
                recorder=recorder,
                config=config,
                spec=spec,
                files=environment.overlay,
                package_dir=environment.package_dir or "",
            ),  # fmt: skip
        )

    @contextlib.contextmanager
    def fresh_box(self) -> Iterator[LaneRun[S]]:
        """This lane in a fresh box of its image (``LaneEnvironment.fresh_box``), with a state of its own: what the
        fresh box records (and removes) is not the lane's. Removed after."""
        state = dataclasses.replace(self.state, shm_owned=set())
        with self.environment.fresh_box(state.shm_owned) as environment:
            yield LaneRun.over(environment, state, self.peers)

    def remove(self) -> None:
        """Remove the lane's box, and the /dev/shm files its artifacts needed."""
        self.environment.remove(self.state.shm_owned)
