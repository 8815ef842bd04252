"""vsnap reference engine: a miniature vLLM that honours the initialized-snapshot contract.

Importing the package stays cheap (no torch): `vllm snapshot --help` must not import the engine stack.
"""

from __future__ import annotations

from typing import Any

from vllm.version import __version__

__all__ = ["SamplingParams", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "SamplingParams":
        from vllm.sampling_params import SamplingParams

        return SamplingParams
    raise AttributeError(name)
