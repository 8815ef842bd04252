"""Fixtures for the report tests: synthetic runs built by ``synthetic_runs``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.report.synthetic_runs import MakeRun, RunSpec, write_evidence


@pytest.fixture
def report_dir(tmp_path: Path) -> Iterator[Path]:
    """A report directory holding a complete synthetic run (2 runners × head/base, 12 faults, 30 params)."""
    directory = tmp_path / "run"
    write_evidence(directory)
    yield directory


@pytest.fixture
def make_run(tmp_path: Path) -> MakeRun:
    """Factory: ``make_run(name, RunSpec(...))`` writes a synthetic run into ``tmp_path/name``."""

    def factory(name: str, spec: RunSpec | None = None) -> Path:
        directory = tmp_path / name
        write_evidence(directory, spec)
        return directory

    return factory
