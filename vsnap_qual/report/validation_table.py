"""The validation table (check | result), shaped like the one a maintainer writes into a PR.

Evaluated once, by the verdict (``verdict.judge``), from the judgements the steps recorded; each row is a
``model.Check``, recorded in ``results.json``, and the HTML verdict, ``summary.md`` and the terminal summary
show the recorded rows (``results["verdict"]["checks"]``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from vsnap_qual import model, overlay, procedure, vllm_words
from vsnap_qual.procedure import results_as
from vsnap_qual.report import figures
from vsnap_qual.report.canary import CanaryRow, canary_rows, largest_delta
from vsnap_qual.report.frames import (
    CleanupRow,
    Comparisons,
    DigestSummaryRow,
    FaultRow,
    KvRow,
    OverlayRow,
    ReadinessRow,
    cleanup_of,
    digest_compare_of,
    judged_audit,
    rows,
)
from vsnap_qual.report.recorded import CanaryCompared, OutsideFiles, latest_steps

_LIFECYCLE = procedure.SNAPSHOT_LIFECYCLE
_NAMES_SHOWN = 10


def check_status(ok: bool | None, *, informational: bool = False, pending: bool = False) -> model.CheckStatus:
    """``pass``, ``FAIL``, ``info`` (a measurement shown for review, not judged), ``incomplete`` (the run
    stopped before the check could finish) or ``not run``."""
    if ok is None:
        return "incomplete" if pending else "not run"
    if informational:
        return "info"
    return "pass" if ok else "FAIL"


def _row(
    name: str,
    ok: bool | None,
    result: str,
    details: Sequence[str] = (),
    *,
    informational: bool = False,
    pending: bool = False,
) -> model.Check:
    """One line of the validation table, as evaluated: ``ok`` None when the check did not run. ``name`` is the
    sentence a reviewer reads, and may carry the run's figures (``(2 restores each)``); the stable ``id``, the
    one-word ``short`` name and the ``items`` behind the row are set by :func:`validation_checks`."""
    return model.Check(
        name=name,
        ok=ok,
        result=result,
        details=list(details),
        informational=informational,
        short="",
        pending=pending,
        id="",
        items=[],
        status=check_status(ok, informational=informational, pending=pending),
    )


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
    "adapters": "adapters",
    "shapes": "shapes",
    "api": "API",
    "serving": "serving",
    "boundaries": "boundaries",
    "faults": "faults",
    "kv": "KV",
    "decode": "decode",
    "prefix-cache": "prefix",
    "liveness": "liveness",
    "self-contained": "alone",
    "unit": "unit",
    "ready": "ready",
    "cleanup": "cleanup",
}


def validation_checks(run: model.RunEvidence, comparisons: Comparisons) -> list[model.Check]:
    """The rows of the validation table, in the order a reviewer reads them."""
    evaluate: dict[str, Callable[[], model.Check]] = {
        "lifecycle": lambda: _lifecycle(run),
        "overlay": lambda: _overlay(comparisons),
        "digests": lambda: _digests(comparisons),
        "canary.single-token": lambda: _canary(run),
        "canary.multi-token": lambda: _multi_token(run),
        "adapters": lambda: _adapters(run),
        "shapes": lambda: _shapes(run),
        "api": lambda: _api(run),
        "serving": lambda: _serving(run),
        "boundaries": lambda: _boundaries(run),
        "faults": lambda: _faults(comparisons),
        "kv": lambda: _kv(run, comparisons),
        "decode": lambda: _decode(run),
        "prefix-cache": lambda: _prefix_cache(run),
        "liveness": lambda: _liveness(run),
        "self-contained": lambda: _self_contained(run),
        "unit": lambda: _unit(run),
        "ready": lambda: _readiness(comparisons),
        "cleanup": lambda: _cleanup(comparisons),
    }
    checks = []
    for check_id, short in CHECK_IDS.items():
        check = evaluate[check_id]()
        check["short"], check["id"], check["items"] = short, check_id, check_items(check_id, run)
        checks.append(check)
    return checks


def _item(*parts: str, ok: bool | None) -> model.CheckItem:
    return model.CheckItem(id=".".join(parts), ok=ok)


def check_items(check_id: str, run: model.RunEvidence) -> list[model.CheckItem]:
    """The recorded judgements behind one row, by stable id ``<check>.<runner>.<arm>.<step or subject>``, in
    ``results.json``'s step order. Only what the steps recorded; nothing is judged here."""
    items: list[model.CheckItem] = []
    outcome = {"passed": True, "failed": False}
    for (runner, arm, step), record in latest_steps(run).items():
        where = (check_id, runner, arm)
        # each record read as what its step's results type declares (a restore's, a fault's, ...)
        restore = results_as(record, model.RestoreResults)
        fault = results_as(record, model.FaultResults)
        if check_id == "lifecycle" and step in _LIFECYCLE:
            items.append(_item(*where, step, ok=outcome.get(record["outcome"])))
        elif check_id == "faults" and fault is not None:
            items.append(_item(*where, step.removeprefix(procedure.FAULT_PREFIX), ok=outcome.get(record["outcome"])))
        elif check_id == "overlay" and (verified := results_as(record, model.OverlayResults)) is not None:
            for entry in verified.get("files", []):
                items.append(_item(*where, str(entry.get("module")), ok=entry.get("ok")))
        elif check_id == "digests" and (compare := digest_compare_of(record)) is not None:
            items.append(_item(*where, step, ok=compare["ok"]))
        elif check_id.startswith("canary.") and (canaries := results_as(record, CanaryCompared)) is not None:
            multi = check_id == "canary.multi-token"
            group = [c for c in canaries.get("canary_compare", []) if ((c.get("tokens") or 1) > 1) == multi]
            if group:
                items.append(_item(*where, step, ok=all(c["ok"] for c in group)))
        elif check_id == "shapes" and restore is not None and "shape_compare" in restore:
            for shape in dict.fromkeys(c["shape"] for c in restore["shape_compare"]):
                judged = [c for c in restore["shape_compare"] if c["shape"] == shape and c["judged"]]
                if judged:
                    items.append(_item(*where, step, shape, ok=all(c["compare"]["ok"] for c in judged)))
            repeated = (restore.get("soak") or {}).get("repeated_mismatch")
            if repeated:
                items.append(_item(*where, step, "soak-rounds", ok=False))
        elif check_id == "api" and restore is not None and "api_compare" in restore:
            for api in restore["api_compare"]:
                if api["ok"] is not None:
                    items.append(_item(*where, step, api["check"], ok=api["ok"]))
        elif check_id == "serving" and restore is not None and "serving_judgement" in restore:
            if (serving := restore["serving_judgement"]).get("ok") is not None:
                items.append(_item(*where, step, ok=serving.get("ok")))
        elif check_id == "boundaries" and restore is not None:
            for crossed in restore.get("boundary_judgements") or []:
                if crossed["ok"] is not None:
                    items.append(_item(*where, step, crossed["boundary"], ok=crossed["ok"]))
        elif check_id == "kv" and restore is not None and "kv_judgement" in restore:
            items.append(_item(*where, step, ok=restore["kv_judgement"].get("ok")))
        elif check_id == "adapters" and restore is not None and restore.get("adapter_compare"):
            groups = restore.get("adapter_compare", {}).values()
            items.append(_item(*where, step, ok=all(group and all(c["ok"] for c in group) for group in groups)))
        elif check_id == "decode" and restore is not None and "decode_judgement" in restore:
            items.append(_item(*where, step, ok=restore["decode_judgement"].get("ok")))
        elif check_id == "prefix-cache" and restore is not None and "prefix_cache_judgement" in restore:
            prefix = restore["prefix_cache_judgement"]
            if not prefix.get("not_judged"):
                items.append(_item(*where, step, ok=prefix.get("ok")))
        elif check_id == "liveness" and restore is not None and "soak" in restore:
            items.append(_item(*where, step, ok=restore["soak"].get("alive")))
        elif check_id == "unit" and step == procedure.UNIT and record["outcome"] != "skipped":
            items.append(_item(*where, step, ok=outcome.get(record["outcome"])))
        elif check_id == "self-contained":
            if step in _ALONE:
                consumed = bool((restore or model.RestoreResults()).get("consumed"))
                items.append(_item(*where, step, ok=False if consumed else outcome.get(record["outcome"])))
            elif _followup(fault).get("consumed"):
                items.append(_item(*where, step, ok=False))
        elif check_id == "cleanup" and (audit := judged_audit(cleanup_of(record))):
            # vLLM's own cleanup where it is judged, else a kill's audit after the harness's sweep (always judged)
            items.append(_item(*where, step, ok=audit.get("ok")))
    return items


