"""How figures are written in every view: token counts, percentages, logprob deltas, seconds, hashes."""

from __future__ import annotations

import math


def _real(value: object) -> float | None:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return None if math.isnan(value) else float(value)


def count(value: object) -> str:
    """``54048`` → ``54,048``; missing → ``–``."""
    number = _real(value)
    return "–" if number is None else f"{round(number):,}"


def signed_count(value: object) -> str:
    """``-16`` → ``−16``, ``+16``, ``0``."""
    number = _real(value)
    if number is None:
        return "–"
    rounded = round(number)
    return "0" if rounded == 0 else f"{'+' if rounded > 0 else '−'}{abs(rounded):,}"


def percent(value: object) -> str:
    """A signed percentage with two decimals (``−0.03%``), or with the digits that show a difference too small for
    two (one block of a million tokens: ``−0.0015%``, never ``−0.00%``); exactly zero is ``0.00%``."""
    number = _real(value)
    if number is None:
        return "–"
    if number == 0:
        return "0.00%"
    size = abs(number)
    places = 2 if size >= 0.005 else min(12, 1 - math.floor(math.log10(size)))
    return f"{'+' if number > 0 else '−'}{size:.{places}f}%"


def logprob(value: object) -> str:
    """A logprob with six decimals."""
    number = _real(value)
    return "–" if number is None else f"{number:.6f}"


def delta(value: object) -> str:
    """A logprob delta: ``0`` when exactly zero, else signed scientific (``+4.0e-04``)."""
    number = _real(value)
    if number is None:
        return "–"
    return "0" if number == 0 else f"{number:+.1e}".replace("-", "−")


def seconds(value: object) -> str:
    """``41.5`` → ``41.5 s``; under 10 s two decimals; over 2 minutes also ``m:ss``."""
    number = _real(value)
    if number is None:
        return "–"
    text = f"{number:.2f} s" if number < 10 else f"{number:.1f} s"
    if number >= 120:
        text += f" ({int(number // 60)}:{int(number % 60):02d})"
    return text


def ratio(value: object) -> str:
    """``5.12`` → ``5.1×``."""
    number = _real(value)
    return "–" if number is None else f"{number:.1f}×"


def short_hash(value: object, length: int = 12) -> str:
    """The first ``length`` hex digits of a sha256 (a ``sha256:`` prefix kept out)."""
    if not isinstance(value, str) or not value:
        return "–"
    return value.removeprefix("sha256:")[:length]


#: How much of a quote from vLLM (an error it printed, a reason it gave) a report shows; the evidence keeps it whole
QUOTE_CHARS = 160


def quote(text: str, limit: int = QUOTE_CHARS) -> str:
    """A quote from the engine, cut once for a report: whitespace runs made one space, then, past ``limit``
    characters, cut at the last word boundary before it with ``… [cut: whole in the evidence]`` (the step's
    recorded message keeps every character)."""
    said = " ".join(text.split())
    if len(said) <= limit:
        return said
    cut = said[:limit]
    if " " in cut[limit // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,;:") + " … [cut: whole in the evidence]"
