"""vsnap-qual report, write_reports' CI hooks (step summary, Buildkite annotation), terminal lines."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.report.synthetic_runs import MakeRun, RunSpec
from vsnap_qual.cli import SUBCOMMANDS, build_parser, main
from vsnap_qual.report import write_reports
from vsnap_qual.report.terminal import terminal_summary_lines


def test_subcommands_are_a_registry() -> None:
    assert list(SUBCOMMANDS) == ["report", "compare", "doctor", "nightly-tag", "history", "merge"]
    help_text = build_parser().format_help()
    assert "report" in help_text and "compare" in help_text


@pytest.mark.parametrize("target", ["dir", "evidence"])
def test_report_from_evidence(report_dir: Path, target: str, capsys: pytest.CaptureFixture[str]) -> None:
    source = report_dir if target == "dir" else report_dir / "evidence.jsonl"
    assert main(["report", str(source)]) == 1  # the default synthetic run fails (a changed digest)
    assert capsys.readouterr().out.startswith("FAIL: wrote")
    for name in ("results.json", "report.html", "summary.md"):
        assert (report_dir / name).stat().st_size > 0


def test_report_from_results_json_elsewhere(report_dir: Path, tmp_path: Path) -> None:
    write_reports(report_dir, github_step_summary=False)
    out = tmp_path / "rerendered"
    assert main(["report", str(report_dir / "results.json"), "--out", str(out)]) == 1
    html = (out / "report.html").read_text()
    # Log links still point at the files beside the original report.
    assert 'href="../run/logs/v2-head/restore-2.log"' in html
    assert "INFO 029 restore-2 v2/head" in html


def test_killed_run_renders_a_partial_report(make_run: MakeRun) -> None:
    directory = make_run("killed", RunSpec(complete=False, stop_after_steps=11, changed_digests=()))
    assert main(["report", str(directory)]) == 4
    assert "INCOMPLETE" in (directory / "report.html").read_text()
    assert "v1/head/fault:wake-raise" in (directory / "summary.md").read_text()


def test_report_bad_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert "holds neither" in capsys.readouterr().err
    bad = tmp_path / "results.json"
    bad.write_text('{"schema": "other"}')
    assert main(["report", str(bad)]) == 2
    assert "not a vsnap-qual results file" in capsys.readouterr().err


def test_github_step_summary_is_appended(report_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "gh-summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    paths = write_reports(report_dir)
    assert paths.github_step_summary == summary
    text = summary.read_text()
    assert text.startswith("earlier step\n## vsnap-qual")
    assert write_reports(report_dir, github_step_summary=False).github_step_summary is None


def test_buildkite_annotation(report_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "annotate.txt"
    agent = bin_dir / "buildkite-agent"
    agent.write_text(f'#!/bin/sh\necho "$@" > {record}\ncat >> {record}\n')
    agent.chmod(agent.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    paths = write_reports(report_dir, annotate=True)
    assert paths.annotated and paths.notes == ()
    written = record.read_text()
    assert written.startswith("annotate --style error --context vsnap-qual")
    assert "| check | result |" in written


def test_annotate_without_the_agent_is_a_note(report_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    paths = write_reports(report_dir, annotate=True, github_step_summary=False)
    assert not paths.annotated
    assert "buildkite-agent is not on PATH" in paths.notes[0]


def test_terminal_summary_lines(report_dir: Path) -> None:
    paths = write_reports(report_dir, github_step_summary=False)
    lines = terminal_summary_lines(paths.results, paths)
    assert lines[0].startswith("vsnap-qual: FAIL")
    header = next(line.split() for line in lines if line.split()[:1] == ["step"])
    assert header == ["step", "v1/head", "v1/base", "v2/head", "v2/base"]
    restore_2 = next(line.split() for line in lines if line.split()[:1] == ["restore-2"])
    assert restore_2 == ["restore-2", "ok", "ok", "FAIL", "ok"]
    assert any("digests" in line and "29/30 unchanged" in line for line in lines)
    assert lines[-3:] == [
        f"  report:  {paths.report_html}",
        f"  summary: {paths.summary_md}",
        f"  results: {paths.results_json}",
    ]
    assert all(len(line) <= 120 for line in lines[1:-3])