def _lifecycle(run: model.RunEvidence) -> model.Check:
    """The snapshot lifecycle's recorded outcomes per runner. A step left out, skipped or not reached is not a
    failure here: the verdict's coverage says what did not run (PARTIAL, or a narrowed PASS)."""
    latest = latest_steps(run)
    per_runner: list[str] = []
    bad: list[str] = []
    oks: list[bool | None] = []
    for runner in run["runners"]:
        steps = [s for (r, _a, name), s in latest.items() if r == runner and name in _LIFECYCLE]
        if not steps:
            per_runner.append(f"{runner} not reached")
            oks.append(None)
            continue
        failed = [procedure.label(s["runner"], s["arm"], s["step"]) for s in steps if s["outcome"] == "failed"]
        passed = [s for s in steps if s["outcome"] == "passed"]
        bad.extend(failed)
        ok: bool | None = False if failed else (True if len(passed) == len(steps) else None)
        oks.append(ok)
        arms = [a for a in run["arms"] if any(s["arm"] == a for s in steps)]
        if failed:
            text = " FAIL"
        elif ok:
            text = ""
        elif all(s["outcome"] == "skipped" and s["message"].startswith(model.NOT_APPLICABLE_PREFIX) for s in steps):
            text = " not applicable"
        else:
            text = f" {len(passed)}/{len(steps)} passed"
        per_runner.append(f"{runner}{text} ({', '.join(arms)})")
    details = (f"failed: {_names(bad)}",) if bad else ()
    return _row(
        "create, inspect, two restores across a container restart",
        _all_ok(oks),
        "; ".join(per_runner),
        details,
        pending=not run["run"]["complete"],
    )


