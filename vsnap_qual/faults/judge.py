"""The judgement of one fault step, pure: every way what the faulted action did (:class:`.injector.Observation`)
differs from what this arm's expectation says (``procedure.Expect``), in words a reviewer can act on; the records
the step's evidence keeps of both; and what the command said (:func:`observe`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from vsnap_qual.box import ExecResult
from vsnap_qual.contract import ARTIFACT
from vsnap_qual.faults.injector import Injector, Observation
from vsnap_qual.faults.lane import FaultLane
from vsnap_qual.faults.tools import fired_records, never_tried
from vsnap_qual.model import FaultExpectation, FaultObservation, FaultResults
from vsnap_qual.procedure import ANY, Expect, Fault
from vsnap_qual.vllm_words import EXCEPTION_LINE


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


def observe(lane: FaultLane, obs: Observation, result: ExecResult) -> None:
    """What the faulted command did: its exit, stderr, ``error.json`` and the probe's fired records."""
    obs.exit_code = result.exit_code
    obs.stderr_tail = result.tail(40)
    obs.error_lines = [line for line in result.stderr.splitlines() if EXCEPTION_LINE.match(line)][-20:]
    obs.seconds = round(result.seconds, 3)
    text = lane.box.read_text(f"{ARTIFACT}/error.json")
    if text.strip():
        try:
            obs.error_json = json.loads(text)
            phase = obs.error_json.get("phase") if isinstance(obs.error_json, dict) else None
            obs.phase = None if phase is None else str(phase)
        except ValueError:
            obs.error_json = {"unparsable": text[:500]}
    obs.fired_records = fired_records(lane.control)


def judge(fault: Fault, expect: Expect, obs: Observation, results: FaultResults, injector: Injector) -> list[str]:
    """Every way the observation differs from the expectation, in words a reviewer can act on (pure: only the
    kind's judging rules are read of its injector, ``FaultCatalogue.injector_for(fault)``)."""
    problems = []
    kind = injector
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
    # a refusal of a group whose follow-up restore is its group's (``faults.group``): judged in that step
    deferred = not follow and "deferred_to" in (results.get("group_followup") or {})
    if expect.followup_restore and not deferred and not (follow.get("exit_code") == 0 and follow.get("canary_ok")):
        still = (follow.get("captured_ids_wait") or {}).get("still_held")
        if follow.get("consumed"):
            pass  # not this fault's: the artifact is not self-contained (the check "self-contained": one finding)
        elif still:  # the artifact was never tried: a captured PID never came free
            problems.append(
                f"the follow-up restore could not be tried fairly: captured PIDs still held after the fault's "
                f"tree was killed ({'; '.join(still)})"
            )
        elif follow.get("ids_taken"):
            problems.append(never_tried("the follow-up restore's artifact", follow))
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


def _injection_evidence(results: FaultResults) -> str:
    injected = results.get("injected") or {}
    return ", ".join(f"{k}={v}" for k, v in injected.items()) or "no injection evidence"


# ---- the one sequence ---------------------------------------------------------------------------------------
