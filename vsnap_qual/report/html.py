"""``report.html``: one self-contained page (inline CSS and SVG, no JavaScript, no network fetch).

The page is rendered by jinja2 with autoescape from a view built here (:class:`ReportView`) out of
``results.json`` and its comparison frames. Log tails are read from the files the evidence names, relative to
the report directory.
"""

from __future__ import annotations

import functools
import os
import statistics
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, TypeVar, cast

from markupsafe import Markup

from vsnap_qual import model, procedure
from vsnap_qual.redact import Redactor
from vsnap_qual.report import charts, figures
from vsnap_qual.report.canary import CanaryRow, CanarySummaryRow, canary_rows, canary_summary
from vsnap_qual.report.frames import (
    DIGEST_COLUMNS,
    UNOBSERVABLE,
    CleanupRow,
    Comparisons,
    DigestSummaryRow,
    FaultRow,
    KvRow,
    MatrixRow,
    OverlayRow,
    ReadinessRow,
    TimingRow,
    compare_all,
    rows,
)
from vsnap_qual.report.markdown import SIMULATED_LABEL, overlap_text
from vsnap_qual.report.recorded import option_value
from vsnap_qual.report.step_times import step_times, totals
from vsnap_qual.report.verdict import shown_qualified

if TYPE_CHECKING:
    import jinja2

#: Lines of each log shown inline; the full log is linked.
LOG_TAIL_LINES = 60
_LOG_READ_BYTES = 256 * 1024
_EXCERPT_LINES = 60
_LINE_CHARS = 400
_PROBLEM_ROWS_SHOWN = 50
#: Failed logs shown inline (the rest are linked): keeps the page small when everything fails.
MAX_LOG_TAILS = 12
_MATRIX_META = ("lane", "runner", "arm", "faults", "faults_ok")
#: The KV chart's axis spans at least ±1 %: a difference of one block in a million tokens draws as a sliver at zero
KV_AXIS_FLOOR_PCT = 1.0
Row = TypeVar("Row")


class EnvironmentView(TypedDict):
    """A lane's row of the environment table."""

    lane: str
    recorded: bool
    image: str | None
    image_id: str | None
    repo_digests: list[str]
    repo_digests_full: str
    revision: str | None
    build_commit: str | None
    platform: str | None
    versions: dict[str, str | None]
    gpu: tuple[str, str]
    simulated: str | None
    gpu_full: str
    container_id: str | None
    package_dir: str | None


class MatrixCell(TypedDict):
    outcome: str | bool | None
    seconds: float | None


class MatrixLane(TypedDict):
    lane: str | bool | None
    cells: list[MatrixCell]
    faults: str | bool | None
    faults_ok: str | bool | None


class MatrixView(TypedDict):
    columns: list[str]
    rows: list[MatrixLane]


class CanaryDivergence(TypedDict):
    """A canary that is not bit-exact with its ordinary reference (or missing), beside that reference."""

    prompt: str
    column: str
    reference: CanaryRow | None
    cell: CanaryRow | None


class CanaryBlock(TypedDict):
    """A runner's canaries: one line when every compared canary is bit-exact, else only the diverging ones."""

    runner: str
    #: the compared (arm, step) columns, said as ``head: ordinary, restore-1; base: …``
    across: str
    #: canaries per step (a prompt's one-token and multi-token canaries are two)
    prompts: int
    compared: int
    diverging: list[CanaryDivergence]


class DigestBlock(TypedDict):
    """A runner's digest table, its rows pre-rendered."""

    runner: str
    columns: list[str]
    reference: str
    summary: DigestSummaryRow | None
    rows: Markup
    problem_rows: Markup
    problems: int
    count: int


class LogLink(TypedDict):
    name: str
    href: str


class StepLogs(TypedDict):
    label: str
    outcome: str
    logs: list[LogLink]


class LogTail(TypedDict):
    label: str
    message: str
    name: str
    href: str
    tail: str
    excerpt: str


class LogsView(TypedDict):
    tails: list[LogTail]
    links: list[StepLogs]
    omitted: int