def _overlay(comparisons: Comparisons) -> model.Check:
    """The overlay step's recorded findings: a file no engine process imported (a new helper) passes, said in
    plain words; a file imported from elsewhere than the overlay fails, with where it came from."""
    found = rows(comparisons.overlay, OverlayRow)
    name = "overlaid source verified in the running processes"
    if not found:
        return _row(name, None, "no overlay")
    bad = [f"{r['runner']}: {r['finding_detail'] or r['module']}" for r in found if not r["ok"]]
    modules = sorted({str(r["module"]) for r in found})
    processes = sum(int(r["matching"] or 0) for r in found)
    result = f"{len(modules)} file(s), hashes equal in {processes} process imports"
    unused = sorted({str(r["module"]) for r in found if r["ok"] and r["finding"] == overlay.OVERLAY_NOT_IMPORTED})
    if unused:
        result += f"; {overlay.OVERLAY_NOT_IMPORTED} (fresh import verified): {_names(unused)}"
    return _row(name, not bad, result, (f"{overlay.OVERLAY_NOT_IN_EFFECT}: {_names(bad)}",) if bad else ())


def _digests(comparisons: Comparisons) -> model.Check:
    found = rows(comparisons.digests, DigestSummaryRow)
    if not found:
        return _row("parameter digests", None, "no digests recorded")
    parts = []
    details = []
    for row in found:
        buffers = row.get("buffers") or 0
        if row["ok"] and not row["unobservable"]:
            parts.append(
                f"{row['runner']}: all {row['total']:,} unchanged" + (f" ({buffers} buffers)" if buffers else "")
            )
        else:
            parts.append(f"{row['runner']}: {row['text']}")
        changed_buffers = list(row.get("changed_buffer_names") or [])
        if changed_buffers:
            details.append(f"{row['runner']} buffers changed: {_names(changed_buffers)}")
        if changed := [n for n in row["changed_names"] if n not in changed_buffers]:
            details.append(f"{row['runner']} changed: {_names(list(changed))}")
        if row["missing_names"]:
            details.append(f"{row['runner']} missing: {_names(list(row['missing_names']))}")
        if row["extra_names"]:
            details.append(f"{row['runner']} extra: {_names(list(row['extra_names']))}")
    return _row(
        "parameter digests (ordinary vs restored)",
        _all_ok([r["ok"] for r in found]),
        "; ".join(parts),
        details,
    )


def _canary(run: model.RunEvidence, multi: bool = False) -> model.Check:
    """One-token canaries (or, ``multi``, the multi-token ones): each restore's recorded judgement of them."""
    found = [r for r in canary_rows(run) if (r["tokens"] > 1) == multi]
    if multi:
        return _multi_token_check(found)
    if all(r["status"] == "reference" for r in found):
        return _row("canary equal to the ordinary reference", None, "no canary compared")
    parts = []
    details = []
    compared = [r for r in found if r["status"] != "reference"]
    for (runner, arm), group in _by_lane(compared).items():
        prompts = _by_prompt(group)
        equal = sum(1 for oks in prompts.values() if _all_true(r["ok"] for r in oks))
        exact = sum(1 for oks in prompts.values() if all(r["status"] == "bit-exact" for r in oks))
        text = f"{runner}/{arm}: {equal}/{len(prompts)} equal"
        if exact == len(prompts):
            text += ", bit-exact"
        else:
            text += f" ({exact} bit-exact, max |Δ logprob| {figures.delta(largest_delta(group))})"
        parts.append(text)
        for row in (r for r in group if r["ok"] is not True):  # False and not judged
            delta = figures.delta(row["delta"])
            details.append(f"{runner}/{arm}/{row['step']} {row['prompt']!r}: {row['status']}, Δ {delta}")
    restores = len({r["step"] for r in compared})
    name = "canary equal to the ordinary reference" + (f" ({restores} restores each)" if restores > 1 else "")
    return _row(name, _all_ok([r["ok"] for r in compared]), "; ".join(parts), details[:_NAMES_SHOWN])


def _multi_token(run: model.RunEvidence) -> model.Check:
    return _canary(run, multi=True)


def _multi_token_check(found: list[CanaryRow]) -> model.Check:
    """Multi-token canaries: N prompts × M greedy tokens, ids exact, |Δ logprob| per position, first divergence."""
    name = "multi-token canary equal to the ordinary reference"
    compared = [r for r in found if r["status"] != "reference"]
    if not compared:
        return _row(name, None, "no multi-token canary compared")
    tokens = max(r["tokens"] for r in compared)
    parts, details = [], []
    for (runner, arm), group in _by_lane(compared).items():
        prompts = _by_prompt(group)
        equal = sum(1 for oks in prompts.values() if _all_true(r["ok"] for r in oks))
        parts.append(
            f"{runner}/{arm}: {equal}/{len(prompts)} equal, max |Δ logprob| {figures.delta(largest_delta(group))}"
        )
        for row in (r for r in group if r["ok"] is not True):  # False and not judged
            details.append(
                f"{runner}/{arm}/{row['step']} {row['prompt']!r}: {row['status']}, first diverging position "
                f"{_position(row['first_divergence'])}"
            )
    return _row(f"{name} ({tokens} tokens each)", _all_ok([r["ok"] for r in compared]), "; ".join(parts), details[:10])


