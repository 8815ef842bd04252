"""scripts/run-pytest.sh: exit code 5 and (with --no-skips) any skipped test fail the command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "run-pytest.sh"


def _run(tmp_path: Path, body: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(body)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", str(SCRIPT), *args, str(tmp_path), "-q", "-p", "no:cacheprovider", "-p", "no:vsnap_qual"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )


def test_a_skip_fails_the_command_with_no_skips_and_is_named(tmp_path: Path) -> None:
    body = "import pytest\ndef test_ok():\n    pass\ndef test_gone():\n    pytest.skip('no torch here')\n"
    strict = _run(tmp_path, body, "--no-skips")
    assert strict.returncode == 1
    assert "test_gone: no torch here" in strict.stderr
    assert _run(tmp_path, body).returncode == 0


def test_no_tests_collected_is_a_failure(tmp_path: Path) -> None:
    done = _run(tmp_path, "def helper():\n    pass\n")
    assert done.returncode == 1 and "exit 5" in done.stderr


def test_all_passing_stays_green(tmp_path: Path) -> None:
    assert _run(tmp_path, "def test_ok():\n    pass\n", "--no-skips").returncode == 0