class ReportView(TypedDict):
    """The template's context: every section, already ordered and formatted where it helps."""

    schema: str
    generated: str
    run: model.RunInfo
    verdict: model.Verdict
    #: what was qualified, as a page shows it (``verdict.shown_qualified``: the engine's words cut once)
    qualified: list[str]
    title: str
    options: list[tuple[str, str]]
    checks: list[model.Check]
    environment: list[EnvironmentView]
    overlay: list[OverlayRow]
    matrix: MatrixView
    canary: list[CanaryBlock]
    canary_summary: list[CanarySummaryRow]
    digests: list[DigestBlock]
    kv: list[KvRow]
    kv_chart: Markup
    #: the run's wall time (``12.3 s``, ``182.4 s (3:02)``), "" when not known
    duration: str
    #: the outcome counts as pytest's summary line says them, else the steps' recorded outcomes
    counts: str
    readiness: list[ReadinessRow]
    timings: list[TimingRow]
    harness_time: str
    timing_chart: Markup
    ready_chart: Markup
    faults: list[FaultRow]
    cleanup: list[CleanupRow]
    cleanup_failed: int
    logs: LogsView
    tail_lines: int
    evidence: model.EvidenceInfo


@functools.lru_cache(maxsize=1)
def _template() -> jinja2.Template:
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
    results: model.Results,
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
    results: model.Results, comparisons: Comparisons, *, log_root: Path | None, out_dir: Path | None
) -> ReportView:
    """The template's context: every section, already ordered and formatted where it helps."""
    run = results["run"]
    cleanup = rows(comparisons.cleanup, CleanupRow)
    return ReportView(
        schema=results["schema"],
        generated=results["generated"],
        run=run,
        verdict=_known_verdict(results["verdict"]),
        qualified=shown_qualified(results["verdict"].get("qualified") or []),
        title=_title(results),
        options=sorted((k, _plain(v)) for k, v in run["options"].items()),
        checks=_known_checks(results["verdict"]),
        environment=_environment(results),
        overlay=rows(comparisons.overlay, OverlayRow),
        matrix=_matrix(results, comparisons),
        canary=_canary(results),
        canary_summary=canary_summary(canary_rows(results)),
        digests=_digests(comparisons),
        kv=rows(comparisons.kv, KvRow),
        kv_chart=_kv_chart(rows(comparisons.kv, KvRow)),
        duration=duration(run),
        counts=counts(run, results["verdict"]),
        readiness=rows(comparisons.readiness, ReadinessRow),
        timings=rows(comparisons.timings, TimingRow),
        harness_time=harness_time(results),
        timing_chart=_timing_chart(results, comparisons),
        ready_chart=_ready_chart(rows(comparisons.readiness, ReadinessRow)),
        faults=_failed_first(rows(comparisons.faults, FaultRow), lambda r: r["outcome"] == "passed"),
        cleanup=_failed_first(cleanup, lambda r: bool(r["ok"])),
        cleanup_failed=sum(1 for r in cleanup if not r["ok"]),
        logs=_logs(results, log_root, out_dir),
        tail_lines=LOG_TAIL_LINES,
        evidence=results["evidence"],
    )


def _title(results: model.Results) -> str:
    image, model_name = option_value(results, "image"), option_value(results, "model")
    return " · ".join(str(p) for p in (image, model_name) if p) or "vsnap-qual run"


def duration(run: model.RunInfo) -> str:
    """The run's wall time, from its start to its end (``182.4 s (3:02)``); for a run that did not finish, to its
    last record (``at least …``); "" when the evidence does not say."""
    end = run["ended"] or run["last_record_time"]
    if not run["started"] or not end:
        return ""
    try:
        seconds = (datetime.fromisoformat(end) - datetime.fromisoformat(run["started"])).total_seconds()
    except ValueError:
        return ""
    if seconds < 0:
        return ""
    said = f"took {figures.seconds(seconds)}"
    return said if run["ended"] else f"ran at least {figures.seconds(seconds)} (it did not finish)"


def counts(run: model.RunInfo, verdict: model.Verdict) -> str:
    """pytest's own counts as its summary line says them (``78 passed, 6 not applicable``), which count a step
    that does not apply to a lane by design apart from a skip; else, for a run that did not record them, the
    steps' recorded outcomes."""
    found = run.get("pytest_counts")
    if found:
        return "pytest: " + ", ".join(f"{n} {category}" for category, n in found.items())
    if found is not None:
        return "pytest: no tests"
    tally = verdict["counts"] if verdict["counts"] else model.Counts(passed=0, failed=0, skipped=0)
    return f"{tally['passed']} steps passed, {tally['failed']} failed, {tally['skipped']} skipped"


