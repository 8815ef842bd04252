#!/usr/bin/env python3
"""Issue 47: every row of the bad-input table seen failing with the check that refuses it removed.

    python scripts/bad_input_mutations.py --check                 # the site table only: every row mapped, anchors found
    python scripts/bad_input_mutations.py --out DIR               # every row without Docker, then DIR/README.md
    python scripts/bad_input_mutations.py --out DIR --docker      # the rows only the engine answers (Docker; flock)
    python scripts/bad_input_mutations.py --out DIR --rows a b    # these rows only

``scripts/bad_input_sites.toml`` names, for each row of ``tests/plugin/test_bad_input_table.py``, the refusal site(s)
that turn its input away: a file, an anchor (text found exactly once in that file) and how the site is disabled:

``if-false``
    the innermost ``if``/``elif`` whose body holds the anchor gets the condition ``False`` (the refusal never runs);
``pass``
    the innermost simple statement holding the anchor (a ``raise``, a ``return`` of an error, an ``append`` of a
    problem) becomes ``pass``;
``replace``
    the anchor itself is replaced by ``new`` (an argparse declaration: ``required=True`` made ``False``, a
    ``choices=`` dropped).

For each row, alone: the tree is copied to a scratch directory once (never edited in place; ``evidence/`` is linked,
read only), the row's sites are disabled there, the copy must still compile, the row is run against the copy
(``pytest tests/plugin/test_bad_input_table.py::test_bad_input[ROW]``, its own test function and nothing else) and
it must FAIL; then the files are put back before the next row. Before that, every row is run once against the
unmodified copy and must pass (else its outcome is "baseline failed": nothing can be said). A file under
``installed:`` is a module this Python imports from outside the checkout (pytest's parser and the standard library's
argparse refuse a few rows themselves): it is copied into the scratch copy's ``_site/``, which comes first on
``PYTHONPATH`` (before the standard library and site-packages), and disabled there.

An anchor that is no longer in its file, or found twice, or a row with no site, is an error (``--check`` says so,
and ``tests/evidence/test_bad_input_mutations.py`` runs it), never a silent skip. Outcomes: ``failed as required``,
``STILL PASSED`` (a gap: the row's input is refused by another check too; find it and add it), ``baseline failed``,
``error`` (the run did not get as far as the row's assertions: a collection error, a copy that does not compile).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import py_compile
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

ROOT = Path(__file__).resolve().parents[1]
SITES = ROOT / "scripts" / "bad_input_sites.toml"
TABLE = "tests/plugin/test_bad_input_table.py"
INSTALLED = "installed:"
HOWS = ("if-false", "pass", "replace")
FAILED = "failed as required"
PASSED = "STILL PASSED"


class SiteError(Exception):
    """A site of the table that cannot be applied: its anchor is gone, found twice, or in no such statement."""


@dataclass(frozen=True)
class Site:
    name: str
    file: str  # relative to the checkout, or site-packages:<path under site-packages>
    anchor: str
    how: str
    new: str = ""
    after: str = ""  # the anchor's first occurrence after this text (found exactly once), e.g. "def parse_count("

    def describe(self) -> str:
        short = self.anchor if len(self.anchor) <= 60 else self.anchor[:57] + "..."
        return f"{self.file} `{short}` ({self.how})"


@dataclass(frozen=True)
class Table:
    sites: dict[str, Site]
    rows: dict[str, tuple[str, ...]]
    notes: dict[str, str]


def load_table(path: Path = SITES) -> Table:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    sites = {}
    for name, entry in data["sites"].items():
        if entry.get("how") not in HOWS:
            raise SiteError(f"site {name}: how must be one of {HOWS}, not {entry.get('how')!r}")
        extra = set(entry) - {"file", "anchor", "how", "new", "after"}
        if extra:
            raise SiteError(f"site {name}: extra key(s) {sorted(extra)}")
        sites[name] = Site(
            name, entry["file"], entry["anchor"], entry["how"], entry.get("new", ""), entry.get("after", "")
        )
    rows: dict[str, tuple[str, ...]] = {}
    for row, given in data["rows"].items():
        names = (given,) if isinstance(given, str) else tuple(given)
        unknown = [n for n in names if n not in sites]
        if unknown or not names:
            raise SiteError(f"row {row}: unknown site(s) {unknown}" if unknown else f"row {row}: no site")
        rows[row] = names
    return Table(sites, rows, dict(data.get("notes", {})))


def installed(relative: str) -> Path:
    """A file of a module this Python imports from outside the checkout: ``_pytest/config/argparsing.py`` (a
    package's file), ``argparse.py`` (a module of the standard library)."""
    top = relative.split("/", 1)[0].removesuffix(".py")
    spec = importlib.util.find_spec(top)
    origin = Path(spec.origin if spec is not None and spec.origin else "")
    base = origin.parent.parent if origin.name == "__init__.py" else origin.parent
    return base / relative


def _installed_tops(table: Table) -> list[str]:
    """The top-level modules (``_pytest``, ``argparse.py``) of the table's ``installed:`` sites."""
    return sorted(
        {s.file[len(INSTALLED) :].split("/")[0] for s in table.sites.values() if s.file.startswith(INSTALLED)}
    )


def source_path(root: Path, site: Site) -> Path:
    if site.file.startswith(INSTALLED):
        return root / "_site" / site.file[len(INSTALLED) :]
    return root / site.file


def _offset(text: str, site: Site) -> int:
    """Where the site's anchor starts: its one occurrence, or with ``after`` its first after that (unique) text."""
    start = 0
    if site.after:
        count = text.count(site.after)
        if count != 1:
            raise SiteError(f"{site.describe()}: the text {site.after!r} is found {count} times (must be exactly once)")
        start = text.index(site.after) + len(site.after)
        found = text.find(site.anchor, start)
        if found < 0:
            raise SiteError(f"{site.describe()}: the anchor {site.anchor!r} is not found after {site.after!r}")
        return found
    count = text.count(site.anchor)
    if count != 1:
        raise SiteError(f"{site.describe()}: the anchor {site.anchor!r} is found {count} times (must be exactly once)")
    return text.index(site.anchor)


def _position(text: str, offset: int) -> tuple[int, int]:
    """(line from 1, UTF-8 byte column) of a character offset, as ``ast`` positions count."""
    before = text[:offset]
    line = before.count("\n") + 1
    column = len(before[before.rfind("\n") + 1 :].encode("utf-8"))
    return line, column


def _inside(node: ast.stmt, where: tuple[int, int]) -> bool:
    start = (node.lineno, node.col_offset)
    end = (node.end_lineno or node.lineno, node.end_col_offset or 0)
    return start <= where < end


def _splice(text: str, start: tuple[int, int], end: tuple[int, int], new: str) -> str:
    lines = text.splitlines(keepends=True)
    first = lines[start[0] - 1].encode("utf-8")
    last = lines[end[0] - 1].encode("utf-8")
    joined = first[: start[1]].decode("utf-8") + new + last[end[1] :].decode("utf-8")
    return "".join([*lines[: start[0] - 1], joined, *lines[end[0] :]])


COMPOUND = (
    ast.If,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.With,
    ast.AsyncWith,
    ast.Try,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Match,
)


def disable(text: str, site: Site) -> str:
    """The file's text with the site disabled (see the module's doc for the three ways)."""
    offset = _offset(text, site)
    if site.how == "replace":
        return text[:offset] + site.new + text[offset + len(site.anchor) :]
    where = _position(text, offset)
    tree = ast.parse(text)
    if site.how == "pass":
        simple = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.stmt) and not isinstance(node, COMPOUND) and _inside(node, where)
        ]
        if not simple:
            raise SiteError(f"{site.describe()}: no simple statement holds the anchor")
        node = max(simple, key=lambda n: (n.lineno, n.col_offset))
        return _splice(text, (node.lineno, node.col_offset), (node.end_lineno or 0, node.end_col_offset or 0), "pass")
    branches = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and any(_inside(child, where) for child in node.body)
    ]
    if not branches:
        raise SiteError(f"{site.describe()}: no if holds the anchor in its body")
    test = max(branches, key=lambda n: (n.lineno, n.col_offset)).test
    return _splice(text, (test.lineno, test.col_offset), (test.end_lineno or 0, test.end_col_offset or 0), "False")


