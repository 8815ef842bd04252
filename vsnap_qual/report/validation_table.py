"""The validation table (check | result), shaped like the one a maintainer writes into a PR.

Evaluated once, by the verdict (``verdict.judge``), from the judgements the steps recorded; the HTML verdict,
``summary.md`` and the terminal summary show the recorded rows (``verdict.recorded_checks``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from vsnap_qual import overlay, procedure
from vsnap_qual.report import figures
from vsnap_qual.report.assemble import step_label
from vsnap_qual.report.frames import Comparisons, latest_steps, records

_LIFECYCLE = procedure.SNAPSHOT_LIFECYCLE
_NAMES_SHOWN = 10


@dataclass(frozen=True)
class Check:
    """One line of the validation table. ``ok`` is None when the check did not run.

    ``id`` is stable across runs (``canary.single-token``); ``name`` is the sentence a reviewer reads, and may
    carry the run's figures (``(2 restores each)``)."""

    name: str
    ok: bool | None
    result: str
    details: tuple[str, ...] = ()
    #: A measurement shown for review, not judged pass/fail (KV capacity, ready times).
    informational: bool = False
    #: A one-word name for narrow views (the terminal summary).
    short: str = ""
    #: The run stopped before this check could finish (``ok`` is None).
    pending: bool = False
    #: The stable id (``CHECK_IDS``): what tools and run diffs key on.
    id: str = ""
    #: The recorded judgements the row sums up, each with a stable id (``digests.v1.head.restore-1``) and its
    #: ``ok`` (None: not judged, e.g. a skipped step).
    items: tuple[tuple[str, bool | None], ...] = ()

    @property
    def status(self) -> str:
        """``pass``, ``FAIL``, ``info``, ``incomplete`` or ``not run``."""
        if self.ok is None:
            return "incomplete" if self.pending else "not run"
        if self.informational:
            return "info"
        return "pass" if self.ok else "FAIL"


def _names(names: list[str], limit: int = _NAMES_SHOWN) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" … and {len(names) - limit} more" if len(names) > limit else "")


def _all_ok(values: list[bool | None]) -> bool | None:
    """False if any is False, else None if any is unknown (or there are none), else True."""
    if False in values:
        return False
    return None if not values or None in values else True


#: Each row's stable id → its one-word short name (the terminal summary), in the order a reviewer reads them.
#: An id never changes with the data; a new check gets a new id.
CHECK_IDS: dict[str, str] = {
    "lifecycle": "lifecycle",
    "overlay": "overlay",
    "digests": "digests",
    "canary.single-token": "canary",
    "canary.multi-token": "multi-token",
    "faults": "faults",
    "kv": "KV",
    "liveness": "liveness",
    "ready": "ready",
    "cleanup": "cleanup",
}


def validation_checks(results: Mapping[str, Any], comparisons: Comparisons) -> list[Check]:
    """The rows of the validation table, in the order a reviewer reads them."""
    rows = {
        "lifecycle": lambda: _lifecycle(results),
        "overlay": lambda: _overlay(comparisons),
        "digests": lambda: _digests(comparisons),
        "canary.single-token": lambda: _canary(comparisons),
        "canary.multi-token": lambda: _multi_token(comparisons),
        "faults": lambda: _faults(comparisons),
        "kv": lambda: _kv(results, comparisons),
        "liveness": lambda: _liveness(results),
        "ready": lambda: _readiness(comparisons),
        "cleanup": lambda: _cleanup(comparisons),
    }
    return [
        replace(rows[check_id](), id=check_id, short=short, items=check_items(check_id, results))
        for check_id, short in CHECK_IDS.items()
    ]


def _judged_audit(audit: Any) -> bool:
    """A recorded cleanup audit that counts (fault steps record some they do not judge)."""
    return isinstance(audit, dict) and bool(audit) and bool(audit.get("judged", True))


def _item_id(*parts: str) -> str:
    return ".".join(parts)