def _plain(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return "" if value is None else str(value)


def _failed_first(found: list[Row], ok: Callable[[Row], bool]) -> list[Row]:
    return sorted(found, key=lambda r: 1 if ok(r) else 0)


def _environment(results: model.Results) -> list[EnvironmentView]:
    lanes = []
    for lane in results["lanes"]:
        env = lane["environment"]
        image = env["image"] if env else model.Image()
        labels = image.get("labels") or {}
        gpu = env["gpu"] if env else None
        lanes.append(
            EnvironmentView(
                lane=f"{lane['runner']}/{lane['arm']}",
                recorded=bool(env),
                image=image.get("ref"),
                image_id=image.get("id"),
                repo_digests=[_short_digest(d) for d in image.get("repo_digests", [])],
                repo_digests_full=", ".join(image.get("repo_digests", [])),
                revision=labels.get("org.opencontainers.image.revision"),
                build_commit=labels.get("ai.vllm.build.commit"),
                platform=image.get("platform"),
                versions=_versions(env["versions"]) if env else {},
                gpu=_gpu(gpu),
                simulated=None if gpu else labels.get(SIMULATED_LABEL),  # a real GPU is used where there is one
                gpu_full=", ".join(f"{k}={v}" for k, v in gpu.items()) if gpu is not None else "",
                container_id=env["container_id"] if env else None,
                package_dir=env["package_dir"] if env else None,
            )
        )
    return lanes


def _versions(versions: dict[str, str | None]) -> dict[str, str | None]:
    """The lane's versions as shown: CRIU's without the ``Version: `` of ``criu --version``'s first line."""
    criu = versions.get("criu")
    return {**versions, "criu": criu.removeprefix("Version: ") if criu else criu}


def _short_digest(reference: str) -> str:
    """``repo@sha256:abcdef…`` → ``repo@sha256:abcdef123456``."""
    name, _, digest = str(reference).rpartition("@")
    return f"{name}@{digest[:19]}" if name else str(reference)[:19]


def _gpu(gpu: model.Gpu | None) -> tuple[str, str]:
    """(name, short id) of the lane's GPU; ("none", "") without one."""
    if not gpu:
        return "none", ""
    ident = next((str(gpu[k]) for k in ("uuid", "index") if gpu.get(k) is not None), "")
    return str(gpu.get("name") or "GPU"), ident[:12]


def _matrix(results: model.Results, comparisons: Comparisons) -> MatrixView:
    seconds: dict[tuple[str, str, str], float] = {
        (s["runner"], s["arm"], s["step"]): s["seconds"] for s in results["steps"]
    }
    columns = [str(c) for c in comparisons.matrix.columns if c not in _MATRIX_META]
    lanes = []
    for row in rows(comparisons.matrix, MatrixRow):
        where = (str(row["runner"]), str(row["arm"]))
        known = results["verdict"].get("known_failures") or {}
        cells = [
            MatrixCell(
                outcome="known" if row[c] == "failed" and f"{row['lane']}/{c}" in known else row[c],
                seconds=seconds.get((*where, c)),
            )
            for c in columns
        ]
        lanes.append(MatrixLane(lane=row["lane"], cells=cells, faults=row["faults"], faults_ok=row["faults_ok"]))
    return MatrixView(columns=columns, rows=lanes)


def _canary(results: model.Results) -> list[CanaryBlock]:
    """Per runner: how many canaries were compared across which (arm, step) columns, and the cells that are not
    bit-exact with the ordinary reference (or are missing): all of them bit-exact is one line, not a grid. Read
    straight from each step's recorded canaries and its recorded judgement of them (``canary_compare``)."""
    recorded = canary_rows(results)
    out = []
    for runner in results["runners"]:
        part = [r for r in recorded if r["runner"] == runner]
        if not part:
            continue
        columns = list(dict.fromkeys((r["arm"], r["step"]) for r in part))
        # a canary is its prompt and its length: the same prompt runs as a one-token and a multi-token canary
        canaries = list(dict.fromkeys((r["prompt"], r["tokens"]) for r in part))
        cells = {(r["prompt"], r["tokens"], r["arm"], r["step"]): r for r in part}
        references = {(r["prompt"], r["tokens"]): r for r in part if r["status"] == "reference"}
        diverging = []
        compared = 0
        for prompt, tokens in canaries:
            for arm, step in columns:
                cell = cells.get((prompt, tokens, arm, step))
                if cell is not None and cell["status"] == "reference":
                    continue
                compared += 1
                if cell is None or cell["status"] != "bit-exact":
                    reference = cells.get((prompt, tokens, arm, procedure.ORDINARY)) or references.get((prompt, tokens))
                    diverging.append(
                        CanaryDivergence(
                            prompt=prompt if tokens <= 1 else f"{prompt} ({tokens} tokens)",
                            column=f"{arm} {step}",
                            reference=reference,
                            cell=cell,
                        )
                    )
        arms = list(dict.fromkeys(arm for arm, _ in columns))
        across = "; ".join(f"{arm}: " + ", ".join(s for a, s in columns if a == arm) for arm in arms)
        out.append(
            CanaryBlock(runner=runner, across=across, prompts=len(canaries), compared=compared, diverging=diverging)
        )
    return out


def _digests(comparisons: Comparisons) -> list[DigestBlock]:
    summaries = {r["runner"]: r for r in rows(comparisons.digests, DigestSummaryRow)}
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
        kinds = table["kind"].to_numpy()
        # Rows are pre-rendered markup: at 1,000 parameters a template loop per cell eats the time budget.
        lines: list[Markup] = []
        for name, row, status, shape, dtype, kind in zip(
            table.index, values, statuses, shapes, dtypes, kinds, strict=True
        ):
            ref = row[0]
            cells = [_digest_cell(ref, ref, is_reference=True)]
            cells.extend(_digest_cell(value, ref, is_reference=False) for value in row[1:])
            lines.append(
                Markup(
                    '<tr class="{}"><td class="mono">{}</td><td>{}</td><td>{}</td><td>{}</td>{}'
                    '<td><span class="pill s-{}">{}</span></td></tr>'
                ).format(status, name, kind, shape, dtype, Markup("").join(cells), status, status)
            )
        problems = int((statuses != "unchanged").sum())
        out.append(
            DigestBlock(
                runner=runner,
                columns=columns,
                reference=reference,
                summary=summaries.get(runner),
                rows=Markup("\n").join(lines),
                # Statuses sort changed/missing/unobservable first, so the leading rows are the problems.
                problem_rows=Markup("\n").join(lines[: min(problems, _PROBLEM_ROWS_SHOWN)]),
                problems=problems,
                count=len(lines),
            )
        )
    return out


def _digest_cell(value: str | float | None, reference: str | float | None, *, is_reference: bool) -> Markup:
    """A digest table cell: a sha256, ``=`` (the reference's), unobservable, or missing (pandas' None or NaN)."""
    if value is None or (isinstance(value, float) and value != value):
        return Markup('<td class="missing">missing</td>')
    if value == UNOBSERVABLE:
        return Markup('<td class="unobs">unobservable</td>')
    if not is_reference and value == reference:
        return Markup('<td class="same">=</td>')
    cls = "mono" if is_reference else "mono diff"
    return Markup('<td class="{}" title="{}">{}</td>').format(cls, value, figures.short_hash(value))


def _logs(results: model.Results, log_root: Path | None, out_dir: Path | None) -> LogsView:
    """Tails of failed steps' logs (inline) and links to every log."""
    tails: list[LogTail] = []
    links = []
    omitted = 0
    for step in results["steps"]:
        if not step["logs"]:
            continue
        label = procedure.label(step["runner"], step["arm"], step["step"])
        entries = [LogLink(name=p, href=_href(p, log_root, out_dir)) for p in step["logs"]]
        links.append(StepLogs(label=label, outcome=step["outcome"], logs=entries))
        if step["outcome"] == "failed":
            for entry in entries:
                if len(tails) >= MAX_LOG_TAILS:
                    omitted += 1
                    continue
                tail, excerpt = _tail(entry["name"], log_root)
                tails.append(
                    LogTail(
                        label=label,
                        message=step["message"],
                        name=entry["name"],
                        href=entry["href"],
                        tail=tail,
                        excerpt=excerpt,
                    )
                )
    return LogsView(tails=tails, links=links, omitted=omitted)


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


def _tail(path: str, log_root: Path | None) -> tuple[str, str]:
    """The last lines of a log and, when the last traceback lies before them, that traceback."""
    if log_root is None:
        return "(log directory unknown)", ""
    target = _inside(path, log_root)
    if target is None:
        return "(log path outside the report directory; not read)", ""
    try:
        with target.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - _LOG_READ_BYTES))
            data = handle.read()
    except OSError as exc:
        return f"(log not readable: {exc.strerror or exc})", ""
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
    return tail, excerpt


