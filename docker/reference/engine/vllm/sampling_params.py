"""The sampling parameters the reference engine honours, with vLLM's meanings: greedy below ``temperature`` 1e-5,
seeded sampling (``top_p``, ``top_k``), ``min_tokens`` holding back EOS and the stop tokens, stop strings and stop
token ids, ``ignore_eos``, ``logit_bias``, ``logprobs`` alternatives."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: below this temperature a request is greedy (vLLM's _SAMPLING_EPS)
SAMPLING_EPS = 1e-5


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    min_tokens: int = 0
    max_tokens: int | None = 16
    seed: int | None = None
    logprobs: int | None = None
    n: int = 1
    top_p: float = 1.0
    top_k: int = 0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    logit_bias: dict[int, float] = field(default_factory=dict)

    @property
    def greedy(self) -> bool:
        return self.temperature < SAMPLING_EPS

    def engine_dict(self, lora_name: str | None = None) -> dict[str, Any]:
        """What the engine core is sent for one request (a plain dict: it crosses the process boundary pickled)."""
        return {
            "max_tokens": self.max_tokens,
            "min_tokens": self.min_tokens,
            "temperature": self.temperature,
            "seed": self.seed,
            "logprobs": self.logprobs,
            "lora_name": lora_name,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "stop": list(self.stop),
            "stop_token_ids": list(self.stop_token_ids),
            "include_stop_str_in_output": self.include_stop_str_in_output,
            "ignore_eos": self.ignore_eos,
            "skip_special_tokens": self.skip_special_tokens,
            "logit_bias": dict(self.logit_bias),
        }
