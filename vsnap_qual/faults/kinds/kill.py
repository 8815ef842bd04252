"""The random-kill fault kind (issue 29): ``vllm snapshot create`` or ``restore`` killed at any moment.

A signal (``KillParams.signal``: KILL, or TERM) goes to the command's whole tree (the command, its descendants and its
session, as listed at that moment) at an offset drawn from a seeded generator over the command's measured
duration (this lane's last unfaulted create or restore of the fault artifact). The seed, the draw, the offset and
what was running then (the phase reached, from the process tree the signal went to) are the step's evidence, so a
failure replays with ``--vsnap-kill-seed`` and the fault's id.

Either outcome of the command is allowed. What is judged:

- the cleanup: after vLLM's own where it has one (``Expect.cleanup``: SIGTERM on the head arm), and in every case
  after the harness's sweep (``results.cleanup.after_sweep``), which must leave nothing: no process, no listener,
  no GPU app, no link remap of this lane's;
- the artifact: for a killed create, its target is absent, or refused by ``inspect`` or ``restore`` with a
  message, or restores and answers the ordinary engine's canaries (``results.killed_artifact``). A restore that
  trusts a half-written artifact and serves other answers is a finding. For a killed restore (issue 44) the
  artifact was whole before the kill and an artifact is reusable, restore after restore: the follow-up restore of
  the fault artifact as the kill left it (no reset in between) must restore and answer vLLM's canary. A refusal is
  a finding that names what the kill left changed in the artifact against its pristine copy's listing
  (``results.injected.artifact_changes``: files removed, renamed, resized, modes; and what was added).
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from vsnap_qual import checks
from vsnap_qual.box import ExecResult, ProcessRow, RuntimeFailure
from vsnap_qual.contract import ARTIFACT, VLLM_CANARY_PROMPT, WORK, restore_argv
from vsnap_qual.engine import client
from vsnap_qual.engine.client import CanaryOutput
from vsnap_qual.faults.injector import Attempt, Injector, Kind, Observation, params_of
from vsnap_qual.faults.lane import FaultLane
from vsnap_qual.faults.parked import criu_action
from vsnap_qual.faults.tools import (
    BACKUP,
    kill_leftovers,
    never_tried,
    restore_retrying_taken,
    settle,
    wait_engine_gone,
)
from vsnap_qual.lane.artifact_files import ArtifactFilesError, Entry, listing
from vsnap_qual.lane.audit import port_listening
from vsnap_qual.lane.state import OrdinaryReference
from vsnap_qual.model import KilledArtifact, KilledCanaries, KillInjected
from vsnap_qual.procedure import ANY, Expect, Fault, FaultParams
from vsnap_qual.vllm_words import vllm_reason

#: where a killed create writes (never the fault artifact: that one stays pristine for the other faults)
KILLED_CREATE = f"{WORK}/fault-create"
#: the commands a kill can hit
COMMANDS = ("create", "restore")


#: the share of the shortest measured duration a kill is drawn over: a draw past the command's end tests nothing,
#: and the same command's duration varies from run to run (a restore of 0.55 s took 0.62 s once on 2 cores)
SPAN = 0.95


def draw(seed: int, lane_name: str, fault_id: str, attempt: int, duration: float) -> tuple[float, float]:
    """The offset (seconds after the command started) and its fraction of the span (:data:`SPAN` of
    ``duration``, the shortest the command took in this lane): one value of a generator seeded by the run's seed,
    the lane, the fault and the attempt, so the same four give the same draw."""
    fraction = random.Random(f"{seed}:{lane_name}:{fault_id}:{attempt}").random()
    return round(fraction * SPAN * duration, 3), round(fraction, 4)


def phase_reached(command: str, tree: list[ProcessRow], captured_alive: bool) -> str:
    """What the command was doing when the signal went, in the engine's and CRIU's own process names: the
    chaos table's rows (``bench/chaos.py``)."""
    actions = {criu_action(p["args"]) for p in tree} - {None}
    if "dump" in actions:
        return "criu dump"
    if "restore" in actions:
        return "criu restore"
    if command == "restore":
        return "restored tree up, recovery running" if captured_alive else "before criu restore"
    return "engine child running" if len(tree) > 1 else "controller only"