# ---------------------------------------------------------------------------------------------- charts


def harness_time(results: model.Results) -> str:
    """The harness's own time beside the engine's (``engine_seconds``: its commands, starts, stops and HTTP
    answers), and its median per fault step (``bench/run_figures.py`` breaks it down by phase)."""
    times = step_times(results["steps"])
    if not times:
        return ""
    total, engine = totals(times)
    said = f"Steps {total:.0f} s, of which the engine's own {engine:.0f} s and the harness's {total - engine:.0f} s"
    if engine:
        said += f" (steps / engine {total / engine:.2f})"
    own = [h for name, t in times.items() if procedure.is_fault_step(name) for h in t.harness]
    if own:
        said += f"; the harness's median per fault step {statistics.median(own):.2f} s (n={len(own)})"
    overlap = overlap_text(results["run"]) if "run" in results else ""
    return said + "." + (f" The {overlap[0].lower()}{overlap[1:]}." if overlap else "")


def _timing_chart(results: model.Results, comparisons: Comparisons) -> Markup:
    frame = comparisons.timings
    if frame.empty:
        return Markup("")
    series = [s for s in procedure.DISPLAY_ORDER if s in set(frame["step"])] + (
        ["faults"] if frame["step"].map(procedure.is_fault_step).any() else []
    )
    lanes = []
    for lane in results["lanes"]:
        part = frame[(frame["runner"] == lane["runner"]) & (frame["arm"] == lane["arm"])]
        totals: dict[str, float] = {}
        for row in rows(part, TimingRow):
            key = "faults" if procedure.is_fault_step(row["step"]) else row["step"]
            if row["median"] is not None:
                totals[key] = totals.get(key, 0.0) + float(row["median"]) * int(row["n"] or 1)
        segments = [(name, totals[name]) for name in series if totals.get(name)]
        lanes.append((f"{lane['runner']}/{lane['arm']}", segments))
    return charts.stacked(
        lanes, series, title="Wall time per lane, by step", unit_format=figures.seconds,
        axis="seconds (the lane's steps, one after another)", tick_format="{:g} s".format,
    )  # fmt: skip


