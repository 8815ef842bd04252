"""Memory formatting as vLLM prints it."""

from __future__ import annotations

GiB_bytes = 1 << 30


def format_gib(nbytes: int | float) -> str:
    return f"{nbytes / GiB_bytes:.2f}"
