"""``vsnap-qual compare old.json new.json``: what changed between two runs.

Steps whose outcome flipped, parameters whose digest status changed, canary changes (tokens, status, Δ
logprob), KV capacity and timing differences; as plain text or Markdown.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from vsnap_qual import model
from vsnap_qual.report import figures, parse
from vsnap_qual.report.canary import CanaryRow, canary_rows
from vsnap_qual.report.frames import (
    KvRow,
    ReadinessRow,
    TimingRow,
    digest_frame,
    kv_frame,
    readiness_frame,
    rows,
    timing_frame,
)
from vsnap_qual.report.markdown import cell, image_identity
from vsnap_qual.report.recorded import StepKey, latest_steps
from vsnap_qual.report.validation_table import CHECK_IDS

#: A step's median time must move by at least this fraction to be listed (restore ready times always are).
TIMING_THRESHOLD = 0.10
_NAMES_SHOWN = 50


@dataclass(frozen=True)
class Change:
    """One difference: what (``key``), before and after, and why it matters."""

    key: str
    old: str
    new: str
    note: str = ""


@dataclass(frozen=True)
class RunDiff:
    """Every difference between two runs, grouped by area."""

    old_run: str
    new_run: str
    old_verdict: str
    new_verdict: str
    #: the recorded verdict statuses (``pass``, ``partial``, ``fail``, ``incomplete``)
    old_status: str = ""
    new_status: str = ""
    checks: list[Change] = field(default_factory=list)
    check_items: list[Change] = field(default_factory=list)
    steps: list[Change] = field(default_factory=list)
    digests: list[Change] = field(default_factory=list)
    reference_digests: list[Change] = field(default_factory=list)
    canary: list[Change] = field(default_factory=list)
    kv: list[Change] = field(default_factory=list)
    timings: list[Change] = field(default_factory=list)
    #: what the two runs ran on and with, where it differs (images, runtime, GPU, options): said first, since
    #: every difference below may come from it rather than from the change under test
    setup: list[Change] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """True when anything but timings differs."""
        return bool(
            self.old_verdict != self.new_verdict
            or self.checks
            or self.check_items
            or self.steps
            or self.digests
            or self.reference_digests
            or self.canary
            or self.kv
        )


def _run_name(results: model.Results) -> str:
    return results["run"]["run_id"] or "unknown"


def _verdict(results: model.Results) -> str:
    return results["verdict"]["headline"] or "?"


def _status(results: model.Results) -> str:
    return results["verdict"]["status"]


def diff_runs(
    old: Mapping[str, object], new: Mapping[str, object], *, timing_threshold: float = TIMING_THRESHOLD
) -> RunDiff:
    """Compare two ``results.json`` (``old`` → ``new``), each read as the model first: they may come from
    different harness versions (``report.parse``; ``ValueError`` when one cannot be read)."""
    return _diff(parse.results(old), parse.results(new), timing_threshold)


def _diff(old: model.Results, new: model.Results, timing_threshold: float) -> RunDiff:
    return RunDiff(
        old_run=_run_name(old),
        new_run=_run_name(new),
        old_verdict=_verdict(old),
        new_verdict=_verdict(new),
        old_status=_status(old),
        new_status=_status(new),
        checks=_checks(old, new),
        check_items=_check_items(old, new),
        steps=_steps(old, new),
        digests=_digests(old, new),
        reference_digests=_reference_digests(old, new),
        canary=_canary(old, new),
        kv=_kv(old, new),
        timings=_timings(old, new, timing_threshold),
        setup=_setup(old, new),
    )


#: options whose difference is not a difference of setup (where the report goes, which run it is)
_OWN_OPTIONS = {"report_dir", "run_id"}


def _setup_facts(results: model.Results) -> dict[str, str]:
    facts: dict[str, str] = {}
    for lane in results.get("lanes") or []:
        env = lane["environment"]
        if env is None:
            continue
        arm = env["arm"]
        image = env.get("image") or model.Image()
        # as summary.md names it (its ID and first repo digest), plain: the text output is a terminal's
        facts[f"image ({arm})"] = image_identity(image, code=False)
        labels = image.get("labels") or {}
        facts["runtime"] = str(labels.get("ai.vsnap.runtime") or "docker")
        gpu = env.get("gpu")
        facts["GPU"] = f"{gpu['name']} × {gpu.get('count', 1)}" if gpu else "none"
    options = results["run"].get("options") or {}
    for name, value in sorted(options.items()):
        if name not in _OWN_OPTIONS:
            facts[f"option {name}"] = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    return facts


def _setup(old: model.Results, new: model.Results) -> list[Change]:
    before, after = _setup_facts(old), _setup_facts(new)
    return [
        Change(key, before.get(key, "-"), after.get(key, "-"))
        for key in sorted(set(before) | set(after))
        if before.get(key) != after.get(key)
    ]


def _recorded_checks(results: model.Results) -> dict[str, model.Check]:
    """The verdict's recorded checks by stable id (a results.json from before ids: by its one-word ``short``
    name, which maps to the id one to one, else by its sentence)."""
    by_short = {short: check_id for check_id, short in CHECK_IDS.items()}
    return {
        entry["id"] or by_short.get(entry["short"]) or entry["name"]: entry for entry in results["verdict"]["checks"]
    }


def _checks(old: model.Results, new: model.Results) -> list[Change]:
    """Validation checks whose recorded status changed, by stable id."""
    before, after = _recorded_checks(old), _recorded_checks(new)
    changes = []
    for key in list(dict.fromkeys([*before, *after])):
        was = before[key]["status"] if key in before else "absent"
        now = after[key]["status"] if key in after else "absent"
        if was != now:
            changes.append(Change(key, was, now, (after.get(key) or before[key])["result"]))
    return changes


_OK_TEXT = {True: "ok", False: "not ok", None: "not judged"}


def _items(results: model.Results) -> dict[str, str]:
    return {
        item["id"]: _OK_TEXT[item["ok"]]
        for entry in _recorded_checks(results).values()
        for item in entry["items"]
        if item["id"]
    }


def _check_items(old: model.Results, new: model.Results) -> list[Change]:
    """The recorded judgements behind the checks (``digests.v1.head.restore-1``) whose result changed."""
    before, after = _items(old), _items(new)
    return [
        Change(key, before.get(key, "absent"), after.get(key, "absent"))
        for key in dict.fromkeys([*before, *after])
        if before.get(key, "absent") != after.get(key, "absent")
    ]


#: ``--fail-on`` levels, each including the ones before it.
FAIL_ON = ("verdict", "check", "figure")
FAIL_ON_DEFAULT = "verdict"
#: Worse is larger: a verdict that moves up this scale is a regression.
_VERDICT_RANK = {"pass": 0, "partial": 1, "incomplete": 2, "interrupted": 2, "fail": 3}
#: Check statuses that count as holding (a check moving from one of these to another status regressed).
_HOLDING = ("pass", "info")


def regressions(diff: RunDiff, fail_on: str = FAIL_ON_DEFAULT) -> list[str]:
    """What makes ``new`` worse than ``old`` at the ``fail_on`` level (``verdict`` ⊂ ``check`` ⊂ ``figure``),
    in words; empty when there is none. Rendered from the recorded verdicts, checks and figures only.

    - ``verdict``: the new verdict is worse (PASS → PARTIAL, INCOMPLETE or FAIL; PARTIAL → FAIL …).
    - ``check``: also a validation check (by id) that held (pass, info) and no longer does, a judgement behind
      a check (``digests.v1.head.restore-1``) that was ok and no longer is, or a step that passed and now failed
      or did not run.
    - ``figure``: also any change of a parameter digest's status, the ordinary digests, a canary or the KV
      capacity (timings never count).
    """
    if fail_on not in FAIL_ON:
        raise ValueError(f"--fail-on must be one of {', '.join(FAIL_ON)}, not {fail_on!r}")
    level = FAIL_ON.index(fail_on)
    found = []
    old_rank, new_rank = _VERDICT_RANK.get(diff.old_status, 3), _VERDICT_RANK.get(diff.new_status, 3)
    if new_rank > old_rank:
        found.append(f"verdict {diff.old_verdict} → {diff.new_verdict}")
    if level >= 1:
        lost = [c for c in diff.checks if c.old in _HOLDING and c.new not in _HOLDING]
        found += [f"check {c.key}: {c.old} → {c.new}" for c in lost]
        found += [f"check item {c.key}: {c.old} → {c.new}" for c in diff.check_items if c.old == "ok"]
        found += [f"step {c.key}: {c.old} → {c.new}" for c in diff.steps if c.old == "passed" and c.new != "passed"]
    if level >= 2:
        for attribute in ("digests", "reference_digests", "canary", "kv"):
            found += [f"{attribute} {c.key}: {c.old} → {c.new}" for c in getattr(diff, attribute)]
    return found


def _steps(old: model.Results, new: model.Results) -> list[Change]:
    before, after = latest_steps(old), latest_steps(new)
    changes = []
    for key in list(dict.fromkeys([*before, *after])):
        was = before[key]["outcome"] if key in before else "not run"
        now = after[key]["outcome"] if key in after else "not run"
        if was != now:
            message = next((s["message"] for s in (after.get(key), before.get(key)) if s and s["message"]), "")
            changes.append(Change("/".join(key), was, now, message))
    return changes


def _runners(old: model.Results, new: model.Results) -> list[str]:
    return list(dict.fromkeys([*old["runners"], *new["runners"]]))


def _digests(old: model.Results, new: model.Results) -> list[Change]:
    changes = []
    for runner in _runners(old, new):
        before, after = digest_frame(old, runner), digest_frame(new, runner)
        was = before["status"].to_dict() if "status" in before else {}
        now = after["status"].to_dict() if "status" in after else {}
        where = after["changed_in"].to_dict() if "changed_in" in after else {}
        where_before = before["changed_in"].to_dict() if "changed_in" in before else {}
        # Parameters that went bad first, then those that recovered.
        names = sorted(set(was) | set(now), key=lambda n: (now.get(n) == "unchanged", n))
        for name in names:
            a, b = was.get(name, "absent"), now.get(name, "absent")
            if a != b:
                old_text = a + (f" ({where_before[name]})" if where_before.get(name) else "")
                new_text = b + (f" ({where[name]})" if where.get(name) else "")
                changes.append(Change(f"{runner} {name}", old_text, new_text))
    return changes


def _reference_digests(old: model.Results, new: model.Results) -> list[Change]:
    """Parameters whose ordinary (reference) digest differs between runs: different weights were loaded."""
    changes = []
    for runner in _runners(old, new):
        before, after = digest_frame(old, runner), digest_frame(new, runner)
        if "ordinary" not in before or "ordinary" not in after:
            continue
        joined = (
            before[["ordinary"]]
            .rename(columns={"ordinary": "ordinary_old"})
            .join(after[["ordinary"]].rename(columns={"ordinary": "ordinary_new"}), how="inner")
        )
        differing = joined[joined["ordinary_old"] != joined["ordinary_new"]]
        for name, row in differing.iterrows():
            changes.append(
                Change(
                    f"{runner} {name}",
                    figures.short_hash(row["ordinary_old"]),
                    figures.short_hash(row["ordinary_new"]),
                )
            )
    return changes


def _canary(old: model.Results, new: model.Results) -> list[Change]:
    def index(results: model.Results) -> dict[tuple[str, str, str, str], CanaryRow]:
        return {(r["runner"], r["arm"], r["step"], r["prompt"]): r for r in canary_rows(results)}

    before, after = index(old), index(new)
    changes = []
    for key in list(dict.fromkeys([*before, *after])):
        a, b = before.get(key), after.get(key)
        if a is None or b is None:
            present = a if a is not None else b
            if present is None or present["status"] != "reference":
                changes.append(Change(_canary_key(key), _canary_text(a), _canary_text(b), "compared in one run only"))
            continue
        if a["status"] == "reference" and b["status"] == "reference":
            if a["token_ids"] != b["token_ids"] or a["text"] != b["text"]:
                changes.append(Change(_canary_key(key), _canary_text(a), _canary_text(b), "reference output changed"))
            continue
        if a["status"] != b["status"] or a["token_ids"] != b["token_ids"] or a["delta"] != b["delta"]:
            changes.append(Change(_canary_key(key), _canary_text(a), _canary_text(b)))
    # Regressions first.
    return sorted(changes, key=lambda c: 0 if "mismatch" in c.new or "missing" in c.new else 1)


def _canary_key(key: tuple[str, str, str, str]) -> str:
    return f"{key[0]}/{key[1]}/{key[2]} {key[3]!r}"


def _canary_text(row: CanaryRow | None) -> str:
    if row is None:
        return "absent"
    text = f"[{row['token_ids']}] {row['status']}"
    return text if row["status"] == "reference" else f"{text}, Δ {figures.delta(row['delta'])}"


def _kv(old: model.Results, new: model.Results) -> list[Change]:
    before = {(r["runner"], r["arm"]): r for r in rows(kv_frame(old), KvRow)}
    after = {(r["runner"], r["arm"]): r for r in rows(kv_frame(new), KvRow)}
    changes = []
    for key in list(dict.fromkeys([*before, *after])):
        a, b = before.get(key), after.get(key)
        pair_a = (a["ordinary"], a["snapshot"]) if a else (None, None)
        pair_b = (b["ordinary"], b["snapshot"]) if b else (None, None)
        if pair_a == pair_b:
            continue
        notes = []
        for label, x, y in (("ordinary", pair_a[0], pair_b[0]), ("snapshot", pair_a[1], pair_b[1])):
            if x is not None and y is not None and x != y:
                share = figures.percent(100.0 * (y - x) / x if x else None)
                notes.append(f"{label} {figures.signed_count(y - x)} ({share})")
        changes.append(
            Change(
                f"{key[0]}/{key[1]}",
                f"{figures.count(pair_a[0])} / {figures.count(pair_a[1])}",
                f"{figures.count(pair_b[0])} / {figures.count(pair_b[1])}",
                ", ".join(notes),
            )
        )
    return changes


def _timings(old: model.Results, new: model.Results, threshold: float) -> list[Change]:
    before: dict[StepKey, TimingRow] = {
        (r["runner"], r["arm"], r["step"]): r for r in rows(timing_frame(old), TimingRow)
    }
    after = {(r["runner"], r["arm"], r["step"]): r for r in rows(timing_frame(new), TimingRow)}
    changes = []
    for key in [k for k in after if k in before]:
        a, b = before[key]["median"], after[key]["median"]
        if a is None or b is None:
            continue
        relative = (b - a) / a if a else 0.0
        if abs(relative) < threshold:
            continue
        changes.append(Change("/".join(key), figures.seconds(a), figures.seconds(b), f"{relative * 100:+.0f}%"))
    ready_a = {(r["runner"], r["arm"]): r for r in rows(readiness_frame(old), ReadinessRow)}
    for r in rows(readiness_frame(new), ReadinessRow):
        a_row = ready_a.get((r["runner"], r["arm"]))
        if a_row and a_row["restore_median"] and r["restore_median"]:
            relative = (r["restore_median"] - a_row["restore_median"]) / a_row["restore_median"]
            changes.append(
                Change(
                    f"{r['runner']}/{r['arm']} restore ready (median)",
                    figures.seconds(a_row["restore_median"]),
                    figures.seconds(r["restore_median"]),
                    f"{relative * 100:+.0f}%",
                )
            )
    return changes


_SECTIONS = (
    ("setup", "Setup differs: the runs ran on or with something else, so a difference below may come from it"),
    ("checks", "Validation checks whose status changed"),
    ("check_items", "Judgements behind the checks that changed"),
    ("steps", "Steps that flipped"),
    ("digests", "Parameter digests whose status changed"),
    ("reference_digests", "Ordinary (reference) digests that differ between the runs"),
    ("canary", "Canary changes"),
    ("kv", "KV-cache capacity, ordinary / snapshot"),
    ("timings", "Timings (median; steps that moved by 10% or more, and restore ready times)"),
)


def _limited(changes: list[Change]) -> tuple[list[Change], int]:
    return changes[:_NAMES_SHOWN], max(0, len(changes) - _NAMES_SHOWN)


def format_text(diff: RunDiff) -> str:
    """The diff as plain text for a terminal."""
    lines = [
        f"vsnap-qual compare: {diff.old_run} ({diff.old_verdict}) → {diff.new_run} ({diff.new_verdict})",
    ]
    if not diff.changed:
        lines.append("No change in outcomes, digests, canaries or KV capacity.")
    for attribute, title in _SECTIONS:
        changes: list[Change] = getattr(diff, attribute)
        if not changes:
            continue
        shown, more = _limited(changes)
        lines.append("")
        lines.append(f"{title} ({len(changes)}):")
        for change in shown:
            note = f"  [{change.note}]" if change.note else ""
            lines.append(f"  {change.key}: {change.old} → {change.new}{note}")
        if more:
            lines.append(f"  … and {more} more")
    return "\n".join(lines) + "\n"


def format_markdown(diff: RunDiff) -> str:
    """The diff as Markdown (a heading and a table per area)."""
    lines = [
        f"## vsnap-qual compare: `{diff.old_run}` ({diff.old_verdict}) → `{diff.new_run}` ({diff.new_verdict})",
        "",
    ]
    if not diff.changed:
        lines += ["No change in outcomes, digests, canaries or KV capacity.", ""]
    for attribute, title in _SECTIONS:
        changes: list[Change] = getattr(diff, attribute)
        if not changes:
            continue
        shown, more = _limited(changes)
        lines += [f"### {title} ({len(changes)})", "", "| what | old | new | note |", "|---|---|---|---|"]
        lines += [f"| {cell(c.key)} | {cell(c.old)} | {cell(c.new)} | {cell(c.note)} |" for c in shown]
        if more:
            lines.append(f"| … and {more} more | | | |")
        lines.append("")
    return "\n".join(lines)
