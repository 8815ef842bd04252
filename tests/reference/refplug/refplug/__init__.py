"""Test-only vLLM plugin and worker extension, loaded through vLLM's seams (general plugin entry point and
`--worker-extension-cls`), used by tests/reference against the reference image.

- `register()` records the calling process (`$REFPLUG_DIR/loaded-<pid>`) and wraps `Worker.wake_up` /
  `Worker.reload_weights` so that a file `$REFPLUG_DIR/raise-<method>` makes the call raise.
- `Digests.refplug_digests()` returns `{name: sha256 of the parameter bytes}` of the served model.
"""

from __future__ import annotations

import functools
import hashlib
import os
import time
from pathlib import Path
from typing import Any


def _dir() -> Path | None:
    value = os.environ.get("REFPLUG_DIR")
    return Path(value) if value else None


def register() -> None:
    directory = _dir()
    if directory is None:
        return
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"loaded-{os.getpid()}").write_text(" ".join(Path("/proc/self/cmdline").read_text().split("\0")))
    from vllm.v1.worker import gpu_worker

    for method in ("wake_up", "reload_weights"):
        original = getattr(gpu_worker.Worker, method)
        if getattr(original, "_refplug", False):
            continue

        @functools.wraps(original)
        def wrapper(self: Any, *args: Any, _original: Any = original, _method: str = method, **kwargs: Any) -> Any:
            result = _original(self, *args, **kwargs)
            stall = directory / f"stall-{_method}"
            if stall.exists():
                time.sleep(float(stall.read_text().strip() or "30"))
            marker = directory / f"raise-{_method}"
            if marker.exists():
                raise RuntimeError(f"refplug fault: {_method}")
            return result

        wrapper._refplug = True  # type: ignore[attr-defined]
        setattr(gpu_worker.Worker, method, wrapper)


class Digests:
    def refplug_digests(self) -> dict[str, str]:
        model = self.model_runner.model  # type: ignore[attr-defined]
        return {
            name: hashlib.sha256(
                param.detach().cpu().contiguous().view(-1).view(dtype=_u8()).numpy().tobytes()
            ).hexdigest()
            for name, param in model.named_parameters()
        }


def _u8() -> Any:
    import torch

    return torch.uint8
