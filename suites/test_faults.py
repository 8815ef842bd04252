"""Injected failures, per model runner and image arm: each must fail the way the contract says, leave nothing
behind, and leave the artifact restorable. The faults and their head / base expectations are each kind's own entries
(``vsnap_qual/faults/kinds/``), plus any a conftest adds through ``pytest_vsnap_add_faults``; the observed outcome is
recorded either way.
"""

from __future__ import annotations

import pytest

from vsnap_qual import procedure
from vsnap_qual.plugin import VsnapStep
from vsnap_qual.procedure import Fault

pytestmark = pytest.mark.fault


class TestFaults:
    @pytest.mark.vsnap_step(procedure.FAULT_ARTIFACT)
    def test_fault_artifact(self, vsnap_step: VsnapStep) -> None:
        """Which expectations judge this lane's faults; the fault lane's own artifact, created with a short
        VLLM_SNAPSHOT_TIMEOUT_S, and a pristine copy."""
        vsnap_step.run()

    @pytest.mark.vsnap_step(procedure.FAULT_PREFIX)  # the step is fault:<id> of the parametrized fault
    def test_fault(self, vsnap_step: VsnapStep, vsnap_fault: Fault) -> None:
        """Inject one failure; judge exit code, HTTP, error.json phase, mutation, cleanup and the next restore."""
        vsnap_step.run()
