"""The sampling parameters the reference engine honours (greedy decoding, one or more tokens)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    min_tokens: int = 0
    max_tokens: int | None = 16
    seed: int | None = None
    logprobs: int | None = None
