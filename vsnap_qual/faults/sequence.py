"""The fault lane's two step bodies (``procedure``'s table names them): :func:`fault_artifact` (which expectations
judge the lane's faults, then its own artifact) and :func:`fault_step` (one fault: inject, observe, judge against
the lane's expectation, once more after an ineffective injection); the one sequence every fault runs, whatever its
kind (:func:`run_fault`); then what the faulted action left (:func:`settle_leftovers`) and the follow-up restore of
the artifact as the failure left it (:func:`followup_restore`). What differs per kind is its injector's
(:mod:`.kinds`)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import cast

from vsnap_qual import procedure, progress, vllm_words
from vsnap_qual.box import BoxProcesses, ProcessRow
from vsnap_qual.contract import ARTIFACT, VLLM_CANARY_PROMPT, restore_argv
from vsnap_qual.engine import client
from vsnap_qual.faults import group, once
from vsnap_qual.faults.catalogue import FaultCatalogue, lane_expectation
from vsnap_qual.faults.injector import Attempt, Injector, Observation
from vsnap_qual.faults.judge import expectation_record, followup_words, judge, observation_record, observe
from vsnap_qual.faults.lane import FaultLane
from vsnap_qual.faults.parked import ParkedWatch
from vsnap_qual.faults.tools import (
    artifact_digest,
    captured_ids,
    clear_fired,
    consumed,
    credit_teardown,
    fresh_artifact,
    kill_leftovers,
    prepare_artifact,
    reset_artifact,
    restore_retrying_taken,
    settle,
    settle_timed,
    wait_engine_gone,
)
from vsnap_qual.lane.snapshot_cli import shm_left_by_commands
from vsnap_qual.model import (
    CapturedIdWait,
    CleanupAudit,
    FaultArtifactResults,
    FaultResults,
    FollowupRestore,
    GroupFollowup,
    GroupProbe,
    RunsOnce,
)
from vsnap_qual.procedure import Fault
from vsnap_qual.recorder import StepEvidence
from vsnap_qual.vllm_words import StepFailed


# ---- the fault lane's steps -------------------------------------------------------------------------------------
def fault_artifact(lane: FaultLane, rec: StepEvidence[FaultArtifactResults]) -> None:
    """The ``fault-artifact`` step: which expectations judge this lane's faults (chosen before its first engine
    command), then the lane's own artifact, created with a short ``VLLM_SNAPSHOT_TIMEOUT_S``, and a pristine copy."""
    rec.results["expect"], rec.results["expect_reason"] = lane_expectation(lane)
    prepare_artifact(lane, rec)


