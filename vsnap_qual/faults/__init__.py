"""Injected failures: one module per fault kind (:mod:`.kinds`: how it is injected and known to have fired, its
parameters and its record, its built-in faults), the one sequence every fault runs (:mod:`.sequence`), the judge
(:mod:`.judge`), the session's catalogue (:mod:`.catalogue`) and the lane-side tools they share (:mod:`.tools`). The
fault layer sees its lane only through :class:`FaultLane` (:mod:`.lane`, below every other module here).

Hooks inside the engine are armed through the lane's control directory (``faults/armed.json``, read by the probe
when the hooked worker method runs: the environment is frozen into the snapshot at create, so it cannot carry a
trigger). The other kinds act on what the contract checks: the environment, a captured PID, the port, the
artifact's files, the weights, the command's own processes. Each kind has one :class:`Injector` (built in, or added
with its faults from a conftest through the ``pytest_vsnap_add_faults`` hook into the session's
:class:`FaultCatalogue`); every fault runs through :func:`run_fault`; the injector decides from the harness's own
evidence whether it fired, and a fault that did not fire fails as an ineffective injection.

What the plugin, the suites and a conftest use is named here."""

from __future__ import annotations

from vsnap_qual.faults.catalogue import (
    BUILTIN,
    BUILTIN_FAULTS,
    BUILTIN_INJECTORS,
    BUILTIN_KINDS,
    FAULTS_BY_ID,
    FaultCatalogue,
    lane_expectation,
)
from vsnap_qual.faults.injector import Attempt, Injector, Kind, Observation, params_of
from vsnap_qual.faults.judge import judge
from vsnap_qual.faults.lane import FaultLane
from vsnap_qual.faults.sequence import Phases, fault_artifact, fault_step, followup_restore, run_fault
from vsnap_qual.faults.tools import prepare_artifact
from vsnap_qual.procedure import ANY, Expect, Fault, FaultParams

__all__ = [
    "ANY",
    "BUILTIN",
    "BUILTIN_FAULTS",
    "BUILTIN_INJECTORS",
    "BUILTIN_KINDS",
    "FAULTS_BY_ID",
    "Attempt",
    "Expect",
    "Fault",
    "FaultCatalogue",
    "FaultLane",
    "FaultParams",
    "Injector",
    "Kind",
    "Observation",
    "Phases",
    "fault_artifact",
    "fault_step",
    "followup_restore",
    "judge",
    "lane_expectation",
    "params_of",
    "prepare_artifact",
    "run_fault",
]
