"""The engine core: a separate process (as in vLLM) that owns the executor and runs requests.

The API-server process talks to it over a Unix socket pair (pickled calls). Started as
`python3 -m vllm.v1.engine.core --engine-fd N` with the config on the socket.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from vllm.config import VllmConfig
from vllm.logger import flush_handlers, init_logger, set_process_label
from vllm.tokenizers.bytelevel_bpe import ByteLevelBPETokenizer

logger = init_logger(__name__)

#: vLLM's FinishReason values, in its order (every one is a label of ``vllm:request_success_total``)
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")


@dataclass
class _Request:
    """What one request (one of the ``n`` of a prompt) has produced so far."""

    index: int
    detokenizer: Any = None
    num_cached_tokens: int = 0
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[dict[int, float]] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: str | int | None = None

    def result(self) -> dict[str, Any]:
        return {
            "token_ids": self.tokens,
            "logprobs": self.logprobs,
            "top_logprobs": self.top_logprobs,
            "finish_reason": self.finish_reason,
            "stop_reason": self.stop_reason,
            "text": self.detokenizer.output_text if self.detokenizer is not None else "",
            "num_cached_tokens": self.num_cached_tokens,
        }


def _filtered(logits: Any, params: dict[str, Any]) -> Any:
    """``logits`` (already divided by the temperature) with vLLM's top-k, then top-p, applied."""
    top_k = int(params.get("top_k") or 0)
    top_p = float(params.get("top_p") if params.get("top_p") is not None else 1.0)
    if 0 < top_k < logits.shape[-1]:
        logits = logits.masked_fill(logits < logits.topk(top_k).values[-1], float("-inf"))
    if top_p < 1.0:
        ordered, order = logits.sort(descending=False)
        cumulative = ordered.softmax(-1).cumsum(-1)
        drop = cumulative <= 1 - top_p
        drop[-1] = False  # the most likely token always stays
        logits = logits.clone()
        logits[order[drop]] = float("-inf")
    return logits


