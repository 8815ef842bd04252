"""scripts/slurm/qualify.sh refuses bad input before it submits anything (issue 46): one clear line naming the
option and what a good value is. (What it submits runs on the real cluster: tests/slurm.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm" / "qualify.sh"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--shards", "0", "--out", "{out}", "--", "suites/"], "--shards N: a whole number >= 1 (got '0')"),
        (["--shards", "x", "--out", "{out}", "--", "suites/"], "--shards N: a whole number >= 1 (got 'x')"),
        (["--shards", "2", "--", "suites/"], "--out DIR: a directory every node of the cluster sees"),
        (["--shards", "2", "--out", "{out}"], "no pytest arguments after --"),
        (["--shards", "2", "--out", "{out}", "--gpus-per-shard", "one", "--", "suites/"], "--gpus-per-shard G"),
        (["--shards", "2", "--out", "{out}", "--", "suites/", "--vsnap-shard=1/2"], "--vsnap-shard=1/2 is set by"),
        (["--shards", "2", "--out", "{out}", "--", "suites/", "--vsnap-report-dir=x"], "--vsnap-report-dir=x is set"),
        (["--shards", "2", "--out", "{out}", "--bogus"], "unknown option --bogus"),
        (["--shards", "2", "--out", "{out}", "--python", "/nowhere/python", "--", "suites/"], "not an executable"),
    ],
)
def test_bad_input_is_one_line_and_nothing_is_submitted(args: list[str], said: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = [a.replace("{out}", str(out)) for a in args]
    if "--python" not in argv:
        argv = ["--python", sys.executable, *argv]
    done = subprocess.run(["bash", str(SCRIPT), *argv], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and not out.exists(), "refused before anything was written or submitted"