def _ready_chart(found: list[ReadinessRow]) -> Markup:
    groups = [
        (
            f"{r['runner']}/{r['arm']}",
            [("cold start (serve)", r["cold_start"]), ("restore", r["restore_median"])],
        )
        for r in found
    ]
    return charts.bars(
        groups, unit_format=figures.seconds, title="Ready time", series=("cold start (serve)", "restore"),
        axis="seconds until the engine answers", tick_format="{:g} s".format,
    )  # fmt: skip


def _kv_chart(found: list[KvRow]) -> Markup:
    """Each lane's KV capacity as its difference from the lane's ordinary reference, in % (the capacities
    themselves differ by a fraction of a percent, so bars from zero tokens would all look the same)."""
    groups = []
    for r in found:
        ordinary = r["ordinary"]
        if not ordinary:
            continue
        bars = [("snapshot", r["delta_pct"])]
        if r["restored"] is not None:
            bars.append(("restored", 100.0 * (float(r["restored"]) - float(ordinary)) / float(ordinary)))
        groups.append((f"{r['runner']}/{r['arm']}", bars))
    return charts.delta_bars(
        groups,
        title="KV-cache capacity, Δ % against the ordinary reference",
        series=("snapshot", "restored"),
        floor=KV_AXIS_FLOOR_PCT,
        axis="Δ KV-cache tokens against the lane's ordinary reference, % (fixed scale, at least ±1 %)",
        unit_format=figures.percent,
        tick_format=lambda v: f"{v:+g}%".replace("-", "−"),
    )


_KNOWN_PILL = {"known": "skipped", "unmatched": "not-run", "expired": "FAIL", "changed": "FAIL"}


def _known_checks(verdict: model.Verdict) -> list[model.Check]:
    """The checks as the page shows them: one that failed on known findings only reads KNOWN (``report.known``)."""
    known = verdict.get("known_failures") or {}
    return [
        cast(model.Check, {**check, "status": "KNOWN"}) if f"check:{check['id']}" in known else check
        for check in verdict["checks"]
    ]


def _known_verdict(verdict: model.Verdict) -> model.Verdict:
    """The verdict as the page shows it: each known-findings entry's line (``report.known``) with its state as a
    pill and its link as a link."""
    said = {o["said"]: o for o in verdict.get("known") or []}
    if not said:
        return verdict
    reasons: list[str] = []
    for reason in verdict["reasons"]:
        outcome = said.get(reason)
        if outcome is None:
            reasons.append(reason)
            continue
        link = outcome["finding"]["link"]
        before, _, after = reason.partition(link)
        reasons.append(
            Markup('<span class="pill s-{}">{}</span> {}<a href="{}">{}</a>{}').format(
                _KNOWN_PILL[outcome["state"]], outcome["state"].upper(), before.split(" ", 1)[1], link, link, after
            )
        )
    return cast(model.Verdict, {**verdict, "reasons": reasons})
