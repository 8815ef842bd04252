"""KV-cache sizing from the memory the worker reports, and the capacity log lines of the engine core."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from vllm.logger import init_logger
from vllm.utils.mem_utils import GiB_bytes

logger = init_logger(__name__)


@dataclass(frozen=True)
class KVCacheSpec:
    """One attention group: every layer stores K and V for `kv_heads × head_dim` values per token."""

    block_size: int
    num_layers: int
    num_kv_heads: int
    head_size: int
    dtype_size: int

    @property
    def page_size_bytes(self) -> int:
        """Bytes of one block across all layers of the group."""
        return 2 * self.num_layers * self.block_size * self.num_kv_heads * self.head_size * self.dtype_size

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class KVCacheConfig:
    num_blocks: int
    block_size: int
    num_layers: int
    num_kv_heads: int
    head_size: int
    dtype_size: int
    kv_cache_memory_bytes: int

    @property
    def size_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_enough_kv_cache_memory(max_model_len: int, spec: KVCacheSpec, available_memory: int) -> None:
    if available_memory <= 0:
        raise ValueError(
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing "
            "the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for "
            "more details."
        )
    blocks_needed = -(-max_model_len // spec.block_size)
    needed = blocks_needed * spec.page_size_bytes
    if needed > available_memory:
        estimated = (available_memory // spec.page_size_bytes) * spec.block_size
        raise ValueError(
            f"To serve at least one request with the models's max seq len ({max_model_len}), "
            f"({needed / GiB_bytes:.2f} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({available_memory / GiB_bytes:.2f} GiB). Based on the available memory, the estimated "
            f"maximum model length is {estimated}. Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine."
        )


def get_kv_cache_config(max_model_len: int, spec: KVCacheSpec, available_memory: int) -> KVCacheConfig:
    check_enough_kv_cache_memory(max_model_len, spec, available_memory)
    num_blocks = available_memory // spec.page_size_bytes
    return KVCacheConfig(
        num_blocks=num_blocks,
        block_size=spec.block_size,
        num_layers=spec.num_layers,
        num_kv_heads=spec.num_kv_heads,
        head_size=spec.head_size,
        dtype_size=spec.dtype_size,
        kv_cache_memory_bytes=num_blocks * spec.page_size_bytes,
    )


def report_kv_cache_config(max_model_len: int, config: KVCacheConfig, device_label: str = "GPU") -> None:
    """Log the capacity once, from the engine-core process, as vLLM's `_report_kv_cache_config` does."""
    num_tokens = config.size_tokens
    max_concurrency = num_tokens / max_model_len
    logger.info_once("%s KV cache size: %s tokens", device_label, f"{num_tokens:,}", scope="local")
    logger.info_once(
        "Maximum concurrency for %s tokens per request: %.2fx",
        f"{max_model_len:,}",
        max_concurrency,
        scope="local",
    )
