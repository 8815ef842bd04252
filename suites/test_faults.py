"""Injected failures, per model runner and image arm: each must fail the way the contract says, leave nothing
behind, and leave the artifact restorable. Expectations per behaviour (head / base) are in
``vsnap_qual.faults.EXPECTATIONS``; the observed outcome is recorded either way.
"""

from __future__ import annotations

import pytest

from vsnap_qual import faults, procedure
from vsnap_qual.docker_lane import LaneRun
from vsnap_qual.faults import EXPECTATIONS
from vsnap_qual.procedure import FAULTS
from vsnap_qual.steps import StepFailed

pytestmark = pytest.mark.fault


class TestFaults:
    @pytest.mark.vsnap_step(procedure.FAULT_ARTIFACT)
    def test_fault_artifact(self, vsnap_fault_lane: LaneRun, request: pytest.FixtureRequest) -> None:
        """The fault lane's own artifact, created with a short VLLM_SNAPSHOT_TIMEOUT_S, and a pristine copy."""
        with vsnap_fault_lane.step(procedure.FAULT_ARTIFACT, request.node.nodeid) as record:
            # which expectations judge this lane's faults, chosen before its first engine command
            record["results"]["expect"], record["results"]["expect_reason"] = faults.lane_expectation(vsnap_fault_lane)
            faults.prepare_artifact(vsnap_fault_lane, record)

    @pytest.mark.vsnap_step(procedure.FAULT_PREFIX)  # the step is fault:<id> of the parametrized fault
    @pytest.mark.parametrize("fault", FAULTS, ids=[f.id for f in FAULTS])
    def test_fault(self, vsnap_fault_lane: LaneRun, fault: faults.Fault, request: pytest.FixtureRequest) -> None:
        """Inject one failure; judge exit code, HTTP, error.json phase, mutation, cleanup and the next restore."""
        with vsnap_fault_lane.step(fault.step, request.node.nodeid) as record:
            behaviour, reason = faults.lane_expectation(vsnap_fault_lane)
            expect = EXPECTATIONS[behaviour][fault.id]
            observed = faults.run_fault(vsnap_fault_lane, fault, record)
            problems = faults.judge(fault, expect, observed, record["results"])
            if problems and problems[0].startswith("ineffective injection"):
                # an injection that did not hold is tried once more before it is reported as ineffective
                first = problems[0]
                observed = faults.run_fault(vsnap_fault_lane, fault, record)
                problems = faults.judge(fault, expect, observed, record["results"])
                record["results"]["retried_after"] = first
            record["results"]["cleanup"]["judged"] = expect.cleanup  # recorded either way
            record["results"].update(
                fault=fault.id,
                title=fault.title,
                expect=behaviour,
                expect_reason=reason,
                expected=faults.asdict(expect),
                observed=faults.observation_dict(observed),
                mismatches=problems,
            )
            if problems:
                raise StepFailed(f"{fault.title} ({behaviour} expectations, {reason}): " + "; ".join(problems))