def check_items(check_id: str, results: Mapping[str, Any]) -> tuple[tuple[str, bool | None], ...]:
    """The recorded judgements behind one row, by stable id ``<check>.<runner>.<arm>.<step or subject>``, in
    ``results.json``'s step order. Only what the steps recorded; nothing is judged here."""
    items: list[tuple[str, bool | None]] = []
    outcome = {"passed": True, "failed": False}
    for (runner, arm, step), record in latest_steps(results).items():
        res = _step_results(record)
        where = (check_id, runner, arm)
        if check_id == "lifecycle" and step in _LIFECYCLE:
            items.append((_item_id(*where, step), outcome.get(str(record.get("outcome")))))
        elif check_id == "faults" and procedure.is_fault_step(step):
            items.append(
                (_item_id(*where, step.removeprefix(procedure.FAULT_PREFIX)), outcome.get(str(record.get("outcome"))))
            )
        elif check_id == "overlay" and step == procedure.OVERLAY:
            for entry in _as_list(res.get("files")):
                if isinstance(entry, dict):
                    items.append((_item_id(*where, str(entry.get("module"))), entry.get("ok")))
        elif check_id == "digests" and isinstance(res.get("digest_compare"), dict):
            items.append((_item_id(*where, step), res["digest_compare"].get("ok")))
        elif check_id.startswith("canary.") and isinstance(res.get("canary_compare"), list):
            multi = check_id == "canary.multi-token"
            rows = [
                c for c in res["canary_compare"] if isinstance(c, dict) and (int(c.get("tokens") or 1) > 1) == multi
            ]
            if rows:
                items.append((_item_id(*where, step), all(bool(c.get("ok")) for c in rows)))
        elif check_id == "kv" and step in procedure.RESTORES and isinstance(res.get("kv_judgement"), dict):
            items.append((_item_id(*where, step), res["kv_judgement"].get("ok")))
        elif check_id == "liveness" and step in procedure.RESTORES and isinstance(res.get("soak"), dict):
            items.append((_item_id(*where, step), res["soak"].get("alive")))
        elif check_id == "cleanup" and _judged_audit(res.get("cleanup")):
            items.append((_item_id(*where, step), res["cleanup"].get("ok")))
    return tuple(items)


def _lifecycle(results: Mapping[str, Any]) -> Check:
    """The snapshot lifecycle's recorded outcomes per runner. A step left out, skipped or not reached is not a
    failure here: the verdict's coverage says what did not run (PARTIAL, or a narrowed PASS)."""
    latest = latest_steps(results)
    per_runner: list[str] = []
    bad: list[str] = []
    oks: list[bool | None] = []
    complete = bool((results.get("run") or {}).get("complete"))
    for runner in results.get("runners") or []:
        steps = [s for (r, _a, name), s in latest.items() if r == runner and name in _LIFECYCLE]
        if not steps:
            per_runner.append(f"{runner} not reached")
            oks.append(None)
            continue
        failed = [step_label(s) for s in steps if s.get("outcome") == "failed"]
        passed = [s for s in steps if s.get("outcome") == "passed"]
        bad.extend(failed)
        ok: bool | None = False if failed else (True if len(passed) == len(steps) else None)
        oks.append(ok)
        arms = [a for a in results.get("arms") or [] if any(s.get("arm") == a for s in steps)]
        text = " FAIL" if failed else ("" if ok else f" {len(passed)}/{len(steps)} passed")
        per_runner.append(f"{runner}{text} ({', '.join(arms)})")
    details = (f"failed: {_names(bad)}",) if bad else ()
    return Check(
        "create, inspect, two restores across a container restart",
        _all_ok(oks),
        "; ".join(per_runner),
        details,
        pending=not complete,
    )


def _overlay(comparisons: Comparisons) -> Check:
    """The overlay step's recorded findings: a file no engine process imported (a new helper) passes, said in
    plain words; a file imported from elsewhere than the overlay fails, with where it came from."""
    rows = records(comparisons.overlay)
    name = "overlaid source verified in the running processes"
    if not rows:
        return Check(name, None, "no overlay")
    bad = [f"{r['runner']}: {r['finding_detail'] or r['module']}" for r in rows if not r["ok"]]
    modules = sorted({str(r["module"]) for r in rows})
    processes = sum(int(r["matching"] or 0) for r in rows)
    result = f"{len(modules)} file(s), hashes equal in {processes} process imports"
    unused = sorted({str(r["module"]) for r in rows if r["ok"] and r["finding"] == overlay.OVERLAY_NOT_IMPORTED})
    if unused:
        result += f"; {overlay.OVERLAY_NOT_IMPORTED} (fresh import verified): {_names(unused)}"
    return Check(name, not bad, result, (f"{overlay.OVERLAY_NOT_IN_EFFECT}: {_names(bad)}",) if bad else ())


