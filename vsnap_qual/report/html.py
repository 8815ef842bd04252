"""``report.html``: one self-contained page (inline CSS and SVG, no JavaScript, no network fetch).

The page is rendered by jinja2 with autoescape from a view built here out of the results dictionary and its
comparison frames. Log tails are read from the files the evidence names, relative to the report directory.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from markupsafe import Markup, escape

from vsnap_qual.redact import Redactor
from vsnap_qual.report import figures
from vsnap_qual.report.assemble import CORE_STEPS, as_dict, as_list, is_fault_step, step_label
from vsnap_qual.report.frames import DIGEST_COLUMNS, UNOBSERVABLE, Comparisons, compare_all, records
from vsnap_qual.report.markdown import SIMULATED_LABEL
from vsnap_qual.report.verdict import recorded_checks

#: Lines of each log shown inline; the full log is linked.
LOG_TAIL_LINES = 60
_LOG_READ_BYTES = 256 * 1024
_EXCERPT_LINES = 60
_LINE_CHARS = 400
_PROBLEM_ROWS_SHOWN = 50
#: Failed logs shown inline (the rest are linked): keeps the page small when everything fails.
MAX_LOG_TAILS = 12
_MATRIX_META = ("lane", "runner", "arm", "faults", "faults_ok")
_PALETTE = ("#3b6ea5", "#d08c2a", "#4a9a6b", "#a6508a", "#6b6b6b", "#b5443b", "#7b62b8", "#2a9d9d")


@functools.lru_cache(maxsize=1)
def _template() -> Any:
    import jinja2

    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
        autoescape=True,
        undefined=jinja2.ChainableUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(
        count=figures.count,
        signed_count=figures.signed_count,
        percent=figures.percent,
        logprob=figures.logprob,
        delta=figures.delta,
        seconds=figures.seconds,
        ratio=figures.ratio,
        short=figures.short_hash,
    )
    return environment.get_template("report.html.j2")


def render_html(
    results: Mapping[str, Any],
    *,
    log_root: Path | None = None,
    out_dir: Path | None = None,
    redactor: Redactor | None = None,
    comparisons: Comparisons | None = None,
) -> str:
    """Render ``report.html`` for ``results``.

    ``log_root`` is the directory the evidence's log paths are relative to (the report directory); ``out_dir``
    is where the page will be written, so links to the logs stay relative. The page is redacted whole.
    """
    comparisons = comparisons or compare_all(results)
    view = build_view(results, comparisons, log_root=log_root, out_dir=out_dir or log_root)
    page = _template().render(**view)
    return (redactor or Redactor()).text(page)


def build_view(
    results: Mapping[str, Any], comparisons: Comparisons, *, log_root: Path | None, out_dir: Path | None
) -> dict[str, Any]:
    """The template's context: every section, already ordered and formatted where it helps."""
    run = results.get("run") or {}
    checks = recorded_checks(results)
    options = run.get("options") or {}
    return {
        "schema": results.get("schema"),
        "generated": results.get("generated"),
        "run": run,
        "verdict": results.get("verdict") or {},
        "title": _title(results),
        "options": sorted((str(k), _plain(v)) for k, v in options.items()),
        "checks": checks,
        "environment": _environment(results),
        "overlay": records(comparisons.overlay),
        "matrix": _matrix(results, comparisons),
        "canary": _canary(results, comparisons),
        "canary_summary": records(comparisons.canary_summary),
        "digests": _digests(comparisons),
        "kv": records(comparisons.kv),
        "kv_chart": _kv_chart(records(comparisons.kv)),
        "readiness": records(comparisons.readiness),
        "timings": records(comparisons.timings),
        "timing_chart": _timing_chart(results, comparisons),
        "ready_chart": _ready_chart(records(comparisons.readiness)),
        "faults": _failed_first(records(comparisons.faults), lambda r: r["outcome"] == "passed"),
        "cleanup": _failed_first(records(comparisons.cleanup), lambda r: bool(r["ok"])),
        "cleanup_failed": sum(1 for r in records(comparisons.cleanup) if not r["ok"]),
        "logs": _logs(results, log_root, out_dir),
        "tail_lines": LOG_TAIL_LINES,
        "evidence": results.get("evidence") or {},
    }


