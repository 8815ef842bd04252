"""The qualification procedure, defined once: every step a lane runs, its prerequisites and its title, and the
shape of a fault's entry (:class:`Fault`, :class:`Expect`). The suites, the evidence (what a run requires) and the
report (order, titles, coverage) all read this table; nothing else spells a step name. The faults themselves are
each kind's own entries, gathered by ``vsnap_qual.faults.catalogue`` (this module imports no fault code).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from vsnap_qual.contract import Purpose

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
    """One step of a lane: its evidence name, what it checks, what must have passed before it."""

    name: str
    title: str
    requires: tuple[str, ...] = ()
    purpose: Purpose = "lifecycle"
    #: The image arms the step runs on.
    arms: tuple[str, ...] = ("head", "base")
    #: Runs only on an arm that carries an overlay.
    overlay_only: bool = False
    #: Runs only when the user gave a unit command (``--vsnap-unit-command``).
    unit_only: bool = False
    #: Prerequisites that need only have delivered what this step uses, whatever their checks found: a restored
    #: server stopped cleanly (a slow or wrong answer is that step's finding; the artifact and the stop it needs
    #: are still there), or a published artifact whose captured tree is gone (a create's leak is its own finding).
    delivered: tuple[str, ...] = ()

    def applies(self, arm: str, overlaid: bool, unit: bool = False) -> bool:
        """Whether a lane of this arm (with or without an overlay; with or without a unit command) runs this step."""
        return arm in self.arms and (overlaid or not self.overlay_only) and (unit or not self.unit_only)


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


#: The lifecycle, in the order a lane runs it (the suite's test order).
LIFECYCLE: tuple[Step, ...] = (
    Step(ORDINARY, "ordinary vllm serve reference: canary, digests, KV, stop, cleanup audit"),
    Step(VS_HEAD, "base image agrees with the image under test (canary, digests)", (ORDINARY,), arms=("base",)),
    Step(CREATE, "vllm snapshot create (offline); the captured tree is gone"),
    Step(INSPECT, "vllm snapshot inspect: every upstream e2e field, oracle, sha256", delivered=(CREATE,)),
    Step(RESTORE_1, "first restore: listener, canary and digests equal to ordinary", (ORDINARY, INSPECT)),
    Step(RESTART, "container restart: restored server gone, inspect output unchanged", (INSPECT,)),
    Step(RESTORE_2, "restore after the restart: the same checks, stop, cleanup audit", (ORDINARY, RESTART)),
    Step(
        RESTORE_AFTER_STOP,
        "restore again after the restored server's graceful stop (SIGTERM, its own cleanup): the same checks",
        (ORDINARY,),
        delivered=(RESTORE_2,),
    ),
    Step(
        FRESH_BOX,
        "restore in a fresh box (own IPC namespace, empty /dev/shm) holding only the artifact: the same checks",
        (ORDINARY, INSPECT),
    ),
    Step(OVERLAY, "overlaid files are the ones the engine processes imported", arms=("head",), overlay_only=True),
    Step(
        UNIT,
        "the unit command from the overlay checkout, per test id; a failure new on the head arm fails",
        unit_only=True,
    ),
)

#: The fault lane's own first step; each fault of the session's catalogue is a step ``fault:<id>`` after it.
FAULT_ARTIFACT_STEP = Step(
    FAULT_ARTIFACT, "the fault lane's own artifact (short recovery deadline) and a pristine copy", (), "faults"
)

#: The table's steps by name: the lifecycle and the fault artifact (a fault's step is :func:`step`'s).
STEPS: dict[str, Step] = {s.name: s for s in (*LIFECYCLE, FAULT_ARTIFACT_STEP)}

#: Lifecycle columns in the order the report shows them (overlay first: it qualifies the image's code).
DISPLAY_ORDER: tuple[str, ...] = (
    OVERLAY, ORDINARY, CREATE, INSPECT, RESTORE_1, RESTART, RESTORE_2, RESTORE_AFTER_STOP, FRESH_BOX
)  # fmt: skip
#: The steps whose outcome is "the lifecycle" in the validation table.
SNAPSHOT_LIFECYCLE: tuple[str, ...] = (CREATE, INSPECT, RESTORE_1, RESTART, RESTORE_2, RESTORE_AFTER_STOP, FRESH_BOX)
#: Steps whose results carry a canary (the ordinary reference, then each restore).
CANARY_STEPS: tuple[str, ...] = (ORDINARY, RESTORE_1, RESTORE_2, RESTORE_AFTER_STOP, FRESH_BOX)
RESTORES: tuple[str, ...] = (RESTORE_1, RESTORE_2, RESTORE_AFTER_STOP, FRESH_BOX)


def is_fault_step(name: str) -> bool:
    """True for ``fault:<id>`` steps."""
    return name.startswith(FAULT_PREFIX)


def step(name: str) -> Step:
    """The table entry of a step (every fault, built in or added by a conftest, is a step ``fault:<id>`` after the
    fault artifact); ``KeyError`` names an unknown step (a typo in a suite)."""
    if name in STEPS:
        return STEPS[name]
    if is_fault_step(name):
        return Step(name, name, (FAULT_ARTIFACT,), "faults")
    raise KeyError(f"{name!r} is not a step of the procedure (vsnap_qual/procedure.py)")


def title(name: str) -> str:
    """A table step's title; a fault step's title is its fault's (recorded in its evidence: ``results.title``)."""
    return STEPS[name].title if name in STEPS else name


def step_order(fault_ids: Sequence[str] = ()) -> dict[str, int]:
    """Each step's place in the procedure: the table's steps, then ``fault:<id>`` for the session's faults in their
    catalogue's order (the evidence's ``coverage.faults``)."""
    names = [*STEPS, *(FAULT_PREFIX + i for i in fault_ids)]
    return {name: i for i, name in enumerate(dict.fromkeys(names))}


def column(runner: str, variant: str | None) -> str:
    """A lane's column in the evidence and every view: its model runner, ``+<variant>`` for a variant's lane."""
    return runner + (f"+{variant}" if variant else "")


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
