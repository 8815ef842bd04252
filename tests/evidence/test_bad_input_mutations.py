"""Issue 47's must-show, held: every row of the bad-input table (``tests/plugin/test_bad_input_table.py``) was seen
failing with the check that refuses it removed. ``scripts/bad_input_mutations.py`` ran each row alone against a
scratch copy of the tree with its refusal site(s) (``scripts/bad_input_sites.toml``) disabled; the committed run
(``evidence/tests/<date>-bad-input-rows-<commit>/README.md``) has a line per row. A row added to the table without
its site and a run of it, a row that still passed, or a site whose anchor is gone from the code fails here."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "evidence" / "tests"
SCRIPT = ROOT / "scripts" / "bad_input_mutations.py"
#: a line of the run's table: | `row` | `site`, `site` | outcome | why it failed |
LINE = re.compile(r"^\| `(?P<row>[a-z0-9-]+)` \| (?P<sites>[^|]*) \| (?P<outcome>[^|]+) \| (?P<why>.*) \|$")
FAILED = "failed as required"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bad_input_mutations", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # its dataclasses look their module up there
    spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


def _row_ids() -> list[str]:
    """The ids of the table's rows, as the script reads them (its ``table_rows``: ``ROWS`` of the test module)."""
    return [row for row, _runtime in _script().table_rows()]


def _run() -> Path:
    """The newest committed run of the script (a folder is named by its day and commit)."""
    runs = sorted(RUNS.glob("*-bad-input-rows-*"))
    assert runs, f"no run of scripts/bad_input_mutations.py under {RUNS}"
    return runs[-1]


def _lines() -> dict[str, tuple[str, str, str]]:
    """The run's table: row → (its sites, as the site table names them; the outcome; why it failed)."""
    found: dict[str, tuple[str, str, str]] = {}
    rows_part = (_run() / "README.md").read_text().split("\n## ")[0]  # the sites' own table comes under a heading
    for line in rows_part.splitlines():
        if (match := LINE.match(line)) is not None:
            assert match["row"] not in found, f"{match['row']} is listed twice"
            sites = ", ".join(re.findall(r"`([^`]+)`", match["sites"]))
            found[match["row"]] = (sites, match["outcome"].strip(), match["why"].strip())
    return found


def test_the_ids_are_read_from_the_table() -> None:
    ids = _row_ids()
    assert len(ids) >= 104 and len(set(ids)) == len(ids)
    assert {"image-space", "overlay-compiled-by-the-engine", "nightly-tag-no-repository"} <= set(ids)


def test_every_row_was_seen_failing_with_its_refusal_removed() -> None:
    """Each row of the table has its line in the committed run, and each line says the row failed as required."""
    ids, lines = _row_ids(), _lines()
    missing = [row for row in ids if row not in lines]
    assert not missing, f"rows never run with their check removed (scripts/bad_input_mutations.py): {missing}"
    gone = sorted(set(lines) - set(ids))
    assert not gone, f"the run lists rows the table no longer has: {gone}"
    others = {row: outcome for row, (_, outcome, _) in lines.items() if outcome != FAILED}
    assert not others, f"rows that did not fail with their site disabled: {others}"
    assert all(why for _, _, why in lines.values()), "each failure says why"


def test_the_run_disabled_the_sites_the_site_table_names() -> None:
    """A row whose sites changed since the run must be run again: the run's sites are the site table's."""
    table = _script().load_table()
    changed = {
        row: (sites, ", ".join(table.rows.get(row, ())))
        for row, (sites, _, _) in _lines().items()
        if sites != ", ".join(table.rows.get(row, ()))
    }
    assert not changed, f"run with other sites than the site table names now (run, table): {changed}"


def test_the_site_table_maps_every_row_to_anchors_the_code_still_has() -> None:
    """The script's own check: every row has a site, every site is used, every anchor is found once (an anchor
    gone from the code is an error, not a skip), and each disabled file still compiles."""
    script = _script()
    assert script.check(script.load_table(), _row_ids()) == []
