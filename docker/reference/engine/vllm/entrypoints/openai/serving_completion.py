"""``/v1/completions``, answered whole or streamed (server-sent events), in vLLM 0.32's shapes
(``docker/reference/api-transcripts/vllm-0.32.0/completion_*.json``)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from vllm.entrypoints.openai.protocol import (
    RequestError,
    completion_logprobs,
    error_body,
    sampling_params,
    sse,
    stream_usage_options,
    system_fingerprint,
    usage,
)
from vllm.sampling_params import SamplingParams
from vllm.v1.engine.async_llm import LLMEngine


@dataclass(frozen=True)
class CompletionPlan:
    """A checked completion request: its prompts (token ids), sampling parameters and what the answer shows."""

    request_id: str
    created: int
    model: str
    lora_name: str | None
    prompts: list[list[int]]
    params: SamplingParams
    return_token_ids: bool
    include_usage: bool
    continuous_usage: bool


def _prompts(engine: LLMEngine, prompt: Any) -> list[list[int]]:
    def token_list(value: Any) -> bool:
        return isinstance(value, list) and bool(value) and all(isinstance(i, int) for i in value)

    if isinstance(prompt, str):
        return [engine.tokenizer.encode(prompt)]
    if token_list(prompt):
        return [list(prompt)]
    if isinstance(prompt, list) and prompt and all(isinstance(item, str) for item in prompt):
        return [engine.tokenizer.encode(item) for item in prompt]
    if isinstance(prompt, list) and prompt and all(token_list(item) for item in prompt):
        return [list(item) for item in prompt]
    raise RequestError(400, "prompt must be a string, a list of strings or a list of token ids", "BadRequestError")


def plan_completion(engine: LLMEngine, body: dict[str, Any]) -> CompletionPlan:
    """Check a completion body (vLLM's refusals, in the words this engine has always used for the older ones)."""
    config = engine.vllm_config
    model = body.get("model")
    if model is not None and model != config.served_model_name and model not in config.lora_modules:
        raise RequestError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    lora_name = model if model in config.lora_modules else None
    prompts = _prompts(engine, body.get("prompt"))
    max_tokens = body.get("max_tokens", 16)
    min_tokens = body.get("min_tokens", 0) or 0
    logprobs = body.get("logprobs")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise RequestError(400, f"max_tokens must be at least 1, got {max_tokens}.", "BadRequestError")
    if not isinstance(min_tokens, int) or min_tokens < 0 or (max_tokens is not None and min_tokens > max_tokens):
        raise RequestError(400, f"min_tokens must be in [0, max_tokens], got {min_tokens}.", "BadRequestError")
    if logprobs is not None and (not isinstance(logprobs, int) or logprobs < 0 or logprobs > config.max_logprobs):
        raise RequestError(
            400,
            f"Requested sample logprobs of {logprobs}, which is greater than max allowed: {config.max_logprobs}",
            "BadRequestError",
        )
    include_usage, continuous_usage = stream_usage_options(body)
    limits = set()
    for prompt_ids in prompts:
        limit = max_tokens if max_tokens is not None else config.max_model_len - len(prompt_ids)
        if len(prompt_ids) + limit > config.max_model_len:
            raise RequestError(
                400,
                f"This model's maximum context length is {config.max_model_len} tokens. However, you "
                "requested "
                f"{len(prompt_ids) + limit} tokens ({len(prompt_ids)} in the messages, {limit} in the "
                "completion). "
                "Please reduce the length of the messages or completion.",
                "BadRequestError",
            )
        limits.add(limit)
    # max_tokens left out: each prompt gets the rest of the context (the engine core ends a request at
    # max_model_len, so the largest of the prompts' limits gives each its own)
    params = sampling_params(config, body, max_tokens=max(limits), min_tokens=min_tokens, logprobs=logprobs)
    return CompletionPlan(
        request_id=f"cmpl-{secrets.token_hex(8)}",
        created=int(time.time()),
        model=lora_name or config.served_model_name,
        lora_name=lora_name,
        prompts=prompts,
        params=params,
        return_token_ids=bool(body.get("return_token_ids")),
        include_usage=include_usage,
        continuous_usage=continuous_usage,
    )


def completion_response(
    engine: LLMEngine, plan: CompletionPlan, answers: list[dict[str, Any]], fingerprint: str
) -> dict[str, Any]:
    """The whole answer: a choice per prompt and sample, in that order."""
    choices: list[dict[str, Any]] = []
    completion_tokens = 0
    n = plan.params.n
    for index, answer in enumerate(answers):
        prompt_ids = plan.prompts[index // n]
        block = None
        if plan.params.logprobs is not None:
            block = completion_logprobs(engine, answer["token_ids"], answer["top_logprobs"], plan.params.logprobs)
        choices.append(
            {
                "index": index,
                "text": answer["text"],
                "logprobs": block,
                "finish_reason": answer["finish_reason"],
                "stop_reason": answer["stop_reason"],
                "token_ids": answer["token_ids"] if plan.return_token_ids else None,
                "prompt_logprobs": None,
                "prompt_token_ids": list(prompt_ids) if plan.return_token_ids else None,
                "routed_experts": None,
            }
        )
        completion_tokens += len(answer["token_ids"])
    prompt_tokens = sum(len(prompt_ids) for prompt_ids in plan.prompts)
    return {
        "id": plan.request_id,
        "object": "text_completion",
        "created": plan.created,
        "model": plan.model,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": fingerprint,
        "usage": usage(prompt_tokens, completion_tokens),
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }


def completion_events(engine: LLMEngine, plan: CompletionPlan) -> Iterator[str]:
    """The streamed answer: a chunk per generated token of each choice (as the engine core makes them), the final
    usage chunk when ``stream_options.include_usage``, then ``data: [DONE]``. Closing it aborts the requests."""
    fingerprint = system_fingerprint(engine.vllm_config)
    n = plan.params.n
    total = len(plan.prompts) * n
    sampled: list[list[int]] = [[] for _ in range(total)]
    offsets = [0] * total
    head = {"id": plan.request_id, "object": "text_completion", "created": plan.created, "model": plan.model}
    stream = engine.stream_batch(plan.prompts, plan.params, plan.lora_name)
    try:
        for kind, part in stream:
            if kind != "part":
                continue
            index = part["index"]
            token = part["token_id"]
            block = None
            if plan.params.logprobs is not None:
                block = completion_logprobs(
                    engine,
                    [token],
                    [part["logprobs"]],
                    plan.params.logprobs,
                    context=sampled[index],
                    initial_offset=offsets[index],
                )
                offsets[index] = block["text_offset"][-1] + len(block["tokens"][-1])
            first = not sampled[index]
            sampled[index].append(token)
            prompt_ids = plan.prompts[index // n]
            chunk: dict[str, Any] = {
                **head,
                "choices": [
                    {
                        "index": index,
                        "text": part["text"],
                        "logprobs": block,
                        "finish_reason": part["finish_reason"],
                        "stop_reason": part["stop_reason"],
                        "prompt_token_ids": list(prompt_ids) if first and plan.return_token_ids else None,
                        "token_ids": [token] if plan.return_token_ids else None,
                    }
                ],
            }
            if not plan.include_usage and part["finish_reason"] is not None:
                chunk["system_fingerprint"] = fingerprint
            if plan.continuous_usage:
                chunk["usage"] = usage(len(prompt_ids), len(sampled[index]), details=False)
            yield sse(chunk)
        if plan.include_usage:
            prompt_tokens = sum(len(prompt_ids) for prompt_ids in plan.prompts)
            completion_tokens = sum(map(len, sampled))
            yield sse(
                {
                    **head,
                    "choices": [],
                    "usage": usage(prompt_tokens, completion_tokens, details=False),
                    "system_fingerprint": fingerprint,
                }
            )
    except Exception as error:  # the engine failed mid-stream: an error event, then [DONE] (vLLM's framing)
        yield sse(error_body(500, str(error), "InternalServerError"))
    finally:
        stream.close()
    yield sse("[DONE]")
