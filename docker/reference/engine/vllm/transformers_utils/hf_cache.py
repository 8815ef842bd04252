"""Offline model resolution in the Hugging Face cache layout (`models--org--name/snapshots/<rev>`)."""

from __future__ import annotations

import os
import re
from pathlib import Path


class LocalEntryNotFoundError(OSError):
    """Raised like huggingface_hub's when a model or revision is not in the cache and the hub is offline."""


def hub_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    hf_home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "huggingface"
    )
    return Path(hf_home).expanduser() / "hub"


def resolve_model_dir(model: str, revision: str | None) -> Path:
    """The snapshot directory of ``model`` at ``revision`` (a local directory is used as is)."""
    local = Path(model)
    if local.is_dir():
        return local.resolve()
    if model.count("/") != 1:
        raise LocalEntryNotFoundError(f"Repo id must be in the form 'repo_name' or 'namespace/repo_name': '{model}'.")
    repo = hub_cache_dir() / ("models--" + model.replace("/", "--"))
    wanted = revision or "main"
    if not re.fullmatch(r"[0-9a-f]{40}", wanted):
        ref = repo / "refs" / wanted
        wanted = ref.read_text().strip() if ref.is_file() else wanted
    snapshot = repo / "snapshots" / wanted
    if not (snapshot / "config.json").is_file():
        offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() in {"1", "true", "yes", "on"}
        reason = (
            "outgoing traffic has been disabled. To enable repo look-ups and downloads online, set "
            "'HF_HUB_OFFLINE=0' as environment variable."
            if offline
            else "the vsnap reference engine has no network access to the Hugging Face Hub."
        )
        raise LocalEntryNotFoundError(
            "Cannot find an appropriate cached snapshot folder for the specified revision on the "
            "local disk and "
            f"{reason} (model {model!r}, revision {revision or 'main'!r}, cache {hub_cache_dir()})"
        )
    return snapshot
