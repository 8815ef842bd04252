"""Qualification reports: ``results.json``, ``report.html`` and ``summary.md`` from one evidence model.

The pytest plugin calls :func:`write_reports` once, on the controller, after the evidence file is closed: the
evidence is assembled, its comparisons computed once, and the verdict and every view use them. The
``vsnap-qual report`` command calls :func:`render_reports` to re-render from a saved ``results.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from vsnap_qual import model
from vsnap_qual.redact import Redactor
from vsnap_qual.report.assemble import EVIDENCE_FILE, RESULTS_FILE, SCHEMA, assemble_path, load_results
from vsnap_qual.report.frames import Comparisons, compare_all
from vsnap_qual.report.recorded import option_value

__all__ = [
    "EVIDENCE_FILE",
    "HTML_FILE",
    "RESULTS_FILE",
    "SCHEMA",
    "SUMMARY_FILE",
    "ReportPaths",
    "load_results",
    "render_reports",
    "write_reports",
]

HTML_FILE = "report.html"
SUMMARY_FILE = "summary.md"
_ANNOTATE_STYLE = {
    "pass": "success",
    "fail": "error",
    "partial": "warning",
    "incomplete": "warning",
    "interrupted": "warning",
}
_ANNOTATE_TIMEOUT_S = 30


@dataclass(frozen=True)
class ReportPaths:
    """What :func:`write_reports` wrote, the verdict, and where the summary also went; the results rendered and
    their comparisons (None when they could not be computed), for the terminal summary."""

    results_json: Path
    report_html: Path
    summary_md: Path
    verdict: str
    results: model.Results = field(repr=False, compare=False)
    comparisons: Comparisons | None = field(default=None, repr=False, compare=False)
    github_step_summary: Path | None = None
    annotated: bool = False
    notes: tuple[str, ...] = ()


def _configured_secret_names(results: model.Results) -> list[str]:
    """The secret variable names the run recorded: ``QualConfig.secret_names`` (the defaults plus
    ``--vsnap-secrets``), recorded in the session's options as ``secret_names``."""
    names: list[str] = []
    for key in ("secret_names", "secrets"):  # ``secrets``: the option's own name, if a writer used it
        value = option_value(results, key)
        if isinstance(value, str):
            names += [v.strip() for v in value.split(",") if v.strip()]
        elif isinstance(value, (list, tuple)):
            names += [str(v) for v in value]
    return list(dict.fromkeys(names))


def _atomic_write(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def render_reports(
    results: model.Results,
    out_dir: Path,
    *,
    log_root: Path | None = None,
    extra_secret_names: Iterable[str] = (),
    write_results: bool = True,
    comparisons: Comparisons | None = None,
) -> ReportPaths:
    """Write ``results.json`` (unless ``write_results`` is false), ``report.html`` and ``summary.md``.

    Every file is redacted with the secret values set in this process's environment (the defaults, the
    run's recorded ``secret_names`` and ``extra_secret_names``). ``log_root`` is the directory the evidence's log
    paths are relative to (default ``out_dir``). ``comparisons`` are the run's (``assemble.assemble``): given,
    they are not computed again; the pages are redacted whole, so tables computed before redaction are safe.
    """
    from vsnap_qual.report.html import render_html
    from vsnap_qual.report.markdown import render_markdown

    out_dir.mkdir(parents=True, exist_ok=True)
    redactor = Redactor.from_environment([*_configured_secret_names(results), *extra_secret_names])
    results = redactor.data(results)
    notes: list[str] = []
    # A report must come out of any evidence: a rendering bug degrades the page, never loses the run.
    if comparisons is None:
        try:
            comparisons = compare_all(results)  # tables to show; the verdict was judged once, at assembly
        except Exception as exc:
            notes.append(f"comparisons failed ({type(exc).__name__}: {exc}); report.html and summary.md are minimal")
    paths = ReportPaths(
        results_json=out_dir / RESULTS_FILE,
        report_html=out_dir / HTML_FILE,
        summary_md=out_dir / SUMMARY_FILE,
        verdict=results["verdict"]["status"],
        results=results,
        comparisons=comparisons,
    )
    if write_results:
        _atomic_write(paths.results_json, json.dumps(results, indent=1, ensure_ascii=False, default=str) + "\n")
    html = markdown = None
    if comparisons is not None:
        try:
            html = render_html(
                results,
                log_root=log_root or out_dir,
                out_dir=out_dir,
                redactor=redactor,
                comparisons=comparisons,
            )
        except Exception as exc:
            notes.append(f"report.html rendering failed ({type(exc).__name__}: {exc}); wrote a minimal page")
        try:
            markdown = render_markdown(results, comparisons, redactor=redactor)
        except Exception as exc:
            notes.append(f"summary.md rendering failed ({type(exc).__name__}: {exc}); wrote a minimal summary")
    _atomic_write(paths.report_html, html or redactor.text(_minimal_html(results, notes)))
    _atomic_write(paths.summary_md, markdown or redactor.text(_minimal_markdown(results, notes)))
    return replace(paths, notes=tuple(notes))


def _minimal_html(results: model.Results, notes: list[str]) -> str:
    from markupsafe import escape

    verdict = results["verdict"]
    reasons = "".join(f"<li>{escape(r)}</li>" for r in [*verdict["reasons"], *notes])
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>vsnap-qual report</title></head>'
        f"<body><h1>vsnap-qual: {escape(verdict['headline'] or 'NO VERDICT')}</h1><ul>{reasons}</ul>"
        "<p>The full report could not be rendered; every piece of evidence is in results.json and "
        "evidence.jsonl beside this page.</p></body></html>\n"
    )