def _by_lane(found: list[CanaryRow]) -> dict[tuple[str, str], list[CanaryRow]]:
    """Canary rows by (runner, arm), in the order the lanes first appear."""
    groups: dict[tuple[str, str], list[CanaryRow]] = {}
    for row in found:
        groups.setdefault((row["runner"], row["arm"]), []).append(row)
    return groups


def _by_prompt(found: list[CanaryRow]) -> dict[str, list[CanaryRow]]:
    groups: dict[str, list[CanaryRow]] = {}
    for row in found:
        groups.setdefault(row["prompt"], []).append(row)
    return groups


def _all_true(oks: Iterable[bool | None]) -> bool:
    """Every judged one is True (one not judged is passed over, as a table's ``all`` skips a gap)."""
    return all(ok for ok in oks if ok is not None)


def _position(value: float | None) -> str:
    """A recorded token position (``first_divergence``), or ``none``."""
    return "none" if value is None else str(int(value))


#: The lifecycle steps that test the artifact alone: after the restored server's own graceful stop, in a fresh box.
_ALONE = (procedure.RESTORE_AFTER_STOP, procedure.FRESH_BOX)


def _followup(fault: model.FaultResults | None) -> model.FollowupRestore:
    """A fault step's follow-up restore (empty for another step, or one that never reached it)."""
    return (fault or model.FaultResults()).get("followup_restore") or model.FollowupRestore()


def _self_contained(run: model.RunEvidence) -> model.Check:
    """One finding wherever it shows: the artifact needs ``/dev/shm`` files it does not carry, so it stops
    restoring once they are gone (after a restored engine's graceful stop, in a fresh box, after a faulted
    restore). Seen by the restore-after-stop and fresh-box steps and the faults' follow-up restores; quoted in
    vLLM's and CRIU's own words, once."""
    name = "the artifact restores alone (after a graceful stop, in a fresh box, after a failed restore)"
    latest = latest_steps(run)
    tried = {key: step for key, step in latest.items() if key[2] in _ALONE and step["outcome"] != "skipped"}
    seen: list[str] = []
    words: list[str] = []
    needs: dict[str, None] = {}
    for (runner, arm, step), record in latest.items():
        restore = results_as(record, model.RestoreResults) or model.RestoreResults()
        follow = _followup(results_as(record, model.FaultResults))
        gone = restore.get("consumed") if step in _ALONE else follow.get("consumed")
        # what an artifact needs from outside it: its creates' records (the lifecycle's and the fault lane's)
        needs.update(dict.fromkeys((results_as(record, OutsideFiles) or OutsideFiles()).get("outside_files") or []))
        if not gone:
            continue
        seen.append(procedure.label(runner, arm, step) + ("" if step in _ALONE else " (follow-up restore)"))
        reason = restore.get("criu_reason") if step in _ALONE else follow.get("criu_reason")
        if not words and reason:
            words = [f"CRIU: {(reason or [''])[0]}"]
            if step in _ALONE and restore.get("vllm_reason"):
                words.append(f"vLLM: {vllm_words.short_command(str(restore.get('vllm_reason')))}")
    fresh = [
        procedure.label(r, a, s)
        for (r, a, s), record in latest.items()
        if (results_as(record, model.FaultResults) or model.FaultResults()).get("fresh_artifact")
    ]
    if seen:
        result = (
            f"not self-contained: its restore needs {len(needs)} /dev/shm file(s) it does not carry "
            f"({_names(sorted(needs), 4)}); it stopped restoring in {len(seen)} place(s)"
        )
        details = [*words, f"seen in: {_names(seen)}"]
        if fresh:
            details.append(f"fresh fault artifact made before: {_names(fresh)}")
        return _row(name, False, result, details)
    if not tried:
        return _row(name, None, "not tried")
    failed = [procedure.label(*key) for key, step in tried.items() if step["outcome"] != "passed"]
    if failed:  # failed for another reason: the lifecycle row says which; not this finding
        return _row(name, None, f"not shown: {_names(failed)} failed for another reason", pending=False)
    outside = f"; it names {len(needs)} /dev/shm file(s) it does not carry" if needs else ""
    return _row(name, True, f"{len(tried)}/{len(tried)} restores of the artifact alone passed{outside}")


