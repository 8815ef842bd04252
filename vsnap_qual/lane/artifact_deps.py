"""What a snapshot artifact needs from outside itself: the ``/dev/shm`` files its CRIU images name and that existed
when it was made (real vLLM's multiprocessing segments ``psm_*``, named semaphores). CRIU does not carry a regular
file it finds open; it records the path and reopens it on restore. An artifact whose restore needs such a file is
not self-contained: once the file is gone (the restored engine's own clean shutdown unlinks it, a restart of a box
with a private IPC namespace empties ``/dev/shm``, another node never had it) the artifact no longer restores.

Facts only, through the box's own file reading and ``/dev/shm`` listing: the lifecycle (:mod:`vsnap_qual.steps`)
and the faults (:mod:`vsnap_qual.faults`) decide what a missing file means for their step;
:mod:`vsnap_qual.report.validation_table` makes it one finding."""

from __future__ import annotations

import re

from vsnap_qual.box import Box
from vsnap_qual.contract import ARTIFACT

SHM = "/dev/shm/"
#: a path under /dev/shm as CRIU's ``files.img`` spells it (protobuf: the path's bytes, without the leading slash)
SHM_PATH = re.compile(rb"dev/shm/([A-Za-z0-9_.+-]+)")


def named(box: Box, artifact: str = ARTIFACT) -> list[str]:
    """The ``/dev/shm`` paths the artifact's ``images/files.img`` (CRIU's table of the files it found open) names."""
    data = box.read_bytes(f"{artifact}/images/files.img") or b""
    return sorted({SHM + m.decode() for m in SHM_PATH.findall(data)})


def outside_files(box: Box, artifact: str = ARTIFACT) -> list[str]:
    """The ``/dev/shm`` files the artifact names that exist now (right after ``create``: what its restore will look
    for). Names of files already gone at create time (CRIU's remaps, unlinked semaphores) are not."""
    paths = named(box, artifact)
    return present(box, paths) if paths else []


def present(box: Box, paths: list[str]) -> list[str]:
    """Those of ``paths`` (under ``/dev/shm``) that the box's ``/dev/shm`` holds."""
    if not paths:
        return []
    there = {SHM + entry.name for entry in box.shm()}
    return [p for p in paths if p in there]


def absent(box: Box, paths: list[str]) -> list[str]:
    """Those of ``paths`` (under ``/dev/shm``) that the box's ``/dev/shm`` does not hold."""
    if not paths:
        return []
    there = set(present(box, paths))
    return [p for p in paths if p not in there]
