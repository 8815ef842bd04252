"""The qualification procedure, defined once: every step a lane runs, its prerequisites and its title, and the
fault catalogue. The suites, the evidence (what a run requires) and the report (order, titles, coverage) all
read this table; nothing else spells a step name.
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


@dataclass(frozen=True)
class Fault:
    """One injected failure: its table entry. ``kind`` names its injector (``faults``); ``head`` is what the
    head behaviour (private canary before HTTP bind, ``error.json`` with the failing phase: the change under
    test) must show, ``base`` where the released behaviour differs (else the head's)."""

    id: str
    title: str
    kind: str  # hook | signal | create | identity | pid | port | manifest | image | kill | weights, or a conftest's
    head: Expect
    base: Expect | None = None
    hook_point: str | None = None  # the probe's point (kinds that act through a hook)
    stall: bool = False  # the hook's action is a stall: armed past the frozen recovery deadline
    signal: str | None = None  # ``kill -<signal>`` for the signal kind
    drift: str | None = None  # the identity kind's drift (``drifts.DRIFTS``)
    command: str | None = None  # the kill kind's command: ``create`` or ``restore`` (``kills``)

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

#: The built-in faults, each one entry. The base expectations are the released behaviour's (vLLM 0.31–0.33: HTTP
#: bound before the public canary, no error.json, no checkpoint hooks) where it differs from the head's.
FAULTS: tuple[Fault, ...] = (
    Fault(
        "wake-raise", "recovery failure after memory wake", "hook",
        head=Expect(1, False, "recovery: restore memory", None),
        base=Expect(1, False, "absent", None),
        hook_point="wake-raise",
    ),
    Fault(
        "communicators-raise", "failure while restoring communicators", "hook",
        head=Expect(1, False, "recovery: restore communicators", None),
        base=Expect(0, True, "absent", None, fires=False),
        hook_point="communicators-raise",
    ),
    Fault(
        "canary-perturb", "canary mismatch: one weight element perturbed after wake", "hook",
        head=Expect(1, False, "recovery: canary", None),
        base=Expect(1, True, "absent", None, message="snapshot oracle mismatch"),
        hook_point="canary-perturb",
    ),
    Fault(
        "recovery-deadline", "recovery stalls past VLLM_SNAPSHOT_TIMEOUT_S frozen at create", "hook",
        head=Expect(1, False, "recovery: restore memory", None),
        base=Expect(0, True, "absent", None),
        hook_point="wake-stall", stall=True,
    ),
    Fault(
        "cancel-sigint", "SIGINT to vllm snapshot restore while recovery runs", "signal",
        head=Expect("nonzero", False, None, None),
        hook_point="wake-stall", stall=True, signal="INT",
    ),
    Fault(
        "cancel-sigterm", "SIGTERM to vllm snapshot restore while recovery runs", "signal",
        head=Expect("nonzero", False, None, None),
        # as released, SIGTERM ends the controller by Python's default action, skipping its BaseException
        # cleanup: the released child may go on and bind; what is left is recorded, not judged
        base=Expect("nonzero", None, None, None, cleanup=False),
        hook_point="wake-stall", stall=True, signal="TERM",
    ),
    Fault(
        "create-partial-sleep", "sleep fails part-way during create", "create",
        head=Expect(1, None, None, None, message="snapshot child exited before ready"),
        hook_point="sleep-raise",
    ),
    *(
        Fault(fault_id, title, "identity", head=before_mutation("snapshot mismatch"), drift=drift)
        for fault_id, drift, title in (
            ("identity-drift", "env-added", "identity: an extra VLLM_* variable at restore"),
            ("identity-env-removed", "env-removed", "identity: a variable of the create's environment unset"),
            ("identity-env-changed", "env-changed", "identity: a variable of the create's environment changed"),
            ("identity-host", "host", "identity: another host (/etc/machine-id) at restore"),
            ("identity-kernel", "kernel", "identity: another kernel release at restore"),
            ("identity-vllm-version", "vllm-version", "identity: another vLLM version at restore"),
            ("identity-gpu", "gpu", "identity: another GPU driver version at restore"),
            ("identity-criu", "criu", "identity: another CRIU version at restore"),
        )
    ),
    Fault(
        "pid-occupied", "a captured PID is already occupied", "pid",
        head=before_mutation("captured PID is already occupied"),
    ),
    Fault("port-in-use", "the restore port is already in use", "port", head=Expect(1, None, None, None,
                                                                                   message="already in use")),
    Fault(
        "manifest-field", "a manifest field changed (schema_version 1 → 2)", "manifest",
        head=before_mutation("invalid snapshot manifest"),
    ),
    Fault("image-truncated", "an images/ file truncated", "image", head=Expect(1, False, None, None)),
    # issue 28: a weight shard changed between create and restore (vsnap_qual/tamper.py), on a private copy of the
    # model's cache entry and a private artifact: a refusal, or the damage named by the digests and canaries; the
    # weights unchanged after the restore is stale weights, a finding against the engine (the kind judges it)
    Fault(
        "weight-tampered", "a weight shard changed between create and restore (a private copy of the model)",
        "weights", head=Expect(ANY, None, None, None, followup_restore=False),
    ),
    # issue 29: killed at any moment (vsnap_qual/kills.py). Either outcome of the command is allowed; the
    # cleanup is judged after the harness's sweep in every case, and after vLLM's own where it has one (SIGTERM
    # to the head arm's restore); what a restore makes of the artifact is judged by the kind
    Fault(
        "kill-create", "SIGKILL to vllm snapshot create's whole tree at a random moment", "kill",
        head=Expect(ANY, None, None, None, cleanup=False), signal="KILL", command="create",
    ),
    Fault(
        # vLLM's create installs no SIGTERM handler (only the head restore raises on it): the controller ends by
        # the default action, so a child it started after the signal went lives on until its release deadline.
        # That is recorded (the chaos figures' "left by the command"); what is judged is the sweep
        "term-create", "SIGTERM to vllm snapshot create's whole tree at a random moment", "kill",
        head=Expect(ANY, None, None, None, cleanup=False), signal="TERM", command="create",
    ),
    Fault(
        "kill-restore", "SIGKILL to vllm snapshot restore's whole tree at a random moment", "kill",
        head=Expect(ANY, None, None, None, followup_restore=False, cleanup=False), signal="KILL", command="restore",
    ),
    Fault(
        "term-restore", "SIGTERM to vllm snapshot restore's whole tree at a random moment", "kill",
        head=Expect(ANY, None, None, None, followup_restore=False),
        base=Expect(ANY, None, None, None, followup_restore=False, cleanup=False),
        signal="TERM", command="restore",
    ),
)  # fmt: skip
FAULTS_BY_ID = {f.id: f for f in FAULTS}

FAULT_STEPS: tuple[Step, ...] = (
    Step(FAULT_ARTIFACT, "the fault lane's own artifact (short recovery deadline) and a pristine copy", (), "faults"),
    *(Step(f.step, f.title, (FAULT_ARTIFACT,), "faults") for f in FAULTS),
)

STEPS: dict[str, Step] = {s.name: s for s in (*LIFECYCLE, *FAULT_STEPS)}

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
    """The table entry of a step (a fault a conftest added is a fault step like the built-in ones); ``KeyError``
    names an unknown step (a typo in a suite)."""
    if name in STEPS:
        return STEPS[name]
    if is_fault_step(name):
        return Step(name, name, (FAULT_ARTIFACT,), "faults")
    raise KeyError(f"{name!r} is not a step of the procedure (vsnap_qual/procedure.py)")


def title(name: str) -> str:
    return STEPS[name].title if name in STEPS else name


def column(runner: str, variant: str | None) -> str:
    """A lane's column in the evidence and every view: its model runner, ``+<variant>`` for a variant's lane."""
    return runner + (f"+{variant}" if variant else "")


def label(runner: str, arm: str, name: str) -> str:
    """``runner/arm/step``, the name a step goes by in the evidence's coverage and in every view."""
    return f"{runner}/{arm}/{name}"


def required(
    lanes: Iterable[tuple[str, str, bool]], fault_ids: Sequence[str] | None = None, *, unit: bool = False
) -> list[str]:
    """Every step a full qualification of these lanes (runner, arm, overlaid) runs, as labels; the faults are the
    session's catalogue (default: the built-in ones); ``unit``: a unit command was given."""
    ids = [f.id for f in FAULTS] if fault_ids is None else list(fault_ids)
    faults = [FAULT_STEPS[0], *(step(FAULT_PREFIX + i) for i in ids)] if ids else []
    steps = [*LIFECYCLE, *faults]
    return [
        label(runner, arm, s.name) for runner, arm, overlaid in lanes for s in steps if s.applies(arm, overlaid, unit)
    ]
