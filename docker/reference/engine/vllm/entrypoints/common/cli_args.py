"""The `vllm serve` option set (the subset the reference implements, with vLLM's names and defaults)."""

from __future__ import annotations

import argparse
import json
from typing import Any

DTYPE_CHOICES = ("auto", "half", "float16", "bfloat16", "float", "float32")
LOGPROBS_MODES = ("raw_logprobs", "raw_logits", "processed_logprobs", "processed_logits")


def _json_object(value: str) -> dict[str, Any]:
    try:
        loaded = json.loads(value)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"invalid JSON: {error}") from error
    if not isinstance(loaded, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return loaded


def _positive_int(value: str) -> int:
    number = int(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {value}")
    return number


def make_arg_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add every serve option to ``parser`` (used by `vllm serve` and `vllm snapshot create`)."""
    parser.add_argument("model_tag", type=str, nargs="?", help="The model tag to serve (optional if in config).")
    frontend = parser.add_argument_group("Frontend")
    frontend.add_argument("--host", type=str, default=None)
    frontend.add_argument("--port", type=int, default=8000)
    frontend.add_argument("--uds", type=str, default=None)
    frontend.add_argument("--api-key", type=str, nargs="+", default=None)
    frontend.add_argument("--api-server-count", "-asc", type=int, default=None)
    frontend.add_argument("--headless", action="store_true", default=False)
    frontend.add_argument("--grpc", action="store_true", default=False)
    frontend.add_argument("--middleware", type=str, action="append", default=[])
    frontend.add_argument("--ssl-keyfile", type=str, default=None)
    frontend.add_argument("--ssl-certfile", type=str, default=None)
    frontend.add_argument("--ssl-ca-certs", type=str, default=None)
    frontend.add_argument("--ssl-cert-reqs", type=int, default=0)
    frontend.add_argument("--ssl-ciphers", type=str, default=None)
    frontend.add_argument("--enable-ssl-refresh", action="store_true", default=False)
    frontend.add_argument("--disable-log-stats", action="store_true", default=False)
    frontend.add_argument("--enable-log-requests", action="store_true", default=False)
    frontend.add_argument("--disable-uvicorn-access-log", action="store_true", default=False)
    frontend.add_argument("--config", type=str, default=None)

    model = parser.add_argument_group("ModelConfig")
    model.add_argument("--model", type=str, default="Qwen/Qwen3-0.6B")
    model.add_argument("--revision", type=str, default=None)
    model.add_argument("--tokenizer", type=str, default=None)
    model.add_argument("--tokenizer-revision", type=str, default=None)
    model.add_argument("--code-revision", type=str, default=None)
    model.add_argument("--trust-remote-code", action="store_true", default=False)
    model.add_argument("--hf-token", type=str, nargs="?", const=True, default=None)
    model.add_argument("--dtype", type=str, choices=DTYPE_CHOICES, default="auto")
    model.add_argument("--max-model-len", type=_positive_int, default=None)
    model.add_argument("--seed", type=int, default=0)
    model.add_argument("--served-model-name", type=str, nargs="+", default=None)
    model.add_argument("--enforce-eager", action="store_true", default=False)
    model.add_argument("--logprobs-mode", type=str, choices=LOGPROBS_MODES, default="raw_logprobs")
    model.add_argument("--max-logprobs", type=int, default=20)
    model.add_argument("--generation-config", type=str, default="auto")
    model.add_argument("--quantization", "-q", type=str, default=None)

    load = parser.add_argument_group("LoadConfig")
    load.add_argument("--load-format", type=str, default="auto")
    load.add_argument("--download-dir", type=str, default=None)

    parallel = parser.add_argument_group("ParallelConfig")
    parallel.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parallel.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    parallel.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    parallel.add_argument("--prefill-context-parallel-size", "-pcp", type=int, default=1)
    parallel.add_argument("--decode-context-parallel-size", "-dcp", type=int, default=1)
    parallel.add_argument("--distributed-executor-backend", type=str, choices=("mp", "uni", "ray"), default=None)
    parallel.add_argument("--worker-cls", type=str, default="auto")
    parallel.add_argument("--worker-extension-cls", type=str, default="")

    cache = parser.add_argument_group("CacheConfig")
    cache.add_argument("--block-size", type=int, choices=(1, 8, 16, 32, 64, 128), default=None)
    cache.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    cache.add_argument("--kv-cache-memory-bytes", type=int, default=None)
    cache.add_argument("--kv-cache-dtype", type=str, default="auto")
    cache.add_argument("--swap-space", type=float, default=4)
    cache.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None)

    scheduler = parser.add_argument_group("SchedulerConfig")
    scheduler.add_argument("--max-num-seqs", type=int, default=None)
    scheduler.add_argument("--max-num-batched-tokens", type=int, default=None)

    lora = parser.add_argument_group("LoRAConfig")
    lora.add_argument("--enable-lora", action="store_true", default=False)
    lora.add_argument("--max-loras", type=int, default=1)
    lora.add_argument("--max-lora-rank", type=int, default=16)
    lora.add_argument("--lora-modules", type=str, nargs="+", default=None)

    spec = parser.add_argument_group("SpeculativeConfig")
    spec.add_argument("--speculative-config", "-sc", type=_json_object, default=None)

    sleep = parser.add_argument_group("Sleep mode")
    sleep.add_argument("--enable-sleep-mode", action="store_true", default=False)
    return parser


def validate_parsed_serve_args(args: argparse.Namespace) -> None:
    """Cross-option checks vLLM runs after parsing."""
    if args.enable_ssl_refresh and not (args.ssl_keyfile and args.ssl_certfile):
        raise TypeError("--enable-ssl-refresh requires --ssl-keyfile and --ssl-certfile")
    if not 0 < args.gpu_memory_utilization <= 1:
        raise ValueError(f"GPU memory utilization must be within (0, 1]. Got {args.gpu_memory_utilization}.")
