"""WorkerBase and WorkerWrapperBase: the wrapper creates the worker in `init_worker` (loading the general
plugins first and mixing `--worker-extension-cls` into the worker class), and dispatches `execute_method`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vllm.config import VllmConfig
from vllm.logger import init_logger
from vllm.utils.import_utils import resolve_obj_by_qualname

logger = init_logger(__name__)

DEFAULT_WORKER_CLS = "vllm.v1.worker.gpu_worker.Worker"


class WorkerBase:
    def __init__(
        self,
        vllm_config: VllmConfig,
        local_rank: int = 0,
        rank: int = 0,
        distributed_init_method: str | None = None,
        is_driver_worker: bool = False,
    ) -> None:
        self.vllm_config = vllm_config
        self.local_rank = local_rank
        self.rank = rank
        self.distributed_init_method = distributed_init_method
        self.is_driver_worker = is_driver_worker

    def init_device(self) -> None:
        raise NotImplementedError

    def load_model(self) -> None:
        raise NotImplementedError

    def check_health(self) -> None:
        return

    def synchronize_device(self) -> None:
        """Block until in-flight device work completes (the CPU reference has none in flight)."""
        return

    def shutdown(self) -> None:
        return


def run_method(obj: Any, method: str | Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    func = getattr(obj, method) if isinstance(method, str) else (lambda *a, **k: method(obj, *a, **k))
    return func(*args, **kwargs)


class WorkerWrapperBase:
    """One worker process's entry object. `self.worker` exists after `init_worker`."""

    def __init__(self, rpc_rank: int = 0, global_rank: int | None = None) -> None:
        self.rpc_rank = rpc_rank
        self.global_rank = rpc_rank if global_rank is None else global_rank
        self.worker: Any = None
        self.vllm_config: VllmConfig | None = None
        self._worker_extension_cls: type | None = None

    def init_worker(self, all_kwargs: list[dict[str, Any]]) -> None:
        kwargs = all_kwargs[self.rpc_rank]
        vllm_config: VllmConfig | None = kwargs.get("vllm_config")
        assert vllm_config is not None, "vllm_config is required to initialize the worker"
        self.vllm_config = vllm_config

        from vllm.plugins import load_general_plugins

        load_general_plugins()

        worker_class: type = resolve_obj_by_qualname(DEFAULT_WORKER_CLS)
        extension_cls: type | None = None
        if vllm_config.worker_extension_cls:
            extension_cls = resolve_obj_by_qualname(vllm_config.worker_extension_cls)
            extended_calls: list[str] = []
            if extension_cls not in worker_class.__bases__:
                for attr in dir(extension_cls):
                    if attr.startswith("__"):
                        continue
                    if hasattr(worker_class, attr):
                        raise AssertionError(
                            f"Worker class {worker_class} already has an attribute {attr}, which "
                            "conflicts with "
                            f"the worker extension class {extension_cls}."
                        )
                    if callable(getattr(extension_cls, attr)):
                        extended_calls.append(attr)
                worker_class.__bases__ = (*worker_class.__bases__, extension_cls)
                logger.info(
                    "Injected %s into %s for extended collective_rpc calls %s",
                    extension_cls,
                    worker_class,
                    extended_calls,
                )
        self.worker = worker_class(**kwargs)
        self._worker_extension_cls = extension_cls

    def init_device(self) -> None:
        self.worker.init_device()
        hook = getattr(self._worker_extension_cls, "init_worker_extension", None)
        if callable(hook):
            hook(self.worker)

    def initialize_from_config(self, kv_cache_configs: list[Any]) -> None:
        self.worker.initialize_from_config(kv_cache_configs[self.global_rank])

    def execute_method(self, method: str | Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return run_method(self, method, args, kwargs)
        except Exception as error:
            logger.exception("Error executing method %r. This might cause deadlock in distributed execution.", method)
            raise error

    def shutdown(self) -> None:
        if self.worker is not None:
            hook = getattr(self._worker_extension_cls, "destroy_worker_extension", None)
            if callable(hook):
                try:
                    hook(self.worker)
                except Exception:
                    logger.exception("Worker extension destroy hook failed.")
            self.worker.shutdown()

    def __getattr__(self, attr: str) -> Any:
        if attr == "worker":
            raise AttributeError(attr)
        return getattr(self.worker, attr)
