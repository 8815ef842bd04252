"""The kinds that act through a probe hook point inside the engine (``vsnap_probe.faults.POINTS``): ``hook`` (the
point raises, perturbs or stalls during the faulted restore), ``signal`` (the point stalls recovery and the restore
is signalled while it runs) and ``create`` (the point acts during ``vllm snapshot create``).

A hook is armed through the lane's control directory (``faults/armed.json``, read by the probe when the hooked
worker method runs: the environment is frozen into the snapshot at create, so it cannot carry a trigger); it fired
when the probe wrote its ``fired-<point>-<pid>.json`` record as it acted."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from vsnap_qual.box import ControlDir, ExecResult
from vsnap_qual.contract import ARTIFACT, WORK
from vsnap_qual.faults.injector import Attempt, Injector, Kind, Observation, params_of
from vsnap_qual.faults.lane import FaultLane
from vsnap_qual.faults.tools import fired_records, snapshot_timeout
from vsnap_qual.model import CreateInjected, HookInjected, SignalInjected
from vsnap_qual.probe.vsnap_probe import control_files
from vsnap_qual.procedure import Expect, Fault, FaultParams

#: where the create kind's faulted create writes (never the fault artifact)
CREATE_TARGET = f"{WORK}/fault-create"
#: how much longer than the fault artifact's recovery deadline a stall lasts
STALL_PAST_S = 10.0


@dataclass(frozen=True)
class HookParams(FaultParams):
    """A hook fault's parameters: the probe's point, and whether its action is a stall (then armed past the
    recovery deadline frozen at create)."""

    point: str
    stall: bool = False

    def waits_out_deadline(self) -> bool:
        return self.stall


@dataclass(frozen=True)
class SignalParams(HookParams):
    """A signal fault's parameters: the stalling point, and the signal sent to the restore as recovery runs (the
    stall never waits out the deadline: the signal ends it)."""

    stall: bool = True
    signal: str = "TERM"

    def waits_out_deadline(self) -> bool:
        return False


def arm(control: ControlDir, point: str, stall_s: float | None = None) -> None:
    """Arm the probe's hook point (the fired records of earlier faults are cleared by ``run_fault`` first)."""
    control.write_json(control_files.ARMED, control_files.armed_payload(point, stall_s))


def disarm(control: ControlDir) -> None:
    """Remove the armed point: the probe's hooks are no-ops again."""
    control.remove(control_files.ARMED)


class HookInjector(Injector):
    """``hook``: a probe hook armed at the fault's point inside the engine; fired when the hook wrote its
    ``fired-<point>-<pid>.json`` record as it acted."""

    through_hook = True

    def begin(self, at: Attempt) -> None:
        params = params_of(at.fault, HookParams)
        # a stall outlasts the recovery deadline frozen into the fault artifact at its create
        arm(at.lane.control, params.point, snapshot_timeout(at.lane) + STALL_PAST_S if params.stall else None)
        if params.waits_out_deadline() and at.lane.state.deadline is not None:
            at.rec.results["recovery_deadline"] = at.lane.state.deadline

    def end(self, at: Attempt) -> None:
        disarm(at.lane.control)

    def fired(self, obs: Observation, injected: Mapping[str, Any]) -> bool:
        return bool(obs.fired_records)


class SignalInjector(HookInjector):
    """``signal``: the hook stalls recovery; a signaller thread signals this lane's ``vllm snapshot restore``
    once the hook reported that recovery runs (``SignalParams.signal``). Fired when the hook fired and the signal
    was sent."""

    @contextlib.contextmanager
    def restoring(self, at: Attempt) -> Iterator[None]:
        done, sent = threading.Event(), list[str]()
        signame = params_of(at.fault, SignalParams).signal
        limit = at.lane.config.timeouts["restore"]
        signaller = threading.Thread(target=signal_when_fired, args=(at.lane, signame, done, sent, limit), daemon=True)
        signaller.start()
        yield
        done.set()
        signaller.join(5)
        cast(SignalInjected, at.injected)["signal"] = sent

    def fired(self, obs: Observation, injected: Mapping[str, Any]) -> bool:
        return bool(obs.fired_records) and bool(injected.get("signal"))


