"""Names shared by the criu kit's tests and their conftest (a module of its own: `conftest` is not importable by
name reliably when several test folders have one)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
KIT_IMAGE = "vsnap-criu-kit:4.2.1"
BOOKWORM_IMAGE = "vsnap-criu-test:bookworm"
KIT = "/opt/vsnap-criu"
PLUGIN_DIR = f"{KIT}/lib/criu"


@dataclass
class Result:
    """What one container of ``run_in`` gave: its exit code and its output."""

    rc: int
    output: str

    def json(self) -> dict[str, Any]:
        """The last JSON line of the output (the driver's report)."""
        lines = [line for line in self.output.splitlines() if line.startswith("{")]
        assert lines, f"no JSON line in the container's output (rc {self.rc}):\n{self.output[-3000:]}"
        report: dict[str, Any] = json.loads(lines[-1])
        return report


class RunIn(Protocol):
    """The ``run_in`` fixture: one shell command in one short-lived container of ``image``."""

    def __call__(self, image: str, command: str, timeout: int = 180) -> Result: ...
