"""The suites run the lifecycle before the injected failures (collection order), so the first lifecycle answer
comes before a dozen faults (suites/conftest.py; the reference profile gives the suites a target)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_lifecycle_item_is_collected_before_any_fault_item(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "suites/",
            "@suites/profiles/reference.args",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--vsnap-report-dir={tmp_path / 'report'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    items = [line for line in done.stdout.splitlines() if "::" in line]
    assert done.returncode == 0 and items, done.stdout[-2000:] + done.stderr[-2000:]
    kinds = ["fault" if line.startswith("test_faults.py") else "lifecycle" for line in items]
    assert "fault" in kinds and "lifecycle" in kinds
    assert kinds == sorted(kinds, key=lambda k: k == "fault"), items
