"""Harness errors (collection, setup, teardown) reach the evidence with their message and fail the verdict;
what the run selected is recorded for the verdict's coverage. Needs Docker and the reference image (preflight)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vsnap_qual.report.assemble import read_evidence

REFERENCE = ["--vsnap-image=vsnap-reference:head", "--vsnap-model=vsnap/tiny-qwen3"]
REVISION = "--vsnap-revision=7f3a9c2e5b1d4086a2e4c6b8d0f1a3c5e7092b4d"

SUITE = """
import pytest

@pytest.fixture
def breaks_at_teardown():
    yield
    raise RuntimeError("sweep saw a container vanish: 404 No such container")

def test_passes_but_its_teardown_breaks(vsnap_config, breaks_at_teardown):
    pass
"""


@pytest.mark.docker
def test_collection_and_teardown_errors_are_evidence_and_fail_the_verdict(
    pytester: pytest.Pytester, tmp_path: Path, reference_images: None
) -> None:
    pytester.makepyfile(test_suite=SUITE, test_broken="import vsnap_no_such_module_anywhere\n")
    report = tmp_path / "report"
    result = pytester.runpytest_subprocess(
        "-p", "vsnap_qual", *REFERENCE, REVISION, "--vsnap-privileges=host-namespaces", f"--vsnap-report-dir={report}"
    )
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED or result.ret == pytest.ExitCode.TESTS_FAILED, text[-3000:]
    errors = [r for r in read_evidence(report / "evidence.jsonl").records if r["kind"] == "harness_error"]
    phases = {e["phase"]: e for e in errors}
    assert "collection" in phases and "vsnap_no_such_module_anywhere" in str(phases["collection"]["message"]), errors
    plans = [r for r in read_evidence(report / "evidence.jsonl").records if r["kind"] == "plan"]
    assert plans and plans[0]["selected"] == []  # no suite step in this run
    verdict = json.loads((report / "results.json").read_text())["verdict"]
    assert verdict["status"] == "fail"
    assert any("harness error (collection)" in r and "vsnap_no_such_module_anywhere" in r for r in verdict["reasons"])
    assert "vsnap_no_such_module_anywhere" in (report / "summary.md").read_text()


@pytest.mark.docker
def test_a_teardown_error_is_evidence_and_fails_the_verdict(
    pytester: pytest.Pytester, tmp_path: Path, reference_images: None
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    report = tmp_path / "report"
    result = pytester.runpytest_subprocess(
        "-p", "vsnap_qual", *REFERENCE, REVISION, "--vsnap-privileges=host-namespaces", f"--vsnap-report-dir={report}"
    )
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, text[-3000:]
    (error,) = [r for r in read_evidence(report / "evidence.jsonl").records if r["kind"] == "harness_error"]
    assert error["phase"] == "teardown" and str(error["nodeid"]).endswith("test_passes_but_its_teardown_breaks")
    assert "sweep saw a container vanish: 404 No such container" in str(error["message"])
    verdict = json.loads((report / "results.json").read_text())["verdict"]
    assert verdict["status"] == "fail" and verdict["harness_errors"][0]["phase"] == "teardown"
    assert any("harness error (teardown)" in r and "404 No such container" in r for r in verdict["reasons"])
