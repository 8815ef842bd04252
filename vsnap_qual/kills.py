"""The random-kill fault kind (issue 29): ``vllm snapshot create`` or ``restore`` killed at any moment; its
injector is ``faults.KillInjector``, the rest is here.

A signal (``Fault.signal``: KILL, or TERM) goes to the command's whole tree (the command, its descendants and its
session, as listed at that moment) at an offset drawn from a seeded generator over the command's measured
duration (this lane's last unfaulted create or restore of the fault artifact). The seed, the draw, the offset and
what was running then (the phase reached, from the process tree the signal went to) are the step's evidence, so a
failure replays with ``--vsnap-kill-seed`` and the fault's id.

Either outcome of the command is allowed. What is judged:

- the cleanup: after vLLM's own where it has one (``Expect.cleanup``: SIGTERM on the head arm), and in every case
  after the harness's sweep (``results.cleanup.after_sweep``), which must leave nothing: no process, no listener,
  no GPU app, no link remap of this lane's;
- the artifact: for a killed create, its target is absent, or refused by ``inspect`` or ``restore`` with a
  message, or restores and answers the ordinary engine's canaries (``results.killed_artifact``); for a killed
  restore, the follow-up restore of the fault artifact restores and answers vLLM's canary, or is refused with a
  message. A restore that trusts a half-written artifact and serves other answers is a finding.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from vsnap_qual import checks, engine
from vsnap_qual.box import ProcessRow
from vsnap_qual.contract import VLLM_CANARY_PROMPT, WORK, restore_argv
from vsnap_qual.engine import CanaryOutput
from vsnap_qual.injection import kill_leftovers, restore_retrying_taken, settle, wait_engine_gone
from vsnap_qual.steps import vllm_reason

if TYPE_CHECKING:
    from vsnap_qual.faults import FaultLane

#: where a killed create writes (never the fault artifact: that one stays pristine for the other faults)
KILLED_CREATE = f"{WORK}/fault-create"
#: the commands a kill can hit
COMMANDS = ("create", "restore")


#: the share of the shortest measured duration a kill is drawn over: a draw past the command's end tests nothing,
#: and the same command's duration varies from run to run (a restore of 0.55 s took 0.62 s once on 2 cores)
SPAN = 0.95


def draw(seed: int, lane: str, fault_id: str, attempt: int, duration: float) -> tuple[float, float]:
    """The offset (seconds after the command started) and its fraction of the span (:data:`SPAN` of
    ``duration``, the shortest the command took in this lane): one value of a generator seeded by the run's seed,
    the lane, the fault and the attempt, so the same four give the same draw."""
    fraction = random.Random(f"{seed}:{lane}:{fault_id}:{attempt}").random()
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


def criu_action(args: str) -> str | None:
    """``dump`` or ``restore`` where ``args`` runs CRIU (directly, or through a loader that names its binary)."""
    words = args.split()
    for i, word in enumerate(words):
        if word.rsplit("/", 1)[-1] == "criu":
            return next((w for w in words[i + 1 :] if w in ("dump", "restore")), None)
    return None


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
    """The refusal's own message (``steps.vllm_reason``: a known limitation, vLLM's exception line, else its last
    line); empty where it wrote nothing."""
    return vllm_reason(text) if text.strip() else ""


def stop_restored(run: FaultLane, baseline: set[int], ids: set[int]) -> None:
    """Stop what a restore of the harness's own started (everything new since ``baseline``) and wait until the
    captured ``ids`` are free again, as the next restore needs them."""
    kill_leftovers(run.box, baseline, set())
    settle(run.box, baseline, set(), limit=run.config.cleanup_grace)
    wait_engine_gone(run, ids, run.config.timeouts["stop"])


def measure_restore(run: FaultLane) -> float | None:
    """One unfaulted restore of the fault artifact, timed, then stopped: the duration a kill is drawn over when
    this lane has timed none yet (only when the kill faults run alone)."""
    captured = {int(p) for p in run.state.manifest.get("process_tree") or []}
    baseline = {p["pid"] for p in run.box.processes()} - captured
    with run.recorder.engine_wait():
        result = run.box.exec(restore_argv(run.ports["fault"]), run.config.timeouts["restore"])
    stop_restored(run, baseline, captured | set(run.state.captured_tids))
    if result.exit_code != 0:
        return None
    run.state.timed("restore", result.seconds)
    return run.state.timings["restore"]


def judge_killed_create(run: FaultLane) -> dict[str, Any]:
    """What the killed create left at its target: absent; refused by ``inspect``; refused by ``restore``; or
    restored, with the ordinary engine's canaries asked of it. The target is removed afterwards."""
    box, timeout = run.box, run.config.timeouts
    out: dict[str, Any] = {"target": KILLED_CREATE}
    if box.sh(f"test -e {KILLED_CREATE}", 10).exit_code != 0:
        out["outcome"] = "absent"
        return out
    listing = box.sh(f"cd {KILLED_CREATE} && find . -maxdepth 2 | sort | head -40", 30)
    out["left"] = listing.stdout.split()
    try:
        with run.recorder.engine_wait():
            inspected = box.exec(["vllm", "snapshot", "inspect", KILLED_CREATE], timeout["exec"])
        out["inspect_exit"] = inspected.exit_code
        if inspected.exit_code != 0:
            out.update(outcome="refused by inspect", message=refusal_words(f"{inspected.stdout}\n{inspected.stderr}"))
            return out
        try:
            manifest = json.loads(inspected.stdout)
        except ValueError:
            manifest = {}
        captured = {int(p) for p in manifest.get("process_tree") or []}
        baseline = {p["pid"] for p in box.processes()} - captured
        port = run.ports["fault"]
        restored, retried = restore_retrying_taken(run, restore_argv(port, KILLED_CREATE), captured, baseline)
        out.update(retried)
        out["restore_exit"] = restored.exit_code
        if restored.exit_code != 0:
            out.update(outcome="refused by restore", message=refusal_words(f"{restored.stdout}\n{restored.stderr}"))
        else:
            out["outcome"] = "restored"
            out["canaries"] = ask_canaries(run, port)
        stop_restored(run, baseline, captured)
        return out
    finally:
        box.remove_path(KILLED_CREATE)