def _digests(comparisons: Comparisons) -> Check:
    rows = records(comparisons.digests)
    if not rows:
        return Check("parameter digests", None, "no digests recorded")
    parts = []
    details = []
    for row in rows:
        if row["ok"] and not row["unobservable"]:
            parts.append(f"{row['runner']}: all {row['total']:,} unchanged")
        else:
            parts.append(f"{row['runner']}: {row['text']}")
        if row["changed_names"]:
            details.append(f"{row['runner']} changed: {_names(list(row['changed_names']))}")
        if row["missing_names"]:
            details.append(f"{row['runner']} missing: {_names(list(row['missing_names']))}")
    return Check(
        "parameter digests (ordinary vs restored)",
        _all_ok([r["ok"] for r in rows]),
        "; ".join(parts),
        tuple(details),
    )


def _canary(comparisons: Comparisons, multi: bool = False) -> Check:
    frame = comparisons.canary
    if not frame.empty and "tokens" in frame:
        frame = frame[(frame["tokens"] > 1) == multi]
    if multi:
        return _multi_token_check(frame)
    if frame.empty or (frame["status"] == "reference").all():
        return Check("canary equal to the ordinary reference", None, "no canary compared")
    parts = []
    details = []
    compared = frame[frame["status"] != "reference"]
    for (runner, arm), group in compared.groupby(["runner", "arm"], sort=False):
        prompts = group["prompt"].nunique()
        equal_prompts = group.groupby("prompt", sort=False)["ok"].all()
        exact_prompts = group.groupby("prompt", sort=False)["status"].apply(lambda s: bool((s == "bit-exact").all()))
        deltas = group["delta"].dropna().abs()
        text = f"{runner}/{arm}: {int(equal_prompts.sum())}/{prompts} equal"
        if int(exact_prompts.sum()) == prompts:
            text += ", bit-exact"
        else:
            text += f" ({int(exact_prompts.sum())} bit-exact, max |Δ logprob| {figures.delta(deltas.max())})"
        parts.append(text)
        for row in records(group[group["ok"] != True]):  # noqa: E712 (False and not judged)
            delta = figures.delta(row["delta"])
            details.append(f"{runner}/{arm}/{row['step']} {row['prompt']!r}: {row['status']}, Δ {delta}")
    restores = compared["step"].nunique()
    name = "canary equal to the ordinary reference" + (f" ({restores} restores each)" if restores > 1 else "")
    return Check(name, _all_ok(list(compared["ok"])), "; ".join(parts), tuple(details[:_NAMES_SHOWN]))


def _multi_token(comparisons: Comparisons) -> Check:
    return _canary(comparisons, multi=True)


def _multi_token_check(frame: Any) -> Check:
    """Multi-token canaries: N prompts × M greedy tokens, ids exact, |Δ logprob| per position, first divergence."""
    name = "multi-token canary equal to the ordinary reference"
    compared = frame[frame["status"] != "reference"] if not frame.empty else frame
    if compared.empty:
        return Check(name, None, "no multi-token canary compared")
    tokens = int(compared["tokens"].max())
    parts, details = [], []
    for (runner, arm), group in compared.groupby(["runner", "arm"], sort=False):
        prompts = group["prompt"].nunique()
        equal = int(group.groupby("prompt", sort=False)["ok"].all().sum())
        deltas = group["delta"].dropna().abs()
        parts.append(f"{runner}/{arm}: {equal}/{prompts} equal, max |Δ logprob| {figures.delta(deltas.max())}")
        for row in records(group[group["ok"] != True]):  # noqa: E712 (False and not judged)
            details.append(
                f"{runner}/{arm}/{row['step']} {row['prompt']!r}: {row['status']}, first diverging position "
                f"{_position(row['first_divergence'])}"
            )
    return Check(f"{name} ({tokens} tokens each)", _all_ok(list(compared["ok"])), "; ".join(parts), tuple(details[:10]))


def _step_results(step: Any) -> dict[str, Any]:
    found = step.get("results") if isinstance(step, dict) else None
    return found if isinstance(found, dict) else {}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _position(value: Any) -> str:
    try:
        return str(int(value))
    except (TypeError, ValueError):
        return "none"


def _liveness(results: Mapping[str, Any]) -> Check:
    """Each restored server stayed alive and serving through its soak (and until the restart / final stop)."""
    name = "restored server alive through the soak after each restore"
    rows = [
        (key, _step_results(step)["soak"])
        for key, step in latest_steps(results).items()
        if key[2] in procedure.RESTORES and isinstance(_step_results(step).get("soak"), dict)
    ]
    if not rows:
        return Check(name, None, "no soak recorded")
    dead = [
        f"{r}/{a}/{s} died {soak.get('died_after_s')} s after restore"
        for (r, a, s), soak in rows
        if not soak.get("alive")
    ]
    seconds = max(float(soak.get("seconds") or 0.0) for _k, soak in rows)
    probes = sum(int(soak.get("probes") or 0) for _k, soak in rows)
    result = f"{len(rows) - len(dead)}/{len(rows)} restores alive ({probes} probes, soak {figures.seconds(seconds)})"
    return Check(name, not dead, result, tuple(dead))