def check(table: Table, row_ids: Iterable[str], root: Path = ROOT) -> list[str]:
    """Every problem of the site table against a tree: rows without a site, sites no row uses, anchors not found
    exactly once, a disabled file that does not compile."""
    problems = []
    ids = list(row_ids)
    problems += [f"row {row}: no refusal site in {SITES.name}" for row in ids if row not in table.rows]
    problems += [f"{SITES.name} names row {row}, which the table does not have" for row in table.rows if row not in ids]
    used = {name for names in table.rows.values() for name in names}
    problems += [f"site {name}: no row uses it" for name in table.sites if name not in used]
    for site in table.sites.values():
        path = installed(site.file[len(INSTALLED) :]) if site.file.startswith(INSTALLED) else root / site.file
        if not path.is_file():
            problems.append(f"site {site.name}: {site.file} is not there")
            continue
        try:
            compile(disable(path.read_text(encoding="utf-8"), site), str(path), "exec")
        except SiteError as exc:
            problems.append(f"site {site.name}: {exc}")
        except SyntaxError as exc:
            problems.append(f"site {site.name}: disabled, {site.file} does not compile: {exc}")
    return problems


def table_rows() -> list[tuple[str, str]]:
    """(row id, runtime) of each row of the bad-input table, read from the test module itself."""
    sys.path.insert(0, str(ROOT))
    try:
        from tests.plugin.test_bad_input_table import ROWS
    finally:
        sys.path.remove(str(ROOT))
    return [(row.id, row.runtime) for row in ROWS]