def signal_when_fired(lane: FaultLane, signame: str, done: threading.Event, sent: list[str], limit: float) -> None:
    """Once a hook reports that recovery is running, signal this lane's ``vllm snapshot restore``.

    The target is looked up among this box's processes only: with host pid namespaces a pattern match
    (``pkill -f``) would also hit other lanes' restores."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and not done.is_set():
        if fired_records(lane.control):
            time.sleep(0.3)
            procs = lane.box.processes()
            wrappers = {
                p["pid"]
                for p in procs
                if p["args"].startswith("timeout ") and f"vllm snapshot restore {ARTIFACT}" in p["args"]
            }
            targets = [p["pid"] for p in procs if p["ppid"] in wrappers]  # the restore command itself
            if targets and lane.box.signal(targets, signame, strict=True):
                sent.append(f"SIG{signame} to {targets}")
            return
        time.sleep(0.05)


class CreateInjector(HookInjector):
    """``create``: the hook armed at a point of ``vllm snapshot create``, and the action is a create into a
    fresh directory (not a restore); the failed create must remove its target directory."""

    judges_artifact = False  # the action does not touch the artifact

    def act(self, at: Attempt) -> ExecResult:
        lane = at.lane
        lane.box.remove_path(CREATE_TARGET)
        result = lane.cli.snapshot(
            at.rec, "create", *lane.cli.create_argv(CREATE_TARGET), timeout_key="create", name="create-faulted"
        )
        cast(CreateInjected, at.injected)["target_removed"] = not lane.box.exists(CREATE_TARGET)
        return result

    def problems(self, obs: Observation, results: Mapping[str, Any]) -> list[str]:
        if not (results.get("injected") or {}).get("target_removed", False):
            return ["the failed create left its target directory behind"]
        return []


KINDS = (
    Kind(
        "hook",
        HookInjector(),
        HookParams,
        HookInjected,
        faults=(
            Fault(
                "wake-raise", "recovery failure after memory wake", "hook",
                head=Expect(1, False, "recovery: restore memory", None),
                base=Expect(1, False, "absent", None),
                params=HookParams("wake-raise"),
            ),
            Fault(
                "communicators-raise", "failure while restoring communicators", "hook",
                head=Expect(1, False, "recovery: restore communicators", None),
                base=Expect(0, True, "absent", None, fires=False),
                params=HookParams("communicators-raise"),
            ),
            Fault(
                "canary-perturb", "canary mismatch: one weight element perturbed after wake", "hook",
                head=Expect(1, False, "recovery: canary", None),
                base=Expect(1, True, "absent", None, message="snapshot oracle mismatch"),
                params=HookParams("canary-perturb"),
            ),
            Fault(
                "recovery-deadline", "recovery stalls past VLLM_SNAPSHOT_TIMEOUT_S frozen at create", "hook",
                head=Expect(1, False, "recovery: restore memory", None),
                base=Expect(0, True, "absent", None),
                params=HookParams("wake-stall", stall=True),
            ),
        ),
    ),
    Kind(
        "signal",
        SignalInjector(),
        SignalParams,
        SignalInjected,
        faults=(
            Fault(
                "cancel-sigint", "SIGINT to vllm snapshot restore while recovery runs", "signal",
                head=Expect("nonzero", False, None, None),
                params=SignalParams("wake-stall", signal="INT"),
            ),
            Fault(
                "cancel-sigterm", "SIGTERM to vllm snapshot restore while recovery runs", "signal",
                head=Expect("nonzero", False, None, None),
                # as released, SIGTERM ends the controller by Python's default action, skipping its BaseException
                # cleanup: the released child may go on and bind; what is left is recorded, not judged
                base=Expect("nonzero", None, None, None, cleanup=False),
                params=SignalParams("wake-stall", signal="TERM"),
            ),
        ),
    ),
    Kind(
        "create",
        CreateInjector(),
        HookParams,
        CreateInjected,
        faults=(
            Fault(
                "create-partial-sleep", "sleep fails part-way during create", "create",
                head=Expect(1, None, None, None, message="snapshot child exited before ready"),
                params=HookParams("sleep-raise"),
            ),
        ),
    ),
)  # fmt: skip
