"""The qualification procedure, defined once: every step a lane runs, in order, with its prerequisites, its title,
which lanes it applies to, its body and the type of the results it records; and the shape of a fault's entry
(:class:`Fault`, :class:`Expect`). The suites (their order, applicability, the body each test runs), the evidence
(what a run requires, each record's results type) and the report (order, titles, coverage, which steps carry
canaries or digests) all read this table; nothing else spells a step name. A step's body is named, not imported
(``run``: ``module:function``, resolved where the suites run), so this module imports no step code; the faults
themselves are each kind's own entries, gathered by ``vsnap_qual.faults.catalogue`` (this module imports no fault
code either).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar, cast

from vsnap_qual import model
from vsnap_qual.contract import Purpose
from vsnap_qual.model import (
    CreateResults,
    FaultArtifactResults,
    FaultResults,
    InspectResults,
    OrdinaryResults,
    OverlayResults,
    RestartResults,
    RestoreResults,
    UnitResults,
    VsHeadResults,
)

OVERLAY = "overlay"
ORDINARY = "ordinary"
VS_HEAD = "vs-head"
CREATE = "create"
INSPECT = "inspect"
RESTORE_1 = "restore-1"
RESTART = "restart"
RESTORE_2 = "restore-2"
RESTORE_AFTER_STOP = "restore-after-stop"
FRESH_BOX = "fresh-box"
UNIT = "unit"
FAULT_ARTIFACT = "fault-artifact"
FAULT_PREFIX = "fault:"


@dataclass(frozen=True)
class Step:
    """One step of a lane: its evidence name, what it checks, what must have passed before it, which lanes run it,
    its body and the type of what it records."""

    name: str
    title: str
    requires: tuple[str, ...] = ()
    purpose: Purpose = "lifecycle"
    #: The image arms the step runs on, and why a lane of another arm does not (its not-applicable words).
    arms: tuple[str, ...] = ("head", "base")
    arms_why: str = ""
    #: Runs only on an arm that carries an overlay.
    overlay_only: bool = False
    #: Runs only when the user gave a unit command (``--vsnap-unit-command``).
    unit_only: bool = False
    #: Prerequisites that need only have delivered what this step uses, whatever their checks found: a restored
    #: server stopped cleanly (a slow or wrong answer is that step's finding; the artifact and the stop it needs
    #: are still there), or a published artifact whose captured tree is gone (a create's leak is its own finding).
    delivered: tuple[str, ...] = ()
    #: The body: ``module:function``, called with the lane and the step's open record (``recorder.StepEvidence``,
    #: whose ``step`` is this entry's name: which restore it is); resolved where the suites run (the plugin's
    #: ``vsnap_step`` fixture), so this table imports no step code.
    run: str = field(default="", kw_only=True)
    #: The type of the results the step records (``vsnap_qual.model``): its record's ``results`` are read as it.
    results: type = field(default=dict, kw_only=True)

    def not_applicable(self, arm: str, overlaid: bool, unit: bool = False) -> str | None:
        """Why a lane of this arm (with or without an overlay; with or without a unit command) does not run this
        step, in words; None where it does."""
        if self.overlay_only and not overlaid:
            return "no overlay on this arm"
        if self.unit_only and not unit:
            return "no --vsnap-unit-command"
        if arm not in self.arms:
            return self.arms_why or f"a step of the {' and '.join(self.arms)} arm"
        return None

    def applies(self, arm: str, overlaid: bool, unit: bool = False) -> bool:
        """Whether a lane of this arm (with or without an overlay; with or without a unit command) runs this step."""
        return self.not_applicable(arm, overlaid, unit) is None

    def declares(self, name: str) -> bool:
        """Whether the step's results type declares the field ``name`` (what its record may carry)."""
        return name in model.fields_of(self.results).types


#: An exit code, or "nonzero" / "any".
ExitExpectation = int | Literal["nonzero", "any"]
ANY: Literal["any"] = "any"


@dataclass(frozen=True)
class Expect:
    """What one fault must produce on one behaviour (``head`` or ``base``)."""

    exit_code: ExitExpectation
    http_bound: bool | None  # None: not judged (the fault itself holds the port)
    error_phase: str | None  # error.json phase; "absent" = must not exist; None = not judged
    artifact_unchanged: bool | None  # the check comes before mutation
    fires: bool = True
    message: str | None = None  # a substring of stderr
    followup_restore: bool = True
    cleanup: bool = True  # vLLM itself must leave no process and no open port behind


