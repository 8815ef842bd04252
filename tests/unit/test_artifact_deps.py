"""What an artifact needs from outside itself, read from its CRIU images and this machine's real /dev/shm."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from vsnap_qual.box import ShmEntry
from vsnap_qual.lane import artifact_deps


class FilesAndShm:
    """What ``artifact_deps`` asks of a box: a file's bytes and the ``/dev/shm`` listing (here, this machine's)."""

    def read_bytes(self, path: str) -> bytes | None:
        return Path(path).read_bytes() if Path(path).is_file() else None

    def shm(self) -> list[ShmEntry]:
        return [ShmEntry(e.name, "0", str(e.inode()), "600", 0) for e in os.scandir("/dev/shm")]


@pytest.fixture
def segment() -> Iterator[Path]:
    path = Path(f"/dev/shm/psm_{uuid.uuid4().hex[:8]}")
    path.write_bytes(b"\0" * 32)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def test_the_outside_files_are_those_the_images_name_that_exist(tmp_path: Path, segment: Path) -> None:
    images = tmp_path / "artifact" / "images"
    images.mkdir(parents=True)
    # CRIU's protobuf: binary around the paths; a named file already gone at create (a remap) is not needed
    gone = f"dev/shm/link_remap.{os.getpid()}999"
    (images / "files.img").write_bytes(
        b"\x08\x96\x01\x12" + str(segment)[1:].encode() + b"\x00\x1a\x07" + gone.encode()
    )
    box = FilesAndShm()
    assert artifact_deps.named(box, str(tmp_path / "artifact")) == sorted([str(segment), "/" + gone])  # type: ignore[arg-type]
    outside = artifact_deps.outside_files(box, str(tmp_path / "artifact"))  # type: ignore[arg-type]
    assert outside == [str(segment)]
    assert artifact_deps.absent(box, outside) == []  # type: ignore[arg-type]
    segment.unlink()  # what the restored engine's graceful exit does
    assert artifact_deps.absent(box, outside) == [str(segment)]  # type: ignore[arg-type]


def test_an_artifact_that_names_no_dev_shm_file_is_self_contained(tmp_path: Path) -> None:
    images = tmp_path / "artifact" / "images"
    images.mkdir(parents=True)
    (images / "files.img").write_bytes(b"\x12\x0f/opt/model.bin\x00")
    assert artifact_deps.outside_files(FilesAndShm(), str(tmp_path / "artifact")) == []  # type: ignore[arg-type]
    assert artifact_deps.outside_files(FilesAndShm(), str(tmp_path / "none")) == []  # type: ignore[arg-type]
