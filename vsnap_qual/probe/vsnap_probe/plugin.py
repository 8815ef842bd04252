"""The ``vllm.general_plugins`` entry point: ``vsnap_probe = vsnap_probe.plugin:register``.

vLLM calls ``register()`` once in every engine process (API server, engine core, worker) unless
``VLLM_PLUGINS`` filters it out. vLLM does not catch exceptions raised by a plugin function, so nothing here
may raise: every part reports its own failure on stderr and the engine goes on.
"""

from __future__ import annotations

from collections.abc import Callable

from vsnap_probe import control_dir, faults, overlay_report, warn

_registered = False


def register() -> None:
    """Overlay report (``loaded-<pid>.json``, ``imports-<pid>.json`` thread) and fault hooks, once per
    process."""
    global _registered
    if _registered:
        return
    _registered = True
    steps: list[tuple[str, Callable[[], object]]] = [
        ("role", overlay_report.set_role_from_current_stack),
        ("fork hook", overlay_report.install_fork_hook),
        ("overlay report", overlay_report.start),
        ("fault hooks", faults.install),
    ]
    for label, step in steps:
        try:
            step()
        except Exception as exc:
            warn(f"{label} failed: {type(exc).__name__}: {exc}")
    if control_dir() is None:
        warn("VSNAP_CONTROL_DIR is not set; the probe writes no reports")
