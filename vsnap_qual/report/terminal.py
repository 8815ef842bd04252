"""The compact table pytest prints in its terminal summary, and the report paths."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from vsnap_qual import model
from vsnap_qual.report.frames import Comparisons, MatrixRow, compare_all, rows

if TYPE_CHECKING:
    from vsnap_qual.report import ReportPaths

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
    extra = [f"  coverage: {verdict['coverage_line']}"] if verdict["coverage_line"] else []
    extra += [f"  - {reason}" for reason in verdict["reasons"][:6]]
    lines += [text if len(text) <= width else text[: width - 1] + "…" for text in extra]
    if not run["complete"]:
        last = run["last_step"]
        lines.append(
            "  incomplete: "
            + (f"last step recorded {last['label']} ({last['outcome']})" if last else "no step recorded")
        )

    matrix = rows(comparisons.matrix, MatrixRow)
    if matrix:
        # Steps down, lanes across: the procedure grows by steps, the lanes stay four, so the table keeps its width.
        steps = [c for c in comparisons.matrix.columns if c not in ("lane", "runner", "arm", "faults", "faults_ok")]
        table = [["step", *(str(row["lane"]) for row in matrix)]]
        table += [[step, *(_MARK.get(row[step], str(row[step])) for row in matrix)] for step in steps]
        table.append(["faults", *(str(row["faults"] or "-") for row in matrix)])
        widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
        lines += ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in table]

    for check in verdict["checks"]:
        if check["ok"] is None:
            continue
        text = f"  {check['status']:<5} {check['short'] or check['name']:<10} {check['result']}"
        lines.append(text if len(text) <= width else text[: width - 1] + "…")
        for detail in check["details"][:3]:
            detail_text = f"        {detail}"
            lines.append(detail_text if len(detail_text) <= width else detail_text[: width - 1] + "…")
    if paths is not None:
        lines.append(f"  report:  {paths.report_html}")
        lines.append(f"  summary: {paths.summary_md}")
        lines.append(f"  results: {paths.results_json}")
    return lines