def _faults(comparisons: Comparisons) -> Check:
    """The fault steps that ran, judged by their recorded outcome; a skipped fault step (an environment
    limitation, its prerequisite) is no failure here: the verdict's coverage names it (PARTIAL)."""
    rows = records(comparisons.faults)
    if not rows:
        return Check("injected failures", None, "no fault ran")
    ran = [r for r in rows if r["outcome"] != "skipped"]
    skipped = len(rows) - len(ran)
    if not ran:
        return Check("injected failures", None, f"not run: {skipped} fault step(s) skipped")
    passed = [r for r in ran if r["outcome"] == "passed"]
    bad = [
        f"{r['runner']}/{r['arm']}/{r['fault']}" + (f" ({r['mismatches']})" if r["mismatches"] else "")
        for r in ran
        if r["outcome"] != "passed"
    ]
    never_bound = sum(1 for r in ran if r["http_bound"] is False)
    cleaned = sum(1 for r in ran if r["cleanup_ok"])
    result = f"{len(passed)}/{len(ran)} as expected; HTTP never bound in {never_bound}, cleanup verified in {cleaned}"
    if skipped:
        result += f"; {skipped} skipped"
    chosen = sorted(
        {
            f"{r['arm']} arm judged by {r['expect']} expectations ({r['expect_reason']})"
            for r in ran
            if r.get("expect_reason")
        }
    )
    details = ((f"unexpected: {_names(bad)}",) if bad else ()) + tuple(chosen)
    return Check("injected failures", not bad, result, details)


def _kv(results: Mapping[str, Any], comparisons: Comparisons) -> Check:
    """Judged by the restores: restored capacity equal to the create-time capacity, and the snapshot's within
    ``--vsnap-kv-tolerance`` of ordinary serving (a figure not observed is not a pass)."""
    name = "KV-cache capacity: restored = created; snapshot vs ordinary within tolerance (tokens)"
    judged = [
        (key, _step_results(step)["kv_judgement"])
        for key, step in latest_steps(results).items()
        if key[2] in procedure.RESTORES and isinstance(_step_results(step).get("kv_judgement"), dict)
    ]
    rows = records(comparisons.kv)
    if not rows and not judged:
        return Check(name, None, "not measured")
    parts = []
    for row in rows:
        restored = [j.get("restored") for (r, a, _s), j in judged if r == row["runner"] and a == row["arm"]]
        parts.append(
            f"{row['runner']}/{row['arm']} {figures.count(row['ordinary'])} / {figures.count(row['snapshot'])} "
            f"({figures.percent(row['delta_pct'])}), restored {', '.join(figures.count(v) for v in restored) or '–'}"
        )
    problems = [f"{r}/{a}/{s}: {p}" for (r, a, s), j in judged for p in _as_list(j.get("problems"))]
    ok = None if not judged else not problems
    return Check(name, ok, " · ".join(parts) or "not measured", tuple(problems[:10]))


def _readiness(comparisons: Comparisons) -> Check:
    rows = records(comparisons.readiness)
    usable = [r for r in rows if r["cold_start"] is not None or r["restore_median"] is not None]
    if not usable:
        return Check("ready time, cold start vs restore", None, "not measured")
    parts = []
    for r in usable:
        lane = f"{r['runner']}/{r['arm']}"
        if r["restore_median"] is None:
            parts.append(f"{lane} cold start {figures.seconds(r['cold_start'])}, no restore measured")
        else:
            parts.append(
                f"{lane} {figures.seconds(r['cold_start'])} vs {figures.seconds(r['restore_median'])}"
                f" (n={r['restore_n']}, {figures.ratio(r['speedup'])})"
            )
    return Check("ready time, cold start vs restore (median)", True, "; ".join(parts), informational=True)


def _cleanup(comparisons: Comparisons) -> Check:
    rows = records(comparisons.cleanup)
    if not rows:
        return Check("cleanup audits", None, "no audit recorded")
    bad = [
        f"{r['runner']}/{r['arm']}/{r['step']}" + (f" ({r['detail']})" if r["detail"] else "")
        for r in rows
        if not r["ok"]
    ]
    return Check(
        "cleanup audits (PIDs gone, ports closed, GPU idle, link remaps)",
        not bad,
        f"{len(rows) - len(bad)}/{len(rows)} ok",
        (f"failed: {_names(bad)}",) if bad else (),
    )