def _title(results: Mapping[str, Any]) -> str:
    options = (results.get("run") or {}).get("options") or {}
    image = options.get("image") or options.get("vsnap_image") or ""
    model = options.get("model") or options.get("vsnap_model") or ""
    return " · ".join(str(p) for p in (image, model) if p) or "vsnap-qual run"


def _plain(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return "" if value is None else str(value)


def _failed_first(rows: list[dict[str, Any]], ok: Any) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: 1 if ok(r) else 0)


def _environment(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    lanes = []
    for lane in results.get("lanes") or []:
        env = as_dict(lane.get("environment"))
        image = as_dict(env.get("image"))
        labels = as_dict(image.get("labels"))
        versions = as_dict(env.get("versions"))
        gpu = env.get("gpu")
        lanes.append(
            {
                "lane": f"{lane['runner']}/{lane['arm']}",
                "recorded": bool(env),
                "image": image.get("ref"),
                "image_id": image.get("id"),
                "repo_digests": [_short_digest(str(d)) for d in as_list(image.get("repo_digests"))],
                "repo_digests_full": ", ".join(str(d) for d in as_list(image.get("repo_digests"))),
                "revision": labels.get("org.opencontainers.image.revision"),
                "build_commit": labels.get("ai.vllm.build.commit"),
                "platform": image.get("platform"),
                "versions": versions,
                "gpu": _gpu(gpu),
                "simulated": labels.get(SIMULATED_LABEL),
                "gpu_full": ", ".join(f"{k}={v}" for k, v in gpu.items()) if isinstance(gpu, dict) else "",
                "container_id": env.get("container_id"),
                "package_dir": env.get("package_dir"),
            }
        )
    return lanes


def _short_digest(reference: str) -> str:
    """``repo@sha256:abcdef…`` → ``repo@sha256:abcdef123456``."""
    name, _, digest = str(reference).rpartition("@")
    return f"{name}@{digest[:19]}" if name else str(reference)[:19]


def _gpu(gpu: Any) -> tuple[str, str]:
    """(name, short id) of the lane's GPU; ("none", "") without one."""
    if not isinstance(gpu, dict) or not gpu:
        return "none", ""
    ident = next((str(gpu[k]) for k in ("uuid", "index") if gpu.get(k) is not None), "")
    return str(gpu.get("name") or "GPU"), ident[:12]


def _matrix(results: Mapping[str, Any], comparisons: Comparisons) -> dict[str, Any]:
    seconds = {
        (str(s.get("runner")), str(s.get("arm")), str(s.get("step"))): s.get("seconds")
        for s in results.get("steps", [])
    }
    columns = [c for c in comparisons.matrix.columns if c not in _MATRIX_META]
    rows = []
    for row in records(comparisons.matrix):
        cells = [{"outcome": row[c], "seconds": seconds.get((row["runner"], row["arm"], c))} for c in columns]
        rows.append({"lane": row["lane"], "cells": cells, "faults": row["faults"], "faults_ok": row["faults_ok"]})
    return {"columns": columns, "rows": rows}


def _canary(results: Mapping[str, Any], comparisons: Comparisons) -> list[dict[str, Any]]:
    """Per runner: prompts as rows, (arm, step) as columns."""
    frame = comparisons.canary
    out = []
    for runner in results.get("runners") or []:
        part = records(frame[frame["runner"] == runner])
        if not part:
            continue
        columns = list(dict.fromkeys((r["arm"], r["step"]) for r in part))
        prompts = list(dict.fromkeys(r["prompt"] for r in part))
        cells = {(r["prompt"], r["arm"], r["step"]): r for r in part}
        rows = [{"prompt": p, "cells": [cells.get((p, a, s)) for a, s in columns]} for p in prompts]
        out.append({"runner": runner, "columns": [f"{a} {s}" for a, s in columns], "rows": rows})
    return out


def _digests(comparisons: Comparisons) -> list[dict[str, Any]]:
    summaries = {r["runner"]: r for r in records(comparisons.digests)}
    out = []
    for runner, table in comparisons.digest_tables.items():
        columns = [c for c in DIGEST_COLUMNS if c in table.columns]
        if table.empty or not columns:
            continue
        reference = columns[0]
        values = table[columns].to_numpy()
        statuses = table["status"].to_numpy()
        shapes = table["shape"].to_numpy()
        dtypes = table["dtype"].to_numpy()
        # Rows are pre-rendered markup: at 1,000 parameters a template loop per cell eats the time budget.
        rows: list[Markup] = []
        for name, row, status, shape, dtype in zip(table.index, values, statuses, shapes, dtypes, strict=True):
            ref = row[0]
            cells = [_digest_cell(ref, ref, is_reference=True)]
            cells.extend(_digest_cell(value, ref, is_reference=False) for value in row[1:])
            rows.append(
                Markup(
                    '<tr class="{}"><td class="mono">{}</td><td>{}</td><td>{}</td>{}'
                    '<td><span class="pill s-{}">{}</span></td></tr>'
                ).format(status, name, shape, dtype, Markup("").join(cells), status, status)
            )
        summary = summaries.get(runner, {})
        problems = int((statuses != "unchanged").sum())
        out.append(
            {
                "runner": runner,
                "columns": columns,
                "reference": reference,
                "summary": summary,
                "rows": Markup("\n").join(rows),
                # Statuses sort changed/missing/unobservable first, so the leading rows are the problems.
                "problem_rows": Markup("\n").join(rows[: min(problems, _PROBLEM_ROWS_SHOWN)]),
                "problems": problems,
                "count": len(rows),
            }
        )
    return out


def _digest_cell(value: Any, reference: Any, *, is_reference: bool) -> Markup:
    if value is None or (isinstance(value, float) and value != value):
        return Markup('<td class="missing">missing</td>')
    if value == UNOBSERVABLE:
        return Markup('<td class="unobs">unobservable</td>')
    if not is_reference and value == reference:
        return Markup('<td class="same">=</td>')
    cls = "mono" if is_reference else "mono diff"
    return Markup('<td class="{}" title="{}">{}</td>').format(cls, value, figures.short_hash(value))


def _logs(results: Mapping[str, Any], log_root: Path | None, out_dir: Path | None) -> dict[str, Any]:
    """Tails of failed steps' logs (inline) and links to every log."""
    tails: list[dict[str, Any]] = []
    links = []
    omitted = 0
    for step in results.get("steps", []):
        logs = [str(p) for p in as_list(step.get("logs"))]
        if not logs:
            continue
        entries = [{"name": p, "href": _href(p, log_root, out_dir)} for p in logs]
        links.append({"label": step_label(step), "outcome": step.get("outcome"), "logs": entries})
        if step.get("outcome") == "failed":
            for entry in entries:
                if len(tails) >= MAX_LOG_TAILS:
                    omitted += 1
                    continue
                tails.append(
                    {
                        "label": step_label(step),
                        "message": step.get("message") or "",
                        "name": entry["name"],
                        "href": entry["href"],
                        **_tail(entry["name"], log_root),
                    }
                )
    return {"tails": tails, "links": links, "omitted": omitted}


def _inside(path: str, root: Path) -> Path | None:
    candidate = (root / path).resolve()
    base = root.resolve()
    return candidate if candidate == base or base in candidate.parents else None


def _href(path: str, log_root: Path | None, out_dir: Path | None) -> str:
    if log_root is None or out_dir is None:
        return path
    target = _inside(path, log_root)
    if target is None:
        return path
    return Path(os.path.relpath(target, out_dir.resolve())).as_posix()


def _tail(path: str, log_root: Path | None) -> dict[str, str]:
    """The last lines of a log and, when the last traceback lies before them, that traceback."""
    if log_root is None:
        return {"tail": "(log directory unknown)", "excerpt": ""}
    target = _inside(path, log_root)
    if target is None:
        return {"tail": "(log path outside the report directory; not read)", "excerpt": ""}
    try:
        with target.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - _LOG_READ_BYTES))
            data = handle.read()
    except OSError as exc:
        return {"tail": f"(log not readable: {exc.strerror or exc})", "excerpt": ""}
    lines = data.decode("utf-8", errors="replace").splitlines()
    if size > _LOG_READ_BYTES and lines:
        lines = lines[1:]  # the first line is probably cut
    tail_start = max(0, len(lines) - LOG_TAIL_LINES)
    excerpt = ""
    # Engines often log the root cause, then a long shutdown; show the last traceback too.
    starts = [i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line]
    if starts and starts[-1] < tail_start:
        block = lines[starts[-1] : min(starts[-1] + _EXCERPT_LINES, tail_start)]
        excerpt = "\n".join(line[:_LINE_CHARS] for line in block)
    tail = "\n".join(line[:_LINE_CHARS] for line in lines[tail_start:])
    return {"tail": tail, "excerpt": excerpt}