def fault_step(
    lane: FaultLane,
    rec: StepEvidence[FaultResults],
    fault: Fault,
    catalogue: FaultCatalogue,
    order: Sequence[str] = (),
    stands_for: Sequence[str] = (),
) -> None:
    """One ``fault:<id>`` step (``fault`` its catalogue entry): inject, observe, judge against this lane's
    expectations; an injection that did not hold is tried once more before it is reported as ineffective. Fails the
    step naming every mismatch. ``order``: the lane's fault ids as the run selected them; a refusal of a group
    there (:mod:`.group`) defers its follow-up restore to the group's last, whose follow-up proves them all.
    ``stands_for``: the other runners' lanes this fault runs for (a kind refused before any engine starts,
    :mod:`.once`): said in the record, and its own record must show that no engine process started, else the step
    fails (those lanes did not run it)."""
    rec.results["kind"] = fault.kind  # recorded first: a step that turns out not applicable says its kind too
    behaviour, reason = lane_expectation(lane)
    expect = fault.expect(behaviour)
    injector = catalogue.injector_for(fault)
    members = refusal_group(fault, catalogue, order, behaviour)
    if members:
        rec.results["group_followup"] = GroupFollowup(group=list(members))
    defer_to = procedure.FAULT_PREFIX + members[-1] if members and fault.id != members[-1] else None
    cannot = injector.not_applicable(lane, fault)
    if cannot:
        if lane.state.deferred and defer_to is None:  # the group's proof is this step's, applicable or not
            prove_deferred(lane, rec, catalogue)
        progress.not_applicable(f"{lane.spec.name}: the box cannot present this fault: {cannot}")
    if stands_for:  # it runs here for them (an engine reached would fail it: below)
        rec.results["runs_once"] = RunsOnce(why=once.WHY, stands_for=list(stands_for))
    observed = run_fault(lane, fault, rec, injector, expect.cleanup, defer_to=defer_to)
    problems = judge(fault, expect, observed, rec.results, injector)
    if problems and problems[0].startswith("ineffective injection"):
        first = problems[0]
        observed = run_fault(lane, fault, rec, injector, expect.cleanup, attempt=2, defer_to=defer_to)
        problems = judge(fault, expect, observed, rec.results, injector)
        rec.results["retried_after"] = first
    problems = group_problems(lane, rec, catalogue, problems)
    if (rec.results.get("followup_restore") or {}).get("consumed"):
        lane.state.consumed_by = fault.id  # the next fault says whose restore used the artifact up
    rec.results.setdefault("cleanup", CleanupAudit()).setdefault("judged", expect.cleanup)  # recorded either way
    rec.results.update(
        FaultResults(
            fault=fault.id,
            title=fault.title,
            expect=behaviour,
            expect_reason=reason,
            expected=expectation_record(expect),
            observed=observation_record(observed),
            mismatches=problems,
        )
    )
    premise = once.premise_problem(rec.results, stands_for)  # the lanes it stood for rest on this record
    if premise:
        problems.append(premise)
        rec.results["mismatches"] = problems
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
    lane: FaultLane,
    fault: Fault,
    rec: StepEvidence[FaultResults],
    injector: Injector,
    cleanup_judged: bool = True,
    attempt: int = 1,
    defer_to: str | None = None,
    followup: bool = True,
) -> Observation:
    """Inject one fault, observe everything the contract says about it, then clean up and restore again: the one
    sequence every kind follows; what differs per kind is its injector's. ``cleanup_judged`` False (this arm's
    expectation records vLLM's cleanup without judging it): what is left is looked at once, as the command
    exits, not waited for through the grace, since no outcome of the wait could change the verdict. ``defer_to``
    (a refusal of a group, :mod:`.group`): where the command was in fact refused with the artifact byte-identical,
    the follow-up restore is that step's, the group's; any other follow-up restore also proves the refusals
    deferred before it (``lane.state.deferred``). ``followup`` False: none at all (a bisection's run)."""
    timeouts = lane.config.timeouts
    phase = Phases(
        rec.results.setdefault("phases", {}),
        rec.results.setdefault("phases_engine", {}),
        lambda: lane.recorder.engine_time,
    )
    shm_before = lane.cli.shm_names()  # what the fault's commands (a re-create included) leave there is named
    # every captured PID free before anything is injected (the previous fault's tree entirely gone, however
    # long its teardown took): else this fault would be judged on what the previous one left
    with phase("captured-id wait before"):
        before_fault = wait_engine_gone(lane, captured_ids(lane), timeouts["stop"])
    gone = consumed(lane)
    if gone:  # the fault starts from an artifact that restores: one engine defect is one finding, not one a fault
        by = f"the faulted restore of {lane.state.consumed_by}" if lane.state.consumed_by else "an earlier step"
        with phase("fresh artifact"):
            why = f"the previous fault artifact was consumed ({', '.join(gone)} gone after {by})"
            fresh_artifact(lane, rec, gone, why)
            lane.state.consumed_by = None
            wait_engine_gone(lane, captured_ids(lane), timeouts["stop"])  # the new artifact's dumped tree gone too
    with phase("reset"):
        captured = captured_ids(lane)
        clear_fired(lane.control)  # a fired record is evidence of this fault only, whatever kind it is
        reset_artifact(lane)
        if lane.state.artifact_files is not None:
            rec.results["artifact_reset"] = lane.state.artifact_files.last_reset
        # the captured PIDs are never "already there": a restore re-uses them, so a dying process of the previous
        # fault still listed under one of them must not hide the next restored server from the cleanup
        baseline = {p["pid"] for p in lane.box.processes()} - captured
    at = Attempt(lane, fault, rec, lane.ports["fault"], captured, number=attempt)
    obs, injected, ignore = at.obs, at.injected, at.ignore
    try:
        with phase("inject"):
            injector.begin(at)
            # the reset put the pristine copy back: its digest, taken once, is the artifact's now, unless this
            # kind's own injection changed the artifact (then it is taken after the injection, as it stands)
            files = lane.state.artifact_files
            pristine = None if injector.undo_before_followup or files is None else files.pristine_digest
            before = pristine or artifact_digest(lane)
        with phase("command"):  # the faulted command, its watchers included
            result = injector.act(at)
        with phase("observe"):
            observe(lane, obs, result)
            obs.fired = injector.fired(obs, injected)
            if injector.judges_artifact:
                obs.artifact_unchanged = artifact_digest(lane) == before
    finally:
        with phase("release"):
            injector.end(at)
    # vLLM's own cleanup after a failure, observed before the harness removes anything. A restore that
    # succeeded (as some behaviours do for some faults) leaves its server running by design: stop it first.
    with phase("audit"):
        if injector.left_serving(at, obs):
            kill_leftovers(lane.box, baseline, ignore)
        # the grace (a maximum: a clean state ends it) where vLLM's cleanup is judged, and where what vLLM left
        # is itself the measure (a kind audited after the sweep: the chaos figures' "left by the command"); an
        # arm's record alone is looked at once. A tree parked for good in CRIU's restorer ends the wait where this
        # kind then records what was left without judging it: no more time could change what it left
        grace = lane.config.cleanup_grace if cleanup_judged or injector.audits_after_sweep else 0.0
        left, wchan, parked_after, went_after = settle_leftovers(at, injector, baseline, ignore, grace, cleanup_judged)
        judged = injector.own_cleanup_judged(at, cleanup_judged, left, wchan)
        # the audit of what was left: waited for (again up to the grace) only where its outcome is judged
        pids_left = [p["pid"] for p in left]
        audit = lane.servers.audit(pids_left, [at.port] if injector.watches_port else [], grace if judged else 0.0)
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
        killed = kill_leftovers(lane.box, baseline, set())
        # killed ones reaped before the follow-up: their teardown is the engine's time where they went
        credit_teardown(lane, *settle_timed(lane.box, baseline, set(), limit=lane.config.cleanup_grace))
        if injector.audits_after_sweep:  # what is left once the harness swept: nothing, whatever the action was
            swept = list(dict.fromkeys([*(p["pid"] for p in left), *killed]))
            audit["after_sweep"] = lane.servers.audit(swept, [at.port] if injector.watches_port else [])
            audit["after_sweep"]["swept"] = killed
    with phase("captured-id wait after"):
        # what was killed and every captured PID gone for good, zombies and GPU teardown included, before the
        # follow-up restore must recreate the captured PIDs (the lane's listing no longer shows exiting ones)
        after_fault = wait_engine_gone(lane, captured | set(killed), timeouts["stop"])
        # the fault port free again (our own blocker, or a server that bound it, is gone only once its socket is);
        # from the lane's own LISTEN table: a connect poll can fail on a listener whose backlog is full
        with contextlib.suppress(client.EngineError):  # still bound: the follow-up restore then says so itself
            client.wait_until(lambda: at.port not in lane.box.listening_ports(), lane.config.cleanup_grace, 0.05)
    with phase("after sweep"):
        injector.after_sweep(at)
    engine_left = [pid for pid in killed if pid not in ignore]  # the harness's own helpers are not the engine's
    if engine_left:
        audit["killed_by_harness"] = engine_left
    rec.results.update(FaultResults(injected=injected, cleanup=audit))
    waits = {k: v for k, v in (("before_fault", before_fault), ("after_fault", after_fault)) if v}
    if waits:
        rec.results["captured_id_waits"] = waits

    def name_shm_left() -> None:
        """What the fault's commands (a re-create, the faulted one, a follow-up restore) left in /dev/shm: named in
        the fault's audit; those no process holds are removed with the lane."""
        shm_left, shm_judged = shm_left_by_commands(lane.cli, lane.state, shm_before)
        if shm_left:
            audit["shm_left_by_fault" if shm_judged else "shm_left_not_judged"] = shm_left

    if not followup:
        name_shm_left()
        return obs
    if defer_to is not None and group.refused(obs.exit_code, obs.artifact_unchanged):
        defer(lane, rec, fault, defer_to)  # refused before it touched anything: its group's follow-up proves it
        name_shm_left()
        return obs
    with phase("follow-up restore"):
        # the captured IDs were just found free and nothing has started since: the follow-up does not look again
        ids_free = "still_held" not in after_fault
        rec.results["followup_restore"] = followup_restore(lane, injector.undo_before_followup, ids_free)
    cover(lane, rec, fault)
    name_shm_left()
    return obs