def command_tree(procs: list[ProcessRow], command: str, target: str) -> tuple[int | None, list[ProcessRow]]:
    """In this listing, the lane's running ``vllm snapshot <command>`` of ``target`` (the child of the harness's
    ``timeout`` wrapper) and its whole tree: its descendants, and the members of its session where that session
    is the command's own (led by the command or by the wrapper: a process it started that was reparented stays
    in it). The wrapper and every other ancestor are left out (a signal to the wrapper reaches the command a
    second time and ends the exec that reads it), and so is a session the command only joined: with the host
    runtime that is the lane's, its namespace holder and every other command run in the lane."""
    needle = f"vllm snapshot {command} "
    wrappers = {
        p["pid"] for p in procs if p["args"].startswith("timeout ") and needle in p["args"] and target in p["args"]
    }
    roots = [p["pid"] for p in procs if p["ppid"] in wrappers]
    if not roots:
        return None, []
    by_pid = {p["pid"]: p for p in procs}
    tree: set[int] = set(roots)
    changed = True
    while changed:
        changed = False
        for p in procs:
            if p["pid"] not in tree and p["ppid"] in tree:
                tree.add(p["pid"])
                changed = True
    own_sessions = {by_pid[r]["sid"] for r in roots if by_pid[r]["sid"] in {*roots, *wrappers}}
    tree |= {p["pid"] for p in procs if p["sid"] in own_sessions}
    ancestors: set[int] = set()
    for root in roots:
        pid = by_pid[root]["ppid"]
        while pid in by_pid and pid not in ancestors:
            ancestors.add(pid)
            pid = by_pid[pid]["ppid"]
    return roots[0], [p for p in procs if p["pid"] in tree - ancestors]


def refusal_words(text: str) -> str:
    """The refusal's own message (``vllm_words.vllm_reason``: a known limitation, vLLM's exception line, else its last
    line); empty where it wrote nothing."""
    return vllm_reason(text) if text.strip() else ""


def stop_restored(lane: FaultLane, baseline: set[int], ids: set[int]) -> None:
    """Stop what a restore of the harness's own started (everything new since ``baseline``) and wait until the
    captured ``ids`` are free again, as the next restore needs them."""
    kill_leftovers(lane.box, baseline, set())
    settle(lane.box, baseline, set(), limit=lane.config.cleanup_grace)
    wait_engine_gone(lane, ids, lane.config.timeouts["stop"])


def measure_restore(lane: FaultLane) -> float | None:
    """One unfaulted restore of the fault artifact, timed, then stopped: the duration a kill is drawn over when
    this lane has timed none yet (only when the kill faults run alone)."""
    captured = {int(p) for p in lane.state.manifest.get("process_tree") or []}
    baseline = {p["pid"] for p in lane.box.processes()} - captured
    with lane.recorder.engine_wait():
        result = lane.box.exec(restore_argv(lane.ports["fault"]), lane.config.timeouts["restore"])
    stop_restored(lane, baseline, captured | set(lane.state.captured_tids))
    if result.exit_code != 0:
        return None
    lane.state.timed("restore", result.seconds)
    return lane.state.timings["restore"]


