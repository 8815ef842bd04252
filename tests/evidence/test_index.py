"""evidence/README.md is the one index of the committed runs: a row for every run folder and none for a folder that is
not there, so the index cannot rot as runs are added, renamed or dropped."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EVIDENCE = ROOT / "evidence"
INDEX = EVIDENCE / "README.md"

#: a run folder's name: the day it ran, what ran, the commit (no attempt marks such as -2 or -final)
RUN_NAME = re.compile(r"(?P<date>\d{4}-\d{2}-\d{2})-[a-z0-9][a-z0-9.-]*-(?P<commit>[0-9a-f]{7})(?:-diagnostic)?")
#: a row of the table of every run: its first cell links the folder ``<kind>/<name>/``, named as the link's text
RUN_ROW = re.compile(r"^\| \[`(?P<text>[^`/]+/[^`/]+)/`\]\((?P<target>[^)]+)/\) \| (?P<cells>.*) \|$")
#: the first day of runs recorded after issue 43: they never had a name under docs/
AFTER_ISSUE_43 = "2026-12-07"
#: a row of the old-names table: the path under docs/ before issue 43 and the folder now
OLD_ROW = re.compile(r"^\| `(?P<old>[^`]+)` \| `(?P<new>[^`/]+/[^`/]+)/` \|$")


def _run_folders() -> set[str]:
    """Every run folder as ``<kind>/<name>``: each directory one level below a kind's directory."""
    return {
        f"{kind.name}/{run.name}"
        for kind in EVIDENCE.iterdir()
        if kind.is_dir()
        for run in kind.iterdir()
        if run.is_dir()
    }


def _rows() -> list[tuple[str, list[str]]]:
    """The index's run rows: the folder each links and the row's other cells."""
    rows = []
    for line in INDEX.read_text().splitlines():
        if (row := RUN_ROW.match(line)) is not None:
            assert row["text"] == row["target"], f"the link's text names another folder than it links: {line[:120]}"
            rows.append((row["target"], row["cells"].split(" | ")))
    return rows


def test_the_index_lists_every_run_folder_and_nothing_else() -> None:
    listed = [folder for folder, _ in _rows()]
    on_disk = _run_folders()
    assert len(on_disk) > 40, "the listing of evidence/ worked"
    assert len(listed) == len(set(listed)), f"listed twice: {sorted(f for f in listed if listed.count(f) > 1)}"
    assert not on_disk - set(listed), f"run folders the index does not list: {sorted(on_disk - set(listed))}"
    assert not set(listed) - on_disk, f"the index lists folders that are not there: {sorted(set(listed) - on_disk)}"


def test_a_kind_holds_run_folders_and_its_readme_only() -> None:
    """A run's files live in its folder: nothing loose beside a kind's README, where the index would not see it."""
    loose = [
        str(path.relative_to(ROOT))
        for kind in EVIDENCE.iterdir()
        if kind.is_dir()
        for path in kind.iterdir()
        if path.is_file() and path.name != "README.md"
    ]
    assert not loose, f"files outside a run folder: {loose}"
    assert all((kind / "README.md").is_file() for kind in EVIDENCE.iterdir() if kind.is_dir())


def test_each_row_gives_the_folders_date_and_commit_and_names_files_that_exist() -> None:
    for folder, cells in _rows():
        name = RUN_NAME.fullmatch(folder.split("/", 1)[1])
        assert name is not None, f"{folder}: not <date>-<what>-<commit>"
        date, commit, _what, verdict, cited = cells
        assert date == name["date"] and f"`{name['commit']}`" in commit, f"{folder}: date or commit cell is not its own"
        assert verdict.strip(), folder
        for path in re.findall(r"`([^`]+)`", cited):
            assert (ROOT / path).is_file(), f"{folder} is said to be cited by {path}, which is not there"


def test_every_run_has_its_old_name_and_no_old_path_is_left() -> None:
    """Commit messages and the older CHANGELOG entries name the paths before issue 43: the index maps each run."""
    mapped = [OLD_ROW.match(line) for line in INDEX.read_text().splitlines()]
    pairs = [(m["old"], m["new"]) for m in mapped if m is not None]
    before_43 = [folder for folder, cells in _rows() if cells[0] < AFTER_ISSUE_43]
    assert sorted(new for _, new in pairs) == sorted(before_43)
    assert not [old for old, _ in pairs if (ROOT / "docs" / old.split(",")[0]).exists()], "an old path is still there"
