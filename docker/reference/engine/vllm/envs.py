"""The environment variables the reference reads (looked up at call time, as vLLM's lazy envs are)."""

from __future__ import annotations

import os


def use_v2_model_runner() -> bool:
    return os.environ.get("VLLM_USE_V2_MODEL_RUNNER", "0").strip().lower() in {"1", "true"}


def server_dev_mode() -> bool:
    return os.environ.get("VLLM_SERVER_DEV_MODE", "0").strip().lower() in {"1", "true"}


def plugins_filter() -> list[str] | None:
    value = os.environ.get("VLLM_PLUGINS")
    if value is None:
        return None
    return [name for name in value.split(",") if name]


def cache_root() -> str:
    default = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "vllm")
    return os.path.expanduser(os.environ.get("VLLM_CACHE_ROOT", default))