def _unit(run: model.RunEvidence) -> model.Check:
    """The user's unit command per arm; only failures new on the head arm fail (the step judged it)."""
    name = "unit command from the overlay checkout (failures new on the head arm)"
    ran = {
        key: (step, unit["unit"])
        for key, step in latest_steps(run).items()
        if (unit := results_as(step, model.UnitResults)) is not None and "unit" in unit
    }
    if not ran:
        return _row(name, None, "no unit command")
    parts: list[str] = []
    details: list[str] = []
    for (runner, arm, _s), (_, record) in ran.items():
        shown = record.get("counts") or {}
        parts.append(
            f"{runner}/{arm} {shown.get('passed', 0)} passed, {shown.get('failed', 0)} failed"
            if shown
            else f"{runner}/{arm} no JUnit (exit {record.get('exit_code')})"
        )
        if record.get("new_on_head"):
            details.append(f"{runner}: new on head: {_names(list(record.get('new_on_head') or []))}")
        if record.get("pre_existing"):
            details.append(
                f"{runner}: pre-existing (failing on base too): {_names(list(record.get('pre_existing') or []))}"
            )
    failed = [procedure.label(*key) for key, (step, _) in ran.items() if step["outcome"] == "failed"]
    ok = None if any(s["outcome"] == "skipped" for s, _ in ran.values()) and not failed else not failed
    return _row(name, ok, "; ".join(parts), details)


def _shapes(run: model.RunEvidence) -> model.Check:
    """Request shapes beyond one greedy prompt (repeated, seeded, concurrent, long) after each restore, each
    answer as the ordinary engine's; a shape the ordinary engine itself answered differently twice is named and not
    judged."""
    name = "request shapes after each restore as on the ordinary engine (repeated, seeded, concurrent, long)"
    latest = latest_steps(run)
    restores = [(key, res) for key, s in latest.items() if (res := results_as(s, model.RestoreResults)) is not None]
    compared = [(key, res) for key, res in restores if "shape_compare" in res]
    if not compared:
        return _row(name, None, "not recorded (no request shapes asked for, or no restore reached them)")
    bad: list[str] = []
    shapes_seen: dict[str, None] = {}
    unsteady: dict[str, None] = {}
    count = 0
    for (r, a, s), res in compared:
        for c in res.get("shape_compare", []):
            shapes_seen[c["shape"]] = None
            if not c["judged"]:
                unsteady[f"{c['shape']} ({r}/{a})"] = None
                continue
            count += 1
            if not c["compare"]["ok"]:
                bad.append(f"{r}/{a}/{s} {c['shape']} request {c['index']}: first divergence at position "
                           f"{c['compare'].get('first_divergence')}")  # fmt: skip
        for m in (res.get("soak") or {}).get("repeated_mismatch") or []:
            bad.append(f"{r}/{a}/{s} repeated (a soak round): {m['prompt']!r} differs")
    result = f"{count - len(bad)}/{count} answers as the ordinary engine over {', '.join(shapes_seen)}"
    if unsteady:
        result += f"; not judged (the ordinary engine answered differently twice): {', '.join(unsteady)}"
    return _row(name, not bad, result, bad)


def _api(run: model.RunEvidence) -> model.Check:
    """The OpenAI API after each restore as on the ordinary engine (``engine.api_checks``): per check, how many
    restores answered as the ordinary engine; a check the engine does not serve is named not applicable in its
    words, a divergence with its first difference."""
    name = (
        "OpenAI API after each restore as on the ordinary engine (stream, chat, logprobs, finish, n, models, tokenize)"
    )
    restores = [(key, res) for key, s in latest_steps(run).items() if (res := results_as(s, model.RestoreResults))]
    compared = [(key, check) for key, res in restores for check in res.get("api_compare") or []]
    if not compared:
        return _row(name, None, "not recorded (no restore reached the API checks)")
    by_check: dict[str, list[model.ApiCheck]] = {}
    for _key, check in compared:
        by_check.setdefault(check["check"], []).append(check)
    parts = []
    for check_id, found in by_check.items():
        judged = [c for c in found if c["ok"] is not None]
        if judged:
            parts.append(f"{check_id} {sum(1 for c in judged if c['ok'])}/{len(judged)}")
        else:
            parts.append(f"{check_id} {found[0]['status']}")
    bad = [f"{r}/{a}/{s}: {c['check']}: {c['detail']}" for (r, a, s), c in compared if c["ok"] is False]
    unserved = {c["check"]: c["detail"] for _k, c in compared if c["status"] == "not applicable"}
    details = [*bad[:_NAMES_SHOWN], *(f"not applicable: {detail}" for detail in unserved.values())]
    ok = False if bad else (True if any(c["ok"] for _k, c in compared) else None)
    return _row(name, ok, "; ".join(parts), details)