def scratch_copy(into: Path, table: Table) -> Path:
    """The checkout's files (tracked and not ignored) copied into ``into/tree``; ``evidence/`` linked, read only;
    the installed modules the table disables copied into ``_site/``."""
    tree = into / "tree"
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"], capture_output=True, check=True
    ).stdout.decode()
    for relative in filter(None, listed.split("\0")):
        if relative.startswith("evidence/") or not (ROOT / relative).is_file():
            continue
        (tree / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / relative, tree / relative)
    (tree / "evidence").symlink_to(ROOT / "evidence")
    (tree / "_site").mkdir()
    for top in _installed_tops(table):
        if top.endswith(".py"):
            shutil.copy2(installed(top), tree / "_site" / top)
        else:
            shutil.copytree(installed(top), tree / "_site" / top, ignore=shutil.ignore_patterns("__pycache__"))
    return tree


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree / "_site"), str(tree)])
    return env


def _node(row: str, runtime: str) -> str:
    function = "test_bad_input_the_engine_answers" if runtime == "docker" else "test_bad_input"
    return f"{TABLE}::{function}[{row}]"


def run_rows(tree: Path, nodes: Sequence[str], junit: Path, timeout: float) -> dict[str, tuple[str, str]]:
    """Run test nodes against the copy; each node's outcome (passed, failed, error, skipped) and message."""
    command = [sys.executable, "-m", "pytest", *nodes, "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"]
    if not any("engine_answers" in n for n in nodes):
        command += ["-m", "not docker"]
    try:
        done = subprocess.run(command, cwd=tree, env=_env(tree), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict.fromkeys(nodes, ("error", f"timed out after {timeout:g} s"))
    results: dict[str, tuple[str, str]] = {}
    if junit.is_file():
        for case in ET.parse(junit).getroot().iter("testcase"):
            name = case.get("name", "")
            found = next((n for n in nodes if n.endswith("::" + name)), None)
            if found is None:
                continue
            outcome, message = "passed", ""
            for kind in ("failure", "error", "skipped"):
                child = case.find(kind)
                if child is not None:
                    outcome = {"failure": "failed"}.get(kind, kind)
                    message = (child.get("message") or "").strip() + "\n" + (child.text or "")
            results[found] = (outcome, message)
    for node in nodes:
        results.setdefault(node, ("error", f"not run (pytest rc {done.returncode}): {done.stdout[-400:]}"))
    return results


#: what the run said instead, in a failure's report: an error line of pytest or a command, else an exception
SAID = re.compile(r"^(?:ERROR: |vsnap-qual(?: [a-z-]+)?: |nothing selected|pytest\.main\(\): error)")
RAISED = re.compile(r"^(?:INTERNALERROR> )?[A-Za-z_.]*(?:Error|Exception|Exit)\b:? ?")


def first_line(message: str) -> str:
    """The row's own assertion (its first line) and what the run said instead (its error line, or the exception
    that ended it), made table-safe."""
    lines = [re.sub(r"^(?:E\s+|\s+)", "", line) for line in message.strip().splitlines()]
    first = re.sub(r"^AssertionError: ", "", lines[0]).rstrip(":") if lines else ""
    said = next((line for line in lines[1:] if SAID.match(line)), "")
    if not said and not first.startswith(("assert", "AssertionError")):
        said = next((line for line in reversed(lines[1:]) if RAISED.match(line) and "Traceback" not in line), "")
    text = f"{first}; it said: {said}" if said and said not in first else first
    text = re.sub(r"/tmp/pytest-of-[^ '\"]*?/s/", "…/", text).replace("|", "\\|")
    return text if len(text) <= 240 else text[:237] + "..."


def _forget_bytecode(path: Path) -> None:
    """Remove the module's cached bytecode: a disabled module is compiled from its text, and so is the original
    after (a .pyc is judged by the source's mtime in seconds and its size, which a same-size edit could match)."""
    Path(importlib.util.cache_from_source(str(path))).unlink(missing_ok=True)


def mutate_row(tree: Path, table: Table, row: str, runtime: str, scratch: Path, timeout: float) -> dict[str, str]:
    names = table.rows[row]
    originals: dict[Path, tuple[str, os.stat_result]] = {}
    try:
        for name in names:
            site = table.sites[name]
            path = source_path(tree, site)
            originals.setdefault(path, (path.read_text(encoding="utf-8"), path.stat()))
            path.write_text(disable(path.read_text(encoding="utf-8"), site), encoding="utf-8")
            _forget_bytecode(path)
        for path in originals:
            py_compile.compile(str(path), cfile=str(scratch / "compiled.pyc"), doraise=True)
        node = _node(row, runtime)
        outcome, message = run_rows(tree, [node], scratch / "row.xml", timeout)[node]
    except (SiteError, py_compile.PyCompileError) as exc:
        outcome, message = "error", str(exc)
    finally:
        for path, (text, stat) in originals.items():
            path.write_text(text, encoding="utf-8")
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
            _forget_bytecode(path)
    verdict = {"failed": FAILED, "passed": PASSED}.get(outcome, outcome)
    return {"row": row, "sites": ", ".join(names), "outcome": verdict, "message": first_line(message)}


def render(results: dict[str, dict[str, str]], table: Table, order: Sequence[str], meta: dict[str, str]) -> str:
    counts: dict[str, int] = {}
    for entry in results.values():
        counts[entry["outcome"]] = counts.get(entry["outcome"], 0) + 1
    lines = [
        "# The bad-input table, row by row, each with its refusal removed",
        "",
        "Issue 47's must-show: every row of `tests/plugin/test_bad_input_table.py` seen failing with its check "
        "removed. Made by `scripts/bad_input_mutations.py` (its doc says how) with the site table "
        "`scripts/bad_input_sites.toml`: for each row alone, the check that refuses its input was disabled in a "
        "scratch copy of the tree and the row was run against that copy; it must fail. Each row ran first against "
        "the unmodified copy and passed. `tests/evidence/test_bad_input_mutations.py` holds this table to the test "
        "file's rows.",
        "",
        *(f"- {key}: {value}" for key, value in meta.items()),
        "- outcomes: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())),
        "",
        "Sites: a file, the anchor text found once in it, and how it was disabled (`if-false`: the `if` whose body "
        "holds the anchor made `if False`; `pass`: the statement holding it made `pass`; `replace`: the anchor "
        'replaced, see the site table). "Why it failed" is the row\'s own assertion with the site disabled.',
        "",
        "| row | refusal site(s) | outcome with the site disabled | why it failed |",
        "|---|---|---|---|",
    ]
    for row in order:
        if row not in results:
            lines.append(f"| `{row}` | {_sites_cell(table, row)} | not run | |")
            continue
        done = results[row]
        lines.append(f"| `{row}` | {_sites_cell(table, row)} | {done['outcome']} | {done['message']} |")
    if table.notes:
        lines += ["", "## Notes on rows", ""]
        lines += [f"- `{row}`: {text}" for row, text in table.notes.items()]
    lines += ["", "## The sites", "", "| site | file | anchor | how |", "|---|---|---|---|"]
    for site in table.sites.values():
        anchor = site.anchor.replace("|", "\\|").replace("\n", "\\n")
        how = f"replace with `{site.new}`" if site.how == "replace" else site.how
        lines.append(f"| `{site.name}` | `{site.file}` | `{anchor}` | {how} |")
    return "\n".join(lines) + "\n"


def _sites_cell(table: Table, row: str) -> str:
    return ", ".join(f"`{name}`" for name in table.rows.get(row, ()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="check the site table only, run nothing")
    parser.add_argument("--out", type=Path, help="folder of rows.json and README.md (rows already there are kept)")
    parser.add_argument("--docker", action="store_true", help="the rows only the engine answers (needs Docker)")
    parser.add_argument("--rows", nargs="*", default=None, help="only these rows")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for one pytest run")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between rows (a shared machine)")
    args = parser.parse_args(argv)
    table = load_table()
    rows = table_rows()
    problems = check(table, [row for row, _ in rows])
    if problems or args.check:
        print("\n".join(problems) or f"{SITES.name}: {len(rows)} rows, {len(table.sites)} sites, every anchor found")
        return 1 if problems else 0
    if args.out is None:
        parser.error("give --out DIR (or --check)")
    chosen = [
        (row, runtime)
        for row, runtime in rows
        if (args.rows is None or row in args.rows) and (runtime == "docker") == args.docker
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "rows.json"
    results: dict[str, dict[str, str]] = json.loads(store.read_text()) if store.is_file() else {}
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    with tempfile.TemporaryDirectory(prefix="vsnap-bad-input-mutations-") as name:
        scratch = Path(name)
        tree = scratch_copy(scratch, table)
        modules = ["vsnap_qual", *(top.removesuffix(".py") for top in _installed_tops(table))]
        show = f"import {', '.join(modules)}; print({' '.join(m + '.__file__,' for m in modules)})"
        where = subprocess.run(
            [sys.executable, "-c", show],
            cwd=tree, env=_env(tree), capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        if not all(path.startswith(str(tree)) for path in where):
            raise SystemExit(f"the copy's modules are not the ones imported: {where}")
        started = time.monotonic()
        baseline = run_rows(tree, [_node(r, rt) for r, rt in chosen], scratch / "baseline.xml", args.timeout * 4)
        print(f"baseline: {sum(o == 'passed' for o, _ in baseline.values())}/{len(chosen)} passed", flush=True)
        for row, runtime in chosen:
            outcome, message = baseline[_node(row, runtime)]
            if outcome != "passed":
                entry = {
                    "row": row,
                    "sites": ", ".join(table.rows[row]),
                    "outcome": "baseline failed",
                    "message": first_line(message),
                }
            else:
                entry = mutate_row(tree, table, row, runtime, scratch, args.timeout)
            entry["commit"] = commit.stdout.strip()
            results[row] = entry
            store.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
            print(f"{row}: {entry['outcome']}: {entry['message'][:100]}", flush=True)
            time.sleep(args.pause)
        print(f"{len(chosen)} rows in {time.monotonic() - started:.0f} s", flush=True)
    meta = {
        "commit of the tree": ", ".join(sorted({e.get("commit", "?") for e in results.values()})),
        "rows": f"{len(results)} of {len(rows)} ({sum(rt == 'docker' for _, rt in rows)} need Docker)",
    }
    (args.out / "README.md").write_text(render(results, table, [r for r, _ in rows], meta))
    gaps = [r for r, e in results.items() if e["outcome"] != FAILED]
    print(f"not failed as required: {gaps}" if gaps else "every row failed as required")
    return 1 if gaps else 0


if __name__ == "__main__":
    sys.exit(main())