def before_mutation(message: str) -> Expect:
    """A check the contract places before any mutation: exit 1, no HTTP, artifact byte-identical."""
    return Expect(1, False, None, True, message=message)


class FaultParams:
    """The parameters a fault kind reads of its faults (``Fault.params``): each kind's own frozen dataclass
    subclasses this (``HookParams``, ``IdentityParams``, ``KillParams``, … in ``vsnap_qual/faults/kinds/``)."""

    def waits_out_deadline(self) -> bool:
        """Whether the faulted action waits out the recovery deadline frozen at create (a stall no signal ends):
        the plan line's floor (``plan.plan_line``)."""
        return False


@dataclass(frozen=True)
class Fault:
    """One injected failure: its table entry. ``kind`` names its kind (``vsnap_qual/faults/kinds/``: the injector
    and the parameter type); ``head`` is what the head behaviour (private canary before HTTP bind, ``error.json``
    with the failing phase: the change under test) must show, ``base`` where the released behaviour differs (else
    the head's); ``params`` is what its kind reads of it (a hook point, a drift, a command and a signal, ...).
    The built-in faults are each kind's own entries (``vsnap_qual.faults.catalogue``); a conftest adds its own."""

    id: str
    title: str
    kind: str  # hook | signal | create | identity | pid | port | manifest | image | weights | kill, or a conftest's
    head: Expect
    base: Expect | None = None
    params: FaultParams | None = None

    @property
    def step(self) -> str:
        return FAULT_PREFIX + self.id

    def expect(self, behaviour: str) -> Expect:
        """The expectation this fault is judged by on ``behaviour`` (``head`` or ``base``)."""
        return self.base if behaviour == "base" and self.base is not None else self.head


STEPS_MODULE = "vsnap_qual.steps"
FAULTS_MODULE = "vsnap_qual.faults"

#: The lifecycle, in the order a lane runs it (the suite's test order, held to it as the suite is collected).
LIFECYCLE: tuple[Step, ...] = (
    Step(
        ORDINARY,
        "ordinary vllm serve reference: canary, digests, KV, stop, cleanup audit",
        run=f"{STEPS_MODULE}:ordinary_reference",
        results=OrdinaryResults,
    ),
    Step(
        VS_HEAD,
        "base image agrees with the image under test (canary, digests)",
        (ORDINARY,),
        arms=("base",),
        arms_why="compared from the base arm",
        run=f"{STEPS_MODULE}:compare_arms",
        results=VsHeadResults,
    ),
    Step(
        CREATE,
        "vllm snapshot create (offline); the captured tree is gone",
        run=f"{STEPS_MODULE}:create",
        results=CreateResults,
    ),
    Step(
        INSPECT,
        "vllm snapshot inspect: every upstream e2e field, oracle, sha256",
        delivered=(CREATE,),
        run=f"{STEPS_MODULE}:inspect",
        results=InspectResults,
    ),
    Step(
        RESTORE_1,
        "first restore: listener, canary and digests equal to ordinary",
        (ORDINARY, INSPECT),
        run=f"{STEPS_MODULE}:restore",
        results=RestoreResults,
    ),
    Step(
        RESTART,
        "container restart: restored server gone, inspect output unchanged",
        (INSPECT,),
        run=f"{STEPS_MODULE}:restart",
        results=RestartResults,
    ),
    Step(
        RESTORE_2,
        "restore after the restart: the same checks, stop, cleanup audit",
        (ORDINARY, RESTART),
        run=f"{STEPS_MODULE}:restore_then_stop",
        results=RestoreResults,
    ),
    Step(
        RESTORE_AFTER_STOP,
        "restore again after the restored server's graceful stop (SIGTERM, its own cleanup): the same checks",
        (ORDINARY,),
        delivered=(RESTORE_2,),
        run=f"{STEPS_MODULE}:restore_then_stop",
        results=RestoreResults,
    ),
    Step(
        FRESH_BOX,
        "restore in a fresh box (own IPC namespace, empty /dev/shm) holding only the artifact: the same checks",
        (ORDINARY, INSPECT),
        run=f"{STEPS_MODULE}:fresh_box_restore",
        results=RestoreResults,
    ),
    Step(
        OVERLAY,
        "overlaid files are the ones the engine processes imported",
        arms=("head",),
        overlay_only=True,
        run=f"{STEPS_MODULE}:overlay_verification",
        results=OverlayResults,
    ),
    Step(
        UNIT,
        "the unit command from the overlay checkout, per test id; a failure new on the head arm fails",
        unit_only=True,
        run=f"{STEPS_MODULE}:unit_step",
        results=UnitResults,
    ),
)

