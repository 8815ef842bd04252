"""Injected failures, per model runner and image arm: each must fail the way the contract says, leave nothing
behind, and leave the artifact restorable. The faults and their head / base expectations are each kind's own entries
(``vsnap_qual/faults/kinds/``), plus any a conftest adds through ``pytest_vsnap_add_faults``; the observed outcome is
recorded either way.
"""

from __future__ import annotations

import pytest

from vsnap_qual import faults, procedure
from vsnap_qual.lane import FaultState, LaneRun
from vsnap_qual.procedure import Fault

pytestmark = pytest.mark.fault


class TestFaults:
    @pytest.mark.vsnap_step(procedure.FAULT_ARTIFACT)
    def test_fault_artifact(self, vsnap_fault_lane: LaneRun[FaultState], request: pytest.FixtureRequest) -> None:
        """The fault lane's own artifact, created with a short VLLM_SNAPSHOT_TIMEOUT_S, and a pristine copy."""
        with vsnap_fault_lane.recorder.step(procedure.FAULT_ARTIFACT, request.node.nodeid) as rec:
            # which expectations judge this lane's faults, chosen before its first engine command
            rec.results["expect"], rec.results["expect_reason"] = faults.lane_expectation(vsnap_fault_lane)
            faults.prepare_artifact(vsnap_fault_lane, rec)

    @pytest.mark.vsnap_step(procedure.FAULT_PREFIX)  # the step is fault:<id> of the parametrized fault
    def test_fault(
        self,
        vsnap_fault_lane: LaneRun[FaultState],
        vsnap_fault: Fault,
        vsnap_faults: faults.FaultCatalogue,
        request: pytest.FixtureRequest,
    ) -> None:
        """Inject one failure; judge exit code, HTTP, error.json phase, mutation, cleanup and the next restore."""
        with vsnap_fault_lane.recorder.step(vsnap_fault.step, request.node.nodeid) as rec:
            faults.fault_step(vsnap_fault_lane, vsnap_fault, rec, vsnap_faults)
