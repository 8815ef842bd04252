"""The fault artifact's digest and reset at the cost of what changed (``vsnap_qual.artifact_files``), on real
files with a real shell: the box's ``sh`` runs here, over a temporary artifact and its pristine copy."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import cast

import pytest

from vsnap_qual.box import Box, ExecResult
from vsnap_qual.lane import artifact_files
from vsnap_qual.lane.artifact_files import ArtifactFiles, Entry, parse_listing


class ShellBox:
    """The one box method the artifact's files need, run by this machine's shell; every script is kept."""

    def __init__(self) -> None:
        self.scripts: list[str] = []

    def sh(self, script: str, timeout: float = 60.0) -> ExecResult:
        self.scripts.append(script)
        done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=timeout)
        return ExecResult(["sh", "-c", script], done.returncode, done.stdout, done.stderr, 0.0, 0.0)

    def hashed(self) -> list[str]:
        return [s for s in self.scripts if "sha256sum" in s]


def _box(box: ShellBox) -> Box:
    """The stand-in where the artifact's files take a box: they call its ``sh`` only."""
    return cast(Box, box)


@pytest.fixture
def made(tmp_path: Path) -> tuple[ShellBox, ArtifactFiles, Path, Path]:
    artifact, backup = tmp_path / "artifact", tmp_path / "artifact.pristine"
    (artifact / "images").mkdir(parents=True)
    (artifact / "manifest.json").write_text('{"a": 1}\n')
    (artifact / "images" / "pages-1.img").write_bytes(os.urandom(1 << 20))
    (artifact / "images" / "core-7.img").write_bytes(b"core")
    shutil.copytree(artifact, backup, symlinks=True, copy_function=shutil.copy2)
    box = ShellBox()
    return box, ArtifactFiles.kept(_box(box), str(artifact), str(backup)), artifact, backup


def _whole(box: ShellBox, artifact: Path, backup: Path) -> str:
    """The digest read from scratch: every file hashed."""
    return ArtifactFiles.kept(_box(box), str(artifact), str(backup)).pristine_digest


def _same_bytes_rewritten(path: Path, data: bytes) -> None:
    """Another content of the same size with the old mtime put back: only ctime tells the change."""
    stat = path.stat()
    path.write_bytes(data)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_the_digest_reads_only_changed_files_and_equals_the_whole_digest(
    made: tuple[ShellBox, ArtifactFiles, Path, Path],
) -> None:
    box, files, artifact, backup = made
    assert files.digest(_box(box)) == files.pristine_digest  # just copied: the artifact is the pristine copy
    box.scripts.clear()
    assert files.digest(_box(box)) == files.pristine_digest
    assert box.hashed() == []  # nothing changed: nothing read
    _same_bytes_rewritten(artifact / "images" / "core-7.img", b"CORE")
    changed = files.digest(_box(box))
    assert changed != files.pristine_digest
    assert changed == _whole(box, artifact, artifact)  # what hashing every file gives
    (hashed,) = [s for s in box.hashed() if str(artifact) in s and "find" not in s]
    assert "core-7.img" in hashed and "pages-1.img" not in hashed


def test_the_digest_covers_added_files_and_modes(made: tuple[ShellBox, ArtifactFiles, Path, Path]) -> None:
    box, files, artifact, _ = made
    (artifact / "images" / "restore.log").write_text("restored\n")
    assert files.digest(_box(box)) != files.pristine_digest
    (artifact / "images" / "restore.log").unlink()
    assert files.digest(_box(box)) == files.pristine_digest
    (artifact / "manifest.json").chmod(0o600)
    assert files.digest(_box(box)) != files.pristine_digest


def test_the_reset_puts_back_only_what_changed_and_the_artifact_is_the_pristine_copy_again(
    made: tuple[ShellBox, ArtifactFiles, Path, Path],
) -> None:
    box, files, artifact, backup = made
    files.reset(_box(box))  # the first reset knows the artifact as just copied
    _same_bytes_rewritten(artifact / "images" / "core-7.img", b"CORE")
    (artifact / "manifest.json").unlink()
    (artifact / "images" / "restore.log").write_text("restored\n")
    (artifact / "scratch").mkdir()
    (artifact / "scratch" / "x").write_text("x")
    (artifact / "images").chmod(0o700)
    box.scripts.clear()
    files.reset(_box(box))
    assert files.last_reset.endswith("entries put back or removed"), files.last_reset
    (script,) = [s for s in box.scripts if "cp -a" in s]
    assert "pages-1.img" not in script  # the big unchanged image is not copied
    assert "core-7.img" in script and "manifest.json" in script
    assert _whole(box, artifact, artifact) == files.pristine_digest
    assert (artifact / "images" / "core-7.img").read_bytes() == b"core"
    assert not (artifact / "scratch").exists() and oct((artifact / "images").stat().st_mode & 0o777) == "0o755"
    assert files.digest(_box(box)) == files.pristine_digest


def test_a_directory_gone_makes_the_reset_copy_everything(made: tuple[ShellBox, ArtifactFiles, Path, Path]) -> None:
    box, files, artifact, _ = made
    files.reset(_box(box))
    shutil.rmtree(artifact / "images")
    files.reset(_box(box))
    assert files.last_reset == "full"
    assert _whole(box, artifact, artifact) == files.pristine_digest


def test_an_entry_changed_in_the_listings_own_tick_is_never_taken_as_unchanged() -> None:
    listed = "1000.000000000\0" + "f 644 11 4 999.9 999.9 old\0f 644 12 4 999.99 999.99 just-now\0"
    entries = parse_listing(listed)
    assert entries["old"].key == "11 4 999.9 999.9"
    assert entries["just-now"].key == ""  # may share the tick of a change after the listing
    assert not entries["just-now"].same(Entry("f", "644", ""))
    assert artifact_files.RECENT <= 0.1