def _serving(run: model.RunEvidence) -> model.Check:
    """vLLM's serving counters and the engine's memory over the fixed request series after each restore, against
    the ordinary engine's over the same series (``engine.serving_series``); not applicable in the engine's words
    where it serves no ``/metrics``."""
    name = "serving counters and memory per request over a request series after each restore as on the ordinary engine"
    restores = [(key, res) for key, s in latest_steps(run).items() if (res := results_as(s, model.RestoreResults))]
    judged = [(key, j) for key, res in restores if (j := res.get("serving_judgement")) is not None]
    if not judged:
        return _row(name, None, "not recorded (no restore reached the request series)")
    bad = [f"{r}/{a}/{s}: {p}" for (r, a, s), j in judged for p in j.get("problems") or []]
    counted = [j for _k, j in judged if j.get("ok") is not None]
    growth = [g for _k, j in judged if (g := j.get("rss_growth_mib")) is not None]
    result = f"{sum(1 for j in counted if j['ok'])}/{len(counted)} restores as the ordinary engine"
    if growth:
        result += f" (resident memory {min(growth):+.2f} to {max(growth):+.2f} MiB per request)"
    unserved = {j.get("detail", "") for _k, j in judged if j.get("status") == "not applicable"}
    if not counted and unserved:
        return _row(name, None, f"not applicable: {'; '.join(sorted(unserved))}")
    ok = False if bad else (True if counted else None)
    return _row(name, ok, result, bad[:_NAMES_SHOWN])


def _boundaries(run: model.RunEvidence) -> model.Check:
    """Requests across the boundaries (``engine.boundaries``): one sent while the first restore's recovery was held
    must not be taken before recovery and its private check completed; one in flight at ``restore-2``'s graceful
    stop completes or is refused cleanly (``restore-after-stop`` then restores again)."""
    name = "requests across boundaries: none taken while recovering; one in flight at the stop completes or is refused"
    judged = [
        (key, j)
        for key, s in latest_steps(run).items()
        if (res := results_as(s, model.RestoreResults))
        for j in res.get("boundary_judgements") or []
    ]
    if not judged:
        return _row(name, None, "not recorded (no restore reached a boundary)")
    bad = [f"{r}/{a}/{s}: {j['detail']}" for (r, a, s), j in judged if j["ok"] is False]
    parts = []
    for boundary in ("recovery", "stop"):
        found = [j for _k, j in judged if j["boundary"] == boundary]
        counted = [j for j in found if j["ok"] is not None]
        if counted:
            parts.append(f"{boundary} {sum(1 for j in counted if j['ok'])}/{len(counted)}")
        elif found:
            parts.append(f"{boundary} {found[0]['detail']}")
    ok = False if bad else (True if any(j["ok"] for _k, j in judged) else None)
    return _row(name, ok, "; ".join(parts), bad[:_NAMES_SHOWN])


def _liveness(run: model.RunEvidence) -> model.Check:
    """Each restored server stayed alive and serving through its soak and its observation window (and until the
    restart / final stop); the result says how long after its restore each was watched ("alive 30 s after
    restore"), so a PASS says what it covered."""
    name = "restored server alive through the observation window after each restore"
    soaks = [
        (key, soak)
        for key, step in latest_steps(run).items()
        if (restore := results_as(step, model.RestoreResults)) is not None and (soak := restore.get("soak")) is not None
    ]
    if not soaks:
        return _row(name, None, "no soak recorded")
    dead = [
        f"{r}/{a}/{s} died {soak.get('died_after_s')} s after restore"
        for (r, a, s), soak in soaks
        if not soak.get("alive")
    ]
    seconds = max(float(soak.get("seconds") or 0.0) for _k, soak in soaks)
    probes = sum(int(soak.get("probes") or 0) for _k, soak in soaks)
    watched = [float(w) for _k, soak in soaks if (w := soak.get("observed_after_restore_s")) is not None]
    alive_for = f"alive {figures.seconds(min(watched))} after restore, " if watched and not dead else ""
    result = (
        f"{len(soaks) - len(dead)}/{len(soaks)} restores alive ({alive_for}{probes} probes, "
        f"soak {figures.seconds(seconds)})"
    )
    return _row(name, not dead, result, dead)


def _faults(comparisons: Comparisons) -> model.Check:
    """The fault steps that ran, judged by their recorded outcome; a skipped fault step (an environment
    limitation, its prerequisite) is no failure here: the verdict's coverage names it (PARTIAL)."""
    found = rows(comparisons.faults, FaultRow)
    if not found:
        return _row("injected failures", None, "no fault ran")
    ran = [r for r in found if r["outcome"] != "skipped"]
    elsewhere = sum(1 for r in found if r["not_applicable"] and r.get("runs_once"))  # run on another runner's lane
    not_applicable = sum(1 for r in found if r["not_applicable"]) - elsewhere
    skipped = len(found) - len(ran) - not_applicable - elsewhere
    if not ran:
        said = f"{skipped} fault step(s) skipped" if skipped else f"{not_applicable} not applicable"
        return _row("injected failures", None, said)
    passed = [r for r in ran if r["outcome"] == "passed"]
    bad = [
        f"{r['runner']}/{r['arm']}/{r['fault']}" + (f" ({r['mismatches']})" if r["mismatches"] else "")
        for r in ran
        if r["outcome"] != "passed"
    ]
    # the exceptions by name, never a count to subtract from another (the base arm binds HTTP before its
    # canary, a cleanup recorded and not judged)
    bound = [f"{r['runner']}/{r['arm']}/{r['fault']}" for r in ran if r["http_bound"]]
    unverified = [f"{r['runner']}/{r['arm']}/{r['fault']}" for r in ran if not _cleanup_verified(r)]
    http = f"HTTP bound in {len(bound)}: {_names(bound)}" if bound else "HTTP never bound"
    cleanup = f"cleanup not verified in {len(unverified)}: {_names(unverified)}" if unverified else "cleanup verified"
    result = f"{len(passed)}/{len(ran)} as expected; {http}; {cleanup}"
    if skipped:
        result += f"; {skipped} skipped"
    if not_applicable:
        result += f"; {not_applicable} not applicable"
    if elsewhere:
        result += f"; {elsewhere} run on another runner's lane ({model.RUNS_ONCE})"
    chosen = sorted(
        {
            f"{r['arm']} arm judged by {r['expect']} expectations ({r['expect_reason']})"
            for r in ran
            if r.get("expect_reason")
        }
    )
    details = [*((f"unexpected: {_names(bad)}",) if bad else ()), *chosen]
    return _row("injected failures", not bad, result, details)


