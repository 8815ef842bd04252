"""The compact table pytest prints in its terminal summary, and the report paths."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import TYPE_CHECKING

from vsnap_qual import model
from vsnap_qual.report.frames import Comparisons, MatrixRow, compare_all, rows

if TYPE_CHECKING:
    from vsnap_qual.report import ReportPaths

_REASONS = 8
_MARK: dict[str | bool | None, str] = {"passed": "ok", "failed": "FAIL", "skipped": "skip", None: "-"}


def terminal_summary_lines(
    results: model.Results,
    paths: ReportPaths | None = None,
    *,
    comparisons: Comparisons | None = None,
    width: int = 120,
    pytest_counts: Mapping[str, int] | None = None,
) -> list[str]:
    """Lines for ``terminalreporter.write_line``: verdict, step × lane table, validation checks, paths.

    Counts are pytest's own when given (``pytest_counts``: what its summary line says, by-design "not applicable"
    steps apart), else the recorded steps'. The comparisons are the ones the reports were rendered from
    (``paths.comparisons``) unless given, and computed only when neither has them. ``paths.notes`` (step summary
    / annotation problems) are left to the caller to print.
    """
    comparisons = comparisons or (paths.comparisons if paths is not None else None) or compare_all(results)
    verdict = results["verdict"]
    run = results["run"]
    if pytest_counts is not None:
        shown = ", ".join(f"{n} {category}" for category, n in pytest_counts.items()) or "no tests"
        counted = f"pytest: {shown}"
    else:
        counts = verdict["counts"]
        counted = f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"
    lines = [f"vsnap-qual: {verdict['headline'] or '?'}  ({counted})  run {run['run_id'] or 'unknown'}"]
    # what was qualified, in full: the terminal wraps, never cuts (a link, a path, vLLM's words stay whole)
    if verdict.get("target"):
        lines += _wrapped(f"qualified: {verdict.get('target')}", width)
    lines += [w for line in verdict.get("qualified") or [] for w in _wrapped(f"- {line}", width, indent=4)]
    if verdict["coverage_line"]:
        lines += _wrapped(f"coverage: {verdict['coverage_line']}", width)
    outcomes = verdict.get("known") or []
    said = {o["said"] for o in outcomes}
    reasons = [r for r in verdict["reasons"] if r not in said]
    for reason in reasons[:_REASONS]:
        lines += _wrapped(f"- {reason}", width, indent=4)
    if len(reasons) > _REASONS:
        lines.append(f"  … and {len(reasons) - _REASONS} more reason(s) in summary.md")
    if outcomes:
        lines.append("  known findings (--vsnap-known-findings):")
        lines += [w for o in outcomes for w in _wrapped(f"- {o['said']}", width, indent=6, first=4)]
    if not run["complete"]:
        last = run["last_step"]
        lines.append(
            "  incomplete: "
            + (f"last step recorded {last['label']} ({last['outcome']})" if last else "no step recorded")
        )

    known = verdict.get("known_failures") or {}
    matrix = rows(comparisons.matrix, MatrixRow)
    if matrix:
        # Steps down, lanes across: the procedure grows by steps, the lanes stay four, so the table keeps its width.
        steps = [c for c in comparisons.matrix.columns if c not in ("lane", "runner", "arm", "faults", "faults_ok")]
        table = [["step", *(str(row["lane"]) for row in matrix)]]
        table += [[step, *(_mark(row, step, known) for row in matrix)] for step in steps]
        table.append(["faults", *(str(row["faults"] or "-") for row in matrix)])
        widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
        lines += ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in table]

    for check in verdict["checks"]:  # every check, "not run" ones too: what was not qualified is said
        status = "KNOWN" if f"check:{check['id']}" in known else check["status"]
        lines += _wrapped(f"{status:<7} {check['short'] or check['name']:<10} {check['result']}", width, indent=21)
        for detail in check["details"][:3]:
            lines += _wrapped(detail, width, indent=21, first=21)
    if paths is not None:
        lines.append(f"  report:  {paths.report_html}")
        lines.append(f"  summary: {paths.summary_md}")
        lines.append(f"  results: {paths.results_json}")
    return lines


def _mark(row: MatrixRow, step: str, known: Mapping[str, str]) -> str:
    """A step's cell: ok, FAIL, KNOWN (failed on a known finding), skip or -."""
    outcome = row[step]
    if outcome == "failed" and f"{row['lane']}/{step}" in known:
        return "KNOWN"
    return _MARK.get(outcome, str(outcome))


def _wrapped(text: str, width: int, *, indent: int = 4, first: int = 2) -> list[str]:
    """``text`` over as many lines of ``width`` as it needs (the first indented ``first``, the rest ``indent``),
    never cut: a word longer than a line (a link, a path) stays whole on a line of its own."""
    return textwrap.wrap(
        text,
        width=width,
        initial_indent=" " * first,
        subsequent_indent=" " * indent,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [" " * first]
