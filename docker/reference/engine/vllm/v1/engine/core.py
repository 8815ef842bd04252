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
from multiprocessing.connection import Connection
from typing import Any

from vllm.config import VllmConfig
from vllm.logger import flush_handlers, init_logger, set_process_label

logger = init_logger(__name__)


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
        self.eos_token_id = int(vllm_config.hf_config.get("eos_token_id", 0))
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
        import torch

        ids = list(prompt_token_ids)
        max_tokens = int(params.get("max_tokens") or 16)
        min_tokens = int(params.get("min_tokens") or 0)
        temperature = float(params.get("temperature", 1.0) or 0.0)
        top_n = params.get("logprobs")
        seed = params.get("seed")
        lora_name = params.get("lora_name")
        generator = torch.Generator().manual_seed(int(seed)) if seed is not None else None
        tokens: list[int] = []
        logprobs: list[float] = []
        top_logprobs: list[dict[int, float]] = []
        finish_reason = "length"
        self.num_requests += 1
        self.num_prompt_tokens += len(ids)
        prompt = list(ids)
        # the prompt's first pass through its block table (prefix caching: its hit blocks read back); the decode
        # steps after it recompute the sequence as this engine always has
        planned = self.prefix_cache.begin(prompt, lora_name)
        for step in range(max_tokens):
            # Sampling runs on the host (a CPU generator for seeded requests), whatever the device.
            logits = self._pass(ids, lora_name, planned if step == 0 else None, prompt)
            raw_logprobs = logits.log_softmax(-1)
            if step < min_tokens:
                logits[self.eos_token_id] = float("-inf")
            if temperature <= 1e-5:
                token = int(logits.argmax())
            else:
                probs = (logits / temperature).softmax(-1)
                token = int(torch.multinomial(probs, 1, generator=generator)[0])
            tokens.append(token)
            logprobs.append(float(raw_logprobs[token]))
            if top_n is not None:
                ranked = raw_logprobs.topk(int(top_n)) if int(top_n) > 0 else None
                entry = {token: float(raw_logprobs[token])}
                if ranked is not None:
                    entry.update({int(i): float(v) for v, i in zip(ranked.values, ranked.indices, strict=True)})
                top_logprobs.append(entry)
            ids.append(token)
            if token == self.eos_token_id and step + 1 >= min_tokens:
                finish_reason = "stop"
                break
        self.num_generation_tokens += len(tokens)
        return {
            "token_ids": tokens,
            "logprobs": logprobs,
            "top_logprobs": top_logprobs,
            "finish_reason": finish_reason,
        }

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


def _serve_requests(engine: EngineCore, connection: Connection) -> None:
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            break
        kind, request_id, method, args, kwargs = message
        if kind == "shutdown":
            break
        try:
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
