"""The qualification procedure, defined once: every step a lane runs, its prerequisites and its title, and the
fault catalogue. The suites, the evidence (what a run requires) and the report (order, titles, coverage) all
read this table; nothing else spells a step name.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Purpose = Literal["lifecycle", "faults"]

OVERLAY = "overlay"
ORDINARY = "ordinary"
VS_HEAD = "vs-head"
CREATE = "create"
INSPECT = "inspect"
RESTORE_1 = "restore-1"
RESTART = "restart"
RESTORE_2 = "restore-2"
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

    def applies(self, arm: str, overlaid: bool) -> bool:
        """Whether a lane of this arm (with or without an overlay) runs this step."""
        return arm in self.arms and (overlaid or not self.overlay_only)


@dataclass(frozen=True)
class Fault:
    """One injected failure."""

    id: str
    title: str
    kind: str  # hook | env | pid | port | manifest | image | signal | create
    hook_point: str | None = None

    @property
    def step(self) -> str:
        return FAULT_PREFIX + self.id


#: The lifecycle, in the order a lane runs it (the suite's test order).
LIFECYCLE: tuple[Step, ...] = (
    Step(ORDINARY, "ordinary vllm serve reference: canary, digests, KV, stop, cleanup audit"),
    Step(VS_HEAD, "base image agrees with the image under test (canary, digests)", (ORDINARY,), arms=("base",)),
    Step(CREATE, "vllm snapshot create (offline); the captured tree is gone"),
    Step(INSPECT, "vllm snapshot inspect: every upstream e2e field, oracle, sha256", (CREATE,)),
    Step(RESTORE_1, "first restore: listener, canary and digests equal to ordinary", (ORDINARY, INSPECT)),
    Step(RESTART, "container restart: restored server gone, inspect output unchanged", (INSPECT,)),
    Step(RESTORE_2, "restore after the restart: the same checks, stop, cleanup audit", (ORDINARY, RESTART)),
    Step(OVERLAY, "overlaid files are the ones the engine processes imported", arms=("head",), overlay_only=True),
)

FAULTS: tuple[Fault, ...] = (
    Fault("wake-raise", "recovery failure after memory wake", "hook", "wake-raise"),
    Fault("communicators-raise", "failure while restoring communicators", "hook", "communicators-raise"),
    Fault("canary-perturb", "canary mismatch: one weight element perturbed after wake", "hook", "canary-perturb"),
    Fault(
        "recovery-deadline",
        "recovery stalls past VLLM_SNAPSHOT_TIMEOUT_S frozen at create",
        "hook",
        "wake-stall",
    ),
    Fault("cancel-sigint", "SIGINT to vllm snapshot restore while recovery runs", "signal", "wake-stall"),
    Fault("cancel-sigterm", "SIGTERM to vllm snapshot restore while recovery runs", "signal", "wake-stall"),
    Fault("create-partial-sleep", "sleep fails part-way during create", "create", "sleep-raise"),
    Fault("identity-drift", "an extra VLLM_* variable at restore", "env"),
    Fault("pid-occupied", "a captured PID is already occupied", "pid"),
    Fault("port-in-use", "the restore port is already in use", "port"),
    Fault("manifest-field", "a manifest field changed (schema_version 1 → 2)", "manifest"),
    Fault("image-truncated", "an images/ file truncated", "image"),
)
FAULTS_BY_ID = {f.id: f for f in FAULTS}

FAULT_STEPS: tuple[Step, ...] = (
    Step(FAULT_ARTIFACT, "the fault lane's own artifact (short recovery deadline) and a pristine copy", (), "faults"),
    *(Step(f.step, f.title, (FAULT_ARTIFACT,), "faults") for f in FAULTS),
)

STEPS: dict[str, Step] = {s.name: s for s in (*LIFECYCLE, *FAULT_STEPS)}

#: Lifecycle columns in the order the report shows them (overlay first: it qualifies the image's code).
DISPLAY_ORDER: tuple[str, ...] = (OVERLAY, ORDINARY, CREATE, INSPECT, RESTORE_1, RESTART, RESTORE_2)
#: The steps whose outcome is "the lifecycle" in the validation table.
SNAPSHOT_LIFECYCLE: tuple[str, ...] = (CREATE, INSPECT, RESTORE_1, RESTART, RESTORE_2)
#: Steps whose results carry a canary (the ordinary reference, then each restore).
CANARY_STEPS: tuple[str, ...] = (ORDINARY, RESTORE_1, RESTORE_2)
RESTORES: tuple[str, ...] = (RESTORE_1, RESTORE_2)


def add_fault(fault: Fault) -> None:
    """Add a fault point to the catalogue (``faults.register`` calls this; see ``docs/adding-a-fault.md``).
    Must run before the suites are collected (a conftest's import, or ``pytest_configure``)."""
    global FAULTS, FAULTS_BY_ID, FAULT_STEPS
    if fault.id in FAULTS_BY_ID:
        raise ValueError(f"fault {fault.id!r} is already in the catalogue")
    FAULTS = (*FAULTS, fault)
    FAULTS_BY_ID = {f.id: f for f in FAULTS}
    FAULT_STEPS = (*FAULT_STEPS, Step(fault.step, fault.title, (FAULT_ARTIFACT,), "faults"))
    STEPS[fault.step] = FAULT_STEPS[-1]


def is_fault_step(name: str) -> bool:
    """True for ``fault:<id>`` steps."""
    return name.startswith(FAULT_PREFIX)


def step(name: str) -> Step:
    """The table entry of a step; ``KeyError`` names an unknown step (a typo in a suite)."""
    try:
        return STEPS[name]
    except KeyError:
        raise KeyError(f"{name!r} is not a step of the procedure (vsnap_qual/procedure.py)") from None


def title(name: str) -> str:
    return STEPS[name].title if name in STEPS else name


def label(runner: str, arm: str, name: str) -> str:
    """``runner/arm/step``, the name a step goes by in the evidence's coverage and in every view."""
    return f"{runner}/{arm}/{name}"


def required(lanes: Iterable[tuple[str, str, bool]], *, faults: bool = True) -> list[str]:
    """Every step a full qualification of these lanes (runner, arm, overlaid) runs, as labels."""
    steps = [*LIFECYCLE, *(FAULT_STEPS if faults else ())]
    return [label(runner, arm, s.name) for runner, arm, overlaid in lanes for s in steps if s.applies(arm, overlaid)]
