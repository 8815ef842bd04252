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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from vsnap_qual import procedure
from vsnap_qual.report.assemble import as_dict, as_list
from vsnap_qual.report.validation_table import Check, validation_checks

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


def latest_by_label(steps: list[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The last record of each ``runner/arm/step``: a repeated step counts once, by its last outcome."""
    return {procedure.label(str(s.get("runner")), str(s.get("arm")), str(s.get("step"))): s for s in steps}


def coverage(results: Mapping[str, Any]) -> dict[str, Any]:
    """What the run required and what of it ran: passed, failed, skipped (with why), not reached, left out."""
    wanted = as_dict(results.get("coverage"))
    required = wanted.get("required")
    if isinstance(required, list):
        required = [str(x) for x in required]
    latest = latest_by_label([s for s in as_list(results.get("steps")) if isinstance(s, Mapping)])
    out: dict[str, Any] = {
        "known": isinstance(required, list),
        "runners": [str(x) for x in as_list(wanted.get("runners")) or as_list(results.get("runners"))],
        "arms": [str(x) for x in as_list(wanted.get("arms")) or as_list(results.get("arms"))],
        "overlay": bool(wanted.get("overlay")),
        "faults": [str(x) for x in as_list(wanted.get("faults"))],
        "selection": as_dict(wanted.get("selection")),
        "required": len(required) if isinstance(required, list) else None,
        "passed": [],
        "failed": [],
        "skipped": [],
        "not_reached": [],
        "left_out": [],
    }
    if not isinstance(required, list):
        return out
    selected = wanted.get("selected")
    chosen = {str(x) for x in selected} if isinstance(selected, list) else None
    for label in required:
        record = latest.get(label)
        if chosen is not None and label not in chosen and record is None:
            out["left_out"].append(label)
        elif record is None:
            out["not_reached"].append(label)
        elif record.get("outcome") == "passed":
            out["passed"].append(label)
        elif record.get("outcome") == "failed":
            out["failed"].append(label)
        else:
            out["skipped"].append({"step": label, "message": str(record.get("message") or "")[:300]})
    return out


def coverage_line(cov: Mapping[str, Any]) -> str:
    """One line for the badge: required vs ran, by dimension."""
    if not cov.get("known"):
        return "coverage unknown: the evidence does not record what the run required"
    faults = cov.get("faults") or []
    parts = [
        f"{len(cov['passed'])}/{cov['required']} required steps passed",
        "runners " + (", ".join(cov.get("runners") or []) or "none"),
        "arms " + (", ".join(cov.get("arms") or []) or "none"),
        f"{len(faults)} fault points per lane",
        "overlay " + ("verified per process" if cov.get("overlay") else "not configured"),
    ]
    return "; ".join(parts)


def _narrowing(cov: Mapping[str, Any]) -> str:
    selection = cov.get("selection") or {}
    how = []
    if selection.get("markexpr"):
        how.append(f"-m {selection['markexpr']!r}")
    if selection.get("keyword"):
        how.append(f"-k {selection['keyword']!r}")
    if selection.get("deselect"):
        how.append("--deselect")
    return " ".join(how) or "the selected tests"


def judge(results: Mapping[str, Any], comparisons: Any = None) -> dict[str, Any]:
    """The run's verdict (status, headline, reasons, counts, checks, coverage, harness errors)."""
    from vsnap_qual.report.frames import compare_all

    run = results.get("run") or {}
    complete = bool(run.get("complete"))
    latest = latest_by_label([s for s in as_list(results.get("steps")) if isinstance(s, Mapping)])
    counts = Counter(str(s.get("outcome")) for s in latest.values())
    failed = [label for label, s in latest.items() if s.get("outcome") == "failed"]
    errors = [e for e in as_list(results.get("harness_errors")) if isinstance(e, Mapping)]
    checks: list[Check] = []
    check_error = None
    try:
        checks = validation_checks(results, comparisons if comparisons is not None else compare_all(results))
    except Exception as exc:  # odd evidence: the verdict says so instead of losing the run
        check_error = f"the checks could not be evaluated ({type(exc).__name__}: {exc})"
    cov = coverage(results)
    has_session = bool((results.get("evidence") or {}).get("has_session", True))

    reasons: list[str] = []
    fail = False
    if failed:
        reasons.append(f"{len(failed)} step(s) failed: {_names(failed)}")
        fail = True
    for error in errors:
        reasons.append(
            f"harness error ({error.get('phase')}) in {error.get('nodeid') or 'the session'}: {error.get('message')}"
        )
        fail = True
    bad_checks = [c.name for c in checks if c.status == "FAIL"]
    for name in bad_checks:
        reasons.append(f"check failed: {name}")
        fail = True
    if check_error:
        reasons.append(check_error)
        fail = True
    if not complete:
        last = run.get("last_step")
        where = f"last step recorded: {last['label']} ({last['outcome']})" if last else "no step was recorded"
        reasons.append(f"the run did not finish (no session_end record); {where}")
    if not has_session:
        reasons.append("the evidence has no session record")
        fail = fail or complete
    exitstatus = run.get("exitstatus")
    if complete and exitstatus not in (0, None):
        if not fail:
            reasons.append(f"pytest exited with status {exitstatus} (no step failure or harness error recorded)")
        fail = True
    if complete and not counts.get("passed"):
        reasons.append("no step passed")
        fail = True

    gaps = [*(s["step"] for s in cov["skipped"]), *cov["not_reached"]]
    narrowed = bool(cov["left_out"])
    if fail:
        status = "fail"
    elif not complete:
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
    if narrowed and status in ("pass", "partial"):
        left = f"left out by {_narrowing(cov)}: {_grouped(cov['left_out'])}"
        headline += f" (narrowed: {_grouped(cov['left_out'])} left out)"
        reasons.append(left)
    return {
        "status": status,
        "headline": headline,
        "complete": complete,
        "reasons": reasons,
        "counts": {k: counts.get(k, 0) for k in ("passed", "failed", "skipped")},
        "failed": failed,
        "narrowed": narrowed,
        "coverage": cov,
        "coverage_line": coverage_line(cov),
        "harness_errors": errors,
        "checks": [
            {**asdict(c), "items": [{"id": i, "ok": ok} for i, ok in c.items], "status": c.status} for c in checks
        ],
    }


def recorded_checks(results: Mapping[str, Any]) -> list[Check]:
    """The validation checks as the verdict recorded them (never evaluated again)."""
    fields = set(Check.__dataclass_fields__)
    out = []
    for entry in (results.get("verdict") or {}).get("checks") or []:
        if isinstance(entry, Mapping):
            values = {k: v for k, v in entry.items() if k in fields}
            values["details"] = tuple(values.get("details") or ())
            values["items"] = tuple(
                (str(i.get("id")), i.get("ok")) for i in values.get("items") or () if isinstance(i, Mapping)
            )
            out.append(Check(**values))
    return out