# ---- refusals proved once per group (faults.group) -------------------------------------------------------------
def refusal_group(fault: Fault, catalogue: FaultCatalogue, order: Sequence[str], behaviour: str) -> tuple[str, ...]:
    """The group of refusals ``fault`` belongs to in the lane's ``order`` (:func:`.group.group_of`), judged by
    each fault's expectation on this lane's ``behaviour``."""

    def is_refusal(fault_id: str) -> bool:
        other = catalogue.get(fault_id)
        if other is None:
            return False
        return group.refusal(other.expect(behaviour), catalogue.injector_for(other).judges_artifact)

    return group.group_of(fault.id, order, is_refusal)


def defer(lane: FaultLane, rec: StepEvidence[FaultResults], fault: Fault, defer_to: str) -> None:
    """A refusal of a group, refused with the artifact byte-identical: its follow-up restore is the group's, in
    the step ``defer_to`` (or the lane's next follow-up restore, whichever comes first), said in its record."""
    if fault.id not in lane.state.deferred:
        lane.state.deferred.append(fault.id)
    rec.results.setdefault("group_followup", GroupFollowup())["deferred_to"] = defer_to
    rec.results.pop("followup_restore", None)  # a first attempt's, if it restored


def cover(lane: FaultLane, rec: StepEvidence[FaultResults], fault: Fault) -> None:
    """This step's follow-up restore (just recorded) also proves the refusals deferred before it: said in its
    record (``group_followup.covered``); they are no longer pending."""
    if not lane.state.deferred:
        return
    covered = list(dict.fromkeys([*lane.state.deferred, fault.id]))
    lane.state.deferred.clear()
    rec.results.setdefault("group_followup", GroupFollowup())["covered"] = covered


