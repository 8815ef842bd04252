"""A run's comparisons are computed once: the verdict is judged from them and every view renders them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import vsnap_qual.report.frames as frames
from vsnap_qual.report import write_reports
from vsnap_qual.report.terminal import terminal_summary_lines


def test_writing_the_reports_and_the_terminal_summary_compares_once(
    report_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    step_matrix = frames.step_matrix  # called by compare_all and by nothing else

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return step_matrix(*args, **kwargs)

    monkeypatch.setattr(frames, "step_matrix", counted)
    paths = write_reports(report_dir, github_step_summary=False)
    lines = terminal_summary_lines(paths.results, paths)
    assert paths.notes == () and lines[0].startswith("vsnap-qual: FAIL")
    assert len(calls) == 1
