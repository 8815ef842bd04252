"""``--vsnap-known-findings`` through a whole pytest run (the in-memory runtime of ``tests/seam``): the base arm
judged by the head expectations fails its ``wake-raise`` fault in known words, the head arm by the base ones in
others; with both listed the run's steps read KNOWN, its verdict passes and pytest exits 0; with one word of an
entry changed, that failure is new: FAIL, exit 1. A bad file stops the run before anything starts (exit 4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent
HEAD_WORDS = "recovery failure after memory wake (base expectations, --vsnap-expect=base): error.json present"
BASE_WORDS = "recovery failure after memory wake (head expectations, --vsnap-base-expect=head): error.json missing"
ENTRY = (
    '[[finding]]\nid = "step:fault:wake-raise"\nwords = "{}"\nlink = "https://example.org/{}"\nexpires = 2099-12-31\n'
)


def _run(tmp_path: Path, findings: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    tmp_path.mkdir(exist_ok=True)
    known = tmp_path / "known.toml"
    known.write_text(findings)
    report = tmp_path / "report"
    done = subprocess.run(
        [
            sys.executable, "-m", "pytest", str(ROOT / "suites"), "-p", "memory_runtime", "-p", "no:cacheprovider",
            "--vsnap-runtime=memory", "--vsnap-image=memory:head", "--vsnap-base-image=memory:base",
            "--vsnap-model=org/tiny", "--vsnap-revision=0123456789abcdef0123456789abcdef01234567",
            "--vsnap-expect=base", "--vsnap-base-expect=head", "--vsnap-runners=v1", "--vsnap-fault-timeout=2",
            "--vsnap-soak=0.5", "--vsnap-observe=2", "--vsnap-decode-runs=0", "--vsnap-cleanup-grace=1",
            f"--vsnap-report-dir={report}", f"--vsnap-known-findings={known}", "-m", "fault",
            "-k", "fault_artifact or (wake and raise)",
        ],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)])},
    )  # fmt: skip
    results = json.loads((report / "results.json").read_text()) if (report / "results.json").exists() else {}
    return done, results


def test_known_failures_pass_the_run_and_a_changed_word_fails_it(tmp_path: Path) -> None:
    both = ENTRY.format(HEAD_WORDS, "head") + ENTRY.format(BASE_WORDS, "base")
    done, results = _run(tmp_path / "known", both)
    output = done.stdout + done.stderr
    verdict = results["verdict"]
    assert sorted(verdict["failed"]) == ["v1/base/fault:wake-raise", "v1/head/fault:wake-raise"], output[-3000:]
    assert verdict["status"] == "pass" and "known finding" in verdict["headline"], verdict["reasons"]
    assert done.returncode == 0, output[-3000:]  # pytest's exit 1 for the known failed tests is taken back
    assert "KNOWN" in output and "https://example.org/base" in output
    changed = ENTRY.format(HEAD_WORDS, "head") + ENTRY.format(BASE_WORDS.replace("missing", "absent"), "base")
    done, results = _run(tmp_path / "changed", changed)
    assert results["verdict"]["status"] == "fail" and done.returncode == 1, (done.stdout + done.stderr)[-3000:]
    assert [o["state"] for o in results["verdict"]["known"]] == ["known", "changed"]


def test_a_bad_file_stops_the_run_before_anything_starts(tmp_path: Path) -> None:
    done, results = _run(tmp_path, ENTRY.format(HEAD_WORDS, "head").replace("2099-12-31", '"someday"'))
    assert done.returncode == 4 and not results, done.stdout[-2000:] + done.stderr[-2000:]
    assert "--vsnap-known-findings" in done.stderr and "is not a date" in done.stderr
    assert not (tmp_path / "report").exists()
