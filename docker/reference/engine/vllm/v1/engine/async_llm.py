"""The API-server engine object: tokenizes, calls the engine core, detokenizes. Sync methods serve HTTP; the
async methods are what vLLM's AsyncLLM offers the snapshot session (`generate`, `sleep`, `wake_up`, ...)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm.config import VllmConfig
from vllm.logger import init_logger
from vllm.sampling_params import SamplingParams
from vllm.tokenizers.bytelevel_bpe import ByteLevelBPETokenizer
from vllm.v1.engine.core_client import EngineCoreClient

logger = init_logger(__name__)


@dataclass(frozen=True)
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)
    finished: bool = True


class LLMEngine:
    def __init__(self, vllm_config: VllmConfig, client: EngineCoreClient) -> None:
        self.vllm_config = vllm_config
        self.client = client
        self.tokenizer = ByteLevelBPETokenizer.from_file(Path(vllm_config.model_dir) / "tokenizer.json")
        self._gate = threading.Condition()
        self._paused = False
        self._unfinished = 0

    # -- sync (HTTP) -------------------------------------------------------------------------------------
    def complete(
        self, prompt: str | list[int], params: SamplingParams, request_id: str, lora_name: str | None = None
    ) -> RequestOutput:
        prompt_ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        with self._gate:
            self._gate.wait_for(lambda: not self._paused)
            self._unfinished += 1
        try:
            result = self.client.call(
                "generate",
                prompt_ids,
                {
                    "max_tokens": params.max_tokens,
                    "min_tokens": params.min_tokens,
                    "temperature": params.temperature,
                    "seed": params.seed,
                    "logprobs": params.logprobs,
                    "lora_name": lora_name,
                },
            )
        finally:
            with self._gate:
                self._unfinished -= 1
                self._gate.notify_all()
        token_ids: list[int] = result["token_ids"]
        logprobs = None
        if params.logprobs is not None:
            logprobs = []
            for entry in result["top_logprobs"]:
                ranked = sorted(entry.items(), key=lambda item: -item[1])
                logprobs.append(
                    {
                        int(token): Logprob(value, rank + 1, self.tokenizer.decode([int(token)]))
                        for rank, (token, value) in enumerate(ranked)
                    }
                )
        text = self.tokenizer.decode(token_ids)
        output = CompletionOutput(0, text, token_ids, logprobs, result["finish_reason"])
        return RequestOutput(request_id, prompt if isinstance(prompt, str) else None, prompt_ids, [output])

    # -- async (snapshot session) ------------------------------------------------------------------------
    async def generate(
        self, prompt: str, sampling_params: SamplingParams, request_id: str
    ) -> AsyncIterator[RequestOutput]:
        yield await asyncio.to_thread(self.complete, prompt, sampling_params, request_id)

    async def sleep(self, level: int = 1) -> None:
        await asyncio.to_thread(self.client.call, "sleep", level)

    async def wake_up(self, tags: list[str] | None = None) -> None:
        await asyncio.to_thread(self.client.call, "wake_up", tags)

    async def is_sleeping(self) -> bool:
        return bool(await asyncio.to_thread(self.client.call, "is_sleeping"))

    async def collective_rpc(
        self,
        method: str,
        timeout: float | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> list[Any]:
        result: list[Any] = await asyncio.to_thread(
            self.client.call, "collective_rpc", method, timeout, tuple(args), kwargs or {}, timeout=timeout
        )
        return result

    async def pause_generation(self, *, mode: str = "abort", **_: Any) -> None:
        def pause() -> None:
            with self._gate:
                self._paused = True
                if mode == "wait":
                    self._gate.wait_for(lambda: self._unfinished == 0)

        await asyncio.to_thread(pause)

    async def resume_generation(self) -> None:
        with self._gate:
            self._paused = False
            self._gate.notify_all()

    def get_num_unfinished_requests(self) -> int:
        return self._unfinished

    def shutdown(self, timeout: float | None = None) -> None:
        self.client.shutdown(timeout)