class EngineCore:
    def __init__(self, vllm_config: VllmConfig) -> None:
        from vllm.plugins import load_general_plugins

        load_general_plugins()
        from vllm.v1.executor.uniproc_executor import UniProcExecutor

        self.vllm_config = vllm_config
        self.model_executor = UniProcExecutor(vllm_config)
        self.num_requests = 0
        self.num_prompt_tokens = 0
        self.num_generation_tokens = 0
        self.num_cached_prompt_tokens = 0
        #: finished requests by vLLM's finished_reason (``vllm:request_success_total``)
        self.request_success: dict[str, int] = dict.fromkeys(FINISHED_REASONS, 0)
        self.eos_token_id = int(vllm_config.hf_config.get("eos_token_id", 0))
        # the engine core decides where a request ends, stop strings included, so it detokenizes too
        self.tokenizer = ByteLevelBPETokenizer.from_file(Path(vllm_config.model_dir) / "tokenizer.json")
        self.model_executor.load_model()
        self.kv_cache_config = self._initialize_kv_caches()
        from vllm.v1.core.block_pool import PrefixCache

        size = self.kv_cache_config.block_size
        self.prefix_cache = PrefixCache(
            self.kv_cache_config.num_blocks,
            size,
            first_block=-(-vllm_config.max_model_len // size),  # the table-less passes' blocks (block_pool)
            enabled=vllm_config.enable_prefix_caching,
        )

    def _initialize_kv_caches(self) -> Any:
        from vllm.v1.core.kv_cache_utils import get_kv_cache_config, report_kv_cache_config

        started = time.perf_counter()
        spec = self.model_executor.collective_rpc("get_kv_cache_spec")[0]
        available = self.model_executor.collective_rpc("determine_available_memory")[0]
        kv_cache_config = get_kv_cache_config(self.vllm_config.max_model_len, spec, available)
        report_kv_cache_config(self.vllm_config.max_model_len, kv_cache_config)
        self.model_executor.collective_rpc("initialize_from_config", args=([kv_cache_config],))
        self.model_executor.collective_rpc("compile_or_warm_up_model")
        logger.info(
            "init engine (profile, create kv cache, warmup model) took %.2f seconds",
            time.perf_counter() - started,
        )
        return kv_cache_config

    # -- requests ----------------------------------------------------------------------------------------
    def generate(self, prompt_token_ids: list[int], params: dict[str, Any]) -> dict[str, Any]:
        """One request, to its end (the snapshot canary's and every non-streamed request's path)."""
        return self.generate_batch([(prompt_token_ids, params)])[0]

    def generate_batch(
        self,
        requests: list[tuple[list[int], dict[str, Any]]],
        emit: Callable[[dict[str, Any]], None] | None = None,
        aborted: Callable[[], bool] | None = None,
    ) -> list[dict[str, Any]]:
        """Several requests (the prompts of one HTTP request, each ``n`` times) stepped in turn, one token each a
        round, as vLLM's scheduler batches them. ``emit`` is handed each step's token (streaming); ``aborted`` is
        asked between rounds (the client went away: the requests end as ``abort``, and vLLM then counts their
        tokens but no success)."""
        states = [_Request(index) for index in range(len(requests))]
        running = {
            state.index: self._decode(prompt, params, state)
            for state, (prompt, params) in zip(states, requests, strict=True)
        }
        try:
            while running:
                if aborted is not None and aborted():
                    for index in running:
                        states[index].finish_reason = "abort"
                    break
                for index, steps in list(running.items()):
                    part = next(steps, None)
                    if part is None:
                        del running[index]
                        continue
                    if emit is not None:
                        emit(part)
        finally:
            for steps in running.values():
                steps.close()
        return [state.result() for state in states]

    def _decode(self, prompt_token_ids: list[int], params: dict[str, Any], state: _Request) -> Iterator[dict[str, Any]]:
        """One request, a token per step: sampled from the real logits, then vLLM's stop checks (EOS, stop token
        ids, length; then the stop strings of the detokenized text). Yields each step's part of the answer."""
        import torch

        from vllm.v1.engine.detokenizer import IncrementalDetokenizer

        ids = list(prompt_token_ids)
        max_tokens = int(params.get("max_tokens") or 16)
        min_tokens = int(params.get("min_tokens") or 0)
        temperature = float(params.get("temperature", 1.0) or 0.0)
        top_n = params.get("logprobs")
        seed = params.get("seed")
        lora_name = params.get("lora_name")
        stop_token_ids = [int(token) for token in params.get("stop_token_ids") or ()]
        ignore_eos = bool(params.get("ignore_eos"))
        logit_bias = {int(token): float(bias) for token, bias in (params.get("logit_bias") or {}).items()}
        generator = torch.Generator().manual_seed(int(seed)) if seed is not None else None
        detokenizer = state.detokenizer = IncrementalDetokenizer(
            self.tokenizer,
            params.get("stop") or (),
            bool(params.get("include_stop_str_in_output")),
            min_tokens,
            bool(params.get("skip_special_tokens", True)),
        )
        self.num_requests += 1
        self.num_prompt_tokens += len(ids)
        prompt = list(ids)
        # the prompt's first pass through its block table (prefix caching: its hit blocks read back, an earlier
        # request's of the same batch included, as vLLM's scheduler caches a block when it allocates it); the decode
        # steps after it recompute the sequence as this engine always has
        planned = self.prefix_cache.begin(prompt, lora_name)
        if planned is not None:
            state.num_cached_tokens = planned[1]
            self.num_cached_prompt_tokens += planned[1]
        for step in range(max_tokens):
            # Sampling runs on the host (a CPU generator for seeded requests), whatever the device.
            logits = self._pass(ids, lora_name, planned if step == 0 else None, prompt)
            raw_logprobs = logits.log_softmax(-1)  # vLLM's raw logprobs: before the bias, min_tokens, temperature
            for token, bias in logit_bias.items():
                logits[token] += bias
            if step < min_tokens:
                for token in stop_token_ids if ignore_eos else [self.eos_token_id, *stop_token_ids]:
                    logits[token] = float("-inf")
            if temperature <= 1e-5:
                token = int(logits.argmax())
            else:
                probs = _filtered(logits / temperature, params).softmax(-1)
                token = int(torch.multinomial(probs, 1, generator=generator)[0])
            state.tokens.append(token)
            state.logprobs.append(float(raw_logprobs[token]))
            entry: dict[int, float] | None = None
            if top_n is not None:
                # the sampled token first, then the top N by rank (vLLM's order; the sampled one once)
                entry = {token: float(raw_logprobs[token])}
                if int(top_n) > 0:
                    ranked = raw_logprobs.topk(int(top_n))
                    for value, index in zip(ranked.values, ranked.indices, strict=True):
                        entry.setdefault(int(index), float(value))
                state.top_logprobs.append(entry)
            ids.append(token)
            self.num_generation_tokens += 1
            if token == self.eos_token_id and not ignore_eos:
                state.finish_reason = "stop"
            elif token in stop_token_ids:
                state.finish_reason, state.stop_reason = "stop", token
            elif step + 1 >= max_tokens or len(ids) >= self.vllm_config.max_model_len:
                state.finish_reason = "length"
            stop_string = detokenizer.update(token, stop_terminated=state.finish_reason == "stop")
            if stop_string is not None:
                state.finish_reason, state.stop_reason = "stop", stop_string
            if state.finish_reason is not None:
                self.request_success[state.finish_reason] = self.request_success.get(state.finish_reason, 0) + 1
            yield {
                "index": state.index,
                "token_id": token,
                "logprobs": entry,
                "text": detokenizer.next_text(state.finish_reason is not None),
                "finish_reason": state.finish_reason,
                "stop_reason": state.stop_reason,
            }
            if state.finish_reason is not None:
                return

    def _pass(
        self, ids: list[int], lora_name: str | None, planned: tuple[list[int], int] | None, prompt: list[int]
    ) -> Any:
        """One forward pass: the logits (float32, on the host) of the next token. ``planned``: the prompt's block
        table and hit tokens (its first pass under prefix caching), whose blocks are kept or given back after."""
        if planned is None:
            return self.model_executor.execute_model(ids, lora_name).float().cpu().clone()
        table, hit = planned
        try:
            logits = self.model_executor.execute_model(ids, lora_name, table, hit).float().cpu().clone()
        except BaseException:
            self.prefix_cache.abort(table, hit)  # nothing of the prompt is kept
            raise
        self.prefix_cache.finish(prompt, lora_name, table, hit)
        return logits

    def sleep(self, level: int = 1) -> None:
        if not self.vllm_config.enable_sleep_mode:
            raise ValueError("Sleep mode is not enabled in the model config")
        self.model_executor.sleep(level)
        self.prefix_cache.reset()  # the KV cache is gone: no block may be hit any more (vLLM resets it too)

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.model_executor.wake_up(tags)

    def is_sleeping(self) -> bool:
        return self.model_executor.is_sleeping

    def collective_rpc(
        self,
        method: str,
        timeout: float | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> list[Any]:
        return self.model_executor.collective_rpc(method, timeout, args, kwargs)

    def info(self) -> dict[str, Any]:
        return {
            "kv_cache_config": self.kv_cache_config.to_dict(),
            "num_requests": self.num_requests,
            "num_prompt_tokens": self.num_prompt_tokens,
            "num_generation_tokens": self.num_generation_tokens,
            "num_cached_prompt_tokens": self.num_cached_prompt_tokens,
            "request_success": dict(self.request_success),
            "is_sleeping": self.model_executor.is_sleeping,
            "prefix_cache_queries": self.prefix_cache.queries,
            "prefix_cache_hits": self.prefix_cache.hits,
            "enable_prefix_caching": self.prefix_cache.enabled,
        }

    def shutdown(self) -> None:
        self.model_executor.shutdown()


def run_engine_core(connection: Connection) -> None:
    set_process_label("EngineCore")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(SystemExit(0)))
    engine: EngineCore | None = None
    try:
        vllm_config = VllmConfig.from_dict(connection.recv())
        engine = EngineCore(vllm_config)
    except BaseException as error:
        logger.exception("EngineCore failed to start.")
        flush_handlers()
        with contextlib.suppress(OSError):
            connection.send(("failed", f"{type(error).__name__}: {error}"))
        raise
    connection.send(("ready", engine.info()))
    flush_handlers()
    try:
        _serve_requests(engine, connection)
    finally:
        engine.shutdown()
        flush_handlers()


def _stream_hooks(connection: Connection, request_id: Any) -> dict[str, Callable[..., Any]]:
    """A streamed call's ``emit`` (each part goes to the client as it is made) and ``aborted`` (has the client sent
    ``abort`` for it: it stopped reading). Nothing else can arrive meanwhile: the client holds its lock for the whole
    stream."""
    seen: list[bool] = []

    def emit(part: Any) -> None:
        connection.send(("part", request_id, part))

    def aborted() -> bool:
        while not seen and connection.poll(0):
            message = connection.recv()
            if message[0] == "abort" and message[1] == request_id:
                seen.append(True)
        return bool(seen)

    return {"emit": emit, "aborted": aborted}


def _serve_requests(engine: EngineCore, connection: Connection) -> None:
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            break
        kind, request_id, method, args, kwargs = message
        if kind == "shutdown":
            break
        if kind == "abort":
            continue  # an abort that crossed its stream's final reply: that stream is over already
        try:
            if kind == "stream":
                kwargs = {**kwargs, **_stream_hooks(connection, request_id)}
            result = getattr(engine, method)(*args, **kwargs)
            reply: tuple[Any, ...] = ("ok", request_id, result)
        except Exception as error:
            if method != "collective_rpc":
                logger.exception("EngineCore failed to run %s.", method)
            reply = ("error", request_id, type(error).__name__, str(error), traceback.format_exc())
        flush_handlers()
        try:
            connection.send(reply)
        except (BrokenPipeError, OSError):
            break


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m vllm.v1.engine.core")
    parser.add_argument("--engine-fd", type=int, required=True)
    options = parser.parse_args()
    connection = Connection(options.engine_fd)
    try:
        run_engine_core(connection)
    except SystemExit:
        raise
    except BaseException:
        sys.exit(1)


if __name__ == "__main__":
    main()
