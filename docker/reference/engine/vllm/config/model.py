"""Model-config helpers shared by the engine and the snapshot runtime."""

from __future__ import annotations


def get_served_model_name(model: str, served_model_name: str | list[str] | None) -> str:
    """The first served name if given, else the model: as vLLM resolves it."""
    if not served_model_name:
        return model
    if isinstance(served_model_name, list):
        return served_model_name[0]
    return served_model_name