def prove_deferred(lane: FaultLane, rec: StepEvidence[FaultResults], catalogue: FaultCatalogue) -> None:
    """The deferred refusals' follow-up restore, in a step whose own fault does not run (not applicable on this
    box): the artifact as reset, then the group's judgement (:func:`group_problems`); fails the step where the
    restore failed, naming what the bisection found."""
    rec.results["followup_restore"] = followup_restore(lane, True)
    covered = list(lane.state.deferred)
    lane.state.deferred.clear()
    rec.results.setdefault("group_followup", GroupFollowup())["covered"] = covered
    problems = group_problems(lane, rec, catalogue, [])
    if problems:
        raise StepFailed("; ".join(problems))


def restored(follow: FollowupRestore) -> bool:
    return follow.get("exit_code") == 0 and bool(follow.get("canary_ok"))


def group_problems(
    lane: FaultLane, rec: StepEvidence[FaultResults], catalogue: FaultCatalogue, problems: list[str]
) -> list[str]:
    """Where this step's follow-up restore proved a group (``group_followup.covered``) and failed: the faults run
    again by halves, each from a reset artifact and followed by a restore (:func:`.group.bisect`), and the
    follow-up's problem replaced by one that names the fault that broke it. Else ``problems`` as they are."""
    record = rec.results.get("group_followup") or GroupFollowup()
    covered = record.get("covered") or []
    follow = rec.results.get("followup_restore") or FollowupRestore()
    if len(covered) < 2 or restored(follow) or follow.get("consumed"):
        return problems
    if (follow.get("captured_ids_wait") or {}).get("still_held") or follow.get("ids_taken"):
        return problems  # the restore was never tried fairly: said as such by the judge
    scratch: StepEvidence[FaultResults] = StepEvidence(FaultResults(), rec.step)
    found = group.bisect(covered, lambda subset: rerun_then_restore(lane, scratch, catalogue, subset))
    record["bisection"] = [GroupProbe(faults=list(p.faults), restored=p.restored) for p in found.probes]
    record["broke"] = found.broke
    record["words"] = found.words
    kept = [p for p in problems if not p.startswith("the artifact no longer restores")]
    return [
        *kept,
        f"the artifact no longer restores after the refusals {', '.join(covered)} (one follow-up restore for all: "
        f"{followup_words(follow)}); bisected: {found.words}",
    ]


