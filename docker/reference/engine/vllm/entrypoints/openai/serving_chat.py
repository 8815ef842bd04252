"""``/v1/chat/completions``: the messages through the model's chat template, then generated as a completion is, and
answered whole or streamed in vLLM 0.32's shapes (``docker/reference/api-transcripts/vllm-0.32.0/chat*.json``)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from vllm.entrypoints.chat_utils import ChatTemplateError
from vllm.entrypoints.openai.protocol import (
    RequestError,
    bad_request,
    chat_logprobs,
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
class ChatPlan:
    request_id: str
    created: int
    model: str
    lora_name: str | None
    prompt_ids: list[int]
    params: SamplingParams
    top_logprobs: int | None  # None: no logprobs asked
    return_token_ids: bool
    include_usage: bool
    continuous_usage: bool


def chat_prompt_ids(engine: LLMEngine, body: dict[str, Any]) -> list[int]:
    """The token ids of a body's ``messages`` through the chat template (special tokens recognised, none added)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise bad_request("messages must be a list of messages.", "messages")
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise bad_request("chat_template_kwargs must be an object.", "chat_template_kwargs")
    try:
        text = engine.chat_template.render(
            messages, add_generation_prompt=bool(body.get("add_generation_prompt", True)), **kwargs
        )
    except ChatTemplateError as error:
        raise bad_request(str(error)) from error
    return engine.tokenizer.encode(text)


def plan_chat(engine: LLMEngine, body: dict[str, Any]) -> ChatPlan:
    config = engine.vllm_config
    model = body.get("model")
    if model is not None and model != config.served_model_name and model not in config.lora_modules:
        raise RequestError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    lora_name = model if model in config.lora_modules else None
    prompt_ids = chat_prompt_ids(engine, body)
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    min_tokens = body.get("min_tokens", 0) or 0
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise bad_request(f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
    limit = max_tokens if max_tokens is not None else config.max_model_len - len(prompt_ids)
    if len(prompt_ids) + limit > config.max_model_len or limit < 1:
        raise bad_request(
            f"This model's maximum context length is {config.max_model_len} tokens. However, you requested "
            f"{len(prompt_ids) + limit} tokens ({len(prompt_ids)} in the messages, {limit} in the completion). "
            "Please reduce the length of the messages or completion."
        )
    if not isinstance(min_tokens, int) or min_tokens < 0 or min_tokens > limit:
        raise bad_request(f"min_tokens must be in [0, max_tokens], got {min_tokens}.", "min_tokens")
    wants_logprobs = bool(body.get("logprobs"))
    top_logprobs = body.get("top_logprobs") or 0
    if not isinstance(top_logprobs, int) or (top_logprobs < 0 and top_logprobs != -1):
        raise bad_request("`top_logprobs` must be a positive value or -1.", "top_logprobs")
    if top_logprobs and not wants_logprobs:
        raise bad_request("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")
    if top_logprobs > config.max_logprobs:
        raise bad_request(
            f"Requested sample logprobs of {top_logprobs}, which is greater than max allowed: {config.max_logprobs}",
            "top_logprobs",
        )
    include_usage, continuous_usage = stream_usage_options(body)
    params = sampling_params(
        config, body, max_tokens=limit, min_tokens=min_tokens, logprobs=top_logprobs if wants_logprobs else None
    )
    return ChatPlan(
        request_id=f"chatcmpl-{secrets.token_hex(8)}",
        created=int(time.time()),
        model=lora_name or config.served_model_name,
        lora_name=lora_name,
        prompt_ids=prompt_ids,
        params=params,
        top_logprobs=top_logprobs if wants_logprobs else None,
        return_token_ids=bool(body.get("return_token_ids")),
        include_usage=include_usage,
        continuous_usage=continuous_usage,
    )


def _message(text: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": text,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "reasoning": None,
    }


def chat_response(engine: LLMEngine, plan: ChatPlan, answers: list[dict[str, Any]]) -> dict[str, Any]:
    choices = []
    for index, answer in enumerate(answers):
        block = None
        if plan.top_logprobs is not None:
            block = chat_logprobs(engine, answer["token_ids"], answer["top_logprobs"], plan.top_logprobs)
        choices.append(
            {
                "index": index,
                "message": _message(answer["text"]),
                "logprobs": block,
                "finish_reason": answer["finish_reason"],
                "stop_reason": answer["stop_reason"],
                "token_ids": answer["token_ids"] if plan.return_token_ids else None,
                "routed_experts": None,
            }
        )
    completion_tokens = sum(len(answer["token_ids"]) for answer in answers)
    return {
        "id": plan.request_id,
        "object": "chat.completion",
        "created": plan.created,
        "model": plan.model,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": system_fingerprint(engine.vllm_config),
        "usage": usage(len(plan.prompt_ids), completion_tokens),
        "prompt_logprobs": None,
        "prompt_token_ids": plan.prompt_ids if plan.return_token_ids else None,
        "prompt_text": None,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }


def chat_events(engine: LLMEngine, plan: ChatPlan) -> Iterator[str]:
    """The streamed answer: per choice a first chunk with the role, a chunk per generated token (its text in
    ``delta.content``), the final usage chunk when asked, then ``data: [DONE]``. Closing it aborts the requests."""
    fingerprint = system_fingerprint(engine.vllm_config)
    n = plan.params.n
    sampled: list[list[int]] = [[] for _ in range(n)]
    head = {"id": plan.request_id, "object": "chat.completion.chunk", "created": plan.created, "model": plan.model}
    prompt_tokens = len(plan.prompt_ids)
    stream = engine.stream_batch([plan.prompt_ids], plan.params, plan.lora_name)
    try:
        for index in range(n):
            chunk: dict[str, Any] = {
                **head,
                "choices": [
                    {
                        "index": index,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
                "prompt_token_ids": plan.prompt_ids if plan.return_token_ids else None,
                "prompt_text": None,
            }
            if plan.continuous_usage:
                chunk["usage"] = usage(prompt_tokens, 0, details=False)
            yield sse(chunk)
        for kind, part in stream:
            if kind != "part":
                continue
            index = part["index"]
            token = part["token_id"]
            block = None
            if plan.top_logprobs is not None:
                block = chat_logprobs(engine, [token], [part["logprobs"]], plan.top_logprobs, context=sampled[index])
            sampled[index].append(token)
            choice: dict[str, Any] = {
                "index": index,
                "delta": {"content": part["text"]},
                "logprobs": block,
                "finish_reason": part["finish_reason"],
            }
            if part["finish_reason"] is not None:
                choice["stop_reason"] = part["stop_reason"]
            choice["token_ids"] = [token] if plan.return_token_ids else None
            chunk = {**head, "choices": [choice]}
            if not plan.include_usage and part["finish_reason"] is not None:
                chunk["system_fingerprint"] = fingerprint
            if plan.continuous_usage:
                chunk["usage"] = usage(prompt_tokens, len(sampled[index]), details=False)
            yield sse(chunk)
        if plan.include_usage:
            yield sse(
                {
                    **head,
                    "choices": [],
                    "usage": usage(prompt_tokens, sum(map(len, sampled)), details=False),
                    "system_fingerprint": fingerprint,
                }
            )
    except Exception as error:  # the engine failed mid-stream: an error event, then [DONE] (vLLM's framing)
        yield sse(error_body(500, str(error), "InternalServerError"))
    finally:
        stream.close()
    yield sse("[DONE]")
