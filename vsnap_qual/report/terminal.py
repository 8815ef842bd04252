"""The compact table pytest prints in its terminal summary, and the report paths."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from vsnap_qual.report.frames import Comparisons, compare_all, records
from vsnap_qual.report.verdict import recorded_checks

if TYPE_CHECKING:
    from vsnap_qual.report import ReportPaths

_MARK = {"passed": "ok", "failed": "FAIL", "skipped": "skip", None: "-"}


def terminal_summary_lines(
    results: Mapping[str, Any],
    paths: ReportPaths | None = None,
    *,
    comparisons: Comparisons | None = None,
    width: int = 120,
    pytest_counts: Mapping[str, int] | None = None,
) -> list[str]:
    """Lines for ``terminalreporter.write_line``: verdict, lane × step table, validation checks, paths.

    Counts are pytest's own when given (``pytest_counts``: what its summary line says, by-design "not applicable"
    steps apart), else the recorded steps'. ``paths.notes`` (step summary / annotation problems) are left to the
    caller to print.
    """
    comparisons = comparisons or compare_all(results)
    verdict = results.get("verdict") or {}
    run = results.get("run") or {}
    if pytest_counts is not None:
        shown = ", ".join(f"{n} {category}" for category, n in pytest_counts.items()) or "no tests"
        counted = f"pytest: {shown}"
    else:
        counts = verdict.get("counts") or {}
        counted = (
            f"{counts.get('passed', 0)} passed, {counts.get('failed', 0)} failed, {counts.get('skipped', 0)} skipped"
        )
    lines = [f"vsnap-qual: {verdict.get('headline') or '?'}  ({counted})  run {run.get('run_id') or 'unknown'}"]
    extra = [f"  coverage: {verdict['coverage_line']}"] if verdict.get("coverage_line") else []
    extra += [f"  - {reason}" for reason in (verdict.get("reasons") or [])[:6]]
    lines += [text if len(text) <= width else text[: width - 1] + "…" for text in extra]
    if not run.get("complete"):
        last = run.get("last_step")
        lines.append(
            "  incomplete: "
            + (f"last step recorded {last['label']} ({last['outcome']})" if last else "no step recorded")
        )

    matrix = records(comparisons.matrix)
    if matrix:
        steps = [c for c in comparisons.matrix.columns if c not in ("lane", "runner", "arm", "faults", "faults_ok")]
        header = ["lane", *steps, "faults"]
        table = [header] + [
            [row["lane"], *(_MARK.get(row[s], str(row[s])) for s in steps), row["faults"] or "-"] for row in matrix
        ]
        widths = [max(len(str(r[i])) for r in table) for i in range(len(header))]
        lines += ["  " + "  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in table]

    checks = recorded_checks(results)
    for check in checks:
        if check.ok is None:
            continue
        text = f"  {check.status:<5} {check.short or check.name:<10} {check.result}"
        lines.append(text if len(text) <= width else text[: width - 1] + "…")
        for detail in check.details[:3]:
            detail_text = f"        {detail}"
            lines.append(detail_text if len(detail_text) <= width else detail_text[: width - 1] + "…")
    if paths is not None:
        lines.append(f"  report:  {paths.report_html}")
        lines.append(f"  summary: {paths.summary_md}")
        lines.append(f"  results: {paths.results_json}")
    return lines
