"""Injected failures: how each kind is injected and known to have fired, the one sequence every fault runs, and the
judge. The table of faults (id, title, kind, head and base expectations, parameters) is ``procedure.FAULTS``.

Hooks inside the engine are armed through the lane's control directory (``faults/armed.json``, read by the probe
when the hooked worker method runs: the environment is frozen into the snapshot at create, so it cannot carry a
trigger). The other kinds act on what the contract checks: the environment, a captured PID, the port, the
artifact's files. Each kind has one :class:`Injector` (built in, or added with its faults from a conftest through
the ``pytest_vsnap_add_faults`` hook into the session's :class:`FaultCatalogue`); every fault runs through the one
sequence of :func:`run_fault`; the injector decides from the harness's own evidence whether it fired, and a fault
that did not fire fails as an ineffective injection. :func:`judge` is pure. The lane-side tools the injectors use
are :mod:`vsnap_qual.injection`; the fault layer sees its lane only through :class:`FaultLane`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from vsnap_qual import artifact_deps, checks, drifts, engine, kills, package_probe, progress, tamper
from vsnap_qual.audit import port_listening
from vsnap_qual.box import Box, ControlDir, ExecResult, ProcessRow, ShmHolders
from vsnap_qual.config import Lane, QualConfig
from vsnap_qual.contract import ARTIFACT, VLLM_CANARY_PROMPT, WORK, restore_argv
from vsnap_qual.injection import (
    ListenerScan,
    PidHolder,
    arm,
    block_port,
    captured_ids,
    clear_fired,
    consumed,
    corrupt_manifest,
    credit_teardown,
    cursor_past,
    disarm,
    fired_records,
    fresh_artifact,
    kill_leftovers,
    move_pid_cursor_past,
    reset_artifact,
    restore_retrying_taken,
    settle,
    settle_timed,
    signal_when_fired,
    truncate_image,
    wait_engine_gone,
)
from vsnap_qual.model import (
    Behaviour,
    CapturedIdWait,
    CleanupAudit,
    Digest,
    FaultExpectation,
    FaultObservation,
    FiredRecord,
    FollowupRestore,
)
from vsnap_qual.parked import ParkedWatch
from vsnap_qual.procedure import ANY, Expect, Fault
from vsnap_qual.recorder import StepEvidence, StepRecorder
from vsnap_qual.steps import EXCEPTION_LINE, LaneState, OrdinaryReference, StepFailed

__all__ = ["ANY", "Expect", "Fault", "FaultCatalogue", "Injector", "Observation", "fault_step", "judge", "run_fault"]


class FaultLane(Protocol):
    """What the fault layer needs of its lane (``lane.LaneRun`` implements it; the unit tests' fake lane too)."""

    lane: Lane
    config: QualConfig
    recorder: StepRecorder
    state: LaneState
    ports: dict[str, int]
    #: the ordinary references this process recorded, by lane name (the lifecycle lane's is its fault lane's)
    peers: dict[str, OrdinaryReference]

    @property
    def box(self) -> Box: ...
    @property
    def control(self) -> ControlDir: ...
    @property
    def served_model(self) -> str: ...

    def endpoint(self, port: int) -> tuple[str, int]: ...
    def pid_alive(self, pid: int) -> bool: ...
    def canaries(self, port: int) -> list[engine.CanaryOutput]: ...
    def digests(self, port: int) -> dict[str, Digest]: ...
    def command(
        self, rec: StepEvidence, argv: list[str], timeout_key: str, env: dict[str, str] | None, name: str
    ) -> ExecResult: ...
    def snapshot(
        self,
        rec: StepEvidence,
        action: str,
        *args: str,
        timeout_key: str,
        env: dict[str, str] | None = None,
        name: str | None = None,
    ) -> ExecResult: ...
    def restore(self, rec: StepEvidence, port: int, name: str, env: dict[str, str] | None = None) -> ExecResult: ...
    def create_argv(self, target: str = ARTIFACT) -> list[str]: ...
    def cleanup_audit(self, pids: list[int], ports: list[int], grace: float | None = None) -> CleanupAudit: ...
    def artifact_digest(self, artifact: str = ARTIFACT) -> str: ...
    def claim_made_remaps(self, step: str) -> list[str]: ...
    def shm_names(self) -> set[str]: ...
    def shm_unheld(self, names: list[str]) -> ShmHolders | None: ...


class Injector:
    """How the faults of one kind (``Fault.kind``) are injected, acted on and known to have fired: one class per
    kind, built in or added with a conftest's faults, all run by the one sequence of :func:`run_fault`.

    The three documented hooks (``docs/adding-a-fault.md``): ``inject`` runs before the faulted
    ``vllm snapshot restore`` (it may add variables to ``env`` and must record what it did in ``injected``);
    ``fired`` decides from the harness's own evidence (``injected``, and what the restore did in ``obs``) whether
    the injection held at the moment of the action; ``release`` undoes it (also when the action raised).

    The rest of the sequence has defaults a kind may override: ``begin``/``end`` (the whole :class:`Attempt`,
    defaults: ``inject``/``release``), ``act`` (default: the faulted restore, watched for HTTP),
    ``at_restore_start`` and ``restoring`` (verify the injection in place as the restore starts, act around the
    command), ``restore`` (the command) and ``problems`` (what else the judge says about this kind)."""

    #: the restore's port is watched for HTTP and audited after the failure (not where the injection holds it)
    watches_port: bool = True
    #: the artifact digest before and after the action is compared (not where the action is a create)
    judges_artifact: bool = True
    #: the harness's own corruption of the artifact (made by ``begin``) is undone before the follow-up restore;
    #: the artifact's digest before the action is then taken after the injection, not the pristine copy's
    undo_before_followup: bool = False
    #: fires through a probe hook point: a command that died before reaching it says why (the judge quotes it)
    through_hook: bool = False
    #: the cleanup is audited once more after the harness's sweep (``results.cleanup.after_sweep``): a kind
    #: whose action may leave what no engine could clean (a SIGKILL) judges that audit itself
    audits_after_sweep: bool = False

    def inject(self, run: FaultLane, injected: dict[str, object], env: dict[str, str]) -> None:
        raise NotImplementedError

    def fired(self, obs: Observation, injected: Mapping[str, Any]) -> bool:
        raise NotImplementedError

    def release(self, run: FaultLane, injected: dict[str, object]) -> None:
        """Undo the injection (default: nothing to undo)."""

    def after_sweep(self, at: Attempt) -> None:
        """After the harness's sweep, before the follow-up restore (default: nothing)."""

    def own_cleanup_judged(
        self, at: Attempt, expected: bool, left: Sequence[ProcessRow], wchan: Mapping[str, str]
    ) -> bool:
        """Whether vLLM's own cleanup is judged for this attempt, as its action turned out and by what it left
        (its processes and where each waits in the kernel; default: as this arm's expectation says)."""
        return expected

    def left_serving(self, at: Attempt, obs: Observation) -> bool:
        """Whether the action ended with a restored server that runs by design (default: the restore exited 0);
        the harness stops it before vLLM's own cleanup is audited."""
        return obs.exit_code == 0

    def not_applicable(self, run: FaultLane, fault: Fault) -> str | None:
        """Why this lane's box cannot present this fault at all (the step is then not applicable, in those
        words), asked once before the fault runs; default: it always can."""
        return None

    # ---- the rest of the sequence (defaults) --------------------------------------------------------------
    def begin(self, at: Attempt) -> None:
        """Inject (default: :meth:`inject`); runs after the artifact is reset, before its digest is taken."""
        self.inject(at.run, at.injected, at.env)

    def end(self, at: Attempt) -> None:
        """Undo (default: :meth:`release`); always runs, before vLLM's own cleanup is audited."""
        self.release(at.run, at.injected)

    def act(self, at: Attempt) -> ExecResult:
        """The faulted action: ``vllm snapshot restore``, with a connect poll from here and a listener scan in
        the box watching its port (whether HTTP was bound during the failed restore)."""
        self.at_restore_start(at)
        host, reach = at.run.endpoint(at.port)
        with engine.ListenerWatch(reach, host) as watch, ListenerScan(at.run, at.port) as scan:
            at.ignore.add(scan.pid or 0)
            with self.restoring(at):
                result = self.restore(at)
            time.sleep(0.1)
            if self.watches_port:
                seen = (("host connect poll", watch.bound), ("container listener scan", scan.bound))
                at.obs.http_bound_by = [name for name, bound in seen if bound]
                at.obs.http_bound = bool(at.obs.http_bound_by)
            at.rec.results["watch_polls"] = watch.polls
        return result

    def at_restore_start(self, at: Attempt) -> None:
        """Verify the injection in place as the restore starts (before the watchers start: a listener that
        never accepts, as the port kind's, stops answering once their connect polls fill its backlog)."""

    @contextlib.contextmanager
    def restoring(self, at: Attempt) -> Iterator[None]:
        """Around the restore command: code before ``yield`` runs just before it, after ``yield`` once it ended."""
        yield

    def restore(self, at: Attempt) -> ExecResult:
        return at.run.restore(at.rec, at.port, name="restore-faulted", env=at.env)

    def problems(self, obs: Observation, results: Mapping[str, Any]) -> list[str]:
        """What else is wrong with this kind's outcome (judged after the stderr message, before cleanup)."""
        return []


@dataclass
class Observation:
    """What one injected failure actually did."""

    exit_code: int | None = None
    http_bound: bool = False
    http_bound_by: list[str] = field(default_factory=list)
    error_json: dict[str, Any] | None = None  # vLLM's error.json: any JSON it wrote
    phase: str | None = None
    fired: bool = False
    fired_records: list[FiredRecord] = field(default_factory=list)
    artifact_unchanged: bool | None = None
    stderr_tail: str = ""
    error_lines: list[str] = field(default_factory=list)  # exception lines anywhere in stderr
    seconds: float = 0.0


@dataclass
class Attempt:
    """One injection of one fault: what the common sequence (:func:`run_fault`) and the kind's injector share."""

    run: FaultLane
    fault: Fault
    rec: StepEvidence
    port: int  # the faulted restore's port
    captured: set[int]  # the snapshot's captured PIDs
    obs: Observation = field(default_factory=Observation)
    env: dict[str, str] = field(default_factory=dict)  # added to the faulted command's environment
    injected: dict[str, object] = field(default_factory=dict)  # the injection's evidence (results.injected)
    ignore: set[int] = field(default_factory=set)  # the injection's own processes: not vLLM's leftovers
    state: dict[str, object] = field(default_factory=dict)  # the injector's own objects for this attempt
    number: int = 1  # the step's second attempt after an ineffective first (:func:`fault_step`)


# ---- the built-in kinds -----------------------------------------------------------------------------------
class HookInjector(Injector):
    """``hook``: a probe hook armed at the fault's point inside the engine; fired when the hook wrote its
    ``fired-<point>-<pid>.json`` record as it acted."""

    through_hook = True

    def begin(self, at: Attempt) -> None:
        point = at.fault.hook_point
        assert point is not None, f"fault {at.fault.id!r} of kind {at.fault.kind!r} names no hook point"
        arm(at.run.control, point, at.run.config.fault_timeout + 10.0 if at.fault.stall else None)

    def end(self, at: Attempt) -> None:
        disarm(at.run.control)

    def fired(self, obs: Observation, injected: Mapping[str, Any]) -> bool:
        return bool(obs.fired_records)


class SignalInjector(HookInjector):
    """``signal``: the hook stalls recovery; a signaller thread signals this lane's ``vllm snapshot restore``
    once the hook reported that recovery runs (``Fault.signal``, default TERM). Fired when the hook fired and the
    signal was sent."""

    @contextlib.contextmanager
    def restoring(self, at: Attempt) -> Iterator[None]:
        done, sent = threading.Event(), list[str]()
        signame = at.fault.signal or "TERM"
        limit = at.run.config.timeouts["restore"]
        signaller = threading.Thread(target=signal_when_fired, args=(at.run, signame, done, sent, limit), daemon=True)
        signaller.start()
        yield
        done.set()
        signaller.join(5)
        at.injected["signal"] = sent

    def fired(self, obs: Observation, injected: Mapping[str, Any]) -> bool:
        return bool(obs.fired_records) and bool(injected.get("signal"))


class CreateInjector(HookInjector):
    """``create``: the hook armed at a point of ``vllm snapshot create``, and the action is a create into a
    fresh directory (not a restore); the failed create must remove its target directory."""

    judges_artifact = False  # the action does not touch the artifact

    def act(self, at: Attempt) -> ExecResult:
        run = at.run
        create_dir = f"{WORK}/fault-create"
        run.box.remove_path(create_dir)
        result = run.snapshot(
            at.rec, "create", *run.create_argv(create_dir), timeout_key="create", name="create-faulted"
        )
        at.injected["target_removed"] = run.box.sh(f"test -e {create_dir}", 10).exit_code != 0
        return result

    def problems(self, obs: Observation, results: Mapping[str, Any]) -> list[str]:
        if not (results.get("injected") or {}).get("target_removed", False):
            return ["the failed create left its target directory behind"]
        return []


class IdentityInjector(Injector):
    """``identity``: one identity field drifted for the faulted restore alone (``Fault.drift``, a
    :data:`drifts.DRIFTS` entry): its kit prepared in the box, the restore launched through it and a shell that
    records the value this process sees before it ``exec``s vLLM. Fired when that value differs from the
    manifest's; not applicable where the box cannot present the drift (said in the box's own words)."""

    def __init__(self) -> None:
        # a drift prepared when the step asked whether the box can present it: its first attempt uses it
        self._asked: dict[tuple[str, str], drifts.Prepared] = {}

    def not_applicable(self, run: FaultLane, fault: Fault) -> str | None:
        prepared = self._prepare(run, fault)
        if isinstance(prepared, str):
            return prepared
        self._asked[(run.lane.name, fault.id)] = prepared
        return None

    def _prepare(self, run: FaultLane, fault: Fault) -> drifts.Prepared | str:
        drift = drifts.DRIFTS[fault.drift or ""]
        manifest = run.state.manifest
        result = run.box.sh(drift.prepare_script(manifest), run.config.timeouts["exec"])
        if result.exit_code != 0:
            raise StepFailed(f"preparing the {drift.id} drift in the box failed: {result.tail(5)}")
        return drifts.parse_prepared(drift, result.stdout, manifest)

    def begin(self, at: Attempt) -> None:
        asked = self._asked.pop((at.run.lane.name, at.fault.id), None)  # a retry prepares its kit again
        prepared = asked or self._prepare(at.run, at.fault)
        if isinstance(prepared, str):  # the box changed since the step asked: nothing to inject
            raise StepFailed(f"the {at.fault.drift} drift cannot be presented: {prepared}")
        at.state["prepared"] = prepared
        at.injected.update(
            {"field": prepared.drift.field, "presents": prepared.drift.presents, "presented": prepared.presented}
        )
        at.run.control.remove(drifts.SEEN)

    def end(self, at: Attempt) -> None:
        """Nothing to undo: the drift lived in the restore's own launch (its kit stays for the next attempt)."""

    def restore(self, at: Attempt) -> ExecResult:
        prepared = at.state["prepared"]
        assert isinstance(prepared, drifts.Prepared)
        argv = drifts.restore_command(prepared, at.port)
        result = at.run.command(at.rec, argv, "restore", at.env, "restore-faulted")
        seen = at.run.control.read_text(drifts.SEEN)
        manifest = at.run.state.manifest
        at.injected["seen_by_restore"] = None if seen is None else seen.strip()[:300]
        at.injected["manifest_value"] = drifts.manifest_value(prepared.drift, manifest, seen or "")[:300]
        at.injected["held"] = drifts.held(prepared.drift, manifest, seen)
        return result

    def fired(self, obs: Observation, injected: Mapping[str, Any]) -> bool:
        return bool(injected.get("held"))

    def problems(self, obs: Observation, results: Mapping[str, Any]) -> list[str]:
        """The refusal must name the drifted field, and only it (one field changed)."""
        field_name = str((results.get("injected") or {}).get("field") or "")
        named = drifts.named_fields("\n".join((obs.stderr_tail, *obs.error_lines)))
        if not field_name or named is None:
            return []  # no refusal in vLLM's words: the message check says so
        if field_name not in named:
            said = ", ".join(named) or "no field"
            return [f"the identity check refused, but names {said}, not the drifted {field_name}"]
        others = [name for name in named if name != field_name]
        if others:
            return [
                f"the identity check names {', '.join(others)} besides the drifted {field_name}: either the check "
                f"compares a value that did not change or the injection changed more than {field_name}"
            ]
        return []


class PidInjector(Injector):
    """``pid``: the snapshot's first captured PID occupied by a sleeper of ours (retried up to 3 times until the
    occupation holds); fired when our process held it as the restore started and still as it ended."""

    ATTEMPTS = 3

    def begin(self, at: Attempt) -> None:
        run, injected = at.run, at.injected
        holder = PidHolder(run, int(run.state.manifest["process_tree"][0]), cursor_past(at.captured))
        at.state["holder"] = holder
        injected["pid"] = holder.pid
        for attempt in range(1, self.ATTEMPTS + 1):  # verified in place; an occupation that did not hold: again
            injected["occupied"] = holder.occupy()
            injected["occupied_in"] = holder.where
            injected["attempts"] = attempt
            if injected["occupied"] and run.pid_alive(holder.pid):
                break
            holder.release()
        # the occupation moved the allocation cursor past the captured IDs right after its fork; else now
        injected["pid_cursor_moved"] = holder.cursor_moved or move_pid_cursor_past(run.box, at.captured)
        at.ignore.add(holder.pid)

    @staticmethod
    def holder(at: Attempt) -> PidHolder | None:
        holder = at.state.get("holder")
        return holder if isinstance(holder, PidHolder) else None

    def at_restore_start(self, at: Attempt) -> None:
        holder = self.holder(at)
        at.injected["held_at_restore"] = holder is not None and at.run.pid_alive(holder.pid)  # as the restore starts

    @contextlib.contextmanager
    def restoring(self, at: Attempt) -> Iterator[None]:
        yield
        holder = self.holder(at)
        at.injected["held_after_restore"] = holder is not None and at.run.pid_alive(holder.pid)  # and when it ended

    def end(self, at: Attempt) -> None:
        holder = self.holder(at)
        if holder is not None and holder.where in ("container", "host"):
            holder.release()

    def fired(self, obs: Observation, injected: Mapping[str, Any]) -> bool:
        return bool(injected.get("occupied") and injected.get("held_at_restore") and injected.get("held_after_restore"))


class PortInjector(Injector):
    """``port``: a listener of ours on the restore's port; fired when the port was bound as the restore started.
    HTTP is not watched and the port not audited (the injection itself holds it)."""

    watches_port = False

    def begin(self, at: Attempt) -> None:
        at.ignore.add(block_port(at.run, at.port))
        at.injected["port"] = at.port

    def at_restore_start(self, at: Attempt) -> None:
        host, reach = at.run.endpoint(at.port)
        at.injected["bound_at_restore"] = engine.port_open(reach, host)

    def fired(self, obs: Observation, injected: Mapping[str, Any]) -> bool:
        return bool(injected.get("bound_at_restore"))


class ManifestInjector(Injector):
    """``manifest``: a manifest field changed (``schema_version`` 1 → 2), verified when made (it fails the step
    otherwise); undone before the follow-up restore."""

    undo_before_followup = True

    def inject(self, run: FaultLane, injected: dict[str, object], env: dict[str, str]) -> None:
        corrupt_manifest(run.box)
        injected["manifest"] = "schema_version=2"

    def fired(self, obs: Observation, injected: Mapping[str, Any]) -> bool:
        return bool(injected.get("manifest"))


class ImageInjector(Injector):
    """``image``: the largest core image truncated to half, verified when made (it fails the step otherwise);
    undone before the follow-up restore."""

    undo_before_followup = True

    def inject(self, run: FaultLane, injected: dict[str, object], env: dict[str, str]) -> None:
        injected["truncated"] = truncate_image(run.box)

    def fired(self, obs: Observation, injected: Mapping[str, Any]) -> bool:
        return bool(injected.get("truncated"))


class WeightsInjector(Injector):
    """``weights`` (issue 28): a weight shard of a private copy of the model's cache entry changed between the
    private artifact's ``create`` and its ``restore`` (``vsnap_qual.tamper``); the restored engine, when there is
    one, is asked its digests and canaries before it is stopped."""

    #: the lane's artifact is not this kind's: its own artifact is made, restored and removed by the attempt
    judges_artifact = False

    def begin(self, at: Attempt) -> None:
        run, injected = at.run, at.injected
        timeout = run.config.timeouts["http"]
        reference = run.peers.get(run.lane.name)
        observable = [n for n, d in (reference.digests if reference else {}).items() if d.get("sha256")]
        copied = tamper.private_copy(run.box, run.config.model, run.config.revision, timeout)
        if isinstance(copied, str):
            injected["error"] = f"no private copy of the model: {copied}"
            return
        home = {"HF_HOME": tamper.PRIVATE_HOME, "HF_HUB_CACHE": f"{tamper.PRIVATE_HOME}/hub"}
        run.box.remove_path(tamper.PRIVATE_ARTIFACT)
        created = run.snapshot(
            at.rec,
            "create",
            *run.create_argv(tamper.PRIVATE_ARTIFACT),
            timeout_key="create",
            env=home,
            name="create-tampered",
        )
        if created.exit_code != 0:
            injected["error"] = f"create from the private copy exited {created.exit_code}: {created.stderr[-300:]}"
            return
        run.state.shm_owned.update(artifact_deps.outside_files(run.box, tamper.PRIVATE_ARTIFACT))
        record = tamper.flip(run.box, copied, tamper.choose_tensor(copied.tensors, observable), timeout)
        at.rec.results["weight_tamper"] = record
        if record.get("sha256_after") and record["sha256_after"] != record["sha256_before"]:
            injected["tampered"] = f"{record['length']} bytes of {record['tensor']} in {record['shard']}"
        at.env.update(home)

    def restore(self, at: Attempt) -> ExecResult:
        argv = restore_argv(at.port, tamper.PRIVATE_ARTIFACT)
        return at.run.command(at.rec, argv, "restore", at.env, "restore-faulted")

    def act(self, at: Attempt) -> ExecResult:
        result = super().act(at)
        record = at.rec.results.get("weight_tamper")
        if record is None or not at.injected.get("tampered"):
            return result
        if result.exit_code != 0:
            record["outcome"] = record["said"] = "refused"
            return result
        run = at.run
        reference = run.peers.get(run.lane.name)
        try:
            digests, canaries = run.digests(at.port), run.canaries(at.port)
        except (engine.EngineError, OSError) as exc:
            record["outcome"] = record["said"] = "unasked"
            record["error"] = f"{type(exc).__name__}: {exc}"
            return result
        compared = tamper.compare(
            record,
            reference.digests if reference else None,
            reference.canary if reference else None,
            digests,
            canaries,
            run.config.logprob_tolerance,
        )
        compared["said"] = tamper.outcome_words(compared, result.exit_code)
        at.rec.results["weight_tamper"] = compared
        return result

    def end(self, at: Attempt) -> None:
        at.run.box.remove_path(tamper.PRIVATE_ARTIFACT)
        at.run.box.remove_path(tamper.PRIVATE_HOME)

    def fired(self, obs: Observation, injected: Mapping[str, Any]) -> bool:
        return bool(injected.get("tampered"))

    def problems(self, obs: Observation, results: Mapping[str, Any]) -> list[str]:
        return tamper.problems(results.get("weight_tamper"), obs.exit_code, [obs.stderr_tail, *obs.error_lines])


class KillInjector(Injector):
    """``kill``: ``Fault.signal`` to the whole tree of ``Fault.command`` at a seeded random moment. Fired when the
    signal went to a running command (one that had already ended is tried again, with the next draw)."""

    judges_artifact = False  # a killed command may leave anything: what is judged is what a restore makes of it
    audits_after_sweep = True

    # ---- inject ---------------------------------------------------------------------------------------------
    def begin(self, at: Attempt) -> None:
        run, fault = at.run, at.fault
        command = fault.command or "restore"
        duration = run.state.timings.get(command)
        if duration is None and command == "restore":
            duration = kills.measure_restore(run)
            at.injected["duration_measured_now"] = True
        if duration is None:
            raise RuntimeError(f"no unfaulted {command} of this lane was timed before {fault.id}")
        seed, attempt = run.config.kill_seed, at.number
        offset, fraction = kills.draw(seed, run.lane.name, fault.id, attempt, duration)
        at.injected.update(
            {
                "seed": seed,
                "attempt": attempt,
                "command": command,
                "signal": f"SIG{fault.signal or 'KILL'}",
                "duration_s": round(duration, 3),
                "offset_s": offset,
                "fraction": fraction,
                "sent": [],
            }
        )
        if command == "create":
            run.box.remove_path(kills.KILLED_CREATE)

    def release(self, run: FaultLane, injected: dict[str, object]) -> None:
        """Nothing to undo: the signal is the injection."""

    def fired(self, obs: Observation, injected: Mapping[str, Any]) -> bool:
        return bool(injected.get("sent"))

    # ---- act --------------------------------------------------------------------------------------------------
    def act(self, at: Attempt) -> ExecResult:
        if at.fault.command != "create":
            result = super().act(at)  # the faulted restore, watched for HTTP; the killer runs around it
        else:
            with self.restoring(at):
                result = at.run.snapshot(
                    at.rec,
                    "create",
                    *at.run.create_argv(kills.KILLED_CREATE),
                    timeout_key="create",
                    name="create-killed",
                )
        if at.injected.get("missed") and result.exit_code == 0:
            # it ended first: the next draw is over the duration it just took (the one measured before may be
            # a cold start's)
            at.run.state.timed(str(at.injected["command"]), result.seconds)
        return result

    @contextlib.contextmanager
    def restoring(self, at: Attempt) -> Iterator[None]:
        done = threading.Event()
        started = time.monotonic()
        killer = threading.Thread(target=self._kill_at_recorded, args=(at, started, done), daemon=True)
        killer.start()
        try:
            yield
        finally:
            done.set()
            killer.join(30)

    def _kill_at_recorded(self, at: Attempt, started: float, done: threading.Event) -> None:
        """:meth:`_kill_at`, its own failure recorded as the attempt's (the step then says the signal never went)."""
        try:
            self._kill_at(at, started, done)
        except Exception as exc:
            at.injected["missed"] = f"the killer failed: {type(exc).__name__}: {exc}"

    def _kill_at(self, at: Attempt, started: float, done: threading.Event) -> None:
        """At the drawn offset: the command's tree as it is then, the phase it reached, and the signal to all of it
        in one ``kill``. Nothing is sent once the command has ended."""
        injected, run = at.injected, at.run
        offset = float(injected["offset_s"])  # type: ignore[arg-type]
        if done.wait(max(0.0, started + offset - time.monotonic())):
            injected["missed"] = "the command ended before the drawn offset"
            return
        command = str(injected["command"])
        target = kills.KILLED_CREATE if command == "create" else ARTIFACT
        # not listed yet (an offset drawn near 0 comes before the exec has spawned it): it is signalled the moment
        # it is listed, or the command ended without ever being seen
        while True:
            procs = run.box.processes()
            root, tree = kills.command_tree(procs, command, target)
            if root is not None or done.wait(0.02):
                break
        if root is None or done.is_set():
            injected["missed"] = "the command was never listed running at or after the drawn offset"
            return
        captured = {int(p) for p in run.state.manifest.get("process_tree") or []}
        alive = {p["pid"] for p in procs}
        signame = str(injected["signal"]).removeprefix("SIG")
        pids = sorted(p["pid"] for p in tree)
        sent = run.box.sh(f"kill -{signame} {' '.join(map(str, pids))} 2>/dev/null; true", 15)
        injected.update(
            {
                "sent_after_s": round(time.monotonic() - started, 3),
                "phase": kills.phase_reached(command, tree, bool(captured & alive)),
                "tree": [f"{p['pid']} {p['args'][:100]}" for p in tree],
                "sent": [f"SIG{signame} to {len(pids)} processes of vllm snapshot {command} (root {root})"]
                if sent.exit_code == 0
                else [],
            }
        )

    def left_serving(self, at: Attempt, obs: Observation) -> bool:
        """A restore that completed before the signal took effect: it ended by the signal itself (no error path
        of vLLM's ran) or exited 0, and its server is serving on the port: that server runs by design, as after
        any successful restore (said in the evidence)."""
        if at.fault.command != "restore":
            return False
        signum = signal.Signals[str(at.injected.get("signal"))].value
        if obs.exit_code not in (0, 128 + signum) or not port_listening(at.run.box, at.port):
            return False
        at.injected["completed"] = "the restore had completed: its server was serving on the port as it ended"
        return True

    def own_cleanup_judged(
        self, at: Attempt, expected: bool, left: Sequence[ProcessRow], wchan: Mapping[str, str]
    ) -> bool:
        """Not where the kill reached CRIU while it restored: the phase reached says so, or what was left says so
        whatever the listing saw (CRIU may start just after it): a tree left stopped, or every leftover parked
        on a futex, where CRIU's restorer holds the tasks it has not resumed (a tree running vLLM's code waits in
        its event loop's poll). vLLM's own error path ends CRIU (its ``subprocess.run`` kills the child it was
        waiting on), pins the restored tree only once CRIU has returned and never signals a PID it has not pinned
        (its contract); a tree CRIU never resumed cannot read vLLM's abort marker. There is no cleanup of vLLM's to
        judge: what it left is recorded and the harness's sweep is judged (said in the evidence)."""
        if not expected or at.fault.command != "restore":
            return expected
        stopped = [p["pid"] for p in left if p.get("stat", "")[:1] in ("T", "t")]
        parked = bool(left) and all(wchan.get(str(p["pid"]), "").startswith("futex") for p in left)
        if at.injected.get("phase") == "criu restore" or stopped or parked:
            why = (
                f"CRIU left {stopped} stopped" if stopped
                else f"CRIU left {[p['pid'] for p in left]} parked in its restorer (futex)" if parked
                else "the signal reached CRIU while it restored"
            )  # fmt: skip
            at.injected["own_cleanup"] = f"not judged: {why}, and vLLM signals no PID it has not pinned"
            return False
        return expected

    # ---- after the harness's sweep ---------------------------------------------------------------------------
    def after_sweep(self, at: Attempt) -> None:
        """A killed create: what a restore makes of what it left (``results.killed_artifact``)."""
        if at.fault.command == "create":
            at.rec.results["killed_artifact"] = kills.judge_killed_create(at.run)

    def problems(self, obs: Observation, results: Mapping[str, Any]) -> list[str]:
        out: list[str] = []
        swept = (results.get("cleanup") or {}).get("after_sweep") or {}
        if not swept.get("ok", False):
            out.append(
                "something outlived the harness's sweep after the kill: "
                f"processes {swept.get('pids_alive')}, ports open {swept.get('ports_open')}, "
                f"GPU idle {swept.get('gpu_idle')}, link remaps of this lane {swept.get('link_remaps_ours')}"
            )
        killed = results.get("killed_artifact")
        if killed is not None:
            out.extend(kills.killed_artifact_problems(killed))
        follow = results.get("followup_restore") or {}
        if killed is None and follow and not (follow.get("exit_code") == 0 and follow.get("canary_ok")):
            if follow.get("ids_taken"):
                out.append(kills.never_tried("after the killed restore the artifact", follow))
            elif follow.get("exit_code") == 0:
                out.append("after the killed restore the artifact restores but does not answer vLLM's canary")
            elif not (follow.get("criu_reason") or kills.refusal_words(str(follow.get("stderr_tail") or ""))):
                out.append("after the killed restore the artifact is refused without a message")
        return out


#: The built-in kinds' injectors (a conftest's faults bring their own kinds: :meth:`FaultCatalogue.add`).
BUILTIN_INJECTORS: Mapping[str, Injector] = {
    "hook": HookInjector(),
    "signal": SignalInjector(),
    "create": CreateInjector(),
    "identity": IdentityInjector(),
    "pid": PidInjector(),
    "port": PortInjector(),
    "manifest": ManifestInjector(),
    "image": ImageInjector(),
    "kill": KillInjector(),
    "weights": WeightsInjector(),
}


class FaultCatalogue:
    """The session's faults: the built-in table (``procedure.FAULTS``) and those a conftest or plugin adds through
    the ``pytest_vsnap_add_faults`` hook (``docs/adding-a-fault.md``), with one injector per kind."""

    def __init__(self, faults: Iterable[Fault] = (), injectors: Mapping[str, Injector] | None = None) -> None:
        self._faults: dict[str, Fault] = {}
        self._injectors: dict[str, Injector] = dict(BUILTIN_INJECTORS if injectors is None else injectors)
        for fault in faults:
            self.add(fault)

    @classmethod
    def builtin(cls) -> FaultCatalogue:
        from vsnap_qual.procedure import FAULTS

        return cls(FAULTS)

    def repeat_kills(self, times: int) -> None:
        """The chaos run (``--vsnap-chaos``): each fault of the kill kind ``times`` times, ``<id>.2`` … ``<id>.N``
        after the catalogue's faults, each repeat its own draw (the fault's id is part of the draw's seed)."""
        for fault in [f for f in self.faults if f.kind == "kill"]:
            for i in range(2, times + 1):
                self.add(dataclasses.replace(fault, id=f"{fault.id}.{i}"))

    def add(self, fault: Fault, injector: Injector | None = None) -> None:
        """Add a fault point: its table entry and, for a kind of its own, its injector."""
        if fault.id in self._faults:
            raise ValueError(f"fault {fault.id!r} is already in the catalogue")
        known = self._injectors.get(fault.kind)
        if known is None and injector is None:
            raise ValueError(f"fault {fault.id!r} of a new kind {fault.kind!r} needs an injector")
        if known is not None and injector is not None and injector is not known:
            raise ValueError(
                f"fault {fault.id!r}: kind {fault.kind!r} already has an injector ({type(known).__name__}); "
                "give a fault with its own injector a new kind"
            )
        self._faults[fault.id] = fault
        if injector is not None:
            self._injectors[fault.kind] = injector

    @property
    def faults(self) -> tuple[Fault, ...]:
        return tuple(self._faults.values())

    @property
    def ids(self) -> list[str]:
        return list(self._faults)

    @property
    def kinds(self) -> Mapping[str, Injector]:
        return dict(self._injectors)

    def injector_for(self, fault: Fault) -> Injector:
        """The injector of this fault's kind; a kind nobody added is named with the fix."""
        try:
            return self._injectors[fault.kind]
        except KeyError:
            raise ValueError(
                f"fault {fault.id!r}: no injector for kind {fault.kind!r} (known: {', '.join(self._injectors)}); "
                "add the fault with its injector in a pytest_vsnap_add_faults hook (docs/adding-a-fault.md)"
            ) from None


def lane_expectation(run: FaultLane) -> tuple[Behaviour, str]:
    """The behaviour this lane's faults are judged by, and why: ``--vsnap-expect``/``--vsnap-base-expect`` when
    they name one, else (``auto``) what the lane's installed snapshot package implements, probed in the lane
    (with its overlay) by a plain interpreter before the lane's first engine command. Probed once per lane."""
    if run.state.expectation is None:
        option = "--vsnap-expect" if run.lane.arm == "head" else "--vsnap-base-expect"
        if run.lane.expect == "head":
            run.state.expectation = ("head", f"{option}=head")
        elif run.lane.expect == "base":
            run.state.expectation = ("base", f"{option}=base")
        else:
            probe = run.box.exec(["python3", "-c", package_probe.SCRIPT], run.config.timeouts["exec"])
            info = package_probe.parse(probe.stdout) or {
                "snapshot_behaviour_reason": f"the package probe failed: {probe.tail()}"
            }
            found, why = package_probe.detected_behaviour(info)
            if found is None:
                raise StepFailed(f"{option}=auto: cannot tell which snapshot behaviour the image implements ({why})")
            run.state.expectation = (found, f"detected from the image: {why}")
    assert run.state.expectation is not None
    return run.state.expectation


def _injection_evidence(results: Mapping[str, Any]) -> str:
    injected = results.get("injected") or {}
    return ", ".join(f"{k}={v}" for k, v in injected.items()) or "no injection evidence"


# ---- the one sequence ---------------------------------------------------------------------------------------
def fault_step(run: FaultLane, fault: Fault, rec: StepEvidence, catalogue: FaultCatalogue) -> None:
    """One ``fault:<id>`` step: inject, observe, judge against this lane's expectations; an injection that did not
    hold is tried once more before it is reported as ineffective. Fails the step naming every mismatch."""
    behaviour, reason = lane_expectation(run)
    expect = fault.expect(behaviour)
    injector = catalogue.injector_for(fault)
    cannot = injector.not_applicable(run, fault)
    if cannot:
        progress.not_applicable(f"{run.lane.name}: the box cannot present this fault: {cannot}")
    observed = run_fault(run, fault, rec, injector, expect.cleanup)
    problems = judge(fault, expect, observed, rec.results, injector)
    if problems and problems[0].startswith("ineffective injection"):
        first = problems[0]
        observed = run_fault(run, fault, rec, injector, expect.cleanup, attempt=2)
        problems = judge(fault, expect, observed, rec.results, injector)
        rec.results["retried_after"] = first
    if (rec.results.get("followup_restore") or {}).get("consumed"):
        run.state.consumed_by = fault.id  # the next fault says whose restore used the artifact up
    rec.results.setdefault("cleanup", CleanupAudit()).setdefault("judged", expect.cleanup)  # recorded either way
    rec.results.update(
        {
            "fault": fault.id,
            "title": fault.title,
            "expect": behaviour,
            "expect_reason": reason,
            "expected": expectation_record(expect),
            "observed": observation_record(observed),
            "mismatches": problems,
        }
    )
    if problems:
        raise StepFailed(f"{fault.title} ({behaviour} expectations, {reason}): " + "; ".join(problems))


class Phases:
    """Where one fault step's time went, phase by phase (``results.phases``, seconds, summed over a retry), and how
    much of each phase was spent waiting on the engine (``results.phases_engine``): the evidence
    ``bench/run_figures.py`` reads the harness's own time from."""

    def __init__(self, into: dict[str, float], engine_into: dict[str, float], engine_clock: Callable[[], float]):
        self.into, self.engine_into, self.engine_clock = into, engine_into, engine_clock

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started, engine = time.monotonic(), self.engine_clock()
        try:
            yield
        finally:
            self.into[name] = round(self.into.get(name, 0.0) + time.monotonic() - started, 3)
            spent = self.engine_clock() - engine
            self.engine_into[name] = round(self.engine_into.get(name, 0.0) + spent, 3)


def run_fault(
    run: FaultLane,
    fault: Fault,
    rec: StepEvidence,
    injector: Injector,
    cleanup_judged: bool = True,
    attempt: int = 1,
) -> Observation:
    """Inject one fault, observe everything the contract says about it, then clean up and restore again: the one
    sequence every kind follows; what differs per kind is its injector's. ``cleanup_judged`` False (this arm's
    expectation records vLLM's cleanup without judging it): what is left is looked at once, as the command
    exits, not waited for through the grace, since no outcome of the wait could change the verdict."""
    timeouts = run.config.timeouts
    phase = Phases(
        rec.results.setdefault("phases", {}),
        rec.results.setdefault("phases_engine", {}),
        lambda: run.recorder.engine_time,
    )
    # every captured PID free before anything is injected (the previous fault's tree entirely gone, however
    # long its teardown took): else this fault would be judged on what the previous one left
    with phase("captured-id wait before"):
        before_fault = wait_engine_gone(run, captured_ids(run), timeouts["stop"])
    gone = consumed(run)
    if gone:  # the fault starts from an artifact that restores: one engine defect is one finding, not one a fault
        by = f"the faulted restore of {run.state.consumed_by}" if run.state.consumed_by else "an earlier step"
        with phase("fresh artifact"):
            why = f"the previous fault artifact was consumed ({', '.join(gone)} gone after {by})"
            fresh_artifact(run, rec, gone, why)
            run.state.consumed_by = None
            wait_engine_gone(run, captured_ids(run), timeouts["stop"])  # the new artifact's dumped tree gone too
    with phase("reset"):
        captured = captured_ids(run)
        clear_fired(run.control)  # a fired record is evidence of this fault only, whatever kind it is
        reset_artifact(run)
        if run.state.artifact_files is not None:
            rec.results["artifact_reset"] = run.state.artifact_files.last_reset
        # the captured PIDs are never "already there": a restore re-uses them, so a dying process of the previous
        # fault still listed under one of them must not hide the next restored server from the cleanup
        baseline = {p["pid"] for p in run.box.processes()} - captured
    at = Attempt(run, fault, rec, run.ports["fault"], captured, number=attempt)
    obs, injected, ignore = at.obs, at.injected, at.ignore
    try:
        with phase("inject"):
            injector.begin(at)
            # the reset put the pristine copy back: its digest, taken once, is the artifact's now, unless this
            # kind's own injection changed the artifact (then it is taken after the injection, as it stands)
            files = run.state.artifact_files
            pristine = None if injector.undo_before_followup or files is None else files.pristine_digest
            before = pristine or run.artifact_digest()
        with phase("command"):  # the faulted command, its watchers included
            result = injector.act(at)
        with phase("observe"):
            observe(run, obs, result)
            obs.fired = injector.fired(obs, injected)
            if injector.judges_artifact:
                obs.artifact_unchanged = run.artifact_digest() == before
    finally:
        with phase("release"):
            injector.end(at)
    # vLLM's own cleanup after a failure, observed before the harness removes anything. A restore that
    # succeeded (as some behaviours do for some faults) leaves its server running by design: stop it first.
    with phase("audit"):
        if injector.left_serving(at, obs):
            kill_leftovers(run.box, baseline, ignore)
        # the grace (a maximum: a clean state ends it) where vLLM's cleanup is judged, and where what vLLM left
        # is itself the measure (a kind audited after the sweep: the chaos figures' "left by the command"); an
        # arm's record alone is looked at once. A tree parked for good in CRIU's restorer ends the wait where this
        # kind then records what was left without judging it: no more time could change what it left
        grace = run.config.cleanup_grace if cleanup_judged or injector.audits_after_sweep else 0.0
        left, wchan, parked_after, went_after = settle_leftovers(at, injector, baseline, ignore, grace, cleanup_judged)
        judged = injector.own_cleanup_judged(at, cleanup_judged, left, wchan)
        # the audit of what was left: waited for (again up to the grace) only where its outcome is judged
        pids_left = [p["pid"] for p in left]
        audit = run.cleanup_audit(pids_left, [at.port] if injector.watches_port else [], grace if judged else 0.0)
        audit["leftover_processes"] = [f"{p['pid']} {p['args'][:120]}" for p in left]
        if left:
            audit["leftover_states"] = {str(p["pid"]): p.get("stat", "") for p in left}
            audit["leftover_wchan"] = wchan
        audit["grace_s"] = grace
        if parked_after is not None:
            audit["parked_for_good_after_s"] = parked_after
        if went_after is not None:
            audit["leftovers_went_after_s"] = went_after
        audit["judged"] = judged
        killed = kill_leftovers(run.box, baseline, set())
        # killed ones reaped before the follow-up: their teardown is the engine's time where they went
        credit_teardown(run, *settle_timed(run.box, baseline, set(), limit=run.config.cleanup_grace))
        if injector.audits_after_sweep:  # what is left once the harness swept: nothing, whatever the action was
            swept = list(dict.fromkeys([*(p["pid"] for p in left), *killed]))
            audit["after_sweep"] = run.cleanup_audit(swept, [at.port] if injector.watches_port else [])
            audit["after_sweep"]["swept"] = killed
    with phase("captured-id wait after"):
        # what was killed and every captured PID gone for good, zombies and GPU teardown included, before the
        # follow-up restore must recreate the captured PIDs (the lane's listing no longer shows exiting ones)
        after_fault = wait_engine_gone(run, captured | set(killed), timeouts["stop"])
        # the fault port free again (our own blocker, or a server that bound it, is gone only once its socket is);
        # from the lane's own LISTEN table: a connect poll can fail on a listener whose backlog is full
        with contextlib.suppress(engine.EngineError):  # still bound: the follow-up restore then says so itself
            engine.wait_until(lambda: at.port not in run.box.listening_ports(), run.config.cleanup_grace, 0.05)
    with phase("after sweep"):
        injector.after_sweep(at)
    engine_left = [pid for pid in killed if pid not in ignore]  # the harness's own helpers are not the engine's
    if engine_left:
        audit["killed_by_harness"] = engine_left
    rec.results.update({"injected": injected, "cleanup": audit})
    waits = {k: v for k, v in (("before_fault", before_fault), ("after_fault", after_fault)) if v}
    if waits:
        rec.results["captured_id_waits"] = waits
    with phase("follow-up restore"):
        # the captured IDs were just found free and nothing has started since: the follow-up does not look again
        ids_free = "still_held" not in after_fault
        rec.results["followup_restore"] = followup_restore(run, injector.undo_before_followup, ids_free)
    return obs


def settle_leftovers(
    at: Attempt, injector: Injector, baseline: set[int], ignore: set[int], grace: float, cleanup_judged: bool
) -> tuple[list[ProcessRow], dict[str, str], float | None, float | None]:
    """What the faulted action left after up to ``grace`` seconds, where each leftover waits in the kernel,
    where the wait ended early because the leftovers were parked for good in CRIU's restorer and this kind does
    not judge vLLM's cleanup of them (:class:`ParkedWatch`), how long after it began (else None), and where
    everything left went by itself during the wait, how long it was still there (credited to the engine:
    :func:`credit_teardown`; else None)."""
    parked = ParkedWatch(at.run.box)
    found: dict[str, Any] = {}
    started = time.monotonic()

    def hopeless(left: list[ProcessRow]) -> bool:
        if not parked(left):
            return False
        wchan = leftover_wchan(at.run.box, [p["pid"] for p in left])
        if injector.own_cleanup_judged(at, cleanup_judged, left, wchan):
            return False
        found.update(wchan=wchan, after=round(time.monotonic() - started, 2))
        return True

    left, held_s = settle_timed(at.run.box, baseline, ignore, limit=grace, hopeless=hopeless)
    went_after = credit_teardown(at.run, left, held_s)
    if found:  # the wait ended on these very leftovers: where they wait was just read
        return left, found["wchan"], found["after"], went_after
    return left, leftover_wchan(at.run.box, [p["pid"] for p in left]) if left else {}, None, went_after


def leftover_wchan(box: Box, pids: list[int]) -> dict[str, str]:
    """Where in the kernel each leftover waits (``/proc/<pid>/wchan``, as the box numbers it): a process that
    never left CRIU's restorer waits on a futex there, one that runs vLLM's code mostly in its event loop's poll
    (what :meth:`Injector.own_cleanup_judged` may read)."""
    script = " ".join(f"{pid}:$(cat /proc/{pid}/wchan 2>/dev/null || echo gone)" for pid in pids)
    done = box.sh(f"echo {script}", 15)
    pairs = (word.partition(":") for word in done.stdout.split()) if done.exit_code == 0 else ()
    return {pid: wchan for pid, _, wchan in pairs}


def expectation_record(expect: Expect) -> FaultExpectation:
    """The expectation as the step's evidence records it."""
    return FaultExpectation(
        exit_code=expect.exit_code,
        http_bound=expect.http_bound,
        error_phase=expect.error_phase,
        artifact_unchanged=expect.artifact_unchanged,
        fires=expect.fires,
        message=expect.message,
        followup_restore=expect.followup_restore,
        cleanup=expect.cleanup,
    )


def observation_record(obs: Observation) -> FaultObservation:
    """The observation as the step's evidence records it."""
    return FaultObservation(
        exit_code=obs.exit_code,
        http_bound=obs.http_bound,
        http_bound_by=list(obs.http_bound_by),
        error_json=obs.error_json,
        phase=obs.phase,
        fired=obs.fired,
        fired_records=list(obs.fired_records),
        artifact_unchanged=obs.artifact_unchanged,
        stderr_tail=obs.stderr_tail,
        error_lines=list(obs.error_lines),
        seconds=obs.seconds,
    )


def observe(run: FaultLane, obs: Observation, result: ExecResult) -> None:
    """What the faulted command did: its exit, stderr, ``error.json`` and the probe's fired records."""
    obs.exit_code = result.exit_code
    obs.stderr_tail = result.tail(40)
    obs.error_lines = [line for line in result.stderr.splitlines() if EXCEPTION_LINE.match(line)][-20:]
    obs.seconds = round(result.seconds, 3)
    text = run.box.read_text(f"{ARTIFACT}/error.json")
    if text.strip():
        try:
            obs.error_json = json.loads(text)
            obs.phase = obs.error_json.get("phase") if isinstance(obs.error_json, dict) else None
        except ValueError:
            obs.error_json = {"unparsable": text[:500]}
    obs.fired_records = fired_records(run.control)


def followup_restore(run: FaultLane, undo_injection: bool, ids_free: bool = False) -> FollowupRestore:
    """After a fault, the artifact as the failure left it must still restore and answer vLLM's canary with its
    oracle (a failed restore must not damage it). Only a corruption the harness injected itself is undone.
    ``ids_free``: the caller has just seen every captured ID free, with nothing started since."""
    if undo_injection:
        reset_artifact(run)
    port = run.ports["fault"]
    # the captured PIDs are never "already there": a restore re-uses them, so a dying process of the previous
    # fault still listed under one of them must not hide the next restored server from the cleanup
    captured = captured_ids(run)
    baseline = {p["pid"] for p in run.box.processes()} - captured
    # the faulted restore's tree may still be exiting (killed by vLLM's cleanup or ours a moment ago): its PIDs
    # are the captured ones, which CRIU must recreate, so they must be free first
    outcome = FollowupRestore()
    gone = consumed(run)
    if gone:  # the faulted restore's exit unlinked what the artifact needs: it is tried all the same, for CRIU's words
        outcome["consumed"] = gone
    waited = CapturedIdWait() if ids_free else wait_engine_gone(run, captured, run.config.timeouts["stop"])
    if waited:
        outcome["captured_ids_wait"] = waited
    # another host process took a captured PID/TID for a moment (the host's doing): once more
    result, retried = restore_retrying_taken(run, restore_argv(port), captured, baseline)
    outcome.update(cast(FollowupRestore, retried))
    outcome.update({"exit_code": result.exit_code, "seconds": round(result.seconds, 3)})
    if result.exit_code == 0:
        run.state.timed("restore", result.seconds)  # what a random kill of a restore is drawn over
    host, reach = run.endpoint(port)
    manifest = run.state.manifest
    if result.exit_code == 0:
        try:
            with run.recorder.engine_wait():  # an HTTP answer of the engine's, as every canary is
                got = engine.completion(
                    reach, run.served_model, VLLM_CANARY_PROMPT, host=host, timeout=run.config.timeouts["http"]
                )
            outcome["canary"] = got.as_dict()
            outcome["canary_ok"] = (
                got.token_ids == manifest.get("oracle_token_ids")
                and got.text == manifest.get("oracle_text")
                and abs(got.logprob - float(manifest["oracle_sampled_token_logprob"])) <= run.config.logprob_tolerance
            )
        except (engine.EngineError, OSError) as exc:
            outcome["canary_ok"] = False
            outcome["error"] = str(exc)
    else:
        outcome["canary_ok"] = False
        outcome["stderr_tail"] = result.tail(15)
        # vLLM logs CRIU's words on stdout (0.32; stderr only has the exit status), else only restore.log has them
        reason = checks.criu_words(
            result.stdout, result.stderr, lambda: run.box.read_text(f"{ARTIFACT}/images/restore.log")
        )
        if reason:
            outcome["criu_reason"] = reason
    kill_leftovers(run.box, baseline, set())
    left = settle(run.box, baseline, set())
    outcome["cleanup_ok"] = not left and not engine.port_open(reach, host)
    return outcome


def judge(
    fault: Fault, expect: Expect, obs: Observation, results: Mapping[str, Any], injector: Injector | None = None
) -> list[str]:
    """Every way the observation differs from the expectation, in words a reviewer can act on (pure: only the
    kind's judging rules are read of its injector)."""
    problems = []
    kind = injector or BUILTIN_INJECTORS.get(fault.kind) or Injector()
    if expect.fires and not obs.fired:
        # Nothing else is claimed about a fault that did not take effect: the engine was not tested by it.
        why = f"the hook or condition did not take effect: {_injection_evidence(results)}"
        fatal = first_fatal_line(obs) if obs.exit_code else None
        if fatal and kind.through_hook:  # the command died before the hook point
            why = f"exit {obs.exit_code} before the hook point was reached: {fatal}"
        return [f"ineffective injection: fault {fault.id} never fired ({why}), so nothing was tested"]
    if not expect.fires and obs.fired:
        problems.append(f"fault {fault.id} fired, but this behaviour has no such hook")
    code = obs.exit_code
    # A restore that should have failed and exited 0 is said as such; no clause then describes "the failure".
    succeeded = code == 0 and expect.exit_code not in (ANY, 0)
    if succeeded:
        wanted = "non-zero" if expect.exit_code == "nonzero" else str(expect.exit_code)
        problems.append(f"the restore succeeded (exit 0) although this fault must make it fail (exit {wanted})")
    elif expect.exit_code == "nonzero":
        if not code:
            problems.append(f"exit code {code}, expected non-zero")
    elif expect.exit_code != ANY and code != expect.exit_code:
        problems.append(f"exit code {code}, expected {expect.exit_code}")
    if expect.http_bound is False and obs.http_bound and not succeeded:
        problems.append(
            "HTTP was bound during the failed restore (seen by "
            + ", ".join(obs.http_bound_by)
            + "): the output check did not complete before serving"
        )
    if expect.http_bound is True and not obs.http_bound:
        problems.append("HTTP was never bound, but this behaviour binds before its public canary")
    if expect.error_phase == "absent" and obs.error_json is not None:
        problems.append(f"error.json present ({obs.error_json}), expected none for this behaviour")
    elif expect.error_phase not in (None, "absent"):
        if obs.error_json is None and succeeded:
            pass  # a restore that succeeded writes no error record: said once, above
        elif obs.error_json is None:
            problems.append(f"error.json missing, expected phase {expect.error_phase!r}")
        elif obs.phase != expect.error_phase:
            problems.append(f"error.json phase {obs.phase!r}, expected {expect.error_phase!r}")
    if expect.artifact_unchanged and obs.artifact_unchanged is False:
        problems.append("the artifact was mutated although the check must come before mutation")
    if expect.message and not any(expect.message in text for text in (obs.stderr_tail, *obs.error_lines)):
        problems.append(f"stderr does not say {expect.message!r}")
    problems.extend(kind.problems(obs, results))
    cleanup = results.get("cleanup") or {}
    if cleanup.get("judged", expect.cleanup) and not cleanup.get("ok", False):
        after = "after the restore was stopped" if succeeded else "after the failure"
        problems.append(
            f"cleanup incomplete {after}: leftover {cleanup.get('leftover_processes')}, "
            f"ports open {cleanup.get('ports_open')}, link remaps equal {cleanup.get('link_remaps_equal')}"
        )
    follow = results.get("followup_restore") or {}
    if expect.followup_restore and not (follow.get("exit_code") == 0 and follow.get("canary_ok")):
        still = (follow.get("captured_ids_wait") or {}).get("still_held")
        if follow.get("consumed"):
            pass  # not this fault's: the artifact is not self-contained (the check "self-contained": one finding)
        elif still:  # the artifact was never tried: a captured PID never came free
            problems.append(
                f"the follow-up restore could not be tried fairly: captured PIDs still held after the fault's "
                f"tree was killed ({'; '.join(still)})"
            )
        elif follow.get("ids_taken"):
            problems.append(kills.never_tried("the follow-up restore's artifact", follow))
        else:
            after = "after the fault" if succeeded else "after the failure"
            problems.append(f"the artifact no longer restores {after}: {followup_words(follow)}")
    return problems


def followup_words(follow: Mapping[str, Any]) -> str:
    """The follow-up restore's outcome in words: its exit, the canary, and the engine's or CRIU's own reason."""
    words = [f"follow-up restore exit {follow.get('exit_code')}"]
    if follow.get("exit_code") == 0:
        words.append("canary " + ("as the oracle" if follow.get("canary_ok") else "differs from the oracle"))
        if follow.get("error"):
            words.append(str(follow["error"]))
    reason = (follow.get("criu_reason") or [])[:1] or [
        ln for ln in str(follow.get("stderr_tail") or "").splitlines() if EXCEPTION_LINE.match(ln)
    ][-1:]
    if reason:
        words.append(str(reason[0]).strip())
    return "; ".join(words)


_FATAL = ("FATAL", "Fatal Python error", "Segmentation fault", "Killed")


def first_fatal_line(obs: Observation) -> str | None:
    """The first line of the command's output that says why it died before anything was injected (a library's
    fatal error, else the last exception line)."""
    for line in obs.stderr_tail.splitlines():
        if any(mark in line for mark in _FATAL):
            return line.strip()
    return obs.error_lines[-1].strip() if obs.error_lines else None
