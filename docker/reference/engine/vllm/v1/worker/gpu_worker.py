"""The worker: owns the device (CUDA when torch sees one, else simulated), the model runner and sleep mode."""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

from vllm._vsnapref.device import Device, MiB, make_device
from vllm.config import VllmConfig
from vllm.logger import init_logger
from vllm.utils.mem_utils import format_gib
from vllm.v1.core.kv_cache_utils import KVCacheConfig, KVCacheSpec
from vllm.v1.worker.gpu_model_runner import GPUModelRunner, unique_parameters
from vllm.v1.worker.worker_base import WorkerBase

logger = init_logger(__name__)

# What a CUDA context and the allocator's bookkeeping cost before any tensor exists (simulated).
CONTEXT_BYTES = 2 * MiB


class Worker(WorkerBase):
    def __init__(
        self,
        vllm_config: VllmConfig,
        local_rank: int = 0,
        rank: int = 0,
        distributed_init_method: str | None = None,
        is_driver_worker: bool = False,
    ) -> None:
        super().__init__(vllm_config, local_rank, rank, distributed_init_method, is_driver_worker)
        self.device: Device | None = None
        self.model_runner: GPUModelRunner
        self._sleep_saved_buffers: dict[str, torch.Tensor] = {}
        self._sleep_offloaded: dict[str, torch.Tensor] = {}
        self._released_shapes: dict[str, tuple[int, ...]] = {}
        self._kv_released = False
        self.requested_memory = 0

    # -- start-up ----------------------------------------------------------------------------------------
    def init_device(self) -> None:
        torch.set_num_threads(1)
        torch.manual_seed(self.vllm_config.seed)
        self.device = make_device()
        self.device.register_holder(CONTEXT_BYTES)
        logger.info(
            "Worker device: %s (%s)%s",
            self.device.torch_device,
            self.device.info.name,
            " (simulated: sizes the KV cache only; tensors in host memory)" if self.device.simulated else "",
        )
        self.requested_memory = int(self.device.total * self.vllm_config.gpu_memory_utilization)
        if self.device.free < self.requested_memory:
            raise ValueError(
                "Free memory on device "
                f"({format_gib(self.device.free)}/{format_gib(self.device.total)} GiB) on "
                "startup is less than desired GPU memory utilization "
                f"({self.vllm_config.gpu_memory_utilization}, "
                f"{format_gib(self.requested_memory)} GiB). Decrease GPU memory utilization or reduce "
                "GPU memory "
                "used by other processes."
            )
        if self.vllm_config.use_v2_model_runner:
            from vllm.v1.worker.gpu.model_runner import GPUModelRunner as V2ModelRunner

            self.model_runner = V2ModelRunner(self.vllm_config, self.device)
        else:
            self.model_runner = GPUModelRunner(self.vllm_config, self.device)

    def load_model(self) -> None:
        self.model_runner.load_model()

    def get_model(self) -> nn.Module:
        return self.model_runner.model

    def get_kv_cache_spec(self) -> KVCacheSpec:
        return self.model_runner.kv_cache_spec()

    @torch.inference_mode()
    def determine_available_memory(self) -> int:
        """Profile the peak activation memory and return the bytes left for the KV cache."""
        assert self.device is not None
        explicit = self.vllm_config.kv_cache_memory_bytes
        if explicit:
            self.model_runner.profile_run()
            logger.info(
                "Reserved %s GiB for KV cache as specified by kv_cache_memory_bytes config and "
                "skipped memory "
                "profiling. This does not respect the gpu_memory_utilization config.",
                format_gib(explicit),
            )
            return int(explicit)
        peak_activation = self.model_runner.profile_run()
        non_kv = self.device.used + peak_activation
        available = self.requested_memory - non_kv
        if self.vllm_config.enable_sleep_mode:
            # Sleep mode allocates through the CuMem pool, which keeps a staging copy of the model buffers on
            # the device so that level-2 sleep can restore them.
            available -= self.model_runner.buffer_bytes()
        logger.info_once("Available KV cache memory: %s GiB", format_gib(available))
        return available

    def initialize_from_config(self, kv_cache_config: KVCacheConfig) -> None:
        self.model_runner.initialize_kv_cache(kv_cache_config)

    def compile_or_warm_up_model(self) -> float:
        started = time.perf_counter()
        if not self.vllm_config.enforce_eager:
            self.model_runner.execute(list(range(min(8, self.vllm_config.max_model_len))))
        return time.perf_counter() - started

    # -- execution ---------------------------------------------------------------------------------------
    def execute_model(
        self, token_ids: list[int], lora_name: str | None = None, table: list[int] | None = None, hit: int = 0
    ) -> torch.Tensor:
        if self._released_shapes:
            raise RuntimeError("model weights are released (the engine is sleeping)")
        return self.model_runner.execute(token_ids, lora_name, table, hit)

    # -- sleep mode --------------------------------------------------------------------------------------
    def sleep(self, level: int = 1) -> None:
        assert self.device is not None
        free_before = self.device.free
        model = self.model_runner.model
        if level == 2:
            self._sleep_saved_buffers = {name: buffer.to("cpu", copy=True) for name, buffer in model.named_buffers()}
        for name, param in unique_parameters(model):
            if name in self._released_shapes:
                continue
            if level == 1:
                self._sleep_offloaded[name] = param.data.to("cpu", copy=True)
            self._released_shapes[name] = tuple(param.shape)
            param.data = torch.empty(0, dtype=param.dtype, device=self.device.torch_device)
        self.device.release("weights")
        self.model_runner.release_kv_cache()
        self._kv_released = True
        freed = self.device.free - free_before
        logger.info(
            "Sleep mode freed %s GiB memory, %s GiB memory is still in use.",
            format_gib(freed),
            format_gib(self.device.used),
        )

    def wake_up(self, tags: list[str] | None = None) -> None:
        assert self.device is not None
        wake_weights = tags is None or "weights" in tags
        wake_kv = tags is None or "kv_cache" in tags
        model = self.model_runner.model
        if wake_weights and self._released_shapes:
            params = dict(unique_parameters(model))
            total = sum(
                int(torch.Size(shape).numel()) * params[name].element_size()
                for name, shape in self._released_shapes.items()
            )
            self.device.allocate("weights", total)
            for name, shape in self._released_shapes.items():
                param = params[name]
                offloaded = self._sleep_offloaded.pop(name, None)
                # Fresh device pages hold no weights: level-2 sleep needs reload_weights() afterwards.
                param.data = (
                    offloaded.to(self.device.torch_device)
                    if offloaded is not None
                    else torch.zeros(shape, dtype=param.dtype, device=self.device.torch_device)
                )
            self._released_shapes = {}
        if wake_weights and self._sleep_saved_buffers:
            for name, buffer in model.named_buffers():
                if name in self._sleep_saved_buffers:
                    buffer.data.copy_(self._sleep_saved_buffers[name])
            self._sleep_saved_buffers = {}
        if wake_kv and self._kv_released:
            self.model_runner.allocate_kv_cache()
            self._kv_released = False
        self.synchronize_device()

    def synchronize_device(self) -> None:
        """Block until in-flight device work completes (a CPU or simulated device has none in flight)."""
        if self.device is not None and not self.device.simulated:
            torch.cuda.synchronize(self.device.torch_device)

    def reload_weights(self, *args: Any, **kwargs: Any) -> None:
        self.model_runner.reload_weights()

    def checkpoint_prepare(self) -> None:
        """Prepare communicators for a process checkpoint (a single worker has none to prepare)."""
        logger.debug("checkpoint_prepare: no distributed communicators in a single-worker engine")

    def checkpoint_restore(self) -> None:
        """Re-establish communicators after a process checkpoint (a single worker has none)."""
        logger.debug("checkpoint_restore: no distributed communicators in a single-worker engine")

    def shutdown(self) -> None:
        if self.device is not None:
            self.device.unregister_holder()
