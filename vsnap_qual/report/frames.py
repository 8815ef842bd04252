"""The tables of one run, as pandas DataFrames: digests, KV, timings, faults, cleanup, the step matrix.

They display what the steps recorded (their judgements included); they judge nothing themselves.

Every view (HTML, Markdown, terminal, run diff) renders from these frames, computed once per run
(:func:`compare_all`), so a number is computed once. Each frame's rows have a ``TypedDict`` here (its columns,
in order): the builders fill it from the typed evidence (``model.RunEvidence``), each record read as what its
step's results type declares (``procedure.results_as``), and :func:`rows` reads a frame back as it. The canaries
are no table: the views read each step's recorded judgement of them (``report.canary``). pandas is imported inside
the functions: importing this module stays cheap for ``pytest --help``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypedDict, TypeVar, cast

from vsnap_qual import model, overlay, procedure
from vsnap_qual.procedure import CREATE, ORDINARY, RESTORE_1, RESTORE_2, RESTORES, VS_HEAD, results_as
from vsnap_qual.report.chaos import artifact_outcome
from vsnap_qual.report.kinds import fault_kind
from vsnap_qual.report.recorded import (
    Audited,
    DigestCompared,
    Digested,
    Noticed,
    Ready,
    StepKey,
    latest_steps,
    reference_arm,
)

if TYPE_CHECKING:
    import pandas as pd

#: The digest table's columns: the reference, the two restores, and the base arm.
DIGEST_COLUMNS: tuple[str, ...] = (ORDINARY, RESTORE_1, RESTORE_2, "base")
#: A digest cell for a parameter the probe could not observe (``sha256: null``).
UNOBSERVABLE = "(unobservable)"
#: A parameter's status in the digest table, worst first: the list a recorded comparison named it in
#: (``checks.compare_digests``), else ``unchanged``.
DigestStatus = Literal["changed", "missing", "extra", "unobservable", "unchanged"]
_STATUS_RANK: dict[DigestStatus, int] = {"changed": 0, "missing": 1, "extra": 2, "unobservable": 3, "unchanged": 4}
_RECORDED: tuple[Literal["changed", "missing", "extra", "unobservable"], ...] = (
    "changed",
    "missing",
    "extra",
    "unobservable",
)

#: A row of the step matrix: lane, runner, arm, then one column per step (its outcome), faults, faults_ok.
MatrixRow = dict[str, str | bool | None]
Row = TypeVar("Row")


# ---------------------------------------------------------------------------------------------- rows
class DigestSummaryRow(TypedDict):
    runner: str
    columns: str
    total: int
    unchanged: int
    changed: int
    missing: int
    extra: int
    unobservable: int
    changed_names: list[str]
    missing_names: list[str]
    extra_names: list[str]
    text: str
    ok: bool | None
    #: how many of ``total`` are buffers (``named_buffers()``), and which changed ones are
    buffers: int
    changed_buffer_names: list[str]


class KvRow(TypedDict):
    runner: str
    arm: str
    ordinary: float | None
    snapshot: float | None
    restored: float | None
    delta: float | None
    delta_pct: float | None
    source: str | None


class TimingRow(TypedDict):
    runner: str
    arm: str
    step: str
    n: int
    median: float | None
    min: float | None
    max: float | None
    engine_median: float | None
    ready_median: float | None
    notice_latency_median: float | None


class ReadinessRow(TypedDict):
    runner: str
    arm: str
    cold_start: float | None
    restore_median: float | None
    restore_n: int
    speedup: float | None


class FaultRow(TypedDict):
    runner: str
    arm: str
    fault: str
    title: str
    expect: str | None
    expect_reason: str | None
    outcome: str
    #: skipped because the target has no such runner (its platform's words): not counted as skipped
    not_applicable: bool
    exit_code: int | None
    http_bound: bool | None
    expected_http_bound: bool | None
    expected_exit_code: int | str | None
    expected_fires: bool | None
    expected_artifact_unchanged: bool | None
    phase: str | None
    fired: bool | None
    artifact_unchanged: bool | None
    cleanup_ok: bool | None
    cleanup_judged: bool | None
    followup_exit: int | None
    followup_canary_ok: bool | None
    mismatches: str
    message: str
    #: the kill kind (issue 29): the signal and when it went (``SIGKILL at 1.65 s``; None: another kind), the
    #: phase reached, the killed tree's processes left before the harness's sweep, whether nothing outlived the
    #: sweep, and what became of a killed create's target (``chaos.artifact_outcome``)
    kill: str | None
    kill_phase: str | None
    kill_left: int | None
    kill_swept_ok: bool | None
    kill_artifact: str | None
    #: the weight-tamper kind (issue 28): what the restore made of the tampered weights, in words (None: another kind)
    tamper: str | None
    #: a fault that waits out the recovery deadline: the deadline and how it was derived, in words (None: another)
    deadline: str | None
    #: a refusal proved with its group (issue 45): whose follow-up restore proved it, or which refusals this step's
    #: follow-up restore proved, in words (None: it restored after itself alone)
    followup_group: str | None
    #: a kind refused before any engine starts, run once per image and arm (issue 45): where it ran and why, in
    #: words (None: it runs on every lane)
    runs_once: str | None


class CleanupRow(TypedDict):
    runner: str
    arm: str
    step: str
    pids_gone: bool | None
    ports_closed: bool | None
    gpu_idle: bool | None
    link_remaps_equal: bool | None
    ok: bool | None
    detail: str


class OverlayRow(TypedDict):
    runner: str
    arm: str
    module: str | None
    host_path: str | None
    image_path: str | None
    host_sha256: str | None
    processes: int
    matching: int
    roles: str
    ok: bool
    finding: str
    finding_detail: str


def _columns(row: type) -> list[str]:
    """A row type's fields, in order: its frame's columns."""
    return list(row.__annotations__)


def records(frame: pd.DataFrame) -> list[dict[str, object]]:
    """``frame`` as a list of row dictionaries with NaN turned into ``None`` (for templates and JSON). pandas
    gives its rows back untyped; :func:`rows` reads them as the row type the frame was built from."""
    found = frame.to_dict("records")
    return [{str(k): (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()} for row in found]


def rows(frame: pd.DataFrame, of: type[Row]) -> list[Row]:
    """``frame``'s rows as its row type ``of`` (``FaultRow`` …): the frames of this module are built from these
    types, column for column, so reading them back as the same type is the one place pandas' untyped rows meet
    the model."""
    return cast(list[Row], records(frame))


def _frame(found: Sequence[object], row: type) -> pd.DataFrame:
    """A frame of ``found`` rows, with the columns of their row type (also when there are none)."""
    import pandas as pd

    frame: pd.DataFrame = pd.DataFrame(found, columns=_columns(row))  # (pandas-stubs: the constructor is Any)
    return frame


def _float(value: float | None) -> float | None:
    """A recorded figure as the frames hold it (NaN, which JSON can carry, is no figure)."""
    return None if value is None or math.isnan(value) else float(value)


# ---------------------------------------------------------------------------------------------- digests


def digest_sources(run: model.RunEvidence, runner: str) -> dict[str, model.Step]:
    """Which step record feeds each digest column for ``runner`` (only columns that have digests)."""
    latest = latest_steps(run)
    ref_arm = reference_arm(run)
    sources: dict[str, model.Step] = {}
    for column in procedure.recording("digests"):
        step = latest.get((runner, ref_arm, column))
        if step is not None and digests_of(step):
            sources[column] = step
    for arm in run["arms"]:
        if arm == ref_arm:
            continue
        for step_name in (RESTORE_1, ORDINARY):
            step = latest.get((runner, arm, step_name))
            if step is not None and digests_of(step):
                sources["base"] = step
                break
        if "base" in sources:
            break
    return sources


def digests_of(step: model.Step) -> dict[str, model.Digest]:
    """The parameter digests a step recorded (none where its type records none)."""
    found = results_as(step, Digested)
    return (found or Digested()).get("digests") or {}


def digest_compare_of(step: model.Step | None) -> model.DigestCompare | None:
    """The comparison of digests a step recorded (a restore's, the base arm's with the head's)."""
    found = results_as(step, DigestCompared)
    return None if found is None else found.get("digest_compare")


def digest_frame(run: model.RunEvidence, runner: str) -> pd.DataFrame:
    """A row per parameter and buffer: its sha256 in each digest column, ``kind`` (``parameter`` or ``buffer``),
    ``status`` and ``changed_in``; changed first.

    ``status`` is what the recorded comparisons of the columns with the reference (:func:`column_compares`)
    named the parameter: ``changed``, ``missing`` (from a column), ``extra`` (in a column, not in the
    reference) or ``unobservable``, the worst over the columns; else ``unobservable`` when a digest shown is
    (nothing compared it), else ``unchanged``. ``changed_in``: the columns whose comparison named it changed.
    The report classifies nothing itself.
    """
    import numpy as np
    import pandas as pd

    sources = digest_sources(run, runner)
    columns = [c for c in DIGEST_COLUMNS if c in sources]
    data: dict[str, dict[str, str]] = {}
    shapes: dict[str, str] = {}
    dtypes: dict[str, str] = {}
    kinds: dict[str, str] = {}
    for column in columns:
        cells: dict[str, str] = {}
        for name, entry in digests_of(sources[column]).items():
            sha = entry.get("sha256")
            cells[name] = sha if sha else UNOBSERVABLE
            shapes.setdefault(name, "×".join(str(d) for d in entry.get("shape", [])))
            dtypes.setdefault(name, entry.get("dtype") or "")
            kinds.setdefault(name, "buffer" if entry.get("source") == "buffer" else "parameter")
        data[column] = cells
    names = list(dict.fromkeys(name for column in columns for name in data[column]))
    frame: pd.DataFrame = pd.DataFrame(  # (pandas-stubs type the constructor as returning Any)
        {column: [data[column].get(n) for n in names] for column in columns},
        index=pd.Index(names, name="parameter"),
        dtype=object,
    )
    if not columns:
        empty: pd.DataFrame = frame.assign(
            kind=pd.Series(dtype=object), status=pd.Series(dtype=object), changed_in=pd.Series(dtype=object)
        )
        return empty
    latest = latest_steps(run)
    recorded: dict[str, DigestStatus] = {}
    changed_in: dict[str, list[str]] = {}
    for column in columns:
        for compare in column_compares(latest, runner, column, sources[column]):
            for status in _RECORDED:
                for name in compare[status]:
                    if _STATUS_RANK[status] < _STATUS_RANK[recorded.get(name, "unchanged")]:
                        recorded[name] = status
                    if status == "changed" and column not in changed_in.setdefault(name, []):
                        changed_in[name].append(column)
    statuses = [
        recorded.get(n) or ("unobservable" if any(data[c].get(n) == UNOBSERVABLE for c in columns) else "unchanged")
        for n in names
    ]
    frame = frame.assign(
        shape=[shapes.get(n, "") for n in names],
        dtype=[dtypes.get(n, "") for n in names],
        kind=[kinds.get(n, "parameter") for n in names],
        status=statuses,
        changed_in=[" ".join(changed_in.get(n, [])) for n in names],
    )
    rank = frame["status"].map(_STATUS_RANK)
    ordered: pd.DataFrame = frame.iloc[np.argsort(rank.to_numpy(), kind="stable")]
    return ordered


def column_compares(
    latest: dict[StepKey, model.Step], runner: str, column: str, source: model.Step
) -> list[model.DigestCompare]:
    """The recorded comparisons of a digest column with the reference (the ordinary column): a restore's own
    ``digest_compare``; for the base column, the base arm's comparison with the head arm (``vs-head``) and,
    when the column shows a base restore, that restore's comparison with the base arm's ordinary server."""
    steps: list[model.Step] = []
    if column == "base" and (vs_head := latest.get((runner, source["arm"], VS_HEAD))) is not None:
        steps.append(vs_head)
    steps.append(source)  # a restore's own comparison (the ordinary reference's type records none)
    return [compare for step in steps if (compare := digest_compare_of(step)) is not None]


def digest_summary(run: model.RunEvidence, tables: dict[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """A row per runner: total, unchanged, changed, missing, extra, unobservable, their names, a summary line.

    When a runner's steps carry no raw digests, the restores' ``digest_compare`` records are used instead.
    """

    found: list[DigestSummaryRow] = []
    latest = latest_steps(run)
    for runner in run["runners"]:
        frame = tables[runner] if tables is not None and runner in tables else digest_frame(run, runner)
        columns = [c for c in DIGEST_COLUMNS if c in frame.columns]
        counts: dict[DigestStatus, int]
        names: dict[DigestStatus, list[str]]
        if len(frame) and len(columns) > 1:
            statuses = frame["status"]
            counts = {k: int((statuses == k).sum()) for k in _STATUS_RANK}
            names = {k: [str(n) for n in frame.index[statuses == k]] for k in _RECORDED}
            total, shown = len(frame), ", ".join(columns)
            is_buffer = frame["kind"] == "buffer"
            buffers = int(is_buffer.sum())
            changed_buffers = [str(n) for n in frame.index[is_buffer & (statuses == "changed")]]
        else:
            compared = _summary_from_compare(runner, latest, reference_arm(run))
            if compared is None:
                continue
            total, counts, names, buffers, changed_buffers = compared
            shown = "digest_compare"
        found.append(
            DigestSummaryRow(
                runner=runner,
                columns=shown,
                total=total,
                unchanged=counts["unchanged"],
                changed=counts["changed"],
                missing=counts["missing"],
                extra=counts["extra"],
                unobservable=counts["unobservable"],
                changed_names=names["changed"],
                missing_names=names["missing"],
                extra_names=names["extra"],
                text=_digest_text(total, counts, buffers, changed_buffers),
                ok=recorded_digest_ok(latest, runner),
                buffers=buffers,
                changed_buffer_names=changed_buffers,
            )
        )
    return _frame(found, DigestSummaryRow)


def recorded_digest_ok(latest: dict[StepKey, model.Step], runner: str) -> bool | None:
    """The run's own judgement of ``runner``'s digests: every ``digest_compare.ok`` its restores (and the base
    arm's comparison with the head arm) recorded (``checks.compare_digests``); None when none was recorded."""
    judged = [
        compare["ok"] for (r, _a, _s), step in latest.items() if r == runner and (compare := digest_compare_of(step))
    ]
    return all(judged) if judged else None


def _summary_from_compare(
    runner: str, latest: dict[StepKey, model.Step], arm: str
) -> tuple[int, dict[DigestStatus, int], dict[DigestStatus, list[str]], int, list[str]] | None:
    """(total, counts, names, buffers, changed buffers) from the restores' recorded ``digest_compare``, for a runner
    without digests."""
    found = [compare for s in RESTORES if (compare := digest_compare_of(latest.get((runner, arm, s)))) is not None]
    if not found:
        return None
    names: dict[DigestStatus, list[str]] = {k: list(dict.fromkeys(n for c in found for n in c[k])) for k in _RECORDED}
    total = max(c["total"] for c in found)
    seen = {n for k in ("changed", "missing", "unobservable") for n in names[k]}  # extra ones are beyond the total
    counts: dict[DigestStatus, int] = {k: len(v) for k, v in names.items()}
    counts["unchanged"] = max(0, total - len(seen))
    buffers = max(c.get("buffers", 0) for c in found)
    changed_buffers = list(dict.fromkeys(n for c in found for n in c.get("changed_buffers", [])))
    return total, counts, names, buffers, changed_buffers


def _digest_text(
    total: int, counts: dict[DigestStatus, int], buffers: int = 0, changed_buffers: Sequence[str] = ()
) -> str:
    """``130/131 unchanged (1 changed); 5 buffers, 1 changed``: buffers are counted apart."""
    text = f"{counts['unchanged']}/{total} unchanged"
    extra = [f"{counts[k]} {k}" for k in _RECORDED if counts[k]]
    text += f" ({', '.join(extra)})" if extra else ""
    if buffers:
        text += f"; {buffers} buffers" + (f", {len(changed_buffers)} changed" if changed_buffers else "")
    return text


# ---------------------------------------------------------------------------------------------- KV


def kv_frame(run: model.RunEvidence) -> pd.DataFrame:
    """Arm × runner: KV capacity in tokens, ordinary vs snapshot (create, else restore), Δ tokens and %."""
    latest = latest_steps(run)
    found: list[KvRow] = []
    for runner in run["runners"]:
        for arm in run["arms"]:
            ordinary = results_as(latest.get((runner, arm, ORDINARY)), model.OrdinaryResults) or model.OrdinaryResults()
            create = results_as(latest.get((runner, arm, CREATE)), model.CreateResults) or model.CreateResults()
            restore = results_as(latest.get((runner, arm, RESTORE_1)), model.RestoreResults) or model.RestoreResults()
            ordinary_kv = _float(ordinary.get("kv_tokens"))
            if ordinary_kv is None:
                ordinary_kv = _float(restore.get("kv_ordinary"))
            snapshot_kv = _float(create.get("kv_tokens"))
            if snapshot_kv is None:
                snapshot_kv = _float(restore.get("kv_tokens"))
            if ordinary_kv is None and snapshot_kv is None:
                continue
            delta = None if ordinary_kv is None or snapshot_kv is None else snapshot_kv - ordinary_kv
            found.append(
                KvRow(
                    runner=runner,
                    arm=arm,
                    ordinary=ordinary_kv,
                    snapshot=snapshot_kv,
                    restored=_float(restore.get("kv_tokens")),
                    delta=delta,
                    delta_pct=None if delta is None or not ordinary_kv else 100.0 * delta / ordinary_kv,
                    source=restore.get("kv_source") or ordinary.get("kv_source"),
                )
            )
    return _frame(found, KvRow)


# ---------------------------------------------------------------------------------------------- timings


def timing_frame(run: model.RunEvidence) -> pd.DataFrame:
    """Per (runner, arm, step): n, median/min/max wall seconds, and medians of the engine's own time (when
    the step records ``engine_seconds``), the ready time and the readiness-notice latency."""
    import pandas as pd

    found = [
        {
            "runner": s["runner"],
            "arm": s["arm"],
            "step": s["step"],
            "seconds": _float(s["seconds"]),
            "engine_seconds": _float(s.get("engine_seconds")),
            "ready_seconds": _float((results_as(s, Ready) or Ready()).get("ready_seconds")),
            "notice_latency_s": _float((results_as(s, Noticed) or Noticed()).get("notice_latency_s")),
        }
        for s in run["steps"]
    ]
    columns = _columns(TimingRow)
    if not found:
        return _frame([], TimingRow)
    frame: pd.DataFrame = pd.DataFrame(found)
    grouped = frame.groupby(["runner", "arm", "step"], sort=False)
    out = grouped["seconds"].agg(["count", "median", "min", "max"]).rename(columns={"count": "n"})
    out["engine_median"] = grouped["engine_seconds"].median()
    out["ready_median"] = grouped["ready_seconds"].median()
    out["notice_latency_median"] = grouped["notice_latency_s"].median()
    timings: pd.DataFrame = out.reset_index()[columns]
    return timings


def readiness_frame(run: model.RunEvidence) -> pd.DataFrame:
    """Per lane: cold start (ordinary serve ready time) vs restore ready time (median, n) and the speed-up."""
    import pandas as pd

    timings = timing_frame(run)
    found: list[ReadinessRow] = []
    for (runner, arm), group in timings.groupby(["runner", "arm"], sort=False):
        cold = group.loc[group["step"] == ORDINARY, "ready_median"].dropna()
        restores = [
            _float(restore.get("ready_seconds"))
            for s in run["steps"]
            if s["runner"] == runner
            and s["arm"] == arm
            and (restore := results_as(s, model.RestoreResults)) is not None
        ]
        restore_values = [v for v in restores if v is not None]
        if cold.empty and not restore_values:
            continue
        restore_median = float(pd.Series(restore_values).median()) if restore_values else None
        cold_value = float(cold.iloc[0]) if not cold.empty else None
        found.append(
            ReadinessRow(
                runner=str(runner),
                arm=str(arm),
                cold_start=cold_value,
                restore_median=restore_median,
                restore_n=len(restore_values),
                speedup=cold_value / restore_median if cold_value and restore_median else None,
            )
        )
    return _frame(found, ReadinessRow)


# --------------------------------------------------------------------------------------- faults, cleanup


def fault_frame(run: model.RunEvidence) -> pd.DataFrame:
    """A row per fault step: point, expected behaviour, exit, HTTP ever bound, phase, cleanup, follow-up."""
    found: list[FaultRow] = []
    latest = latest_steps(run)
    faults = {key: res for key, step in latest.items() if (res := results_as(step, model.FaultResults)) is not None}
    # a step skipped before its fault ran records no title: another lane's record of the same fault says it
    titles = {name: title for (_, _, name), res in faults.items() if (title := res.get("title"))}
    for (runner, arm, name), res in faults.items():
        step = latest[(runner, arm, name)]
        observed = res.get("observed", model.FaultObservation())
        expected = res.get("expected")
        cleanup = res.get("cleanup")
        followup = res.get("followup_restore", model.FollowupRestore())
        kill = _kill_fields(name, res)
        found.append(
            FaultRow(
                runner=runner,
                arm=arm,
                fault=res.get("fault") or name.split(":", 1)[1],
                title=res.get("title") or titles.get(name) or procedure.title(name),
                expect=res.get("expect"),
                expect_reason=res.get("expect_reason"),
                outcome=step["outcome"],
                not_applicable=step["outcome"] == "skipped" and step["message"].startswith(model.NOT_APPLICABLE_PREFIX),
                exit_code=observed.get("exit_code"),
                http_bound=observed.get("http_bound"),
                expected_http_bound=expected["http_bound"] if expected else None,
                expected_exit_code=expected["exit_code"] if expected else None,
                expected_fires=expected["fires"] if expected else None,
                expected_artifact_unchanged=expected["artifact_unchanged"] if expected else None,
                phase=observed.get("phase"),
                fired=observed.get("fired"),
                artifact_unchanged=observed.get("artifact_unchanged"),
                cleanup_ok=cleanup.get("ok") if cleanup else None,
                cleanup_judged=cleanup.get("judged") if cleanup else None,
                followup_exit=followup.get("exit_code"),
                followup_canary_ok=followup.get("canary_ok"),
                mismatches="; ".join(res.get("mismatches", [])),
                message=step["message"],
                kill=kill[0],
                kill_phase=kill[1],
                kill_left=kill[2],
                kill_swept_ok=kill[3],
                kill_artifact=kill[4],
                tamper=(res.get("weight_tamper") or {}).get("said"),
                deadline=deadline_words(res["recovery_deadline"]) if "recovery_deadline" in res else None,
                followup_group=group_words(res.get("group_followup") or model.GroupFollowup()),
                runs_once=once_words(res.get("runs_once")),
            )
        )
    return _frame(found, FaultRow)


def group_words(record: model.GroupFollowup) -> str | None:
    """A refusal's follow-up restore with its group in words (None: it restored after itself alone)."""
    if "deferred_to" in record:
        return f"follow-up restore with its group's, at {record['deferred_to']}"
    covered = record.get("covered") or []
    if len(covered) > 1:
        said = f"one follow-up restore for {len(covered)} refusals ({', '.join(covered)})"
        return said + (f"; bisected: {record['words']}" if record.get("words") else "")
    return None


def once_words(record: model.RunsOnce | None) -> str | None:
    """Where a fault of a kind refused before any engine starts ran, and why, in words (None: it runs on every
    lane): ``ran here for v2-head too: runs once per image and arm: …`` or ``not run here: runs once …; run on
    v1-head instead``."""
    if not record:
        return None
    why = record.get("why") or model.RUNS_ONCE
    if record.get("ran_on"):
        return f"not run here: {why}; run on {record['ran_on']} instead"
    if record.get("stands_for"):
        return f"ran here for {', '.join(record['stands_for'])} too: {why}"
    return why


def deadline_words(record: model.RecoveryDeadline) -> str | None:
    """A stall fault's recovery deadline in words: ``recovery deadline 11 s: max(10, 3 × 1.83 s restore + 5, …)``
    (None: none recorded)."""
    if "deadline_s" not in record:
        return None
    return f"recovery deadline {record['deadline_s']:g} s: {record.get('rule', '')}"


def _kill_fields(
    name: str, res: model.FaultResults
) -> tuple[str | None, str | None, int | None, bool | None, str | None]:
    """The kill kind's fields of a fault row (``FaultRow.kill`` …; all None for another kind, or a kill that drew
    no moment)."""
    if fault_kind(name.removeprefix(procedure.FAULT_PREFIX), res) != "kill" or "seed" not in res.get("injected", {}):
        return None, None, None, None, None
    injected = cast(model.KillInjected, res.get("injected"))  # the kill kind's record (it drew its moment)
    cleanup = res.get("cleanup") or model.CleanupAudit()
    sent = injected.get("sent_after_s")
    return (
        f"{injected.get('signal')} at {sent:g} s" if injected.get("sent") and sent is not None else None,
        injected.get("phase"),
        len(cleanup.get("leftover_processes") or []),
        (cleanup.get("after_sweep") or {}).get("ok"),
        artifact_outcome(res),
    )


def cleanup_frame(run: model.RunEvidence) -> pd.DataFrame:
    """A row per step that carries a cleanup audit: PIDs gone, ports closed, GPU idle, link remaps, ok."""
    found = [
        CleanupRow(
            runner=runner,
            arm=arm,
            step=name,
            pids_gone=audit.get("pids_gone"),
            ports_closed=audit.get("ports_closed"),
            gpu_idle=audit.get("gpu_idle"),
            link_remaps_equal=audit.get("link_remaps_equal"),
            ok=audit.get("ok"),
            detail=audit.get("detail") or "",
        )
        for (runner, arm, name), step in latest_steps(run).items()
        if (audit := judged_audit(cleanup_of(step)))
    ]
    return _frame(found, CleanupRow)


def cleanup_of(step: model.Step) -> model.CleanupAudit | None:
    """The cleanup audit a step recorded (none where its type records none)."""
    found = results_as(step, Audited)
    return None if found is None else found.get("cleanup")


def judged_audit(audit: model.CleanupAudit | None) -> model.CleanupAudit | None:
    """The audit a step is judged by: vLLM's own cleanup where it is judged; else, for the kill kind, the audit
    after the harness's sweep (``after_sweep``, always judged); else none (recorded, not judged)."""
    if not audit:
        return None
    swept = audit.get("after_sweep")
    if audit.get("judged", True):
        if swept and not swept.get("ok", False):
            return {**audit, "ok": False, "detail": "left after the harness's sweep: " + (swept.get("detail") or "")}
        return audit
    return swept or None


# --------------------------------------------------------------------------------------- matrix, overlay


def _not_applicable(step: model.Step) -> bool:
    return step["outcome"] == "skipped" and str(step.get("message") or "").startswith(model.NOT_APPLICABLE_PREFIX)


def step_matrix(run: model.RunEvidence) -> pd.DataFrame:
    """Lane × step: each non-fault step's outcome (``None`` if not run); ``faults`` is ``passed/total``."""
    import pandas as pd

    latest = latest_steps(run)
    seen_steps = list(dict.fromkeys(key[2] for key in latest))
    # Core steps in lane order, then any other non-fault step (e.g. a cross-arm check) as it first appeared.
    columns = [s for s in procedure.DISPLAY_ORDER if s in seen_steps] + [
        s for s in seen_steps if s not in procedure.DISPLAY_ORDER and not procedure.is_fault_step(s)
    ]
    found: list[MatrixRow] = []
    for lane in run["lanes"]:
        runner, arm = lane["runner"], lane["arm"]
        row: MatrixRow = {"lane": f"{runner}/{arm}", "runner": runner, "arm": arm}
        for step in columns:
            record = latest.get((runner, arm, step))
            row[step] = record["outcome"] if record else None
        faults = [s for (r, a, name), s in latest.items() if r == runner and a == arm and procedure.is_fault_step(name)]
        # a fault that does not apply to the lane (its platform lacks the runner) is neither passed nor failed: a
        # lane where none applies reads "not applicable", never a red 0/12
        applicable = [s for s in faults if not _not_applicable(s)]
        passed = sum(1 for s in applicable if s["outcome"] == "passed")
        if faults and not applicable:
            row["faults"] = "not applicable"
        else:
            skipped = len(faults) - len(applicable)
            row["faults"] = (
                (f"{passed}/{len(applicable)}" + (f" ({skipped} not applicable)" if skipped else ""))
                if faults
                else None
            )
        row["faults_ok"] = None if not applicable else passed == len(applicable)
        found.append(row)
    matrix: pd.DataFrame = pd.DataFrame(found, columns=["lane", "runner", "arm", *columns, "faults", "faults_ok"])
    return matrix


def overlay_frame(run: model.RunEvidence) -> pd.DataFrame:
    """A row per (lane, overlaid file): module, host hash, importing processes, matching hashes, ok."""
    found: list[OverlayRow] = []
    for (runner, arm, _), step in latest_steps(run).items():
        verified = results_as(step, model.OverlayResults)
        if verified is None:
            continue
        for entry in verified.get("files", []):
            imported = entry.get("imported", [])
            host_sha = entry.get("host_sha256")
            matching = [i for i in imported if i["sha256"] == host_sha]
            found.append(
                OverlayRow(
                    runner=runner,
                    arm=arm,
                    module=entry.get("module"),
                    host_path=entry.get("host_path"),
                    image_path=entry.get("image_path"),
                    host_sha256=host_sha,
                    processes=len(imported),
                    matching=len(matching),
                    roles=", ".join(sorted({str(i["role"]) for i in imported})),
                    ok=bool(entry.get("ok")),
                    finding=entry.get("finding") or _overlay_finding(entry, imported),
                    finding_detail=entry.get("finding_detail") or "",
                )
            )
    return _frame(found, OverlayRow)


def _overlay_finding(entry: model.OverlayFileResult, imported: list[model.ImportedModule]) -> str:
    """The finding of evidence that recorded none (older runs): from the file's recorded ``ok`` and whether any
    engine process imported it."""
    if not entry.get("ok"):
        return overlay.OVERLAY_NOT_IN_EFFECT
    return overlay.OVERLAY_IN_EFFECT if imported else overlay.OVERLAY_NOT_IMPORTED


@dataclass(frozen=True)
class Comparisons:
    """Every comparison of one run, computed once and shared by the verdict and the views."""

    digest_tables: dict[str, pd.DataFrame]
    digests: pd.DataFrame
    kv: pd.DataFrame
    timings: pd.DataFrame
    readiness: pd.DataFrame
    faults: pd.DataFrame
    cleanup: pd.DataFrame
    matrix: pd.DataFrame
    overlay: pd.DataFrame


def compare_all(run: model.RunEvidence) -> Comparisons:
    """Compute every comparison frame for ``run`` (``results.json`` is one)."""
    tables = {runner: digest_frame(run, runner) for runner in run["runners"]}
    return Comparisons(
        digest_tables=tables,
        digests=digest_summary(run, tables),
        kv=kv_frame(run),
        timings=timing_frame(run),
        readiness=readiness_frame(run),
        faults=fault_frame(run),
        cleanup=cleanup_frame(run),
        matrix=step_matrix(run),
        overlay=overlay_frame(run),
    )