def judge_killed_create(lane: FaultLane) -> KilledArtifact:
    """What the killed create left at its target: absent; refused by ``inspect``; refused by ``restore``; or
    restored, with the ordinary engine's canaries asked of it. The target is removed afterwards."""
    box, timeout = lane.box, lane.config.timeouts
    out = KilledArtifact(target=KILLED_CREATE)
    if not box.exists(KILLED_CREATE):
        out["outcome"] = "absent"
        return out
    out["left"] = what_is_left(lane)
    try:
        with lane.recorder.engine_wait():
            inspected = box.exec(["vllm", "snapshot", "inspect", KILLED_CREATE], timeout["exec"])
        out["inspect_exit"] = inspected.exit_code
        if inspected.exit_code != 0:
            out.update(
                KilledArtifact(
                    outcome="refused by inspect", message=refusal_words(f"{inspected.stdout}\n{inspected.stderr}")
                )
            )
            return out
        try:
            manifest = json.loads(inspected.stdout)
        except ValueError:
            manifest = {}
        captured = {int(p) for p in manifest.get("process_tree") or []}
        baseline = {p["pid"] for p in box.processes()} - captured
        port = lane.ports["fault"]
        restored, retried = restore_retrying_taken(lane, restore_argv(port, KILLED_CREATE), captured, baseline)
        out.update(cast(KilledArtifact, retried))
        out["restore_exit"] = restored.exit_code
        if restored.exit_code != 0:
            said = refusal_words(f"{restored.stdout}\n{restored.stderr}")
            out.update(KilledArtifact(outcome="refused by restore", message=said))
        else:
            out["outcome"] = "restored"
            # against the fault artifact's oracle: a fault lane's own state has never held the ordinary
            # reference (that is the lifecycle lane's, in ``lane.peers``)
            out["canaries"] = ask_canaries(lane, port)
        stop_restored(lane, baseline, captured)
        return out
    finally:
        box.remove_path(KILLED_CREATE)


def what_is_left(lane: FaultLane, limit: int = 40) -> list[str]:
    """The killed create's target as ``find . -maxdepth 2`` lists it, sorted (``.`` first), at most ``limit``
    entries; nothing where it cannot be listed."""
    try:
        entries = lane.box.list_dir(KILLED_CREATE, depth=2)
    except RuntimeFailure:
        return []
    return [".", *(f"./{e.path}" for e in entries)][:limit]


def _size(entry: Entry) -> int | None:
    parts = entry.key.split()
    return int(parts[1]) if len(parts) > 1 else None


def listing_changes(pristine: Mapping[str, Entry], now: Mapping[str, Entry]) -> list[str]:
    """What differs between the artifact's listing ``now`` and its pristine copy's, in words: entries removed
    (a removed file with the size and kind of exactly one added entry: renamed), files whose size changed
    (truncated or grown), modes changed, then what was added."""
    removed = sorted(pristine.keys() - now.keys())
    added = sorted(now.keys() - pristine.keys())
    out: list[str] = []
    for path in removed:
        was = pristine[path]
        same = [p for p in added if (now[p].kind, _size(now[p])) == (was.kind, _size(was)) and _size(was) is not None]
        if len(same) == 1:
            out.append(f"renamed {path} -> {same[0]}")
            added.remove(same[0])
        else:
            out.append(f"removed {path}")
    for path in sorted(pristine.keys() & now.keys()):
        was, new = pristine[path], now[path]
        if was.kind != new.kind:
            out.append(f"{path}: now of type {new.kind!r} (was {was.kind!r})")
            continue
        before, after = _size(was), _size(new)
        if was.kind == "f" and before is not None and after is not None and before != after:
            out.append(f"{'truncated' if after < before else 'grown'} {path} ({before} -> {after} bytes)")
        if was.mode != new.mode:
            out.append(f"mode of {path} {was.mode} -> {new.mode}")
    out += [f"added {path}" for path in added]
    return out


def artifact_changes(lane: FaultLane) -> list[str]:
    """The fault artifact as the kill left it against its pristine copy (both listed now, the copy untouched since
    it was made); what cannot be listed is said as such."""
    try:
        return listing_changes(listing(lane.box, BACKUP), listing(lane.box, ARTIFACT))
    except (ArtifactFilesError, RuntimeFailure) as exc:
        return [f"not listed: {exc}"]