def rerun_then_restore(
    lane: FaultLane, scratch: StepEvidence[FaultResults], catalogue: FaultCatalogue, subset: tuple[str, ...]
) -> bool:
    """One probe of a bisection: ``subset``'s faults run again in order (each from a reset artifact, audited, no
    follow-up of its own), then one restore of the artifact as reset; whether it restored and answered the canary."""
    behaviour, _ = lane_expectation(lane)
    for fault_id in subset:
        fault = catalogue.get(fault_id)
        if fault is None:
            continue
        injector = catalogue.injector_for(fault)
        run_fault(lane, fault, scratch, injector, fault.expect(behaviour).cleanup, followup=False)
    wait_engine_gone(lane, captured_ids(lane), lane.config.timeouts["stop"])
    gone = consumed(lane)
    if gone:  # as a fault starts: from an artifact that restores
        fresh_artifact(lane, scratch, gone, "a bisection probe starts from an artifact that restores")
    return restored(followup_restore(lane, True))


def settle_leftovers(
    at: Attempt, injector: Injector, baseline: set[int], ignore: set[int], grace: float, cleanup_judged: bool
) -> tuple[list[ProcessRow], dict[str, str], float | None, float | None]:
    """What the faulted action left after up to ``grace`` seconds, where each leftover waits in the kernel,
    where the wait ended early because the leftovers were parked for good in CRIU's restorer and this kind does
    not judge vLLM's cleanup of them (:class:`ParkedWatch`), how long after it began (else None), and where
    everything left went by itself during the wait, how long it was still there (credited to the engine:
    :func:`credit_teardown`; else None)."""
    parked = ParkedWatch(at.lane.box)
    found: list[tuple[dict[str, str], float]] = []  # where the parked leftovers wait, and when that was found
    started = time.monotonic()

    def hopeless(left: list[ProcessRow]) -> bool:
        if not parked(left):
            return False
        wchan = leftover_wchan(at.lane.box, [p["pid"] for p in left])
        if injector.own_cleanup_judged(at, cleanup_judged, left, wchan):
            return False
        found.append((wchan, round(time.monotonic() - started, 2)))
        return True

    left, held_s = settle_timed(at.lane.box, baseline, ignore, limit=grace, hopeless=hopeless)
    went_after = credit_teardown(at.lane, left, held_s)
    if found:  # the wait ended on these very leftovers: where they wait was just read
        wchan, after = found[-1]
        return left, wchan, after, went_after
    return left, leftover_wchan(at.lane.box, [p["pid"] for p in left]) if left else {}, None, went_after


