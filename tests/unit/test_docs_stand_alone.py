"""A clone of this repository has no ``../shared/``: no tracked file may send a reader there."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = re.compile(r"(\.\./)+shared/|shared/docs/")


def test_no_tracked_file_points_outside_the_repository() -> None:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert len(files) > 50  # the listing worked
    pointers = [
        f"{name}:{number}"
        for name in files
        if (ROOT / name).is_file() and not name.startswith("tests/unit/test_docs_stand_alone")
        for number, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not pointers, f"these lines point into ../shared/, which a clone does not have: {pointers}"