def ask_canaries(lane: FaultLane, port: int, ordinary: OrdinaryReference | None = None) -> KilledCanaries:
    """The lane's canaries (``EngineApi.canaries``) asked of a server restored from a killed create's artifact,
    each compared with ``ordinary``'s answer; without one, vLLM's canary (the first) compared with the fault
    artifact's oracle (same engine, model)."""
    manifest = lane.state.manifest
    if ordinary is not None:
        wanted = [CanaryOutput.of(c) for c in ordinary.canary]
    else:
        wanted = [
            CanaryOutput(
                prompt=VLLM_CANARY_PROMPT,
                token_ids=list(manifest.get("oracle_token_ids") or []),
                text=str(manifest.get("oracle_text")),
                logprob=float(manifest.get("oracle_sampled_token_logprob") or 0.0),
            )
        ]
    try:
        got = lane.api.canaries(port)
    except (client.EngineError, OSError) as exc:
        return KilledCanaries(ok=False, error=f"{type(exc).__name__}: {exc}", compared=[])
    tolerance = lane.config.logprob_tolerance
    # the ordinary engine was asked the same plan; without it, only vLLM's canary (the first) has an oracle
    compared = [checks.compare_canary(want, answer, tolerance) for want, answer in zip(wanted, got, strict=False)]
    against = "the ordinary engine's answers" if ordinary is not None else "the fault artifact's oracle"
    ok = len(compared) == len(wanted) and all(c["ok"] for c in compared)
    return KilledCanaries(ok=ok, against=against, compared=compared)


def killed_artifact_problems(killed: Mapping[str, Any]) -> list[str]:
    """A killed create's artifact: refused without a message, or restored and answering otherwise."""
    outcome = killed.get("outcome")
    if killed.get("ids_taken"):
        return [never_tried("the killed create's artifact", killed)]
    if outcome in ("refused by inspect", "refused by restore") and not killed.get("message"):
        return [f"the killed create's artifact was {outcome} without a message"]
    if outcome == "restored" and not (killed.get("canaries") or {}).get("ok"):
        canaries = killed.get("canaries") or {}
        first = next((c for c in canaries.get("compared", []) if not c.get("ok")), None)
        said = canaries.get("error") or (f"first differing answer: {first}" if first else "no answer")
        return [
            "a restore trusted the killed create's half-written artifact and served answers unlike the ordinary "
            f"engine's ({str(said)[:300]})"
        ]
    return []


def killed_restore_problems(follow: Mapping[str, Any], changes: Sequence[str] | None) -> list[str]:
    """The artifact after a killed restore: it was whole before the kill, so the follow-up restore of it as the kill
    left it must restore and answer vLLM's canary; a refusal (with a message or not) is a finding naming what the
    kill changed in it. Not this fault's: a captured ID another process held (never tried), an artifact whose
    outside files are gone (the self-contained check's one finding)."""
    if follow.get("ids_taken"):
        return [never_tried("after the killed restore the artifact", follow)]
    if follow.get("consumed"):
        return []
    if follow.get("exit_code") == 0:
        return ["after the killed restore the artifact restores but does not answer vLLM's canary"]
    said = "; ".join((follow.get("criu_reason") or [])[:1]) or refusal_words(str(follow.get("stderr_tail") or ""))
    changed = "; ".join(changes) if changes else "nothing (the listing is the pristine copy's)"
    return [
        f"a killed restore left the artifact unrestorable: the follow-up restore of it as the kill left it (whole "
        f"before the kill) exited {follow.get('exit_code')}"
        + (f": {said}" if said else " without a message")
        + f"; what the kill changed in the artifact against its pristine listing: {changed}"
    ]


@dataclass(frozen=True)
class KillParams(FaultParams):
    """A kill fault's parameters: the command killed (``create`` into a target of its own, or ``restore``) and the
    signal (``KILL`` or ``TERM``)."""

    command: str = "restore"
    signal: str = "KILL"


