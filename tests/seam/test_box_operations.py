"""The box's named operations (``vsnap_qual.box.Box``: what the fault kinds do to a box instead of shell strings)
behave alike where they are implemented: once for every box with a shell (``runtimes.shell.ShellBox``, here over
this machine's own ``sh`` and ``/proc``, as the Docker and host runtimes run it in theirs) and once in the in-memory
box of the third runtime (``tests/support/memory_box.py``). The same assertions run against both."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.support.memory_box import MemoryBox
from vsnap_qual.box import Bind, BoxSpec, ExecResult, ProcessRow, RuntimeFailure, free_ports
from vsnap_qual.contract import CONTROL
from vsnap_qual.runtimes.shell import ShellBox

HERE = Path(__file__).parent


class LocalShellBox(ShellBox):
    """A shell box whose commands run on this machine: the shell implementation, exactly as a runtime uses it."""

    name = "this machine"

    def exec(
        self, argv: list[str], timeout: float, *, env: Mapping[str, str] | None = None, log: Path | None = None
    ) -> ExecResult:
        started = time.time()
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
        return ExecResult(argv, done.returncode, done.stdout, done.stderr, started, time.time())

    def read_bytes(self, path: str) -> bytes | None:
        return Path(path).read_bytes() if Path(path).is_file() else None

    def processes(self) -> list[ProcessRow]:
        return []


@pytest.fixture(params=["shell", "memory"])
def box(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, str]]:
    """A box of each implementation, and a directory of it to work in."""
    control = tmp_path / "control"
    (control / "faults").mkdir(parents=True)
    if request.param == "shell":
        yield LocalShellBox(), str(tmp_path / "work")
        return
    spec = BoxSpec(name="ops", engine="memory:head", image_id="i", labels={}, environment={},
                   binds=[Bind(CONTROL, control, read_only=False)])  # fmt: skip
    memory = MemoryBox(spec)
    yield memory, "/vsnap/work"
    memory.remove()


def test_files_are_written_in_place_listed_copied_cut_and_digested_alike(box: tuple[Any, str]) -> None:
    b, root = box
    b.ensure_dir(f"{root}/art/images")
    b.write_bytes(f"{root}/art/manifest.json", b'{"schema_version": 1}')
    b.write_bytes(f"{root}/art/images/core-7.img", b"x" * 100)
    b.write_bytes(f"{root}/art/images/pages-7.img", b"y" * 10)
    assert b.exists(f"{root}/art/manifest.json") and b.exists(f"{root}/art") and not b.exists(f"{root}/nothing")
    assert b.read_bytes(f"{root}/art/manifest.json") == b'{"schema_version": 1}'
    assert [(e.path, e.type, e.size) for e in b.list_dir(f"{root}/art/images", "core-*.img")] == [
        ("core-7.img", "f", 100)
    ]
    assert [e.path for e in b.list_dir(f"{root}/art", depth=2)] == [
        "images", "images/core-7.img", "images/pages-7.img", "manifest.json"
    ]  # fmt: skip
    assert [e.path for e in b.list_dir(f"{root}/art")] == ["images", "manifest.json"]
    with pytest.raises(RuntimeFailure):
        b.list_dir(f"{root}/nothing")
    b.copy_tree(f"{root}/art", f"{root}/copy")
    assert b.digest_tree(f"{root}/copy") == b.digest_tree(f"{root}/art")
    pristine = b.digest_tree(f"{root}/art")
    b.truncate(f"{root}/art/images/core-7.img", 50)
    assert [e.size for e in b.list_dir(f"{root}/art/images", "core-*.img")] == [50]
    assert b.digest_tree(f"{root}/art") != pristine
    b.copy_tree(f"{root}/copy", f"{root}/art", replace=True)
    assert b.digest_tree(f"{root}/art") == pristine, "the copy put back, whole"
    with pytest.raises(RuntimeFailure):
        b.copy_tree(f"{root}/nothing", f"{root}/other")


def test_a_write_keeps_the_file_and_its_inode(tmp_path: Path) -> None:
    """In place, as a program in the box writes (the fault artifact's reset reads changes by stat key)."""
    b, path = LocalShellBox(), tmp_path / "manifest.json"
    path.write_bytes(b"a" * 64)
    inode = path.stat().st_ino
    b.write_bytes(str(path), b'{"x": "\\u00e9"}\n')
    assert path.read_bytes() == b'{"x": "\\u00e9"}\n' and path.stat().st_ino == inode


def test_a_held_port_is_listed_watched_and_ended_by_a_signal(box: tuple[Any, str], tmp_path: Path) -> None:
    b, root = box
    (port,) = free_ports(1)
    marker = f"{CONTROL}/faults/listen-{port}" if isinstance(b, MemoryBox) else str(tmp_path / "m")
    local_marker = tmp_path / "control" / "faults" / f"listen-{port}" if marker.startswith(CONTROL) else Path(marker)
    watcher = b.watch_listener(port, marker, str(tmp_path / "watch.log"))
    holder = b.hold_port(port, str(tmp_path / "hold.log"))
    try:
        deadline = time.monotonic() + 10
        while not (port in b.listening_ports() and local_marker.exists()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert port in b.listening_ports(), "the holder listens"
        assert local_marker.exists(), "the watch saw the listener"
    finally:
        assert b.signal([holder], "KILL", strict=True), "the holder was there to receive it"
        b.signal([watcher], "KILL")
    deadline = time.monotonic() + 10
    while port in b.listening_ports() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert port not in b.listening_ports()
    nobody = 2**22 + 1  # above any pid_max: no process of this machine or of the box
    assert b.signal([nobody], "KILL") and not b.signal([nobody], "KILL", strict=True), "not there: strict says so"
    assert b.wchan([nobody]) == {nobody: "gone"} and b.thread_waits([nobody]) == {}
