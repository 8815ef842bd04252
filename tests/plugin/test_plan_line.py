"""The plan line a run prints once its tests are collected (``VsnapSession._say_plan``): the selection as pytest made
it (``-m``, ``-k``, ``--deselect``, ``--vsnap-runners``), with and without xdist, and the estimate from
``--vsnap-plan-history`` only (never from whatever lies in the report root). Collected with ``--co`` on the in-memory
runtime (tests/seam): nothing runs."""

from __future__ import annotations

import json
from pathlib import Path

from tests.plugin.test_non_runs import MEMORY, pytest_in


def _plan(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("vsnap-qual plan: ")]
    assert len(lines) == 1, output[-3000:]
    return lines[0]


def test_the_plan_counts_the_steps_the_selection_kept(tmp_path: Path) -> None:
    report = tmp_path / "report"
    everything = _plan(pytest_in(tmp_path, *MEMORY, f"--vsnap-report-dir={report}", "--co", "-q").stdout)
    assert everything.startswith("vsnap-qual plan: 2 lanes (v1/head, v2/head), "), everything  # no base image
    assert "faults per lane)" in everything and "(0 faults" not in everything and "stall" in everything
    total = int(everything.split("), ", 1)[1].split(" ")[0])
    narrowed = _plan(
        pytest_in(
            tmp_path, *MEMORY, f"--vsnap-report-dir={report}", "--co", "-q", "-m", "not fault",
            "--vsnap-runners=v1", "-k", "not restore_2",
        ).stdout
    )  # fmt: skip
    assert narrowed.startswith("vsnap-qual plan: 1 lane (v1/head), "), narrowed
    kept = int(narrowed.split("), ", 1)[1].split(" ")[0])
    assert 0 < kept < total / 2 and "(0 faults per lane)" in narrowed and "stall" not in narrowed, narrowed
    assert "deselected" in narrowed
    one = "suites/test_lifecycle.py::TestLifecycle::test_create[v1-head]"
    only = _plan(
        pytest_in(
            tmp_path,
            *MEMORY,
            f"--vsnap-report-dir={report}",
            "--co",
            "-q",
            "--vsnap-runners=v1",
            "-m",
            "not fault",
            "-k",
            "test_create and v1-head",
        ).stdout  # fmt: skip
    )
    assert only.startswith("vsnap-qual plan: 1 lane (v1/head), 1 selected step"), (only, one)


def test_under_xdist_the_controller_says_the_workers_selection(tmp_path: Path) -> None:
    done = pytest_in(
        tmp_path, *MEMORY, f"--vsnap-report-dir={tmp_path / 'report'}", "--co", "-q", "-n", "2", "-m", "not fault"
    )
    line = _plan(done.stdout)
    assert line.startswith("vsnap-qual plan: 2 lanes (v1/head, v2/head), "), line
    assert "(0 faults per lane)" in line and "deselected" in line, line


def test_the_estimate_comes_from_the_kept_history_never_from_the_report_root(tmp_path: Path) -> None:
    root = tmp_path / "reports"
    (root / "older").mkdir(parents=True)
    (root / "older" / "results.json").write_text("{}")  # what the report root held: never an estimate
    history = tmp_path / "history"
    history.mkdir()
    args = [*MEMORY, f"--vsnap-report-dir={root / 'latest'}", "--co", "-q", "-m", "not fault"]
    none = _plan(pytest_in(tmp_path, *args).stdout)
    assert none.endswith("; no estimate: no previous run (no --vsnap-plan-history)"), none
    empty = _plan(pytest_in(tmp_path, *args, f"--vsnap-plan-history={history}").stdout)
    assert empty.endswith(f"; no estimate: no previous run of memory in {history}"), empty
    kept = json.loads((root / "older" / "results.json").read_text() or "{}")
    assert kept == {}
    done = pytest_in(tmp_path, *args, f"--vsnap-plan-history={tmp_path / 'nowhere'}")
    assert done.returncode == 4 and "--vsnap-plan-history" in done.stderr and "does not exist" in done.stderr, (
        done.stderr[-2000:]
    )
