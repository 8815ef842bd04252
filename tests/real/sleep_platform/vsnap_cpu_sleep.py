"""EXPERIMENT ONLY, never part of a qualification: vLLM's own CPU platform, admitting ``--enable-sleep-mode``.

Real vLLM 0.32.0 stops ``vllm snapshot create`` on a CPU inside vLLM itself: ``vllm snapshot create`` always adds
``--enable-sleep-mode`` (vllm/snapshot/controller.py:53-54, vllm/snapshot/server.py:205), and ``ModelConfig``
rejects it (vllm/config/model.py:655-657: ``if not current_platform.is_sleep_mode_available(): raise
ValueError("Sleep mode is not supported on current platform.")``; vllm/platforms/interface.py:236 lists CUDA, ROCm
and XPU only). The CPU worker itself accepts sleep and wake as no-ops (vllm/v1/worker/cpu_worker.py:179-184).

To observe what the rest of real vLLM's snapshot lifecycle does (inventory, CRIU dump, manifest, restore, canary,
container restart), tests/real/test_real_snapshot.py activates this module through vLLM's documented
``vllm.platform_plugins`` entry point (no vLLM file is changed): the platform is vLLM's ``CpuPlatform`` with that
one answer changed. Everything it enables is labelled as past vLLM's own stop, not as qualified behaviour.
"""

from __future__ import annotations

from typing import Any


def platform() -> str:
    return "vsnap_cpu_sleep.CpuSleepPlatform"


def __getattr__(name: str) -> Any:
    # Lazy: vLLM resolves platform plugins while vllm.platforms itself is importing.
    if name == "CpuSleepPlatform":
        from vllm.platforms.cpu import CpuPlatform

        class CpuSleepPlatform(CpuPlatform):
            def is_sleep_mode_available(self) -> bool:
                return True

        globals()[name] = CpuSleepPlatform
        return CpuSleepPlatform
    raise AttributeError(name)
