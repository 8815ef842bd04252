"""Which overlaid modules this process imported, from which file, with which content hash.

``$VSNAP_CONTROL_DIR/overlay.json`` (written by the harness) lists module names: ``{"modules":
["vllm.snapshot.server", ...]}``. A daemon thread polls ``sys.modules`` every 0.5 s and, whenever the set of
those modules present changes, atomically rewrites ``$VSNAP_CONTROL_DIR/probe/imports-<pid>.json``::

    {"pid", "cmdline": [...], "role": "api_server|engine_core|worker|other", "time",
     "modules": {name: {"path": module.__file__, "sha256": sha256 of the file's bytes}}}

``probe/loaded-<pid>.json`` (``{"pid", "cmdline", "role", "time"}``) is written once per process at
registration.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vsnap_probe import control_dir, control_files, process_cmdline, utc_now, warn, write_json_atomic

POLL_S = 0.5
ROLES = ("api_server", "engine_core", "worker", "other")

# Role decided from the call stack at registration (vLLM calls register() from EngineCore.__init__ in the
# engine core and from WorkerWrapperBase.init_worker in a worker); None until register() ran.
_registered_role: str | None = None


def role_from_stack(frames: Iterable[tuple[str, str]]) -> str | None:
    """Role from ``(filename, function)`` pairs of the registering call stack, or None when it does not
    tell."""
    for filename, function in frames:
        norm = filename.replace("\\", "/")
        if function == "init_worker" and "worker" in norm:
            return "worker"
        if function == "__init__" and norm.endswith("/v1/engine/core.py"):
            return "engine_core"
    return None


def role_from_process(cmdline: list[str], mp_name: str) -> str:
    """Role from the process title / argv and the multiprocessing process name."""
    joined = " ".join(cmdline)
    if mp_name.startswith(("VllmWorker", "Worker")) or "VLLM::Worker" in joined:
        return "worker"
    if mp_name.startswith("EngineCore") or "VLLM::EngineCore" in joined:
        return "engine_core"
    if mp_name == "MainProcess" and (
        " serve" in f" {joined}"
        or "vllm.snapshot.server" in joined
        or "vllm.entrypoints.openai.api_server" in joined
        or "APIServer" in joined
    ):
        return "api_server"
    return "other"


def current_role() -> str:
    import multiprocessing

    if _registered_role is not None:
        return _registered_role
    return role_from_process(process_cmdline(), multiprocessing.current_process().name)


def set_role_from_current_stack() -> None:
    global _registered_role
    frames = [(f.filename, f.name) for f in traceback.extract_stack()]
    _registered_role = role_from_stack(reversed(frames))


def file_sha256(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def read_overlay_modules(cdir: Path) -> list[str] | None:
    """Module names from ``overlay.json``; None when the file is absent or unusable."""
    path = cdir / control_files.OVERLAY
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        warn(f"ignoring unreadable {path}: {exc}")
        return None
    modules = data.get("modules") if isinstance(data, dict) else None
    if not isinstance(modules, list) or not all(isinstance(m, str) for m in modules):
        warn(f"ignoring {path}: 'modules' must be a list of strings")
        return None
    return list(modules)


def loaded_module(name: str) -> Any:
    """The module imported under ``name``, including a ``python -m name`` entry point (``__main__``, whose
    ``__spec__.name`` is ``name``: vLLM's snapshot child runs as ``python -m vllm.snapshot.server``)."""
    module = sys.modules.get(name)
    if module is None:
        main = sys.modules.get("__main__")
        spec = getattr(main, "__spec__", None)
        if spec is not None and getattr(spec, "name", None) == name:
            module = main
    return module


def imported_modules(names: Iterable[str]) -> dict[str, dict[str, object]]:
    """``{name: {"path", "sha256"}}`` for the names present in ``sys.modules`` (or run as ``__main__``)."""
    result: dict[str, dict[str, object]] = {}
    for name in names:
        module = loaded_module(name)
        if module is None:
            continue
        path = getattr(module, "__file__", None)
        result[name] = {"path": path, "sha256": file_sha256(path) if isinstance(path, str) else None}
    return result


def write_loaded(cdir: Path) -> None:
    pid = os.getpid()
    write_json_atomic(
        cdir / control_files.loaded(pid),
        {"pid": pid, "cmdline": process_cmdline(), "role": current_role(), "time": utc_now()},
    )


def write_imports(cdir: Path, names: list[str]) -> set[str]:
    """Write ``imports-<pid>.json`` now; returns the set of present module names it recorded."""
    pid = os.getpid()
    modules = imported_modules(names)
    write_json_atomic(
        cdir / control_files.imports(pid),
        {
            "pid": pid,
            "cmdline": process_cmdline(),
            "role": current_role(),
            "time": utc_now(),
            "modules": modules,
        },
    )
    return set(modules)


class OverlayWatcher(threading.Thread):
    """Daemon thread rewriting ``imports-<pid>.json`` whenever the present overlay-module set changes."""

    def __init__(self, cdir: Path, names: list[str], poll_s: float = POLL_S) -> None:
        super().__init__(name="vsnap-overlay-report", daemon=True)
        self.cdir = cdir
        self.names = names
        self.poll_s = poll_s
        self.stop_event = threading.Event()
        self.poll_lock = threading.Lock()
        self.last: frozenset[str] | None = None
        self.writes = 0

    def poll_once(self, last: frozenset[str] | None) -> frozenset[str]:
        present = frozenset(n for n in self.names if loaded_module(n) is not None)
        if present != last:
            write_imports(self.cdir, self.names)
            self.writes += 1
        return present

    def poll(self) -> None:
        with self.poll_lock:
            try:
                self.last = self.poll_once(self.last)
            except Exception as exc:
                warn(f"overlay report failed: {type(exc).__name__}: {exc}")

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.poll()
            # Event.wait, not time.sleep: stop() ends the thread promptly.
            self.stop_event.wait(self.poll_s)

    def stop(self) -> None:
        self.stop_event.set()


_watcher: OverlayWatcher | None = None
_lock = threading.Lock()


def start(cdir: Path | None = None, *, announce: bool = True) -> OverlayWatcher | None:
    """Write ``loaded-<pid>.json`` (when ``announce``) and start the watcher if ``overlay.json`` lists
    modules."""
    global _watcher
    cdir = cdir or control_dir()
    if cdir is None:
        return None
    with _lock:
        if announce:
            write_loaded(cdir)
        names = read_overlay_modules(cdir)
        if names is None:
            return None
        if _watcher is not None and _watcher.is_alive():
            return _watcher
        _watcher = OverlayWatcher(cdir, names)
        _watcher.start()
        # A short-lived process (``vllm snapshot inspect``, a create that fails at preflight) imports the
        # snapshot modules just before it exits: poll once more at exit so the report never misses them.
        atexit.register(_watcher.poll)
        return _watcher


def _after_fork_in_child() -> None:
    # A forked child inherits plugins_loaded=True, so vLLM does not call register() again there; threads do
    # not survive fork, so restart the report for the child's own pid.
    global _watcher, _lock
    _lock = threading.Lock()
    if _watcher is None:
        return
    _watcher = None
    try:
        start(announce=False)
    except Exception as exc:
        warn(f"overlay report after fork failed: {type(exc).__name__}: {exc}")


_fork_hook_installed = False


def install_fork_hook() -> None:
    global _fork_hook_installed
    if not _fork_hook_installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _fork_hook_installed = True


def wait_for_writes(watcher: OverlayWatcher, count: int, timeout_s: float = 5.0) -> bool:
    """Test helper: True once the watcher has written at least ``count`` times."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if watcher.writes >= count:
            return True
        time.sleep(0.01)
    return watcher.writes >= count