def ask_canaries(run: FaultLane, port: int) -> dict[str, Any]:
    """The lane's canaries (``FaultLane.canaries``) asked of a server restored from a killed create's artifact,
    each compared with the ordinary engine's answer; where this run has no ordinary reference in the lane (the
    faults run alone), vLLM's canary (the first) compared with the fault artifact's oracle (same engine, model)."""
    ordinary = run.state.ordinary
    manifest = run.state.manifest
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
        got = run.canaries(port)
    except (engine.EngineError, OSError) as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "compared": []}
    tolerance = run.config.logprob_tolerance
    # the ordinary engine was asked the same plan; without it, only vLLM's canary (the first) has an oracle
    compared = [checks.compare_canary(want, answer, tolerance) for want, answer in zip(wanted, got, strict=False)]
    against = "the ordinary engine's answers" if ordinary is not None else "the fault artifact's oracle"
    ok = len(compared) == len(wanted) and all(c["ok"] for c in compared)
    return {"ok": ok, "against": against, "compared": compared}


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


def never_tried(what: str, said: Mapping[str, Any]) -> str:
    """A restore of the harness's own that met a taken captured ID twice: a refusal with a message that says
    nothing of the artifact, so nothing was judged (``injection.restore_retrying_taken``)."""
    return (
        f"{what} was never tried: its restore met a captured ID taken twice ({said.get('ids_taken')}; held at "
        f"the retry by {said.get('held_at_retry') or 'nothing listed'}), so nothing is said of the artifact"
    )
