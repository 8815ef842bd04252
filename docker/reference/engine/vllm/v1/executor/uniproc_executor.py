"""The single-process executor: the worker lives inside the engine-core process (vLLM's `uni` backend)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from vllm.config import VllmConfig
from vllm.logger import init_logger
from vllm.v1.worker.worker_base import WorkerWrapperBase

logger = init_logger(__name__)


class UniProcExecutor:
    def __init__(self, vllm_config: VllmConfig) -> None:
        self.vllm_config = vllm_config
        self.is_sleeping = False
        self.sleeping_tags: set[str] = set()
        self.driver_worker = WorkerWrapperBase(rpc_rank=0)
        kwargs = {
            "vllm_config": vllm_config,
            "local_rank": 0,
            "rank": 0,
            "distributed_init_method": "env://",
            "is_driver_worker": True,
        }
        self.collective_rpc("init_worker", args=([kwargs],))
        self.collective_rpc("init_device")

    def load_model(self) -> None:
        self.collective_rpc("load_model")

    def collective_rpc(
        self,
        method: str | Callable[..., Any],
        timeout: float | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> list[Any]:
        try:
            return [self.driver_worker.execute_method(method, *args, **(kwargs or {}))]
        except Exception as error:
            raise RuntimeError(
                f"Worker failed with error '{error}', please check the stack trace above for the root cause"
            ) from error

    def execute_model(
        self, token_ids: list[int], lora_name: str | None = None, table: list[int] | None = None, hit: int = 0
    ) -> Any:
        return self.collective_rpc("execute_model", args=(token_ids, lora_name, table, hit))[0]

    def sleep(self, level: int = 1) -> None:
        if self.is_sleeping:
            logger.warning("Executor is already sleeping.")
            return
        started = time.perf_counter()
        self.collective_rpc("sleep", kwargs={"level": level})
        self.sleeping_tags = {"weights", "kv_cache"}
        self.is_sleeping = True
        logger.info("It took %.6f seconds to fall asleep.", time.perf_counter() - started)

    def wake_up(self, tags: list[str] | None = None) -> None:
        if not self.is_sleeping:
            logger.warning("Executor is not sleeping.")
            return
        if tags:
            for tag in tags:
                if tag not in self.sleeping_tags:
                    logger.warning("Tag %s is not in sleeping tags %s", tag, self.sleeping_tags)
                    return
        started = time.perf_counter()
        self.collective_rpc("wake_up", kwargs={"tags": tags})
        logger.info(
            "It took %.6f seconds to wake up tags %s.",
            time.perf_counter() - started,
            tags if tags is not None else self.sleeping_tags,
        )
        if tags:
            for tag in tags:
                self.sleeping_tags.discard(tag)
        else:
            self.sleeping_tags.clear()
        if not self.sleeping_tags:
            self.is_sleeping = False

    def shutdown(self) -> None:
        self.driver_worker.shutdown()
