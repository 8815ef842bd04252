"""Names shared by the criu kit's tests and their conftest (a module of its own: `conftest` is not importable by
name reliably when several test folders have one)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
KIT_IMAGE = "vsnap-criu-kit:4.2.1"
BOOKWORM_IMAGE = "vsnap-criu-test:bookworm"
KIT = "/opt/vsnap-criu"
PLUGIN_DIR = f"{KIT}/lib/criu"
