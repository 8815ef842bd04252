"""report.html's fault table is coloured by each fault step's judgement, never by an observed value."""

from __future__ import annotations

import re
from pathlib import Path

from tests.report.synthetic_runs import MakeRun, RunSpec
from vsnap_qual.faults import BUILTIN_FAULTS
from vsnap_qual.report import write_reports

#: Every class the page paints in the failure colour (the stylesheet's --fail-bg / --fail rules).
FAILURE_CLASSES = ("s-FAIL", "s-failed", "s-mismatch", "s-missing", "s-false", "s-changed", "fault-failed", "mismatch")


def _fault_rows(directory: Path) -> list[str]:
    html = write_reports(directory, github_step_summary=False).report_html.read_text()
    section = html[html.index('<section id="faults">') : html.index('<section id="cleanup">')]
    return re.findall(r"<tr class=\"fault-row[^>]*>.*?</tr>", section, re.DOTALL)


def _failure_classes(row: str) -> set[str]:
    classes = {c for attr in re.findall(r'class="([^"]*)"', row) for c in attr.split()}
    return classes & set(FAILURE_CLASSES)


def test_a_passing_run_has_no_failure_colour_although_many_values_are_no(make_run: MakeRun) -> None:
    rows = _fault_rows(make_run("pass", RunSpec(changed_digests=())))
    assert len(rows) == 4 * len(BUILTIN_FAULTS)
    noes = sum(row.count(">no</span>") for row in rows)
    assert noes >= 48  # HTTP never bound, the base arm's missing hook not fired, …: the expected values
    assert [row for row in rows if _failure_classes(row)] == []
    # the expectation is still there for the reader
    assert 'title="expected no">no</span>' in "".join(rows)


def test_a_failed_fault_row_has_the_failure_colour(make_run: MakeRun) -> None:
    spec = RunSpec(changed_digests=(), failed_steps=(("v2", "base", "fault:port-in-use"),))
    rows = _fault_rows(make_run("fail", spec))
    failed = [row for row in rows if _failure_classes(row)]
    assert len(failed) == 1
    assert "v2/base" in failed[0] and "port-in-use" in failed[0]
    assert {"fault-failed", "s-failed", "mismatch"} <= _failure_classes(failed[0])
    assert "restore exited 1" in failed[0]  # the step's message, where no mismatch was recorded
