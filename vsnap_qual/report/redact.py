"""The report's name for :mod:`vsnap_qual.redact` (where ``Redactor`` lives, below the evidence store and the
report alike); kept for ``vsnap_qual.cli``, which imports it from here."""

from __future__ import annotations

from vsnap_qual.redact import DEFAULT_SECRET_NAMES, MASK, Redactor, redact, secret_names

__all__ = ["DEFAULT_SECRET_NAMES", "MASK", "Redactor", "redact", "secret_names"]
