"""The lane's control directory as the harness reads and writes it (``box.ControlDir``; the layout is the
probe's ``control_files``, shared by both sides).

A runtime whose boxes bind a directory of this machine at ``contract.CONTROL`` (Docker, the host runtime) hands
out :class:`MountedControlDir`: plain file operations, no round trip into the box. A runtime on another machine
implements ``box.ControlDir`` over its own transport; nothing above the box reads a host path of the lane.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from vsnap_qual.box import ControlDir
from vsnap_qual.probe.vsnap_probe import control_files


class MountedControlDir:
    """A control directory that is a directory of this machine, bind-mounted into the box."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def create(self, overlay_modules: list[str]) -> None:
        """The directory with its subdirectories and ``overlay.json`` (written before the lane's box starts)."""
        for sub in control_files.SUBDIRS:
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / control_files.OVERLAY).write_text(control_files.overlay_payload(overlay_modules))

    def write_json(self, name: str, payload: object) -> None:
        """Atomically: the probe reads these files at any moment (a torn ``armed.json`` arms nothing)."""
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(payload, handle)
        os.replace(tmp, path)

    def read_text(self, name: str) -> str | None:
        try:
            return (self.root / name).read_text(errors="replace")
        except (FileNotFoundError, IsADirectoryError):
            return None

    def remove(self, name: str) -> None:
        (self.root / name).unlink(missing_ok=True)

    def names(self, pattern: str) -> list[str]:
        """The files matching ``pattern`` (``faults/fired-*.json``), as names relative to the directory, sorted."""
        return sorted(str(p.relative_to(self.root)) for p in self.root.glob(pattern) if p.is_file())

    def local_copy(self, name: str) -> Path | None:
        path = self.root / name
        return path if path.exists() else None


def read_json_files(control: ControlDir, pattern: str) -> list[dict[str, object]]:
    """Every file matching ``pattern`` that holds a JSON object (a file being rewritten is left out)."""
    found: list[dict[str, object]] = []
    for name in control.names(pattern):
        try:
            data = json.loads(control.read_text(name) or "")
        except ValueError:
            continue
        if isinstance(data, dict):
            found.append(data)
    return found
