"""Probe unit tests: ``vsnap_probe`` imported from ``vsnap_qual/probe`` as with PYTHONPATH=/vsnap/probe."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PROBE_ROOT = Path(__file__).resolve().parents[2] / "vsnap_qual" / "probe"
if str(PROBE_ROOT) not in sys.path:
    sys.path.insert(0, str(PROBE_ROOT))


@pytest.fixture
def control(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh ``$VSNAP_CONTROL_DIR``."""
    cdir = tmp_path / "control"
    cdir.mkdir()
    monkeypatch.setenv("VSNAP_CONTROL_DIR", str(cdir))
    yield cdir