# ---------------------------------------------------------------------------------------------- SVG charts


def _svg_bars(
    groups: Sequence[tuple[str, Sequence[tuple[str, float | None]]]],
    *,
    unit_format: Any,
    title: str,
    series: Sequence[str],
) -> Markup:
    """A horizontal grouped bar chart: a group per label, a bar per series, the value at the bar end."""
    values = [v for _, bars in groups for _, v in bars if v is not None]
    if not values:
        return Markup("")
    label_w, chart_w, bar_h, gap = 150, 560, 14, 10
    peak = max(values) or 1.0
    height = 34 + sum(len(bars) * (bar_h + 2) + gap for _, bars in groups) + 22
    parts = [
        f'<svg role="img" width="{label_w + chart_w + 120}" '
        f'height="{height}" viewBox="0 0 {label_w + chart_w + 120} {height}" class="chart">',
        f"<title>{escape(title)}</title>",
    ]
    x_legend = label_w
    for index, name in enumerate(series):
        colour = _PALETTE[index % len(_PALETTE)]
        parts.append(f'<rect x="{x_legend}" y="6" width="10" height="10" fill="{colour}"/>')
        parts.append(f'<text x="{x_legend + 14}" y="15" class="legend">{escape(name)}</text>')
        x_legend += 24 + 7 * len(name)
    y = 30
    for label, bars in groups:
        group_h = len(bars) * (bar_h + 2)
        parts.append(
            f'<text x="{label_w - 8}" y="{y + group_h / 2 + 4:.1f}" text-anchor="end" class="label">'
            f"{escape(label)}</text>"
        )
        for name, value in bars:
            colour = _PALETTE[list(series).index(name) % len(_PALETTE)] if name in series else _PALETTE[0]
            if value is not None:
                width = max(1.0, chart_w * value / peak)
                parts.append(
                    f'<rect x="{label_w}" y="{y}" width="{width:.1f}" height="{bar_h}" fill="{colour}">'
                    f"<title>{escape(label)} {escape(name)}: {escape(unit_format(value))}</title></rect>"
                )
                parts.append(
                    f'<text x="{label_w + width + 4:.1f}" y="{y + bar_h - 3}" class="value">'
                    f"{escape(unit_format(value))}</text>"
                )
            y += bar_h + 2
        y += gap
    parts.append(f'<line x1="{label_w}" y1="26" x2="{label_w}" y2="{y - gap + 2}" class="axis"/>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _svg_stacked(lanes: Sequence[tuple[str, Sequence[tuple[str, float]]]], series: Sequence[str]) -> Markup:
    """One horizontal stacked bar per lane: where the lane's wall time went, step by step."""
    totals = [sum(v for _, v in segments) for _, segments in lanes]
    if not lanes or not any(totals):
        return Markup("")
    label_w, chart_w, bar_h, gap = 150, 620, 20, 10
    peak = max(totals)
    height = 34 + len(lanes) * (bar_h + gap) + 10
    parts = [
        f'<svg role="img" width="{label_w + chart_w + 90}" height="{height}" '
        f'viewBox="0 0 {label_w + chart_w + 90} {height}" class="chart">',
        "<title>Wall time per lane, by step</title>",
    ]
    x_legend = label_w
    for index, name in enumerate(series):
        colour = _PALETTE[index % len(_PALETTE)]
        parts.append(f'<rect x="{x_legend}" y="6" width="10" height="10" fill="{colour}"/>')
        parts.append(f'<text x="{x_legend + 14}" y="15" class="legend">{escape(name)}</text>')
        x_legend += 24 + 7 * len(name)
    y = 30
    for (label, segments), total in zip(lanes, totals, strict=True):
        parts.append(
            f'<text x="{label_w - 8}" y="{y + bar_h / 2 + 4:.1f}" text-anchor="end" class="label">'
            f"{escape(label)}</text>"
        )
        x = float(label_w)
        for name, value in segments:
            width = chart_w * value / peak
            colour = _PALETTE[list(series).index(name) % len(_PALETTE)]
            parts.append(
                f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{bar_h}" fill="{colour}">'
                f"<title>{escape(label)} {escape(name)}: {escape(figures.seconds(value))}</title></rect>"
            )
            x += width
        parts.append(f'<text x="{x + 4:.1f}" y="{y + bar_h - 5}" class="value">{escape(figures.seconds(total))}</text>')
        y += bar_h + gap
    parts.append("</svg>")
    return Markup("".join(parts))


def _timing_chart(results: Mapping[str, Any], comparisons: Comparisons) -> Markup:
    frame = comparisons.timings
    if frame.empty:
        return Markup("")
    series = [s for s in CORE_STEPS if s in set(frame["step"])] + (
        ["faults"] if frame["step"].map(is_fault_step).any() else []
    )
    lanes = []
    for lane in results.get("lanes") or []:
        part = frame[(frame["runner"] == lane["runner"]) & (frame["arm"] == lane["arm"])]
        totals: dict[str, float] = {}
        for row in records(part):
            key = "faults" if is_fault_step(row["step"]) else row["step"]
            if row["median"] is not None:
                totals[key] = totals.get(key, 0.0) + float(row["median"]) * int(row["n"] or 1)
        segments = [(name, totals[name]) for name in series if totals.get(name)]
        lanes.append((f"{lane['runner']}/{lane['arm']}", segments))
    return _svg_stacked(lanes, series)


def _ready_chart(rows: list[dict[str, Any]]) -> Markup:
    groups = [
        (
            f"{r['runner']}/{r['arm']}",
            [("cold start (serve)", r["cold_start"]), ("restore", r["restore_median"])],
        )
        for r in rows
    ]
    return _svg_bars(groups, unit_format=figures.seconds, title="Ready time", series=("cold start (serve)", "restore"))


def _kv_chart(rows: list[dict[str, Any]]) -> Markup:
    groups = [(f"{r['runner']}/{r['arm']}", [("ordinary", r["ordinary"]), ("snapshot", r["snapshot"])]) for r in rows]
    return _svg_bars(
        groups, unit_format=figures.count, title="KV-cache capacity (tokens)", series=("ordinary", "snapshot")
    )
