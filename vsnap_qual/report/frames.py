"""The tables of one run, as pandas DataFrames: digests, canary, KV, timings, faults, cleanup, the step matrix.

They display what the steps recorded (their judgements included); they judge nothing themselves.

Every view (HTML, Markdown, terminal, run diff) renders from these frames, so a number is computed once.
pandas is imported inside the functions: importing this module stays cheap for ``pytest --help``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vsnap_qual import overlay, procedure
from vsnap_qual.procedure import CANARY_STEPS, CREATE, ORDINARY, OVERLAY, RESTORE_1, RESTORE_2, RESTORES, VS_HEAD
from vsnap_qual.report.assemble import CORE_STEPS, as_dict, as_list, is_fault_step, option_value

if TYPE_CHECKING:
    import pandas as pd

#: The digest table's columns: the reference, the two restores, and the base arm.
DIGEST_COLUMNS: tuple[str, ...] = (ORDINARY, RESTORE_1, RESTORE_2, "base")
#: A digest cell for a parameter the probe could not observe (``sha256: null``).
UNOBSERVABLE = "(unobservable)"
_STATUS_RANK = {"changed": 0, "missing": 1, "unobservable": 2, "unchanged": 3}
_CANARY_STEPS = CANARY_STEPS

StepKey = tuple[str, str, str]


def latest_steps(results: Mapping[str, Any]) -> dict[StepKey, dict[str, Any]]:
    """The last record of each (runner, arm, step): a repeated step is judged by its last run."""
    latest: dict[StepKey, dict[str, Any]] = {}
    for step in results.get("steps", []):
        latest[(str(step.get("runner")), str(step.get("arm")), str(step.get("step")))] = step
    return latest


def _results(step: Mapping[str, Any] | None) -> dict[str, Any]:
    if not step:
        return {}
    found = step.get("results")
    return found if isinstance(found, dict) else {}


def _reference_arm(results: Mapping[str, Any]) -> str:
    arms = list(results.get("arms") or [])
    return "head" if "head" in arms or not arms else arms[0]


def _tolerance(results: Mapping[str, Any]) -> float | None:
    value = option_value(results, "logprob-tolerance")
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return None if isinstance(value, float) and math.isnan(value) else float(value)


# ---------------------------------------------------------------------------------------------- digests


def digest_sources(results: Mapping[str, Any], runner: str) -> dict[str, dict[str, Any]]:
    """Which step record feeds each digest column for ``runner`` (only columns that have digests)."""
    latest = latest_steps(results)
    ref_arm = _reference_arm(results)
    sources: dict[str, dict[str, Any]] = {}
    for column in (ORDINARY, *RESTORES):
        step = latest.get((runner, ref_arm, column))
        if as_dict(_results(step).get("digests")):
            sources[column] = step  # type: ignore[assignment]
    for arm in results.get("arms") or []:
        if arm == ref_arm:
            continue
        for step_name in (RESTORE_1, ORDINARY):
            step = latest.get((runner, arm, step_name))
            if as_dict(_results(step).get("digests")):
                sources["base"] = step  # type: ignore[assignment]
                break
        if "base" in sources:
            break
    return sources


def digest_frame(results: Mapping[str, Any], runner: str) -> pd.DataFrame:
    """A row per parameter: its sha256 in each digest column, ``status`` and ``changed_in``; changed first.

    ``status`` is ``changed`` (an observed digest differs from ordinary), ``missing`` (absent from a column),
    ``unobservable`` (the probe could not hash it) or ``unchanged``.
    """
    import numpy as np
    import pandas as pd

    sources = digest_sources(results, runner)
    columns = [c for c in DIGEST_COLUMNS if c in sources]
    data: dict[str, dict[str, str]] = {}
    shapes: dict[str, str] = {}
    dtypes: dict[str, str] = {}
    for column in columns:
        cells: dict[str, str] = {}
        for name, value in as_dict(_results(sources[column]).get("digests")).items():
            entry = as_dict(value)
            sha = entry.get("sha256")
            cells[name] = sha if isinstance(sha, str) and sha else UNOBSERVABLE
            shapes.setdefault(name, "×".join(str(d) for d in as_list(entry.get("shape"))))
            dtypes.setdefault(name, str(entry.get("dtype") or ""))
        data[column] = cells
    names = list(dict.fromkeys(name for column in columns for name in data[column]))
    frame = pd.DataFrame(
        {column: [data[column].get(n) for n in names] for column in columns},
        index=pd.Index(names, name="parameter"),
        dtype=object,
    )
    if not columns:
        return frame.assign(status=pd.Series(dtype=object), changed_in=pd.Series(dtype=object))
    ref_column = columns[0]
    ref = frame[ref_column]
    others = [c for c in columns if c != ref_column]
    present = frame[columns].notna()
    missing = ~present.all(axis=1)
    unobservable = (frame[columns] == UNOBSERVABLE).any(axis=1)
    observed_ref = ref.notna() & (ref != UNOBSERVABLE)
    differs = pd.DataFrame(
        {c: observed_ref & frame[c].notna() & (frame[c] != UNOBSERVABLE) & (frame[c] != ref) for c in others},
        index=frame.index,
    )
    changed = differs.any(axis=1) if others else pd.Series(False, index=frame.index)
    status = np.select([changed, missing, unobservable], ["changed", "missing", "unobservable"], "unchanged")
    changed_in = pd.Series("", index=frame.index, dtype=object)
    for c in others:
        changed_in = changed_in + np.where(differs[c], c + " ", "")
    frame = frame.assign(
        shape=[shapes.get(n, "") for n in names],
        dtype=[dtypes.get(n, "") for n in names],
        status=status,
        changed_in=changed_in.str.strip(),
    )
    rank = frame["status"].map(_STATUS_RANK)
    return frame.iloc[np.argsort(rank.to_numpy(), kind="stable")]


def digest_summary(results: Mapping[str, Any], tables: Mapping[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """A row per runner: total, unchanged, changed, missing, unobservable, changed names, a summary line.

    When a runner's steps carry no raw digests, the restores' ``digest_compare`` records are used instead.
    """
    import pandas as pd

    rows: list[dict[str, Any]] = []
    latest = latest_steps(results)
    for runner in results.get("runners") or []:
        frame = tables[runner] if tables is not None and runner in tables else digest_frame(results, runner)
        columns = [c for c in DIGEST_COLUMNS if c in frame.columns]
        row: dict[str, Any] | None
        if len(frame) and len(columns) > 1:
            counts = frame["status"].value_counts()
            total = len(frame)
            row = {
                "runner": runner,
                "columns": ", ".join(columns),
                "total": total,
                "unchanged": int(counts.get("unchanged", 0)),
                "changed": int(counts.get("changed", 0)),
                "missing": int(counts.get("missing", 0)),
                "unobservable": int(counts.get("unobservable", 0)),
                "changed_names": list(frame.index[frame["status"] == "changed"]),
                "missing_names": list(frame.index[frame["status"] == "missing"]),
            }
        else:
            row = _summary_from_compare(runner, latest, _reference_arm(results))
            if row is None:
                continue
        row["text"] = _digest_text(row)
        row["ok"] = recorded_digest_ok(latest, runner)
        rows.append(row)
    return pd.DataFrame(
        rows,
        columns=[
            "runner",
            "columns",
            "total",
            "unchanged",
            "changed",
            "missing",
            "unobservable",
            "changed_names",
            "missing_names",
            "text",
            "ok",
        ],
    )


def recorded_digest_ok(latest: Mapping[StepKey, dict[str, Any]], runner: str) -> bool | None:
    """The run's own judgement of ``runner``'s digests: every ``digest_compare.ok`` its restores (and the base
    arm's comparison with the head arm) recorded (``engine.compare_digests``); None when none was recorded."""
    found = [
        _results(step).get("digest_compare")
        for (r, _a, name), step in latest.items()
        if r == runner and name in (*RESTORES, VS_HEAD)
    ]
    judged = [c for c in found if isinstance(c, dict) and isinstance(c.get("ok"), bool)]
    if not judged:
        return None
    return all(c["ok"] for c in judged)


def _summary_from_compare(runner: str, latest: Mapping[StepKey, dict[str, Any]], arm: str) -> dict[str, Any] | None:
    compares = [_results(latest.get((runner, arm, s))).get("digest_compare") for s in RESTORES]
    found = [c for c in compares if isinstance(c, dict)]
    if not found:
        return None
    changed = list(dict.fromkeys(str(n) for c in found for n in as_list(c.get("changed"))))
    missing = list(dict.fromkeys(str(n) for c in found for n in as_list(c.get("missing"))))
    unobservable = list(dict.fromkeys(str(n) for c in found for n in as_list(c.get("unobservable"))))
    total = max(int(_number(c.get("total")) or 0) for c in found)
    return {
        "runner": runner,
        "columns": "digest_compare",
        "total": total,
        "unchanged": max(0, total - len(set(changed) | set(missing) | set(unobservable))),
        "changed": len(changed),
        "missing": len(missing),
        "unobservable": len(unobservable),
        "changed_names": changed,
        "missing_names": missing,
    }


def _digest_text(row: Mapping[str, Any]) -> str:
    text = f"{row['unchanged']}/{row['total']} unchanged"
    extra = [f"{row[k]} {k}" for k in ("changed", "missing", "unobservable") if row[k]]
    return text + (f" ({', '.join(extra)})" if extra else "")


# ---------------------------------------------------------------------------------------------- canary


def canary_frame(results: Mapping[str, Any]) -> pd.DataFrame:
    """Prompt × (runner, arm, step): token ids, text, logprob, Δ vs the runner's ordinary reference, status.

    ``status`` is ``reference``, ``bit-exact``, ``within tolerance``, ``mismatch`` (the step's own recorded
    ``canary_compare``), or ``not judged`` (``ok`` None) when the step recorded no comparison: the report shows
    the step's judgement and never makes its own.
    """
    import pandas as pd

    tolerance = _tolerance(results)
    latest = latest_steps(results)
    ref_arm = _reference_arm(results)
    rows: list[dict[str, Any]] = []
    for runner in results.get("runners") or []:
        for arm in results.get("arms") or []:
            reference_step = latest.get((runner, arm, ORDINARY)) or latest.get((runner, ref_arm, ORDINARY))
            reference = {_canary_key(c): c for c in _canaries(_results(reference_step).get("canary"))}
            for step_name in _CANARY_STEPS:
                step = latest.get((runner, arm, step_name))
                canaries = _canaries(_results(step).get("canary"))
                if step is None or not canaries:
                    continue
                compares = {_canary_key(c): c for c in _canaries(_results(step).get("canary_compare"))}
                is_reference = step is reference_step
                for index, canary in enumerate(canaries):
                    prompt = _canary_key(canary)
                    rows.append(
                        _canary_row(
                            runner,
                            arm,
                            step_name,
                            index,
                            canary,
                            reference.get(prompt),
                            compares.get(prompt),
                            is_reference,
                            tolerance,
                        )
                    )
    return pd.DataFrame(
        rows,
        columns=[
            "runner",
            "arm",
            "step",
            "index",
            "prompt",
            "token_ids",
            "text",
            "logprob",
            "reference_logprob",
            "delta",
            "status",
            "ok",
            "tokens",
            "first_divergence",
        ],
    )


def _canaries(value: Any) -> list[dict[str, Any]]:
    return [c for c in as_list(value) if isinstance(c, dict)]


def _prompt(canary: Mapping[str, Any]) -> str:
    return str(canary.get("prompt", ""))


def _tokens(canary: Mapping[str, Any]) -> int:
    """How many tokens a canary (or a comparison) generated: vLLM's one-token canary, or a multi-token one."""
    if isinstance(canary.get("tokens"), int):
        return int(canary["tokens"])
    expected = canary.get("expected")
    ids = (
        canary.get("token_ids")
        if "token_ids" in canary
        else (expected if isinstance(expected, dict) else {}).get("token_ids")
    )
    return len(as_list(ids)) or 1


def _canary_key(canary: Mapping[str, Any]) -> tuple[str, int]:
    """A canary is its prompt and its length (the same prompt runs as the one-token canary and a long one)."""
    return (_prompt(canary), _tokens(canary))


def _canary_row(
    runner: str,
    arm: str,
    step: str,
    index: int,
    canary: Mapping[str, Any],
    reference: Mapping[str, Any] | None,
    compare: Mapping[str, Any] | None,
    is_reference: bool,
    tolerance: float | None,
) -> dict[str, Any]:
    logprob = _number(canary.get("logprob"))
    ref_logprob = _number(reference.get("logprob")) if reference else None
    delta = None if logprob is None or ref_logprob is None else logprob - ref_logprob
    divergence = None
    if is_reference:
        status, ok = "reference", True
    elif compare is not None:
        delta = _number(compare.get("logprob_delta")) if compare.get("logprob_delta") is not None else delta
        if compare.get("max_logprob_delta") is not None:
            delta = _number(compare.get("max_logprob_delta"))
        divergence = compare.get("first_divergence")
        ok = bool(compare.get("ok"))
        if not ok:
            status = "mismatch"
        elif compare.get("bit_exact"):
            status = "bit-exact"
        else:
            status = "within tolerance"
    else:
        status, ok = "not judged", None
    return {
        "runner": runner,
        "arm": arm,
        "step": step,
        "index": index,
        "prompt": str(canary.get("prompt", "")),
        "token_ids": " ".join(str(t) for t in as_list(canary.get("token_ids"))),
        "text": str(canary.get("text", "")),
        "logprob": logprob,
        "reference_logprob": ref_logprob,
        "delta": delta,
        "status": status,
        "ok": ok,
        "tokens": _tokens(canary),
        "first_divergence": divergence,
    }


def canary_summary(results: Mapping[str, Any]) -> pd.DataFrame:
    """A row per (runner, arm, restore step): prompts, equal, bit-exact, max |Δ logprob|, ok."""
    return _canary_summary(canary_frame(results))


def _canary_summary(frame: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    frame = frame[frame["status"] != "reference"]
    rows: list[dict[str, Any]] = []
    for (runner, arm, step), group in frame.groupby(["runner", "arm", "step"], sort=False):
        deltas = group["delta"].dropna().abs()
        rows.append(
            {
                "runner": runner,
                "arm": arm,
                "step": step,
                "prompts": len(group),
                "equal": int(group["ok"].sum()),
                "bit_exact": int((group["status"] == "bit-exact").sum()),
                "max_abs_delta": float(deltas.max()) if len(deltas) else None,
                "ok": bool((group["ok"] == True).all()),  # noqa: E712 (None: not judged)
            }
        )
    return pd.DataFrame(rows, columns=["runner", "arm", "step", "prompts", "equal", "bit_exact", "max_abs_delta", "ok"])


# ---------------------------------------------------------------------------------------------- KV


def kv_frame(results: Mapping[str, Any]) -> pd.DataFrame:
    """Arm × runner: KV capacity in tokens, ordinary vs snapshot (create, else restore), Δ tokens and %."""
    import pandas as pd

    latest = latest_steps(results)
    rows: list[dict[str, Any]] = []
    for runner in results.get("runners") or []:
        for arm in results.get("arms") or []:
            ordinary = _results(latest.get((runner, arm, ORDINARY)))
            create = _results(latest.get((runner, arm, CREATE)))
            restore = _results(latest.get((runner, arm, RESTORE_1)))
            ordinary_kv = _number(ordinary.get("kv_tokens"))
            if ordinary_kv is None:
                ordinary_kv = _number(restore.get("kv_ordinary"))
            snapshot_kv = _number(create.get("kv_tokens"))
            if snapshot_kv is None:
                snapshot_kv = _number(restore.get("kv_tokens"))
            restored_kv = _number(restore.get("kv_tokens"))
            if ordinary_kv is None and snapshot_kv is None:
                continue
            delta = None if ordinary_kv is None or snapshot_kv is None else snapshot_kv - ordinary_kv
            rows.append(
                {
                    "runner": runner,
                    "arm": arm,
                    "ordinary": ordinary_kv,
                    "snapshot": snapshot_kv,
                    "restored": restored_kv,
                    "delta": delta,
                    "delta_pct": None if delta is None or not ordinary_kv else 100.0 * delta / ordinary_kv,
                    "source": restore.get("kv_source") or ordinary.get("kv_source"),
                }
            )
    return pd.DataFrame(
        rows, columns=["runner", "arm", "ordinary", "snapshot", "restored", "delta", "delta_pct", "source"]
    )


# ---------------------------------------------------------------------------------------------- timings


def timing_frame(results: Mapping[str, Any]) -> pd.DataFrame:
    """Per (runner, arm, step): n, median/min/max wall seconds, and medians of the engine's own time (when
    the step records ``engine_seconds``), the ready time and the readiness-notice latency."""
    import pandas as pd

    rows = [
        {
            "runner": str(s.get("runner")),
            "arm": str(s.get("arm")),
            "step": str(s.get("step")),
            "seconds": _number(s.get("seconds")),
            "engine_seconds": _number(s.get("engine_seconds")),
            "ready_seconds": _number(_results(s).get("ready_seconds")),
            "notice_latency_s": _number(_results(s).get("notice_latency_s")),
        }
        for s in results.get("steps", [])
    ]
    columns = [
        "runner",
        "arm",
        "step",
        "n",
        "median",
        "min",
        "max",
        "engine_median",
        "ready_median",
        "notice_latency_median",
    ]
    if not rows:
        return pd.DataFrame(columns=columns)
    frame = pd.DataFrame(rows)
    grouped = frame.groupby(["runner", "arm", "step"], sort=False)
    out = grouped["seconds"].agg(["count", "median", "min", "max"]).rename(columns={"count": "n"})
    out["engine_median"] = grouped["engine_seconds"].median()
    out["ready_median"] = grouped["ready_seconds"].median()
    out["notice_latency_median"] = grouped["notice_latency_s"].median()
    return out.reset_index()[columns]


def readiness_frame(results: Mapping[str, Any]) -> pd.DataFrame:
    """Per lane: cold start (ordinary serve ready time) vs restore ready time (median, n) and the speed-up."""
    import pandas as pd

    timings = timing_frame(results)
    rows: list[dict[str, Any]] = []
    for (runner, arm), group in timings.groupby(["runner", "arm"], sort=False):
        cold = group.loc[group["step"] == ORDINARY, "ready_median"].dropna()
        restores = [
            _number(_results(s).get("ready_seconds"))
            for s in results.get("steps", [])
            if s.get("runner") == runner and s.get("arm") == arm and s.get("step") in RESTORES
        ]
        restore_values = [v for v in restores if v is not None]
        if cold.empty and not restore_values:
            continue
        restore_median = float(pd.Series(restore_values).median()) if restore_values else None
        cold_value = float(cold.iloc[0]) if not cold.empty else None
        rows.append(
            {
                "runner": runner,
                "arm": arm,
                "cold_start": cold_value,
                "restore_median": restore_median,
                "restore_n": len(restore_values),
                "speedup": cold_value / restore_median if cold_value and restore_median else None,
            }
        )
    return pd.DataFrame(rows, columns=["runner", "arm", "cold_start", "restore_median", "restore_n", "speedup"])


# --------------------------------------------------------------------------------------- faults, cleanup


def fault_frame(results: Mapping[str, Any]) -> pd.DataFrame:
    """A row per fault step: point, expected behaviour, exit, HTTP ever bound, phase, cleanup, follow-up."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for key, step in latest_steps(results).items():
        if not is_fault_step(key[2]):
            continue
        res = _results(step)
        observed = as_dict(res.get("observed"))
        cleanup = as_dict(res.get("cleanup"))
        followup = as_dict(res.get("followup_restore"))
        rows.append(
            {
                "runner": key[0],
                "arm": key[1],
                "fault": str(res.get("fault") or key[2].split(":", 1)[1]),
                "title": str(res.get("title") or procedure.title(key[2])),
                "expect": res.get("expect"),
                "expect_reason": res.get("expect_reason"),
                "outcome": step.get("outcome"),
                "exit_code": observed.get("exit_code"),
                "http_bound": observed.get("http_bound"),
                "expected_http_bound": as_dict(res.get("expected")).get("http_bound"),
                "expected_exit_code": as_dict(res.get("expected")).get("exit_code"),
                "expected_fires": as_dict(res.get("expected")).get("fires"),
                "expected_artifact_unchanged": as_dict(res.get("expected")).get("artifact_unchanged"),
                "phase": observed.get("phase"),
                "fired": observed.get("fired"),
                "artifact_unchanged": observed.get("artifact_unchanged"),
                "cleanup_ok": cleanup.get("ok") if cleanup else None,
                "cleanup_judged": cleanup.get("judged") if cleanup else None,
                "followup_exit": followup.get("exit_code"),
                "followup_canary_ok": followup.get("canary_ok"),
                "mismatches": "; ".join(str(m) for m in as_list(res.get("mismatches"))),
                "message": step.get("message") or "",
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "runner",
            "arm",
            "fault",
            "title",
            "expect",
            "expect_reason",
            "outcome",
            "exit_code",
            "http_bound",
            "expected_http_bound",
            "expected_exit_code",
            "expected_fires",
            "expected_artifact_unchanged",
            "phase",
            "fired",
            "artifact_unchanged",
            "cleanup_ok",
            "cleanup_judged",
            "followup_exit",
            "followup_canary_ok",
            "mismatches",
            "message",
        ],
    )


def cleanup_frame(results: Mapping[str, Any]) -> pd.DataFrame:
    """A row per step that carries a cleanup audit: PIDs gone, ports closed, GPU idle, link remaps, ok."""
    import pandas as pd

    rows = [
        {
            "runner": key[0],
            "arm": key[1],
            "step": key[2],
            **{k: audit.get(k) for k in ("pids_gone", "ports_closed", "gpu_idle", "link_remaps_equal", "ok")},
            "detail": str(audit.get("detail") or ""),
        }
        for key, step in latest_steps(results).items()
        if isinstance(audit := _results(step).get("cleanup"), dict) and audit and audit.get("judged", True)
    ]
    return pd.DataFrame(
        rows,
        columns=[
            "runner",
            "arm",
            "step",
            "pids_gone",
            "ports_closed",
            "gpu_idle",
            "link_remaps_equal",
            "ok",
            "detail",
        ],
    )


# --------------------------------------------------------------------------------------- matrix, overlay


def step_matrix(results: Mapping[str, Any]) -> pd.DataFrame:
    """Lane × step: each non-fault step's outcome (``None`` if not run); ``faults`` is ``passed/total``."""
    import pandas as pd

    latest = latest_steps(results)
    seen_steps = list(dict.fromkeys(key[2] for key in latest))
    # Core steps in lane order, then any other non-fault step (e.g. a cross-arm check) as it first appeared.
    columns = [s for s in CORE_STEPS if s in seen_steps] + [
        s for s in seen_steps if s not in CORE_STEPS and not is_fault_step(s)
    ]
    rows: list[dict[str, Any]] = []
    for lane in results.get("lanes") or []:
        runner, arm = lane["runner"], lane["arm"]
        row: dict[str, Any] = {"lane": f"{runner}/{arm}", "runner": runner, "arm": arm}
        for step in columns:
            record = latest.get((runner, arm, step))
            row[step] = record.get("outcome") if record else None
        faults = [s for (r, a, name), s in latest.items() if r == runner and a == arm and is_fault_step(name)]
        passed = sum(1 for s in faults if s.get("outcome") == "passed")
        row["faults"] = f"{passed}/{len(faults)}" if faults else None
        row["faults_ok"] = None if not faults else passed == len(faults)
        rows.append(row)
    return pd.DataFrame(rows, columns=["lane", "runner", "arm", *columns, "faults", "faults_ok"])


def overlay_frame(results: Mapping[str, Any]) -> pd.DataFrame:
    """A row per (lane, overlaid file): module, host hash, importing processes, matching hashes, ok."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for (runner, arm, step_name), step in latest_steps(results).items():
        if step_name != OVERLAY:
            continue
        for entry in map(as_dict, as_list(_results(step).get("files"))):
            imported = [as_dict(i) for i in as_list(entry.get("imported"))]
            host_sha = entry.get("host_sha256")
            matching = [i for i in imported if i.get("sha256") == host_sha]
            rows.append(
                {
                    "runner": runner,
                    "arm": arm,
                    "module": entry.get("module"),
                    "host_path": entry.get("host_path"),
                    "image_path": entry.get("image_path"),
                    "host_sha256": host_sha,
                    "processes": len(imported),
                    "matching": len(matching),
                    "roles": ", ".join(sorted({str(i.get("role")) for i in imported})),
                    "ok": bool(entry.get("ok")),
                    "finding": str(entry.get("finding") or _overlay_finding(entry, imported)),
                    "finding_detail": str(entry.get("finding_detail") or ""),
                }
            )
    return pd.DataFrame(
        rows,
        columns=[
            "runner",
            "arm",
            "module",
            "host_path",
            "image_path",
            "host_sha256",
            "processes",
            "matching",
            "roles",
            "ok",
            "finding",
            "finding_detail",
        ],
    )


def _overlay_finding(entry: Mapping[str, Any], imported: list[dict[str, Any]]) -> str:
    """The finding of evidence that recorded none (older runs): from the file's recorded ``ok`` and whether any
    engine process imported it."""
    if not entry.get("ok"):
        return overlay.OVERLAY_NOT_IN_EFFECT
    return overlay.OVERLAY_IN_EFFECT if imported else overlay.OVERLAY_NOT_IMPORTED


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """``frame`` as a list of row dictionaries with NaN turned into ``None`` (for templates and JSON)."""
    rows = frame.to_dict("records")
    return [{str(k): (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()} for row in rows]


@dataclass(frozen=True)
class Comparisons:
    """Every comparison of one run, computed once and shared by the views."""

    digest_tables: dict[str, pd.DataFrame]
    digests: pd.DataFrame
    canary: pd.DataFrame
    canary_summary: pd.DataFrame
    kv: pd.DataFrame
    timings: pd.DataFrame
    readiness: pd.DataFrame
    faults: pd.DataFrame
    cleanup: pd.DataFrame
    matrix: pd.DataFrame
    overlay: pd.DataFrame


def compare_all(results: Mapping[str, Any]) -> Comparisons:
    """Compute every comparison frame for ``results``."""
    tables = {runner: digest_frame(results, runner) for runner in results.get("runners") or []}
    canary = canary_frame(results)
    return Comparisons(
        digest_tables=tables,
        digests=digest_summary(results, tables),
        canary=canary,
        canary_summary=_canary_summary(canary),
        kv=kv_frame(results),
        timings=timing_frame(results),
        readiness=readiness_frame(results),
        faults=fault_frame(results),
        cleanup=cleanup_frame(results),
        matrix=step_matrix(results),
        overlay=overlay_frame(results),
    )
