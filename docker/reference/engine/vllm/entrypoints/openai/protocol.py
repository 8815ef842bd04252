"""What the OpenAI-compatible endpoints share: request errors, the sampling parameters of a request body (vLLM's
names, defaults and refusals), logprobs in the completion and chat shapes, usage, ``system_fingerprint``."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from vllm.sampling_params import SamplingParams
from vllm.version import __version__

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.engine.async_llm import LLMEngine

#: the largest logprob a response shows for -inf (OpenAI's and vLLM's)
LOGPROB_FLOOR = -9999.0


class RequestError(Exception):
    def __init__(self, status: int, message: str, error_type: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.param = param


def error_body(status: int, message: str, error_type: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": param, "code": status}}


def bad_request(message: str, param: str | None = None) -> RequestError:
    return RequestError(400, message, "BadRequestError", param)


def system_fingerprint(config: VllmConfig) -> str:
    """``vllm-<version>-<hash8>``, vLLM's default (``--fingerprint-mode full`` on one GPU): the hash of the engine
    configuration (sleep mode included, names and seeds not), so an engine restored from a snapshot keeps the one
    its create had."""
    factors = {
        key: value
        for key, value in sorted(config.to_dict().items())
        if key not in {"served_model_name", "seed", "tokenizer_revision", "enforce_eager", "logprobs_mode"}
    }
    digest = hashlib.sha256(json.dumps(factors, sort_keys=True, default=str).encode()).hexdigest()
    return f"vllm-{__version__}-{digest[:8]}"


def _int(body: dict[str, Any], name: str, default: int | None) -> int | None:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"{name} must be an integer, got {value!r}.", name)
    return value


def _float(body: dict[str, Any], name: str, default: float) -> float:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad_request(f"{name} must be a number, got {value!r}.", name)
    return float(value)


def sampling_params(
    config: VllmConfig, body: dict[str, Any], *, max_tokens: int, min_tokens: int, logprobs: int | None
) -> SamplingParams:
    """The sampling parameters of a completion or chat body (``max_tokens``, ``min_tokens`` and ``logprobs``
    already checked by the endpoint, whose words for them differ)."""
    temperature = _float(body, "temperature", 1.0)
    n = _int(body, "n", 1) or 1
    if n < 1:
        raise bad_request(f"n must be at least 1, got {n}.", "n")
    if n > 1 and temperature < 1e-5:
        raise bad_request(f"n must be 1 when using greedy sampling, got {n}.")
    top_p = _float(body, "top_p", 1.0)
    if not 0.0 < top_p <= 1.0:
        raise bad_request(f"top_p must be in (0, 1], got {top_p}.", "top_p")
    top_k = _int(body, "top_k", 0) or 0
    if top_k < -1:
        raise bad_request(f"top_k must be -1 (disable), or at least 1, got {top_k}.", "top_k")
    stop = body.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, (list, tuple)) or not all(isinstance(item, str) for item in stop):
        raise bad_request("stop must be a string or a list of strings.", "stop")
    stop_token_ids = body.get("stop_token_ids") or ()
    if not isinstance(stop_token_ids, (list, tuple)) or not all(
        isinstance(item, int) and not isinstance(item, bool) for item in stop_token_ids
    ):
        raise bad_request("stop_token_ids must be a list of integers.", "stop_token_ids")
    vocab_size = int(config.hf_config.get("vocab_size", 0))
    logit_bias: dict[int, float] = {}
    raw_bias = body.get("logit_bias") or {}
    if not isinstance(raw_bias, dict):
        raise bad_request("logit_bias must be an object of token ids to biases.", "logit_bias")
    for key, bias in raw_bias.items():
        try:
            token = int(key)
            value = float(bias)
        except (TypeError, ValueError) as error:
            raise bad_request(f"logit_bias: {key!r}: {bias!r} is not a token id and a bias.", "logit_bias") from error
        logit_bias[token] = min(100.0, max(-100.0, value))  # clamped, as vLLM does
    outside = sorted(token for token in logit_bias if not 0 <= token < vocab_size)
    if outside:
        raise bad_request(
            f"token_id(s) {outside} in logit_bias contain out-of-vocab token ids. Vocabulary size: {vocab_size}",
            "logit_bias",
        )
    seed = _int(body, "seed", None)
    return SamplingParams(
        temperature=temperature,
        min_tokens=min_tokens,
        max_tokens=max_tokens,
        seed=seed,
        logprobs=logprobs,
        n=n,
        top_p=top_p,
        top_k=max(top_k, 0),
        stop=tuple(stop),
        stop_token_ids=tuple(stop_token_ids),
        include_stop_str_in_output=bool(body.get("include_stop_str_in_output")),
        ignore_eos=bool(body.get("ignore_eos")),
        skip_special_tokens=bool(body.get("skip_special_tokens", True)),
        logit_bias=logit_bias,
    )


def stream_usage_options(body: dict[str, Any]) -> tuple[bool, bool]:
    """``(include_usage, continuous_usage_stats)`` of a streamed request; ``stream_options`` without ``stream`` is
    refused in vLLM's words."""
    options = body.get("stream_options")
    if options and not body.get("stream"):
        raise bad_request("Stream options can only be defined when `stream=True`.", "stream_options")
    if not isinstance(options, dict):
        return False, False
    return bool(options.get("include_usage")), bool(options.get("continuous_usage_stats"))