def _kv(run: model.RunEvidence, comparisons: Comparisons) -> model.Check:
    """Judged by the restores: restored capacity equal to the create-time capacity, and the snapshot's within
    ``--vsnap-kv-tolerance`` of ordinary serving (a figure not observed is not a pass)."""
    name = "KV-cache capacity: restored = created; snapshot vs ordinary within tolerance (tokens)"
    judged = [
        (key, judgement)
        for key, step in latest_steps(run).items()
        if (restore := results_as(step, model.RestoreResults)) is not None
        and (judgement := restore.get("kv_judgement")) is not None
    ]
    found = rows(comparisons.kv, KvRow)
    if not found and not judged:
        return _row(name, None, "not measured")
    parts = []
    for row in found:
        restored = [j.get("restored") for (r, a, _s), j in judged if r == row["runner"] and a == row["arm"]]
        parts.append(
            f"{row['runner']}/{row['arm']} {figures.count(row['ordinary'])} / {figures.count(row['snapshot'])} "
            f"({figures.percent(row['delta_pct'])}), restored {', '.join(figures.count(v) for v in restored) or '–'}"
        )
    problems = [f"{r}/{a}/{s}: {p}" for (r, a, s), j in judged for p in j.get("problems", [])]
    ok = None if not judged else not problems
    return _row(name, ok, " · ".join(parts) or "not measured", problems[:10])


def _adapters(run: model.RunEvidence) -> model.Check:
    """Judged by the restores of lanes serving LoRA adapters (a variant's ``--lora-modules``): every adapter answers
    its canaries as the ordinary engine did through it (a wake that drops adapters, vLLM #53888)."""
    name = "LoRA adapter canaries equal to the ordinary reference through each adapter"
    judged = [
        (key, compared)
        for key, step in latest_steps(run).items()
        if (restore := results_as(step, model.RestoreResults)) is not None
        and (compared := restore.get("adapter_compare"))
    ]
    if not judged:
        return _row(name, None, "no lane serves a LoRA adapter (a variant with --lora-modules)")
    parts, problems = [], []
    for runner, arm in dict.fromkeys((r, a) for (r, a, _s), _c in judged):
        mine = [(s, c) for (r, a, s), c in judged if (r, a) == (runner, arm)]
        names = list(dict.fromkeys(n for _s, c in mine for n in c))
        equal = sum(1 for _s, c in mine for g in c.values() for x in g if x["ok"])
        total = sum(len(g) for _s, c in mine for g in c.values())
        parts.append(f"{runner}/{arm}: adapters {', '.join(names)}, {equal}/{total} equal over {len(mine)} restores")
        problems += [
            f"{runner}/{arm}/{s}: adapter {n!r} {sum(not x['ok'] for x in g)}/{len(g)} differ" if g else
            f"{runner}/{arm}/{s}: adapter {n!r} did not answer every canary"
            for s, c in mine for n, g in c.items() if not g or not all(x["ok"] for x in g)
        ]  # fmt: skip
    return _row(name, not problems, " · ".join(parts), problems[:10])


def _slowdown(step: str, judgement: model.DecodeJudgement) -> str:
    """``restore-1 1.02×``: the judged slowdown, one figure (how it was reached is :func:`_slowdown_note`'s)."""
    if judgement.get("slowdown") is None:
        return f"{step} –"
    return f"{step} {judgement['slowdown']:.2f}×"


def _slowdown_note(lane: str, step: str, judgement: model.DecodeJudgement) -> str | None:
    """Where other work on the CPUs was counted, how the judged figure came about: the measured slowdown over the
    machine's own (its run-queue and busy-time stretch between the two timed sets); ``None`` where it was not."""
    machine = judgement.get("machine_slowdown", 1.0)
    if judgement.get("slowdown") is None or machine == 1.0:
        return None
    return (
        f"{lane}/{step}: {judgement['slowdown']:.2f}× is the measured slowdown "
        f"{judgement.get('measured_slowdown', 0.0):.2f}× over the machine's own {machine:.2f}× (the other work on its "
        "CPUs between the ordinary and the restored timing)"
    )


