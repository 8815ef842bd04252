"""The verdict: one function, :func:`judge`, run once when ``results.json`` is assembled and recorded there.

Every view (HTML, Markdown, terminal, run diff) renders the recorded verdict and its recorded checks; none
judges again. The verdict states its coverage: what a full qualification of the configuration requires
(runners, arms, lifecycle steps, fault points, overlay) and what of it ran.

Statuses:

- ``pass``: every required step passed, every judged check held, no harness error. When the user narrowed the
  selection (``-k``, ``-m``, ``--deselect``, a file or node id), the headline says what was left out:
  ``PASS (narrowed: …)``.
- ``partial``: nothing failed, but a required step was skipped (an environment limitation, a prerequisite) or
  never reached: not a qualification.
- ``fail``: a step or a judged check failed, a harness error (collection, setup, teardown) happened, pytest
  exited non-zero, or no step passed.
- ``incomplete``: the run was killed (no ``session_end``) before anything failed.
- ``interrupted``: the run was stopped (Ctrl-C, SIGTERM: its ``session_end`` says so) before anything failed; the
  headline names the step that was running. A failure found before the stop stays a FAIL (``FAIL (interrupted)``).
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from collections.abc import Mapping, Sequence

from vsnap_qual import model, procedure, vllm_words
from vsnap_qual.report import figures
from vsnap_qual.report import known as known_findings
from vsnap_qual.report.frames import Comparisons
from vsnap_qual.report.kinds import fault_kind
from vsnap_qual.report.validation_table import validation_checks

_SHOWN = 10


def _names(labels: list[str]) -> str:
    shown = ", ".join(labels[:_SHOWN])
    return shown + (f" and {len(labels) - _SHOWN} more" if len(labels) > _SHOWN else "")


def _grouped(labels: list[str]) -> str:
    """``fault steps ×24, overlay ×1``: what a list of step labels amounts to."""
    counts: Counter[str] = Counter()
    for label in labels:
        name = label.rsplit("/", 1)[-1]
        counts["fault steps" if procedure.is_fault_step(name) or name == procedure.FAULT_ARTIFACT else name] += 1
    return ", ".join(f"{name} ×{n}" for name, n in counts.items())


def latest_by_label(steps: list[model.Step]) -> dict[str, model.Step]:
    """The last record of each ``runner/arm/step``: a repeated step counts once, by its last outcome."""
    return {procedure.label(s["runner"], s["arm"], s["step"]): s for s in steps}


def coverage(run: model.RunEvidence) -> model.VerdictCoverage:
    """What the run required and what of it ran: passed, failed, skipped (with why), not reached, left out."""
    wanted = run["coverage"]
    required = wanted.get("required")
    latest = latest_by_label(run["steps"])
    out = model.VerdictCoverage(
        known=required is not None,
        runners=list(wanted.get("runners") or run["runners"]),
        arms=list(wanted.get("arms") or run["arms"]),
        overlay=bool(wanted.get("overlay")),
        faults=list(wanted.get("faults", [])),
        selection=wanted.get("selection") or model.NoSelection(),
        required=len(required) if required is not None else None,
        passed=[],
        failed=[],
        skipped=[],
        not_reached=[],
        left_out=[],
    )
    if "observe_s" in wanted:
        out["observe_s"] = wanted["observe_s"]
    if "request_shapes" in wanted:
        out["request_shapes"] = list(wanted["request_shapes"])
    if required is None:
        return out
    selected = wanted.get("selected")
    chosen = set(selected) if selected is not None else None
    for label in required:
        record = latest.get(label)
        if chosen is not None and label not in chosen and record is None:
            out["left_out"].append(label)
        elif record is None:
            out["not_reached"].append(label)
        elif record["outcome"] == "passed":
            out["passed"].append(label)
        elif record["outcome"] == "failed":
            out["failed"].append(label)
        elif record["message"].startswith(model.NOT_APPLICABLE_PREFIX):
            out.setdefault("not_applicable", []).append(model.SkippedStep(step=label, message=record["message"][:300]))
        else:
            out["skipped"].append(model.SkippedStep(step=label, message=record["message"][:300]))
    return out


def coverage_line(cov: model.VerdictCoverage, kinds: Mapping[str, str | None] | None = None, once: str = "") -> str:
    """One line for the badge: required vs ran, by dimension; ``kinds``: each fault's kind as the run recorded it
    (:func:`fault_kinds`; a fault not in it: :func:`report.kinds.fault_kind` of its id alone); ``once``: where the
    kinds refused before any engine starts ran (:func:`once_part`)."""
    if not cov["known"]:
        return "coverage unknown: the evidence does not record what the run required"
    na = len(cov.get("not_applicable") or [])
    required = (cov["required"] or 0) - na
    parts = [
        f"{len(cov['passed'])}/{required} required steps passed" + (f" ({na} not applicable)" if na else ""),
        "runners " + (", ".join(cov["runners"]) or "none"),
        "arms " + (", ".join(cov["arms"]) or "none"),
        f"{len(cov['faults'])} fault points per lane" + _identity_part(cov["faults"], kinds or {}),
        *([once] if once else []),
        "overlay " + ("verified per process" if cov["overlay"] else "not configured"),
    ]
    alone = _alone_part(cov)
    if alone:
        parts.append(alone)
    if "observe_s" in cov:
        parts.append(f"each restored server watched {cov['observe_s']:g} s after its restore")
    if "request_shapes" in cov:
        parts.append("request shapes " + (", ".join(cov["request_shapes"]) or "none"))
    return "; ".join(parts)


def _identity_part(faults: list[str], kinds: Mapping[str, str | None]) -> str:
    """The identity drifts and the random kills among the fault points, said as such (each drift changes one field
    of the manifest; each kill signals create or restore at a seeded moment, ``kill-create.7`` a chaos repeat)."""
    kind = {f: kinds[f] if f in kinds else fault_kind(f) for f in faults}
    drifts = [f for f in faults if kind[f] == "identity"]
    kills = [f for f in faults if kind[f] == "kill"]
    said = [f"{len(drifts)} of them identity drifts"] if drifts else []
    said += [f"{len(kills)} random kills"] if kills else []
    return f" ({', '.join(said)})" if said else ""


def once_part(steps: list[model.Step]) -> str:
    """Where the faults of the kinds refused before any engine starts ran, from their records' ``runs_once``
    (issue 45): ``identity, pid, manifest (10 faults) on v1 only, not on v2: runs once per image and arm: …``; ""
    where none ran once."""
    kinds: dict[str, None] = {}
    faults: dict[str, None] = {}
    ran: dict[str, None] = {}
    not_run: dict[str, None] = {}
    for step in latest_by_label(steps).values():
        record = step["results"].get("runs_once") if procedure.is_fault_step(step["step"]) else None
        if not isinstance(record, dict):
            continue
        fault = step["step"].removeprefix(procedure.FAULT_PREFIX)
        kinds[fault_kind(fault, step["results"]) or "?"] = None
        faults[fault] = None
        if record.get("ran_on"):
            not_run[step["runner"]] = None
        elif step["outcome"] != "skipped":
            ran[step["runner"]] = None
    if not faults:
        return ""
    said = f"{', '.join(kinds)} ({len(faults)} faults)"
    if ran:
        said += f" on {', '.join(ran)}" + (" only" if not_run else "")
    if not_run:
        said += f"{',' if ran else ''} not on {', '.join(not_run)}"
    return f"{said}: {model.RUNS_ONCE}"


def fault_kinds(steps: list[model.Step]) -> dict[str, str | None]:
    """Each fault's kind, by its id, as its steps recorded it (any lane's; ``report.kinds.fault_kind``)."""
    kinds: dict[str, str | None] = {}
    for step in steps:
        if procedure.is_fault_step(step["step"]):
            fault = step["step"].removeprefix(procedure.FAULT_PREFIX)
            kinds[fault] = kinds.get(fault) or fault_kind(fault, step["results"])
    return kinds


def _alone_part(cov: model.VerdictCoverage) -> str:
    """The restores of the artifact alone in a fresh box: how many of those required passed (none required: "")."""
    label = "/fresh-box"
    passed = [p for p in cov["passed"] if p.endswith(label)]
    others = [p for p in [*cov["failed"], *cov["not_reached"], *cov["left_out"]] if p.endswith(label)]
    others += [s["step"] for s in cov["skipped"] if s["step"].endswith(label)]
    if not passed and not others:
        return ""
    return f"{len(passed)}/{len(passed) + len(others)} restores in a fresh box (the artifact alone)"


def _narrowing(cov: model.VerdictCoverage) -> str:
    selection = cov["selection"]
    how = []
    if selection.get("markexpr"):
        how.append(f"-m {selection.get('markexpr')!r}")
    if selection.get("keyword"):
        how.append(f"-k {selection.get('keyword')!r}")
    if selection.get("deselect"):
        how.append("--deselect")
    return " ".join(how) or "the selected tests"


_VARYING = re.compile(r"[0-9a-f]{6,}|\d+")


def _failure_words(failed: list[str], latest: dict[str, model.Step]) -> list[str]:
    """Each distinct failure once, in the failed step's own words (its message's first line: vLLM's, CRIU's or
    the check's), with the steps that failed so: the same defect on several lanes is one line, not one a lane.
    Messages that differ only in IDs and numbers (a segment's name, a PID) are the same failure."""
    groups: dict[str, list[str]] = {}
    words: dict[str, str] = {}
    for label in failed:
        first = vllm_words.short_command((latest[label]["message"] or "no message recorded").splitlines()[0])
        key = _VARYING.sub("#", first)
        groups.setdefault(key, []).append(label)
        words.setdefault(key, first if len(first) <= 600 else first[:599] + "…")
    return [f"{_names(labels)}: {words[key]}" for key, labels in groups.items()]


def judge(run: model.RunEvidence, comparisons: Comparisons | None, *, failure: str = "") -> model.Verdict:
    """The run's verdict (status, headline, reasons, counts, checks, coverage, harness errors), from the
    evidence and its comparisons (``frames.compare_all``, computed once and shared with the views; None, with
    the ``failure``, when they could not be computed)."""
    info = run["run"]
    complete = info["complete"]
    latest = latest_by_label(run["steps"])
    counts = Counter(s["outcome"] for s in latest.values())
    failed = [label for label, s in latest.items() if s["outcome"] == "failed"]
    errors = list(run["harness_errors"])
    checks: list[model.Check] = []
    check_error = None
    if comparisons is None:
        check_error = f"the checks could not be evaluated ({failure or 'no comparisons'})"
    else:
        try:
            checks = validation_checks(run, comparisons)
        except Exception as exc:  # odd evidence: the verdict says so instead of losing the run
            check_error = f"the checks could not be evaluated ({type(exc).__name__}: {exc})"
    cov = coverage(run)
    has_session = run["evidence"]["has_session"]

    entries = _known_entries(info["options"])
    matched = None
    if entries:
        found = known_findings.failures({label: latest[label]["message"] for label in failed}, checks)
        matched = known_findings.match(found, entries, _run_date(info))
    known = matched.known if matched else {}
    new_failed = [label for label in failed if label not in known]

    reasons: list[str] = []
    fail = False
    if new_failed:
        reasons.append(f"{len(new_failed)} step(s) failed: {_names(new_failed)}")
        reasons.extend(_failure_words(new_failed, latest))
        fail = True
    for error in errors:
        reasons.append(f"harness error ({error['phase']}) in {error['nodeid'] or 'the session'}: {error['message']}")
        fail = True
    for bad in (c for c in checks if c["status"] == "FAIL" and f"check:{c['id']}" not in known):
        said = "; ".join([bad["result"], *bad["details"][:2]])
        reasons.append(f"check failed: {bad['name']}: {said}" if said else f"check failed: {bad['name']}")
        fail = True
    known_steps = [label for label in failed if label in known]
    if matched:
        if known_steps:
            reasons.append(
                f"{len(known_steps)} step(s) failed on known findings (shown as KNOWN, not failing the verdict by "
                f"themselves): {_names(known_steps)}"
            )
        reasons.extend(outcome["said"] for outcome in matched.outcomes)
    if check_error:
        reasons.append(check_error)
        fail = True
    if not complete:
        last = info["last_step"]
        where = f"last step recorded: {last['label']} ({last['outcome']})" if last else "no step was recorded"
        reasons.append(f"the run did not finish (no session_end record); {where}")
    if not has_session:
        reasons.append("the evidence has no session record")
        fail = fail or complete
    merge = info.get("merge")
    shard_gaps = shard_problems(merge) if merge else []
    reasons.extend(shard_gaps)
    setups = setup_differences(merge) if merge else []
    reasons.extend(setups)
    exitstatus = info["exitstatus"]
    interrupted = info.get("interrupted")
    stopped = [s["step"] for s in cov["skipped"] if s["message"].startswith(model.INTERRUPTED_PREFIX)]
    if interrupted:
        during = f"while {_names(stopped)} ran" if stopped else "between steps"
        required = cov["required"] if cov["required"] is not None else "?"
        reasons.insert(
            0,
            f"the run was interrupted ({interrupted}) {during}; {len(cov['passed'])} of {required} required steps "
            "passed before it: not a qualification",
        )
    elif complete and exitstatus not in (0, None) and not _known_exit(exitstatus, known_steps, info):
        if not fail:
            reasons.append(f"pytest exited with status {exitstatus} (no step failure or harness error recorded)")
        fail = True
    if complete and not counts.get("passed") and not interrupted and not shard_gaps:
        reasons.append("no step passed")
        fail = True

    gaps = [*(s["step"] for s in cov["skipped"]), *cov["not_reached"]]
    narrowed = bool(cov["left_out"])
    status: model.Status
    if fail:
        status = "fail"
    elif interrupted:
        status = "interrupted"
    elif not complete or shard_gaps:
        status = "incomplete"
    elif not cov["known"] or gaps:
        status = "partial"
        if not cov["known"]:
            reasons.append("the evidence does not record what a full qualification requires")
        if cov["skipped"]:
            shown = [f"{s['step']} ({s['message']})" for s in cov["skipped"]]
            reasons.append(f"{len(cov['skipped'])} required step(s) skipped: {_names(shown)}")
        if cov["not_reached"]:
            reasons.append(f"{len(cov['not_reached'])} required step(s) not reached: {_names(cov['not_reached'])}")
    else:
        status = "pass"
    headline = status.upper()
    if status == "fail" and not complete:
        headline = "FAIL (incomplete run)"
    elif status == "fail" and interrupted:
        headline = "FAIL (interrupted)"
    elif status == "interrupted":
        headline = f"INTERRUPTED ({'during ' + _names(stopped) if stopped else 'between steps'})"
    if status == "pass" and known:
        titles = (
            {o["finding"]["title"] or o["finding"]["id"] for o in matched.outcomes if o["state"] == "known"}
            if matched
            else set()
        )
        headline += f" ({len(titles)} known finding{'s' if len(titles) != 1 else ''})"
    if shard_gaps and status in ("fail", "incomplete"):
        headline += f" ({_shards_said(merge)})" if status == "incomplete" else f" (incomplete: {_shards_said(merge)})"
    if setups and merge and status in ("pass", "partial"):
        headline += " (setups differ between shards: " + ", ".join(d["fact"] for d in merge["setups"]) + ")"
    smoke = bool(info["options"].get("cpu_smoke"))
    if smoke:
        headline += " (CPU smoke)"  # never a bare PASS: nothing of a GPU was qualified
    if narrowed and status in ("pass", "partial"):
        left = f"left out by {_narrowing(cov)}: {_grouped(cov['left_out'])}"
        headline += f" (narrowed: {_grouped(cov['left_out'])} left out)"
        reasons.append(left)
    verdict = model.Verdict(
        status=status,
        headline=headline,
        complete=complete and not shard_gaps,
        reasons=reasons,
        counts=model.Counts(passed=counts["passed"], failed=counts["failed"], skipped=counts["skipped"]),
        failed=failed,
        narrowed=narrowed,
        coverage=cov,
        coverage_line=coverage_line(cov, fault_kinds(run["steps"]), once_part(run["steps"])),
        harness_errors=errors,
        checks=checks,
        qualified=qualified(run, smoke, cov.get("not_applicable") or []),
        target=target(run),
    )
    if matched is not None:
        verdict["known"] = matched.outcomes
        verdict["known_failures"] = known
    return verdict


def _known_entries(options: Mapping[str, object]) -> list[model.KnownFinding]:
    """The known-findings entries the run was given (``--vsnap-known-findings``, recorded in its options)."""
    value = options.get("known_findings")
    if not isinstance(value, list):
        return []
    return [
        model.KnownFinding(
            id=str(e["id"]), words=str(e["words"]), link=str(e["link"]), expires=str(e["expires"]),
            title=str(e.get("title") or ""),
        )
        for e in value
        if isinstance(e, dict) and {"id", "words", "link", "expires"} <= set(e)
    ]  # fmt: skip


def _run_date(info: model.RunInfo) -> dt.date:
    """The day the run started (UTC), against which an entry's expiry is read; today when it is not recorded."""
    stamp = info["started"] or info["ended"] or ""
    try:
        return dt.date.fromisoformat(stamp[:10])
    except ValueError:
        return dt.datetime.now(dt.timezone.utc).date()


def _known_exit(exitstatus: int, known_steps: list[str], info: model.RunInfo) -> bool:
    """pytest's exit 1 that the known findings' failed steps explain: as many failed tests as known failed steps."""
    if exitstatus != 1 or not known_steps:
        return False
    failed_tests = (info.get("pytest_counts") or {}).get("failed")
    return failed_tests is None or failed_tests <= len(known_steps)


_SHARD_WORDS = {
    "missing": "is missing (no evidence of it was given to the merge)",
    "duplicate": "was given twice (the second copy was left out)",
    "foreign": "belongs to another matrix (its evidence was left out)",
    "interrupted": "did not finish (stopped or killed before its end)",
}


def _bad_shards(merge: model.MergeInfo) -> list[model.MergedShard]:
    return [shard for shard in merge["shards"] if shard["status"] in _SHARD_WORDS]


def shard_problems(merge: model.MergeInfo) -> list[str]:
    """A merge's shards that make its verdict INCOMPLETE, each with the lanes it owned (issue 46)."""
    out = []
    for shard in _bad_shards(merge):
        lanes = ", ".join(shard["lanes"]) or "no lane"
        detail = f" ({shard['message']})" if shard["message"] else ""
        out.append(
            f"shard {shard['k']}/{merge['n']} {_SHARD_WORDS[shard['status']]}{detail}: its lanes {lanes} are not "
            "qualified by this merge"
        )
    return out


def _shards_said(merge: model.MergeInfo | None) -> str:
    """The headline's words for the shards that make a merge incomplete: ``shard 3/4 missing: lanes v2-head``."""
    if not merge:
        return ""
    said = []
    for shard in _bad_shards(merge):
        said.append(f"shard {shard['k']}/{merge['n']} {shard['status']}: lanes {', '.join(shard['lanes']) or 'none'}")
    return "; ".join(said)


def setup_differences(merge: model.MergeInfo) -> list[str]:
    """The setups that differ between a merge's shards, in the verdict's words: each fact, each value's lanes."""
    out = []
    for diff in merge["setups"]:
        values = "; ".join(f"{value} on {', '.join(lanes)}" for value, lanes in diff["values"].items())
        out.append(f"setups differ between shards: {diff['fact']}: {values}")
    return out


def _targets(run: model.RunEvidence) -> tuple[list[str], list[str], list[str]]:
    """The engines the lanes' targets name (their ``ai.vsnap.engine`` label: an image's, or a Python's vllm
    distribution's), what they simulate (``ai.vsnap.simulated``, only where the lane had no GPU) and the vLLM
    versions the lanes ran, each once."""
    engines: dict[str, None] = {}
    simulated: dict[str, None] = {}
    vllm: dict[str, None] = {}
    for lane in run["lanes"]:
        env = lane["environment"]
        if env is None:
            continue
        labels = env["image"].get("labels") or {}
        if labels.get("ai.vsnap.engine"):
            engines[labels["ai.vsnap.engine"]] = None
        if labels.get("ai.vsnap.simulated") and not env["gpu"]:  # where there is a GPU, the target uses it
            simulated[labels["ai.vsnap.simulated"]] = None
        version = env["versions"].get("vllm")
        if version:
            vllm[f"{lane['arm']} arm vLLM {version}"] = None
    return list(engines), list(simulated), list(vllm)


def target(run: model.RunEvidence) -> str:
    """What was qualified in one phrase, shown beside the verdict: ``vsnap reference engine, … (not vLLM); simulated:
    gpu`` or ``head arm vLLM 0.32.0, base arm vLLM 0.31.0``; empty when no lane recorded its environment."""
    engines, simulated, vllm = _targets(run)
    parts = ["; ".join(engines) or ", ".join(vllm)]
    if simulated:
        parts.append("simulated: " + ", ".join(simulated))
    return "; ".join(p for p in parts if p)


def qualified(run: model.RunEvidence, smoke: bool, not_applicable: list[model.SkippedStep]) -> list[str]:
    """What was qualified, in plain words: the engine and what is simulated, from each lane's image labels
    (``ai.vsnap.engine``, ``ai.vsnap.simulated``), the vLLM the lanes ran, CPU smoke mode, and the runners (lanes)
    the platform does not have, with vLLM's words."""
    engines, simulated, vllm = _targets(run)
    lines = [f"engine: {e}" for e in engines]
    if not engines and vllm:
        lines.append("engine: " + ", ".join(vllm))
    if smoke:
        lines.append(
            "CPU smoke mode: real vLLM's CPU build, with sleep mode declared on vLLM's own CPU platform by vsnap-qual "
            "(its sleep and wake are no-ops there). Qualified: the snapshot CLI, CRIU's dump and restore of the real "
            "engine tree, the manifest and identity checks, outputs, parameters and KV capacity after restore, the "
            "injected failures vLLM can express. Not qualified: GPU memory release and restore (sleep/wake), CUDA "
            "checkpoint, anything on a GPU."
        )
    lines += [
        f"simulated: {s} (the lanes had none; the target's stand-in, as its ai.vsnap.simulated label says)"
        for s in simulated
    ]
    # one line per reason, naming every lane it applies to: the engine's words said once (whole here: a report cuts
    # them, shown_qualified)
    reasons: dict[str, list[str]] = {}
    for skipped in not_applicable:
        if model.RUNS_ONCE in skipped["message"]:  # one fault run on another runner's lane: the coverage line says so
            continue
        why = skipped["message"].removeprefix(model.NOT_APPLICABLE_PREFIX)
        lane = skipped["step"].rsplit("/", 1)[0]
        if not any(lane in named for named in reasons.values()):
            reasons.setdefault(why, []).append(lane)
    lines += [f"not applicable: {_lanes(lanes)}, {why}" for why, lanes in reasons.items()]
    return lines


def _lanes(lanes: Sequence[str]) -> str:
    return f"lane{'s' if len(lanes) > 1 else ''} {', '.join(lanes)}"


_NOT_APPLICABLE_LINE = re.compile(r"not applicable: lanes? ((?:[\w.-]+/[\w.-]+)(?:, [\w.-]+/[\w.-]+)*), (.*)", re.S)


def shown_qualified(lines: Sequence[str]) -> list[str]:
    """:func:`qualified`'s lines as a report page or summary shows them: the not-applicable lanes one line per
    reason (also for a run recorded before they were grouped), the engine's words cut once (``figures.quote``);
    ``results.json`` and the terminal keep them whole."""
    shown: list[str] = []
    reasons: dict[str, list[str]] = {}
    for line in lines:
        found = _NOT_APPLICABLE_LINE.fullmatch(line)
        if found is None:
            shown.append(line)
        else:
            reasons.setdefault(found.group(2), []).extend(found.group(1).split(", "))
    return shown + [f"not applicable: {_lanes(lanes)}, {figures.quote(why)}" for why, lanes in reasons.items()]


def with_known_findings(
    results: model.Results, entries: Sequence[model.KnownFinding], comparisons: Comparisons | None
) -> model.Results:
    """``results`` judged again with these known-findings entries (``vsnap-qual report --vsnap-known-findings``):
    the entries replace those recorded in the run's options, and the verdict is the one they give."""
    from vsnap_qual.report.frames import compare_all

    options = {**results["run"]["options"], "known_findings": [dict(e) for e in entries]}
    run: model.RunInfo = {**results["run"], "options": options}
    again: model.Results = {**results, "run": run}
    try:
        verdict = judge(again, comparisons or compare_all(again))
    except Exception as exc:  # odd evidence: the verdict says so, as at assembly
        verdict = judge(again, None, failure=f"{type(exc).__name__}: {exc}")
    return {**again, "verdict": verdict}
