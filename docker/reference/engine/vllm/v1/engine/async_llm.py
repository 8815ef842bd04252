"""The API-server engine object: tokenizes, calls the engine core, detokenizes. Sync methods serve HTTP; the
async methods are what vLLM's AsyncLLM offers the snapshot session (`generate`, `sleep`, `wake_up`, ...)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm.config import VllmConfig
from vllm.entrypoints.chat_utils import ChatTemplate
from vllm.logger import init_logger
from vllm.sampling_params import SamplingParams
from vllm.tokenizers.bytelevel_bpe import ByteLevelBPETokenizer
from vllm.v1.engine.core_client import EngineCoreClient

logger = init_logger(__name__)

REPLACEMENT = "\ufffd"


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
    stop_reason: str | int | None = None


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
        # read and compiled now: a restored engine (this process image) renders chats without touching the disk
        self.chat_template = ChatTemplate(Path(vllm_config.model_dir))
        self._gate = threading.Condition()
        self._paused = False
        self._unfinished = 0

    # -- sync (HTTP) -------------------------------------------------------------------------------------
    def complete(
        self, prompt: str | list[int], params: SamplingParams, request_id: str, lora_name: str | None = None
    ) -> RequestOutput:
        prompt_ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        result = self.generate_batch([prompt_ids], params, lora_name)[0]
        token_ids: list[int] = result["token_ids"]
        logprobs = None
        if params.logprobs is not None:
            logprobs = []
            for step, entry in enumerate(result["top_logprobs"]):
                context = token_ids[:step]
                logprobs.append(
                    {
                        int(token): Logprob(value, rank + 1, self.decode_logprob_token(int(token), context))
                        for rank, (token, value) in enumerate(entry.items())
                    }
                )
        output = CompletionOutput(
            0, result["text"], token_ids, logprobs, result["finish_reason"], result.get("stop_reason")
        )
        return RequestOutput(request_id, prompt if isinstance(prompt, str) else None, prompt_ids, [output])

    def engine_requests(
        self, prompts: list[list[int]], params: SamplingParams, lora_name: str | None = None
    ) -> list[tuple[list[int], dict[str, Any]]]:
        """The engine-core requests of an HTTP request: each prompt ``n`` times, the i-th with seed ``seed + i``
        (vLLM's parallel sampling gives each child its own seed so)."""
        requests = []
        for prompt_ids in prompts:
            for child in range(params.n):
                engine_params = params.engine_dict(lora_name)
                if params.seed is not None:
                    engine_params["seed"] = params.seed + child
                requests.append((list(prompt_ids), engine_params))
        return requests

    def generate_batch(
        self, prompts: list[list[int]], params: SamplingParams, lora_name: str | None = None
    ) -> list[dict[str, Any]]:
        """Every answer of ``prompts`` × ``params.n``, in that order, when all are done."""
        requests = self.engine_requests(prompts, params, lora_name)
        with self._running():
            result: list[dict[str, Any]] = self.client.call("generate_batch", requests)
        return result

    def stream_batch(
        self, prompts: list[list[int]], params: SamplingParams, lora_name: str | None = None
    ) -> Iterator[tuple[str, Any]]:
        """The same, streamed: ``("part", {index, token_id, logprobs, text, finish_reason, stop_reason})`` per
        step as the engine core makes it, then ``("done", answers)``. Close it to abort."""
        requests = self.engine_requests(prompts, params, lora_name)
        with self._running():
            yield from self.client.stream("generate_batch", requests)

    @contextlib.contextmanager
    def _running(self) -> Iterator[None]:
        """A request in flight: waits while generation is paused (a snapshot phase), counted until it ends."""
        with self._gate:
            self._gate.wait_for(lambda: not self._paused)
            self._unfinished += 1
        try:
            yield
        finally:
            with self._gate:
                self._unfinished -= 1
                self._gate.notify_all()

    def decode_logprob_token(self, token: int, context: list[int]) -> str:
        """A token's text as vLLM puts it in a logprobs entry: special tokens spelled out; a byte that only
        completes a character with the tokens before it (``context``, the sampled ones) gets that character's
        text from them, and one still incomplete is empty (vLLM's ``LogprobsProcessor._correct_decoded_token``)."""
        text = self.tokenizer.decode([token], skip_special_tokens=False)
        if not text.endswith(REPLACEMENT):
            return text
        for width in range(1, min(len(context), 4) + 1):
            window = context[-width:]
            whole = self.tokenizer.decode([*window, token], skip_special_tokens=False)
            if whole.endswith(REPLACEMENT):
                continue
            clean = len(window)
            for index in range(len(window) - 1, -1, -1):
                if self.tokenizer.decode([window[index]], skip_special_tokens=False).endswith(REPLACEMENT):
                    clean = index
                else:
                    break
            prefix = self.tokenizer.decode(window[:clean], skip_special_tokens=False) if clean else ""
            if whole.startswith(prefix):
                return whole[len(prefix) :]
            common = 0
            for left, right in zip(prefix, whole, strict=False):
                if left != right:
                    break
                common += 1
            return whole[common:]
        return ""

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
