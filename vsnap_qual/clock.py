"""Timestamps, written the two ways the evidence and ``results.json`` already spell them (docs/design.md §4).

- :func:`utc_now` / :func:`utc_time`: every evidence record's ``time`` and a step's ``started``/``ended``:
  ISO-8601 UTC with milliseconds and an explicit offset (``2026-12-01T10:32:05.123+00:00``).
- :func:`utc_stamp`: ``results.json``'s ``generated``: whole seconds, ``Z`` (``2026-12-01T10:32:05Z``).
"""

from __future__ import annotations

import datetime as dt


def utc_time(epoch: float) -> str:
    """``epoch`` (a ``time.time()`` value) as an evidence timestamp."""
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).isoformat(timespec="milliseconds")


def utc_now() -> str:
    """Now, as an evidence timestamp."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def utc_stamp() -> str:
    """Now, as ``results.json`` records when it was generated."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