def _decode(run: model.RunEvidence) -> model.Check:
    """Judged by the restores: the fixed generation's median tokens/s within ``--vsnap-decode-tolerance`` of the
    ordinary engine's (and the speculative acceptance, where the engine decodes speculatively)."""
    name = "decode speed after restore: ordinary vs restored tokens/s (median; slowdown)"
    latest = latest_steps(run)
    judged = [
        (key, judgement)
        for key, step in latest.items()
        if (restore := results_as(step, model.RestoreResults)) is not None
        and (judgement := restore.get("decode_judgement")) is not None
    ]
    if not judged:
        return _row(name, None, "not measured")
    parts, notes = [], []
    for runner, arm in dict.fromkeys((r, a) for (r, a, _s), _j in judged):
        mine = [(s, j) for (r, a, s), j in judged if (r, a) == (runner, arm)]
        ordinary = next((j.get("ordinary_tps") for _s, j in mine if j.get("ordinary_tps")), None)
        slowdowns = ", ".join(_slowdown(s, j) for s, j in mine)
        notes += [n for s, j in mine if (n := _slowdown_note(f"{runner}/{arm}", s, j))]
        said = f"{ordinary:.1f} tokens/s ordinary" if ordinary else "no ordinary figure"
        parts.append(f"{runner}/{arm} {said}; {slowdowns}")
    tolerance = judged[0][1].get("tolerance")
    problems = [f"{r}/{a}/{s}: {p}" for (r, a, s), j in judged for p in j.get("problems", [])]
    oks = [j.get("ok") for _k, j in judged]
    ok = False if any(o is False for o in oks) else (True if all(o for o in oks) else None)
    return _row(
        f"{name}, tolerance {tolerance:g}×" if tolerance else name, ok, " · ".join(parts), [*problems[:10], *notes]
    )


def _prefix_cache(run: model.RunEvidence) -> model.Check:
    """Judged by the restores: a prompt of whole KV blocks asked twice answers as on the ordinary engine, ask by
    ask, and hits its prefix cache as the ordinary engine did (``vsnap_qual.engine.prefix_cache``)."""
    name = "prefix cache after restore: a repeated prompt of whole KV blocks answers and hits as on the ordinary engine"
    judged = [
        (key, judgement)
        for key, step in latest_steps(run).items()
        if (restore := results_as(step, model.RestoreResults)) is not None
        and (judgement := restore.get("prefix_cache_judgement")) is not None
    ]
    usable = [(k, j) for k, j in judged if not j.get("not_judged")]
    if not usable:
        why = next((j["not_judged"] for _k, j in judged if j.get("not_judged")), "not measured")
        return _row(name, None, f"not judged: {why}" if judged else "not measured")
    parts = []
    for runner, arm in dict.fromkeys((r, a) for (r, a, _s), _j in usable):
        mine = [j for (r, a, _s), j in usable if (r, a) == (runner, arm)]
        hits = [j for j in mine if "hits_ordinary" in j and not j.get("hits_not_judged")]
        equal = sum(1 for j in mine if j.get("answers_equal"))
        if hits:
            ordinary = hits[0]["hits_ordinary"][1]
            restored = ", ".join(f"{j['hits_restored'][1]:g}" for j in hits)
            said = f"{equal}/{len(mine)} answered as ordinary; cached tokens, second ask: {ordinary:g} vs {restored}"
        else:
            why = next((j["hits_not_judged"] for j in mine if j.get("hits_not_judged")), "hits not judged")
            said = f"{equal}/{len(mine)} answered as ordinary (hits not judged: {why})"
        parts.append(f"{runner}/{arm} {said}")
    problems = [f"{r}/{a}/{s}: {p}" for (r, a, s), j in usable for p in j.get("problems", [])]
    ok = not any(j.get("ok") is False for _k, j in usable)
    return _row(name, ok, " · ".join(parts), problems[:10])


def _readiness(comparisons: Comparisons) -> model.Check:
    found = rows(comparisons.readiness, ReadinessRow)
    usable = [r for r in found if r["cold_start"] is not None or r["restore_median"] is not None]
    if not usable:
        return _row("ready time, cold start vs restore", None, "not measured")
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
    return _row("ready time, cold start vs restore (median)", True, "; ".join(parts), informational=True)


def _cleanup_verified(row: FaultRow) -> bool | None:
    """vLLM's own cleanup where it is judged; a kill's where it is not, by the audit after the harness's sweep."""
    if row["cleanup_judged"] is False and row["kill_swept_ok"] is not None:
        return row["kill_swept_ok"]
    return row["cleanup_ok"]


def _cleanup(comparisons: Comparisons) -> model.Check:
    found = rows(comparisons.cleanup, CleanupRow)
    if not found:
        return _row("cleanup audits", None, "no audit recorded")
    bad = [
        f"{r['runner']}/{r['arm']}/{r['step']}" + (f" ({r['detail']})" if r["detail"] else "")
        for r in found
        if not r["ok"]
    ]
    return _row(
        "cleanup audits (PIDs gone, ports closed, GPU idle, link remaps)",
        not bad,
        f"{len(found) - len(bad)}/{len(found)} ok",
        (f"failed: {_names(bad)}",) if bad else (),
    )