class KillInjector(Injector):
    """``kill``: ``KillParams.signal`` to the whole tree of ``KillParams.command`` at a seeded random moment. Fired
    when the signal went to a running command (one that had already ended is tried again, with the next draw)."""

    judges_artifact = False  # a killed command may leave anything: what is judged is what a restore makes of it
    audits_after_sweep = True

    # ---- inject ---------------------------------------------------------------------------------------------
    def begin(self, at: Attempt) -> None:
        lane, fault = at.lane, at.fault
        params = params_of(fault, KillParams)
        command = params.command
        duration = lane.state.timings.get(command)
        if duration is None and command == "restore":
            duration = measure_restore(lane)
            cast(KillInjected, at.injected)["duration_measured_now"] = True
        if duration is None:
            raise RuntimeError(f"no unfaulted {command} of this lane was timed before {fault.id}")
        seed, attempt = lane.config.kill_seed, at.number
        offset, fraction = draw(seed, lane.spec.name, fault.id, attempt, duration)
        cast(KillInjected, at.injected).update(
            {
                "seed": seed,
                "attempt": attempt,
                "command": command,
                "signal": f"SIG{params.signal}",
                "duration_s": round(duration, 3),
                "offset_s": offset,
                "fraction": fraction,
                "sent": [],
            }
        )
        if command == "create":
            lane.box.remove_path(KILLED_CREATE)

    def release(self, lane: FaultLane, injected: dict[str, object]) -> None:
        """Nothing to undo: the signal is the injection."""

    def fired(self, obs: Observation, injected: Mapping[str, Any]) -> bool:
        return bool(injected.get("sent"))

    # ---- act --------------------------------------------------------------------------------------------------
    def act(self, at: Attempt) -> ExecResult:
        if params_of(at.fault, KillParams).command != "create":
            result = super().act(at)  # the faulted restore, watched for HTTP; the killer runs around it
        else:
            with self.restoring(at):
                result = at.lane.cli.snapshot(
                    at.rec,
                    "create",
                    *at.lane.cli.create_argv(KILLED_CREATE),
                    timeout_key="create",
                    name="create-killed",
                )
        injected = cast(KillInjected, at.injected)
        if injected.get("missed") and result.exit_code == 0:
            # it ended first: the next draw is over the duration it just took (the one measured before may be
            # a cold start's)
            at.lane.state.timed(injected["command"], result.seconds)
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
            cast(KillInjected, at.injected)["missed"] = f"the killer failed: {type(exc).__name__}: {exc}"

    def _kill_at(self, at: Attempt, started: float, done: threading.Event) -> None:
        """At the drawn offset: the command's tree as it is then, the phase it reached, and the signal to all of it
        in one ``kill``. Nothing is sent once the command has ended."""
        injected, lane = cast(KillInjected, at.injected), at.lane
        offset = injected["offset_s"]
        if done.wait(max(0.0, started + offset - time.monotonic())):
            injected["missed"] = "the command ended before the drawn offset"
            return
        command = injected["command"]
        target = KILLED_CREATE if command == "create" else ARTIFACT
        # not listed yet (an offset drawn near 0 comes before the exec has spawned it): it is signalled the moment
        # it is listed, or the command ended without ever being seen
        while True:
            procs = lane.box.processes()
            root, tree = command_tree(procs, command, target)
            if root is not None or done.wait(0.02):
                break
        if root is None or done.is_set():
            injected["missed"] = "the command was never listed running at or after the drawn offset"
            return
        captured = {int(p) for p in lane.state.manifest.get("process_tree") or []}
        alive = {p["pid"] for p in procs}
        signame = injected["signal"].removeprefix("SIG")
        pids = sorted(p["pid"] for p in tree)
        sent = lane.box.signal(pids, signame)
        injected.update(
            {
                "sent_after_s": round(time.monotonic() - started, 3),
                "phase": phase_reached(command, tree, bool(captured & alive)),
                "tree": [f"{p['pid']} {p['args'][:100]}" for p in tree],
                "sent": [f"SIG{signame} to {len(pids)} processes of vllm snapshot {command} (root {root})"]
                if sent
                else [],
            }
        )

    def left_serving(self, at: Attempt, obs: Observation) -> bool:
        """A restore that completed before the signal took effect: it ended by the signal itself (no error path
        of vLLM's ran) or exited 0, and its server is serving on the port: that server runs by design, as after
        any successful restore (said in the evidence)."""
        if params_of(at.fault, KillParams).command != "restore":
            return False
        injected = cast(KillInjected, at.injected)
        signum = signal.Signals[str(injected.get("signal"))].value
        if obs.exit_code not in (0, 128 + signum) or not port_listening(at.lane.box, at.port):
            return False
        injected["completed"] = "the restore had completed: its server was serving on the port as it ended"
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
        if not expected or params_of(at.fault, KillParams).command != "restore":
            return expected
        injected = cast(KillInjected, at.injected)
        stopped = [p["pid"] for p in left if p.get("stat", "")[:1] in ("T", "t")]
        parked = bool(left) and all(wchan.get(str(p["pid"]), "").startswith("futex") for p in left)
        if injected.get("phase") == "criu restore" or stopped or parked:
            why = (
                f"CRIU left {stopped} stopped" if stopped
                else f"CRIU left {[p['pid'] for p in left]} parked in its restorer (futex)" if parked
                else "the signal reached CRIU while it restored"
            )  # fmt: skip
            injected["own_cleanup"] = f"not judged: {why}, and vLLM signals no PID it has not pinned"
            return False
        return expected

    # ---- after the harness's sweep ---------------------------------------------------------------------------
    def after_sweep(self, at: Attempt) -> None:
        """A killed create: what a restore makes of what it left (``results.killed_artifact``). A killed restore:
        what it left changed in the fault artifact, which the follow-up restore then meets as it is."""
        if params_of(at.fault, KillParams).command == "create":
            at.rec.results["killed_artifact"] = judge_killed_create(at.lane)
        elif at.injected.get("sent"):
            cast(KillInjected, at.injected)["artifact_changes"] = artifact_changes(at.lane)

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
            out.extend(killed_artifact_problems(killed))
        follow = results.get("followup_restore") or {}
        if killed is None and follow and not (follow.get("exit_code") == 0 and follow.get("canary_ok")):
            out.extend(killed_restore_problems(follow, (results.get("injected") or {}).get("artifact_changes")))
        return out


