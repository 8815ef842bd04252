"""Fault steps skipped (an environment limitation before them) are not failures: the verdict is PARTIAL."""

from __future__ import annotations

from tests.report.synthetic_runs import MakeRun, RunSpec
from vsnap_qual import model, procedure
from vsnap_qual.faults import BUILTIN_FAULTS
from vsnap_qual.report import write_reports
from vsnap_qual.report.assemble import assemble_file

LIMITATION = "environment limitation: Sleep mode is not supported on current platform"


def _faults_check(verdict: model.Verdict) -> model.Check:
    return next(c for c in verdict["checks"] if c["id"] == "faults")


def test_every_fault_step_skipped_is_partial_not_fail(make_run: MakeRun) -> None:
    labels = [procedure.label(r, a, f.step) for r in ("v1", "v2") for a in ("head", "base") for f in BUILTIN_FAULTS]
    spec = RunSpec(changed_digests=(), skipped_steps=tuple((label, LIMITATION) for label in labels))
    directory = make_run("skipped", spec)
    verdict = assemble_file(directory / "evidence.jsonl")["verdict"]
    check = _faults_check(verdict)
    assert check["status"] == "not run" and check["result"] == f"{len(labels)} fault step(s) skipped"
    summary = write_reports(directory, github_step_summary=False).summary_md.read_text()
    row = next(line for line in summary.splitlines() if line.startswith("| injected failures"))
    assert f"| not run: {len(labels)} fault step(s) skipped |" in row, row  # said once, by the status
    assert verdict["status"] == "partial"
    assert not any("check failed" in reason for reason in verdict["reasons"])
    said = f"{len(labels)} required step(s) skipped"
    assert any(said in reason and LIMITATION in reason for reason in verdict["reasons"])


def test_some_fault_steps_skipped_count_apart(make_run: MakeRun) -> None:
    spec = RunSpec(changed_digests=(), skipped_steps=(("v1/base/fault:pid-occupied", LIMITATION),))
    verdict = assemble_file(make_run("one", spec) / "evidence.jsonl")["verdict"]
    check = _faults_check(verdict)
    judged = 4 * len(BUILTIN_FAULTS) - 1
    assert check["status"] == "pass" and check["result"].startswith(f"{judged}/{judged} as expected;")
    assert check["result"].endswith("; 1 skipped")
    assert verdict["status"] == "partial"
