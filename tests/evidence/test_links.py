"""What a reader follows in the repository's Markdown reaches a file: every relative link, and every path into
``docs/`` or ``evidence/`` written as code, names a file or folder that is there (runs get renamed; guides move)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: a Markdown link's target, less its #anchor; an image's too
LINK = re.compile(r"\]\((?P<target>[^)\s#]*)(?:#[^)\s]*)?\)")
#: a path into docs/ or evidence/ written as inline code, as the guides name files
CODE_PATH = re.compile(r"`(?P<path>(?:docs|evidence)/[^`\s]*)`")
#: a path with a placeholder or a pattern in it names no one file
PLACEHOLDER = re.compile(r"[<>{}*…]")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def _markdown() -> list[Path]:
    """The Markdown a reader of this repository reads: the top-level files, the guides, the evidence."""
    top = [ROOT / name for name in ("README.md", "CONTRIBUTING.md", "CHANGELOG.md")]
    return [*top, *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "evidence").rglob("*.md"))]


def _prose(path: Path) -> str:
    """A file's text less its fenced code blocks (a command's output is not a link)."""
    return FENCE.sub("", path.read_text())


def test_every_relative_link_resolves() -> None:
    files = _markdown()
    assert len(files) > 60 and all(f.is_file() for f in files)
    broken = [
        f"{path.relative_to(ROOT)}: {link['target']}"
        for path in files
        for link in LINK.finditer(_prose(path))
        if link["target"] and not re.match(r"[a-z]+:", link["target"])
        if not (path.parent / link["target"]).exists()
    ]
    assert not broken, f"links to what is not there: {broken}"


def test_every_path_into_docs_or_evidence_names_what_is_there() -> None:
    stale = [
        f"{path.relative_to(ROOT)}: {code['path']}"
        for path in _markdown()
        for code in CODE_PATH.finditer(_prose(path))
        if not PLACEHOLDER.search(code["path"]) and not (ROOT / code["path"]).exists()
    ]
    assert not stale, f"paths that name nothing: {stale}"
