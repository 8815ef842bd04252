"""Model runner V1 (the default, `VLLM_USE_V2_MODEL_RUNNER=0`): loads the model, profiles activation memory,
owns the paged KV cache and runs the forward pass."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vllm._vsnapref.device import Device
from vllm.config import VllmConfig
from vllm.logger import init_logger
from vllm.model_executor.model_loader.safetensors_io import load_file
from vllm.model_executor.models.qwen3 import Linear, Qwen3ForCausalLM
from vllm.utils.mem_utils import GiB_bytes
from vllm.v1.core.kv_cache_utils import KVCacheConfig, KVCacheSpec

logger = init_logger(__name__)

TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
FP32_BYTES = 4


def unique_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    return list(model.named_parameters())


class GPUModelRunner:
    def __init__(self, vllm_config: VllmConfig, device: Device) -> None:
        self.vllm_config = vllm_config
        self.device = device
        self.torch_device = device.torch_device
        self.dtype = TORCH_DTYPES[vllm_config.dtype]
        self.hf_config: dict[str, Any] = vllm_config.hf_config
        self.model: nn.Module = nn.Module()
        self.kv_caches: list[torch.Tensor] = []
        self.kv_cache_config: KVCacheConfig | None = None
        #: the LoRA adapters loaded so far, by name: per projection (A, B, scale), on the engine's device
        self.loras: dict[str, dict[str, tuple[torch.Tensor, torch.Tensor, float]]] = {}

    # -- model -------------------------------------------------------------------------------------------
    def _checkpoint(self) -> dict[str, torch.Tensor]:
        return load_file(Path(self.vllm_config.model_dir) / "model.safetensors")

    def load_model(self) -> None:
        logger.info("Starting to load model %s...", self.vllm_config.model)
        started = time.perf_counter()
        model = Qwen3ForCausalLM(self.hf_config, self.dtype)
        model.load_weights(self._checkpoint())
        model.eval()
        self.model = model.to(self.torch_device)
        self.device.allocate("weights", self.weight_bytes())
        logger.info(
            "Model loading took %.4f GiB memory and %.6f seconds",
            self.weight_bytes() / GiB_bytes,
            time.perf_counter() - started,
        )

    def weight_bytes(self) -> int:
        return sum(param.numel() * param.element_size() for _, param in unique_parameters(self.model))

    def buffer_bytes(self) -> int:
        return sum(buffer.numel() * buffer.element_size() for _, buffer in self.model.named_buffers())

    def reload_weights(self) -> None:
        started = time.perf_counter()
        params = unique_parameters(self.model)
        if any(param.numel() == 0 for _, param in params):
            raise RuntimeError("cannot reload weights into released parameters; call wake_up(tags=['weights']) first")
        self.model.load_weights(self._checkpoint())  # type: ignore[operator]
        # as vLLM does: a reload drops every loaded adapter; the next request through one loads it again
        self.remove_all_adapters()
        logger.info("Reloading weights took %.6f seconds", time.perf_counter() - started)

    # -- LoRA --------------------------------------------------------------------------------------------
    def load_adapter(self, name: str) -> dict[str, tuple[torch.Tensor, torch.Tensor, float]]:
        """A PEFT LoRA adapter (``adapter_config.json``, ``adapter_model.safetensors``) of ``--lora-modules``."""
        path = Path(self.vllm_config.lora_modules[name])
        config = json.loads((path / "adapter_config.json").read_text())
        rank = int(config["r"])
        if rank > self.vllm_config.max_lora_rank:
            raise ValueError(f"LoRA rank {rank} is greater than max_lora_rank {self.vllm_config.max_lora_rank}.")
        scale = float(config.get("lora_alpha", rank)) / rank
        tensors = load_file(path / "adapter_model.safetensors")
        projections = {n for n, m in self.model.named_modules() if isinstance(m, Linear)}
        adapter = {}
        for key, tensor in tensors.items():
            if not key.endswith(".lora_A.weight"):
                continue
            module = key.removeprefix("base_model.model.").removesuffix(".lora_A.weight")
            if module not in projections:
                raise ValueError(f"LoRA adapter {name!r} targets {module}, which this model does not have")
            lora_b = tensors[key.replace(".lora_A.", ".lora_B.")]
            adapter[module] = (tensor.float().to(self.torch_device), lora_b.float().to(self.torch_device), scale)
        self.loras[name] = adapter
        logger.info("Loaded new LoRA adapter: name '%s', path '%s'", name, path)
        return adapter

    def remove_all_adapters(self) -> None:
        self.loras.clear()

    @contextlib.contextmanager
    def active_adapter(self, name: str | None) -> Iterator[None]:
        """Run the enclosed forward pass through adapter ``name`` (None: the base model)."""
        if name is None:
            yield
            return
        adapter = self.loras.get(name) or self.load_adapter(name)
        modules = dict(self.model.named_modules())
        for module, weights in adapter.items():
            modules[module].lora = weights  # type: ignore[assignment]
        try:
            yield
        finally:
            for module in adapter:
                modules[module].lora = None  # type: ignore[assignment]

    # -- memory ------------------------------------------------------------------------------------------
    def kv_cache_spec(self) -> KVCacheSpec:
        return KVCacheSpec(
            block_size=self.vllm_config.block_size,
            num_layers=int(self.hf_config["num_hidden_layers"]),
            num_kv_heads=int(self.hf_config["num_key_value_heads"]),
            head_size=int(self.hf_config["head_dim"]),
            dtype_size=torch.empty(0, dtype=self.dtype).element_size(),
        )

    def activation_bytes_per_token(self) -> int:
        config = self.hf_config
        heads = config["num_attention_heads"] + 2 * config["num_key_value_heads"]
        # residual + normed hidden, q/k/v, attention output, gate/up/act of the MLP (float32 activations)
        width = 3 * config["hidden_size"] + heads * config["head_dim"] + 3 * config["intermediate_size"]
        return width * FP32_BYTES

    def profile_run(self) -> int:
        """Run a dummy batch and return the peak activation memory of the largest batch (V1 estimate)."""
        tokens = min(16, self.vllm_config.max_model_len)
        self.execute(list(range(tokens)))
        batched = self.vllm_config.max_num_batched_tokens
        logits = self.vllm_config.max_num_seqs * self.hf_config["vocab_size"] * FP32_BYTES
        return batched * self.activation_bytes_per_token() + logits

    def persistent_buffer_bytes(self) -> int:
        return 0

    def initialize_kv_cache(self, kv_cache_config: KVCacheConfig) -> None:
        self.kv_cache_config = kv_cache_config
        self.allocate_kv_cache()

    def allocate_kv_cache(self) -> None:
        config = self.kv_cache_config
        assert config is not None
        self.device.allocate("kv_cache", config.kv_cache_memory_bytes)
        slots = config.num_blocks * config.block_size
        self.kv_caches = [
            torch.zeros(2, slots, config.num_kv_heads, config.head_size, dtype=self.dtype, device=self.torch_device)
            for _ in range(config.num_layers)
        ]

    def release_kv_cache(self) -> int:
        self.kv_caches = [torch.empty(0, dtype=self.dtype, device=self.torch_device) for _ in self.kv_caches]
        return self.device.release("kv_cache")

    # -- execution ---------------------------------------------------------------------------------------
    def execute(
        self, token_ids: list[int], lora_name: str | None = None, table: list[int] | None = None, hit: int = 0
    ) -> torch.Tensor:
        """Logits (float32) for the next token after ``token_ids``. Without a block table, K/V land in blocks 0..
        of the cache. With one (a request's first pass under prefix caching: ``v1.core.block_pool``), they land in
        its blocks and attention reads every position's K/V back from the cache, the first ``hit`` positions' as a
        previous prompt left them."""
        if len(token_ids) > self.vllm_config.max_model_len:
            raise ValueError(f"sequence of {len(token_ids)} tokens exceeds max_model_len")
        ids = torch.tensor(token_ids, dtype=torch.long, device=self.torch_device)
        positions = torch.arange(len(token_ids), dtype=torch.long, device=self.torch_device)
        caches = self.kv_caches if all(cache.numel() for cache in self.kv_caches) else []
        slots = positions
        if table is not None and caches:
            size = self.vllm_config.block_size
            blocks = torch.tensor(table, dtype=torch.long, device=self.torch_device)
            slots = blocks[positions // size] * size + positions % size
        with self.active_adapter(lora_name):
            if table is None or not caches:
                return self.model(ids, positions, caches, slots)  # type: ignore[no-any-return]
            return self.model(ids, positions, caches, slots, hit)  # type: ignore[no-any-return]
