"""Secret redaction: the values of secret environment variables never reach an artefact.

Used by the evidence writer (before a record is written) and again by every report writer (before a file is
written), so a secret that slipped into a log line, an argv or an error message is replaced by ``***``. It sits
below both (``evidence`` and ``report`` import it; it imports neither).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TypeVar, cast

#: Environment variables whose values are always secret.
DEFAULT_SECRET_NAMES: tuple[str, ...] = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HUGGINGFACE_HUB_TOKEN",
    "VLLM_API_KEY",
)

#: Any JSON-like value: redaction keeps its shape.
Json = TypeVar("Json")

#: What a secret value is replaced with.
MASK = "***"

# A value this short cannot be a real token, and masking it would shred every report (think HF_TOKEN=1).
_MIN_SECRET_LENGTH = 4


def secret_names(extra: Iterable[str] = ()) -> tuple[str, ...]:
    """The default secret names followed by ``extra`` (the ``--vsnap-secrets`` names), without duplicates."""
    return tuple(dict.fromkeys([*DEFAULT_SECRET_NAMES, *(name.strip() for name in extra if name.strip())]))


class Redactor:
    """Replaces each known secret value with ``***`` in strings and in nested JSON-like data.

    ``Redactor(values)`` masks those literal values; ``redactor(obj)`` is ``redactor.data(obj)``.
    """

    __slots__ = ("values",)

    def __init__(self, values: Iterable[str] = ()) -> None:
        kept = {v for v in values if isinstance(v, str) and len(v) >= _MIN_SECRET_LENGTH and v != MASK}
        # Longest first, so a secret that contains another is masked whole.
        self.values: tuple[str, ...] = tuple(sorted(kept, key=lambda v: (-len(v), v)))

    @classmethod
    def from_environment(cls, extra_names: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> Redactor:
        """Collect the values of the secret variables (defaults + ``extra_names``) set in ``environ``."""
        env = os.environ if environ is None else environ
        return cls(env.get(name, "") for name in secret_names(extra_names))

    def __repr__(self) -> str:
        return f"Redactor({len(self.values)} secret value(s))"  # never the values themselves

    def __call__(self, obj: Json) -> Json:
        return self.data(obj)

    def __bool__(self) -> bool:
        return bool(self.values)

    def text(self, text: str) -> str:
        """``text`` with every secret value replaced by ``***``."""
        for value in self.values:
            if value in text:
                text = text.replace(value, MASK)
        return text

    def data(self, obj: Json) -> Json:
        """A copy of JSON-like ``obj`` with secrets masked in every string, dictionary keys included: the same
        shape (a record stays the model type it was; a tuple becomes the list JSON makes of it anyway)."""
        if not self.values:
            return obj
        if isinstance(obj, str):
            return cast(Json, self.text(obj))
        if isinstance(obj, Mapping):
            return cast(Json, {(self.text(k) if isinstance(k, str) else k): self.data(v) for k, v in obj.items()})
        if isinstance(obj, (list, tuple)):
            return cast(Json, [self.data(item) for item in obj])
        return obj


def redact(text: str, extra_names: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> str:
    """One-shot: ``text`` with the secret variables' values in ``environ`` (default os.environ) masked."""
    return Redactor.from_environment(extra_names, environ).text(text)
