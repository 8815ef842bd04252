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


def test_the_readmes_links_resolve_in_a_clone_and_its_internals_live_in_the_design() -> None:
    """Every relative link of the README names a tracked file or directory of this repository (on PyPI the link text
    still names the path), and the assumptions it links to are section 6 of docs/design.md, not the README's."""
    readme = (ROOT / "README.md").read_text()
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    relative = [t for t in targets if not re.match(r"[a-z]+:", t)]
    assert "docs/design.md" in relative and "docs/report-screenshot.png" in relative
    missing = [t for t in relative if not any(f == t.rstrip("/") or f.startswith(t.rstrip("/") + "/") for f in tracked)]
    assert not missing, f"README links to what a clone does not have: {missing}"
    assert not [t for t in relative if t.startswith("..")]
    assert "## 6. Assumptions" in (ROOT / "docs" / "design.md").read_text()
    assert "## Assumptions" not in readme and "**CPU smoke mode.**" not in readme
