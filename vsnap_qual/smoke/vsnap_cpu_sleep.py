"""vsnap-qual's CPU smoke platform: vLLM's own ``CpuPlatform`` with sleep mode declared available. CPU only.

Why it exists. No vLLM release lets ``vllm snapshot create`` run on a CPU: create always adds
``--enable-sleep-mode`` (vllm/snapshot/controller.py, vllm/snapshot/server.py), and ``ModelConfig`` refuses it
(vllm/config/model.py: ``if not current_platform.is_sleep_mode_available(): raise ValueError("Sleep mode is not
supported on current platform.")``; vllm/platforms/interface.py grants it to CUDA, ROCm and XPU only). The CPU
worker itself accepts sleep and wake as no-ops (vllm/v1/worker/cpu_worker.py: "sleep mode is not supported on CPU,
ignore it."). This module declares sleep mode on the CPU platform so that the rest of real vLLM's snapshot
lifecycle (inventory, CRIU dump, manifest, restore, canary) can be exercised on a CPU: a **smoke** test of real
vLLM and real CRIU, never a GPU qualification (no GPU memory is released, captured or restored).

How it is activated, with no vLLM file changed and nothing installed in the image: the harness binds this
directory into a lane (e.g. at ``/vsnap/smoke``) and puts it on ``PYTHONPATH``; vLLM finds
``vsnap_cpu_sleep-1.dist-info/entry_points.txt`` (``[vllm.platform_plugins] vsnap_cpu_sleep =
vsnap_cpu_sleep:platform``) through ``importlib.metadata`` and resolves ``vsnap_cpu_sleep.CpuSleepPlatform``.
``VLLM_TARGET_DEVICE=cpu`` bypasses every platform plugin (vllm/platforms/__init__.py), so it must stay unset.

It refuses loudly where a CUDA device is visible: there, an out-of-tree platform plugin would win over vLLM's own
CUDA platform (vLLM prefers one activated out-of-tree plugin to the built-in ones), and the lane would silently run
on the CPU. The refusal is a ``RuntimeError`` raised while vLLM resolves the platform class, which vLLM does not
catch (an exception from the entry-point function itself is swallowed by vLLM's detection loop).
"""

from __future__ import annotations

import glob
import os
import stat
import sys
from typing import Any

QUALNAME = "vsnap_cpu_sleep.CpuSleepPlatform"
# Device nodes the NVIDIA driver (and `docker run --gpus`) expose, and the driver's per-GPU directory.
CUDA_NODE_PATTERNS = ("/dev/nvidia[0-9]*", "/dev/nvidiactl", "/dev/nvidia-uvm")
CUDA_PROC_PATTERN = "/proc/driver/nvidia/gpus/*"


def visible_cuda_devices() -> list[str]:
    """Paths that show an NVIDIA GPU (or its driver) to this process: character device nodes and driver entries.

    No CUDA library is loaded and ``nvidia-smi`` is not asked (the vsnap-vllm-cpu images carry a simulated one)."""
    found = []
    for pattern in CUDA_NODE_PATTERNS:
        for path in sorted(glob.glob(pattern)):
            try:
                if stat.S_ISCHR(os.stat(path).st_mode):
                    found.append(path)
            except OSError:
                continue
    found.extend(sorted(glob.glob(CUDA_PROC_PATTERN)))
    return found


def refusal() -> str | None:
    devices = visible_cuda_devices()
    if not devices:
        return None
    return (
        "vsnap-qual CPU smoke platform (vsnap_cpu_sleep) refused: a CUDA device is visible "
        f"({', '.join(devices)}). It declares sleep mode on vLLM's CPU platform for a CPU-only smoke run and would "
        "replace vLLM's CUDA platform here; remove /vsnap/smoke (the vsnap_cpu_sleep dist-info) from PYTHONPATH "
        "on a GPU lane."
    )


def platform() -> str:
    """The ``vllm.platform_plugins`` entry point: always activates; the refusal is raised at class resolution."""
    message = refusal()
    if message is not None:
        print(f"ERROR {message}", file=sys.stderr, flush=True)
    return QUALNAME


def __getattr__(name: str) -> Any:
    # Lazy: vLLM resolves platform plugins while vllm.platforms itself is importing.
    if name == "CpuSleepPlatform":
        message = refusal()
        if message is not None:
            raise RuntimeError(message)
        from vllm.platforms.cpu import CpuPlatform

        class CpuSleepPlatform(CpuPlatform):
            """vLLM's CPU platform; the one changed answer: sleep mode is available (its sleep/wake are no-ops)."""

            def is_sleep_mode_available(self) -> bool:
                return True

        CpuSleepPlatform.__qualname__ = "CpuSleepPlatform"  # as if defined at module level (reports name it)
        globals()[name] = CpuSleepPlatform
        return CpuSleepPlatform
    raise AttributeError(name)