#: The fault lane's own first step; each fault of the session's catalogue is a step ``fault:<id>`` after it.
FAULT_ARTIFACT_STEP = Step(
    FAULT_ARTIFACT,
    "the fault lane's own artifact (short recovery deadline) and a pristine copy",
    (),
    "faults",
    run=f"{FAULTS_MODULE}:fault_artifact",
    results=FaultArtifactResults,
)

#: The table's steps by name: the lifecycle and the fault artifact (a fault's step is :func:`step`'s).
STEPS: dict[str, Step] = {s.name: s for s in (*LIFECYCLE, FAULT_ARTIFACT_STEP)}

#: Lifecycle columns in the order the report shows them (overlay first: it qualifies the image's code).
DISPLAY_ORDER: tuple[str, ...] = (
    OVERLAY, ORDINARY, CREATE, INSPECT, RESTORE_1, RESTART, RESTORE_2, RESTORE_AFTER_STOP, FRESH_BOX
)  # fmt: skip
#: The steps whose outcome is "the lifecycle" in the validation table.
SNAPSHOT_LIFECYCLE: tuple[str, ...] = (CREATE, INSPECT, RESTORE_1, RESTART, RESTORE_2, RESTORE_AFTER_STOP, FRESH_BOX)


def recording(name: str) -> tuple[str, ...]:
    """The table's steps whose results type declares the field ``name``, in the table's order (``canary``: the
    ordinary reference and each restore; ``digest_compare``: the restores and ``vs-head``)."""
    return tuple(s.name for s in STEPS.values() if s.declares(name))


#: Steps whose results carry a canary (the ordinary reference, then each restore), read from their types.
CANARY_STEPS: tuple[str, ...] = recording("canary")
#: The restores: the steps that record :class:`model.RestoreResults`.
RESTORES: tuple[str, ...] = tuple(s.name for s in STEPS.values() if s.results is RestoreResults)


def is_fault_step(name: str) -> bool:
    """True for ``fault:<id>`` steps."""
    return name.startswith(FAULT_PREFIX)


def step(name: str) -> Step:
    """The table entry of a step (every fault, built in or added by a conftest, is a step ``fault:<id>`` after the
    fault artifact); ``KeyError`` names an unknown step (a typo in a suite)."""
    if name in STEPS:
        return STEPS[name]
    if is_fault_step(name):
        return Step(name, name, (FAULT_ARTIFACT,), "faults", run=f"{FAULTS_MODULE}:fault_step", results=FaultResults)
    raise KeyError(f"{name!r} is not a step of the procedure (vsnap_qual/procedure.py)")


def title(name: str) -> str:
    """A table step's title; a fault step's title is its fault's (recorded in its evidence: ``results.title``)."""
    return STEPS[name].title if name in STEPS else name


def step_order(fault_ids: Sequence[str] = ()) -> dict[str, int]:
    """Each step's place in the procedure: the table's steps, then ``fault:<id>`` for the session's faults in their
    catalogue's order (the evidence's ``coverage.faults``)."""
    names = [*STEPS, *(FAULT_PREFIX + i for i in fault_ids)]
    return {name: i for i, name in enumerate(dict.fromkeys(names))}


def label(runner: str, arm: str, name: str) -> str:
    """``runner/arm/step``, the name a step goes by in the evidence's coverage and in every view."""
    return f"{runner}/{arm}/{name}"


def required(lanes: Iterable[tuple[str, str, bool]], fault_ids: Sequence[str], *, unit: bool = False) -> list[str]:
    """Every step a full qualification of these lanes (runner, arm, overlaid) runs, as labels; the faults are the
    session's catalogue's (``FaultCatalogue.ids``); ``unit``: a unit command was given."""
    faults = [FAULT_ARTIFACT_STEP, *(step(FAULT_PREFIX + i) for i in fault_ids)] if fault_ids else []
    steps = [*LIFECYCLE, *faults]
    return [
        label(runner, arm, s.name) for runner, arm, overlaid in lanes for s in steps if s.applies(arm, overlaid, unit)
    ]


R = TypeVar("R")


def results_as(record: model.Step | None, of: type[R]) -> R | None:
    """A step record's results read as ``of`` (a step's results type, or a piece of one): where the record's step
    records every field ``of`` declares (its table entry's type), else None (no record, a step that records
    other things, or one the table does not name)."""
    if record is None:
        return None
    try:
        entry = step(record["step"])
    except KeyError:
        return None
    wanted = model.fields_of(cast(type, of)).types
    if not all(entry.declares(name) for name in wanted):
        return None
    return cast(R, record["results"])