KIND = Kind(
    "kill",
    KillInjector(),
    KillParams,
    KillInjected,
    faults=(
        # issue 29: killed at any moment. Either outcome of the command is allowed; the cleanup is judged after the
        # harness's sweep in every case, and after vLLM's own where it has one (SIGTERM to the head arm's restore);
        # what a restore makes of the artifact is judged by the kind
        Fault(
            "kill-create", "SIGKILL to vllm snapshot create's whole tree at a random moment", "kill",
            head=Expect(ANY, None, None, None, cleanup=False), params=KillParams("create", "KILL"),
        ),
        Fault(
            # vLLM's create installs no SIGTERM handler (only the head restore raises on it): the controller ends by
            # the default action, so a child it started after the signal went lives on until its release deadline.
            # That is recorded (the chaos figures' "left by the command"); what is judged is the sweep
            "term-create", "SIGTERM to vllm snapshot create's whole tree at a random moment", "kill",
            head=Expect(ANY, None, None, None, cleanup=False), params=KillParams("create", "TERM"),
        ),
        Fault(
            "kill-restore", "SIGKILL to vllm snapshot restore's whole tree at a random moment", "kill",
            head=Expect(ANY, None, None, None, followup_restore=False, cleanup=False),
            params=KillParams("restore", "KILL"),
        ),
        Fault(
            "term-restore", "SIGTERM to vllm snapshot restore's whole tree at a random moment", "kill",
            head=Expect(ANY, None, None, None, followup_restore=False),
            base=Expect(ANY, None, None, None, followup_restore=False, cleanup=False),
            params=KillParams("restore", "TERM"),
        ),
    ),
)  # fmt: skip
KINDS = (KIND,)
