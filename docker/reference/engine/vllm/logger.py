"""vLLM-format logging: `(EngineCore pid=N) INFO 11-29 16:31:10 [kv_cache_utils.py:123] message`."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

_process_label: str | None = None
_seen_once: set[tuple[str, str]] = set()
_configured = False


def set_process_label(label: str | None) -> None:
    """Name this process in every log line, as vLLM's process prefix does (APIServer, EngineCore)."""
    global _process_label
    _process_label = label


class _VllmFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s", "%m-%d %H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if _process_label:
            prefix = f"({_process_label} pid={os.getpid()}) "
            text = "\n".join(prefix + line for line in text.split("\n"))
        return text


def _configure() -> None:
    global _configured
    if _configured:
        return
    root = logging.getLogger("vllm")
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(_VllmFormatter())
    root.addHandler(handler)
    root.setLevel(os.environ.get("VLLM_LOGGING_LEVEL", "INFO").upper())
    root.propagate = False
    _configured = True


class VllmLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    def info_once(self, msg: str, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("scope", None)
        key = (self.logger.name, msg % args if args else msg)
        if key in _seen_once:
            return
        _seen_once.add(key)
        kwargs.setdefault("stacklevel", 2)
        self.info(msg, *args, **kwargs)

    def warning_once(self, msg: str, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("scope", None)
        key = (self.logger.name, msg % args if args else msg)
        if key in _seen_once:
            return
        _seen_once.add(key)
        kwargs.setdefault("stacklevel", 2)
        self.warning(msg, *args, **kwargs)


def init_logger(name: str) -> VllmLogger:
    _configure()
    return VllmLogger(logging.getLogger(name), {})


def flush_handlers() -> None:
    for handler in logging.getLogger("vllm").handlers:
        handler.flush()