def _minimal_markdown(results: model.Results, notes: list[str]) -> str:
    verdict = results["verdict"]
    lines = [f"## vsnap-qual: {verdict['headline'] or 'NO VERDICT'}", ""]
    lines += [f"- {line}" for line in [*verdict["reasons"], *notes]]
    return "\n".join([*lines, "", "_The full summary could not be rendered; see `results.json`._", ""])


def write_reports(
    report_dir: Path,
    *,
    github_step_summary: bool = True,
    annotate: bool = False,
    extra_secret_names: Iterable[str] = (),
) -> ReportPaths:
    """Assemble ``<report_dir>/evidence.jsonl`` and write ``results.json``, ``report.html``, ``summary.md``.

    With ``github_step_summary`` and ``$GITHUB_STEP_SUMMARY`` set, ``summary.md`` is appended to that file.
    With ``annotate`` and ``buildkite-agent`` on PATH, it becomes the Buildkite annotation (context
    ``vsnap-qual``). Those two never raise: what went wrong is returned in ``notes``. A missing evidence file
    raises ``FileNotFoundError``.
    """
    assembled = assemble_path(report_dir / EVIDENCE_FILE)
    paths = render_reports(
        assembled.results,
        report_dir,
        log_root=report_dir,
        extra_secret_names=extra_secret_names,
        comparisons=assembled.comparisons,
    )
    notes: list[str] = list(paths.notes)
    step_summary: Path | None = None
    if github_step_summary and os.environ.get("GITHUB_STEP_SUMMARY"):
        step_summary = Path(os.environ["GITHUB_STEP_SUMMARY"])
        try:
            with step_summary.open("a", encoding="utf-8") as handle:
                handle.write(paths.summary_md.read_text(encoding="utf-8") + "\n")
        except OSError as exc:
            notes.append(f"could not append to $GITHUB_STEP_SUMMARY ({step_summary}): {exc}")
            step_summary = None
    annotated = False
    if annotate:
        annotated, note = _buildkite_annotate(paths.summary_md, paths.verdict)
        if note:
            notes.append(note)
    return replace(paths, github_step_summary=step_summary, annotated=annotated, notes=tuple(notes))


def _buildkite_annotate(summary: Path, verdict: str) -> tuple[bool, str]:
    agent = shutil.which("buildkite-agent")
    if agent is None:
        return False, "annotate requested but buildkite-agent is not on PATH; skipped"
    argv = [agent, "annotate", "--style", _ANNOTATE_STYLE.get(verdict, "info"), "--context", "vsnap-qual"]
    try:
        completed = subprocess.run(
            argv,
            input=summary.read_text(encoding="utf-8"),
            text=True,
            capture_output=True,
            timeout=_ANNOTATE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"buildkite-agent annotate failed: {exc}"
    if completed.returncode != 0:
        tail = (completed.stderr or completed.stdout).strip().splitlines()[-1:] or [""]
        return False, f"buildkite-agent annotate exited {completed.returncode}: {tail[0]}"
    return True, ""