def leftover_wchan(box: BoxProcesses, pids: list[int]) -> dict[str, str]:
    """Where in the kernel each leftover waits (``/proc/<pid>/wchan``, as the box numbers it; keyed as the evidence
    records it): a process that never left CRIU's restorer waits on a futex there, one that runs vLLM's code mostly
    in its event loop's poll (what :meth:`Injector.own_cleanup_judged` may read)."""
    return {str(pid): wchan for pid, wchan in box.wchan(pids).items()}


def followup_restore(lane: FaultLane, undo_injection: bool, ids_free: bool = False) -> FollowupRestore:
    """After a fault, the artifact as the failure left it must still restore and answer vLLM's canary with its
    oracle (a failed restore must not damage it). Only a corruption the harness injected itself is undone.
    ``ids_free``: the caller has just seen every captured ID free, with nothing started since."""
    if undo_injection:
        reset_artifact(lane)
    port = lane.ports["fault"]
    # the captured PIDs are never "already there": a restore re-uses them, so a dying process of the previous
    # fault still listed under one of them must not hide the next restored server from the cleanup
    captured = captured_ids(lane)
    baseline = {p["pid"] for p in lane.box.processes()} - captured
    # the faulted restore's tree may still be exiting (killed by vLLM's cleanup or ours a moment ago): its PIDs
    # are the captured ones, which CRIU must recreate, so they must be free first
    outcome = FollowupRestore()
    gone = consumed(lane)
    if gone:  # the faulted restore's exit unlinked what the artifact needs: it is tried all the same, for CRIU's words
        outcome["consumed"] = gone
    waited = CapturedIdWait() if ids_free else wait_engine_gone(lane, captured, lane.config.timeouts["stop"])
    if waited:
        outcome["captured_ids_wait"] = waited
    # another host process took a captured PID/TID for a moment (the host's doing): once more
    result, retried = restore_retrying_taken(lane, restore_argv(port), captured, baseline)
    outcome.update(cast(FollowupRestore, retried))
    outcome.update({"exit_code": result.exit_code, "seconds": round(result.seconds, 3)})
    if result.exit_code == 0:
        lane.state.timed("restore", result.seconds)  # what a random kill of a restore is drawn over
    host, reach = lane.box.endpoint(port)
    manifest = lane.state.manifest
    if result.exit_code == 0:
        try:
            with lane.recorder.engine_wait():  # an HTTP answer of the engine's, as every canary is
                got = client.completion(
                    reach, lane.api.served_model, VLLM_CANARY_PROMPT, host=host, timeout=lane.config.timeouts["http"]
                )
            outcome["canary"] = got.as_dict()
            outcome["canary_ok"] = (
                got.token_ids == manifest.get("oracle_token_ids")
                and got.text == manifest.get("oracle_text")
                and abs(got.logprob - float(manifest["oracle_sampled_token_logprob"])) <= lane.config.logprob_tolerance
            )
        except (client.EngineError, OSError) as exc:
            outcome["canary_ok"] = False
            outcome["error"] = str(exc)
    else:
        outcome["canary_ok"] = False
        outcome["stderr_tail"] = result.tail(15)
        # vLLM logs CRIU's words on stdout (0.32; stderr only has the exit status), else only restore.log has them
        reason = vllm_words.criu_words(
            result.stdout, result.stderr, lambda: lane.box.read_text(f"{ARTIFACT}/images/restore.log")
        )
        if reason:
            outcome["criu_reason"] = reason
    kill_leftovers(lane.box, baseline, set())
    left = settle(lane.box, baseline, set())
    outcome["cleanup_ok"] = not left and not client.port_open(reach, host)
    return outcome
