"""vLLM's plugin seam: `vllm.general_plugins` entry points, called once per engine process."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from typing import Any

from vllm import envs
from vllm.logger import init_logger

logger = init_logger(__name__)

DEFAULT_PLUGINS_GROUP = "vllm.general_plugins"

plugins_loaded = False


def load_plugins_by_group(group: str) -> dict[str, Callable[[], Any]]:
    allowed = envs.plugins_filter()
    discovered = importlib.metadata.entry_points(group=group)
    if len(discovered) == 0:
        logger.debug("No plugins for group %s found.", group)
        return {}
    logger.info("Available plugins for group %s:", group)
    for plugin in discovered:
        logger.info("- %s -> %s", plugin.name, plugin.value)
    if allowed is None:
        logger.info("All plugins in this group will be loaded. Set `VLLM_PLUGINS` to control which plugins to load.")
    plugins: dict[str, Callable[[], Any]] = {}
    for plugin in discovered:
        if allowed is None or plugin.name in allowed:
            try:
                plugins[plugin.name] = plugin.load()
            except Exception:
                logger.exception("Failed to load plugin %s", plugin.name)
    return plugins


def load_general_plugins() -> None:
    """Call every general plugin once in this process (API server, engine core, worker, snapshot child)."""
    global plugins_loaded
    if plugins_loaded:
        return
    plugins_loaded = True
    for func in load_plugins_by_group(DEFAULT_PLUGINS_GROUP).values():
        func()
