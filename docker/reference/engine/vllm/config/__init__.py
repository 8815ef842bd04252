"""The engine configuration, resolved in the API-server process and shipped to the engine core."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vllm import envs
from vllm.config.model import get_served_model_name

_DTYPES = {
    "half": "float16",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "float": "float32",
    "float32": "float32",
}


@dataclass
class VllmConfig:
    model: str
    served_model_name: str
    model_dir: str
    revision: str | None
    tokenizer_revision: str | None
    dtype: str
    max_model_len: int
    gpu_memory_utilization: float
    kv_cache_memory_bytes: int | None
    block_size: int
    enable_sleep_mode: bool
    worker_extension_cls: str
    seed: int
    enforce_eager: bool
    use_v2_model_runner: bool
    max_num_seqs: int
    max_num_batched_tokens: int
    logprobs_mode: str
    max_logprobs: int
    hf_config: dict[str, Any] = field(default_factory=dict)
    #: LoRA adapters served by name (``--lora-modules name=path``), loaded on their first request
    lora_modules: dict[str, str] = field(default_factory=dict)
    max_lora_rank: int = 16
    #: automatic prefix caching (``--enable-prefix-caching``, on by default as in vLLM V1): ``v1.core.block_pool``
    enable_prefix_caching: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VllmConfig:
        return cls(**data)


def create_engine_config(args: argparse.Namespace) -> VllmConfig:
    """Resolve the model offline and derive every engine setting from ``args`` (vLLM's EngineArgs step)."""
    from vllm.transformers_utils.hf_cache import resolve_model_dir

    model = str(args.model_tag or args.model)
    model_dir = resolve_model_dir(model, args.revision)
    hf_config = json.loads((model_dir / "config.json").read_text())
    if hf_config.get("model_type") != "qwen3":
        raise ValueError(f"the vsnap reference engine serves Qwen3 models only, not {hf_config.get('model_type')!r}")
    config_dtype = str(hf_config.get("torch_dtype") or hf_config.get("dtype") or "bfloat16")
    dtype = _DTYPES.get(args.dtype) or _DTYPES.get(config_dtype, "bfloat16")
    derived_len = int(hf_config["max_position_embeddings"])
    max_model_len = args.max_model_len or derived_len
    if max_model_len > derived_len:
        raise ValueError(
            f"User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len "
            f"(max_position_embeddings={derived_len} or model_max_length=None in model's config.json)."
        )
    if args.tensor_parallel_size != 1 or args.pipeline_parallel_size != 1:
        raise ValueError("the vsnap reference engine runs one worker (tensor and pipeline parallel size 1)")
    max_num_seqs = args.max_num_seqs or 256
    lora_modules = parse_lora_modules(args.lora_modules or [])
    if lora_modules and not args.enable_lora:
        raise ValueError("--lora-modules requires --enable-lora")
    return VllmConfig(
        model=model,
        served_model_name=get_served_model_name(model, args.served_model_name),
        model_dir=str(Path(model_dir)),
        revision=args.revision,
        tokenizer_revision=args.tokenizer_revision or args.revision,
        dtype=dtype,
        max_model_len=max_model_len,
        gpu_memory_utilization=float(args.gpu_memory_utilization),
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        block_size=args.block_size or 16,
        enable_sleep_mode=bool(args.enable_sleep_mode),
        worker_extension_cls=args.worker_extension_cls or "",
        seed=int(args.seed),
        enforce_eager=bool(args.enforce_eager),
        use_v2_model_runner=envs.use_v2_model_runner(),
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens or max(max_model_len, 2048),
        logprobs_mode=args.logprobs_mode,
        max_logprobs=args.max_logprobs,
        hf_config=hf_config,
        lora_modules=lora_modules,
        max_lora_rank=int(args.max_lora_rank),
        enable_prefix_caching=args.enable_prefix_caching is not False,
    )


def parse_lora_modules(values: list[str]) -> dict[str, str]:
    """``name=path`` or ``{"name": ..., "path": ...}`` per value, as vLLM's ``--lora-modules`` takes them."""
    modules: dict[str, str] = {}
    for value in values:
        if value.strip().startswith("{"):
            entry = json.loads(value)
            name, path = str(entry["name"]), str(entry["path"])
        else:
            name, sep, path = value.partition("=")
            if not sep or not name or not path:
                raise ValueError(f"Invalid LoRA module format: {value!r} (expected name=path)")
        modules[name] = path
    return modules