def usage(prompt_tokens: int, completion_tokens: int, *, details: bool = True) -> dict[str, Any]:
    """The ``usage`` object (``details``: with its null detail fields, as non-streamed answers carry them)."""
    out: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }
    if details:
        out.update({"prompt_tokens_details": None, "completion_tokens_details": None})
    return out


def completion_logprobs(
    engine: LLMEngine,
    token_ids: list[int],
    entries: list[dict[int, float]],
    num: int,
    *,
    context: list[int] | None = None,
    initial_offset: int = 0,
) -> dict[str, Any]:
    """A completion choice's ``logprobs``: per token its text, its logprob and ``top_logprobs`` (the sampled token
    and the top ``num``: ``num + 1`` entries when the sampled one is not among them), offsets into the text.
    ``context``: the tokens sampled before ``token_ids`` (a streamed chunk's)."""
    before = list(context or [])
    tokens: list[str] = []
    token_logprobs: list[float] = []
    top: list[dict[str, float]] = []
    offsets: list[int] = []
    for step, (token, entry) in enumerate(zip(token_ids, entries, strict=True)):
        sampled = [*before, *token_ids[:step]]
        text = engine.decode_logprob_token(token, sampled)
        offsets.append(initial_offset if not offsets else offsets[-1] + len(tokens[-1]))
        tokens.append(text)
        token_logprobs.append(max(entry[token], LOGPROB_FLOOR))
        top.append(
            {
                engine.decode_logprob_token(alternative, sampled): max(value, LOGPROB_FLOOR)
                for rank, (alternative, value) in enumerate(entry.items())
                if num >= rank
            }
        )
    return {"text_offset": offsets, "token_logprobs": token_logprobs, "tokens": tokens, "top_logprobs": top}


def chat_logprobs(
    engine: LLMEngine,
    token_ids: list[int],
    entries: list[dict[int, float]],
    top_logprobs: int,
    *,
    context: list[int] | None = None,
) -> dict[str, Any]:
    """A chat choice's ``logprobs``: ``{"content": [...]}``, per token its text, logprob, UTF-8 bytes and the first
    ``top_logprobs`` entries (the sampled token first)."""
    before = list(context or [])
    content = []
    for step, (token, entry) in enumerate(zip(token_ids, entries, strict=True)):
        sampled = [*before, *token_ids[:step]]
        text = engine.decode_logprob_token(token, sampled)
        alternatives = []
        for rank, (alternative, value) in enumerate(entry.items()):
            if rank >= top_logprobs:
                break
            alternative_text = engine.decode_logprob_token(alternative, sampled)
            alternatives.append(
                {
                    "token": alternative_text,
                    "logprob": max(value, LOGPROB_FLOOR),
                    "bytes": list(alternative_text.encode("utf-8", errors="replace")),
                }
            )
        content.append(
            {
                "token": text,
                "logprob": max(entry[token], LOGPROB_FLOOR),
                "bytes": list(text.encode("utf-8", errors="replace")),
                "top_logprobs": alternatives,
            }
        )
    return {"content": content}


def sse(payload: dict[str, Any] | str) -> str:
    """One server-sent event as vLLM frames it: ``data: <compact JSON>`` and a blank line."""
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return f"data: {data}\n\n"
