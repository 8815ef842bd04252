"""``/tokenize`` (a prompt, or chat messages through the chat template) and ``/detokenize``, in vLLM 0.32's shapes
(``docker/reference/api-transcripts/vllm-0.32.0/tokenize*.json``, ``detokenize*.json``)."""

from __future__ import annotations

from typing import Any

from vllm.entrypoints.openai.protocol import RequestError, bad_request
from vllm.entrypoints.openai.serving_chat import chat_prompt_ids
from vllm.v1.engine.async_llm import LLMEngine


def _check_model(engine: LLMEngine, body: dict[str, Any]) -> None:
    config = engine.vllm_config
    model = body.get("model")
    if model is not None and model != config.served_model_name and model not in config.lora_modules:
        raise RequestError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")


def tokenize(engine: LLMEngine, body: dict[str, Any]) -> dict[str, Any]:
    _check_model(engine, body)
    if "messages" in body:
        tokens = chat_prompt_ids(engine, body)
    elif isinstance(body.get("prompt"), str):
        tokens = engine.tokenizer.encode(body["prompt"])
    else:
        raise bad_request("prompt must be a string (or messages a list of messages).", "prompt")
    return {
        "count": len(tokens),
        "max_model_len": engine.vllm_config.max_model_len,
        "tokens": tokens,
        "token_strs": engine.tokenizer.convert_ids_to_tokens(tokens) if body.get("return_token_strs") else None,
    }


def detokenize(engine: LLMEngine, body: dict[str, Any]) -> dict[str, Any]:
    _check_model(engine, body)
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise bad_request("tokens must be a list of token ids.", "tokens")
    return {"prompt": engine.tokenizer.decode(tokens, skip_special_tokens=DETOKENIZE_SKIPS_SPECIAL)}


#: whether /detokenize leaves special tokens out of the text (vLLM 0.32's answer: transcripts/detokenize_special)
DETOKENIZE_SKIPS_SPECIAL = False
