"""The session's probe copy: a copy of the probe tree without bytecode, and a digest that names its contents."""

from __future__ import annotations

from pathlib import Path

from vsnap_qual.run.probe_copy import BUILT_IN, copy_probe, tree_digest


def _probe(root: Path) -> Path:
    (root / "vsnap_probe" / "__pycache__").mkdir(parents=True)
    (root / "vsnap_probe" / "__init__.py").write_text("")
    (root / "vsnap_probe" / "digest.py").write_text("X = 1\n")
    (root / "vsnap_probe" / "__pycache__" / "digest.cpython-311.pyc").write_bytes(b"\0junk")
    return root


def test_the_copy_leaves_bytecode_out_and_its_digest_is_the_sources(tmp_path: Path) -> None:
    source = _probe(tmp_path / "src")
    report = tmp_path / "report"
    report.mkdir()
    copy = copy_probe(source, report)
    assert sorted(p.relative_to(report).as_posix() for p in (report / "probe").rglob("*")) == [
        "probe/vsnap_probe", "probe/vsnap_probe/__init__.py", "probe/vsnap_probe/digest.py",
    ]  # fmt: skip
    assert copy == {"source": str(source), "path": "probe", "sha256": tree_digest(source)[0], "files": 2}


def test_the_digest_changes_with_a_files_content_or_name(tmp_path: Path) -> None:
    source = _probe(tmp_path / "src")
    before = tree_digest(source)[0]
    (source / "vsnap_probe" / "digest.py").write_text("X = 2\n")
    changed = tree_digest(source)[0]
    (source / "vsnap_probe" / "digest.py").rename(source / "vsnap_probe" / "digest2.py")
    renamed = tree_digest(source)[0]
    assert len({before, changed, renamed}) == 3


def test_without_a_probe_dir_the_built_in_probe_is_copied(tmp_path: Path) -> None:
    copy = copy_probe(None, tmp_path)
    assert copy["source"] == str(BUILT_IN) and (tmp_path / "probe" / "vsnap_probe" / "digest.py").is_file()
