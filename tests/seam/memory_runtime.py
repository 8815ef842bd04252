"""A third runtime, in one module, registered from outside the harness: each lane's box lives in this process's
memory (:class:`tests.support.memory_box.MemoryBox`, shared with the unit tests' fake lane), its "engine" a small
HTTP server thread per listening port that answers as vLLM's OpenAI server does. The box has no shell: the
lifecycle and the faults must need nothing but the declared :class:`vsnap_qual.box.Box` methods (its named
operations included).

Used as a pytest plugin (``-p memory_runtime``): it registers ``--vsnap-runtime=memory`` at import. It is the proof
that the runtime seam holds (``tests/seam/test_third_runtime.py``), not a qualification target: its image labels
say so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.support.memory_box import MemoryBox
from vsnap_qual import runtimes
from vsnap_qual.box import BoxSpec, ImageInfo
from vsnap_qual.cli.diagnostics import CheckResult
from vsnap_qual.run.package_probe import PackageInfo
from vsnap_qual.run.preflight_result import PreflightResult, lane_gpu_result

__all__ = ["MemoryBox", "MemoryRuntime"]

LABELS = {
    "ai.vsnap.runtime": "memory",
    "ai.vsnap.simulated": "everything: an in-memory fake engine of tests/seam (proof of the runtime seam)",
}


class MemoryRuntime:
    """``--vsnap-runtime=memory``."""

    name = "memory"
    engine_options = ("--vsnap-image", "--vsnap-base-image")

    def __init__(self, settings: runtimes.RuntimeSettings) -> None:
        self.settings = settings

    def engines(self, parsed: Mapping[str, Any], default_python: str) -> tuple[str, str | None]:
        base = parsed.get("vsnap_base_image")
        return str(parsed.get("vsnap_image") or ""), str(base) if base else None

    def engine_problem(self, value: str) -> str | None:
        return None  # any name is an in-memory engine

    def preflight(self, config: Any, overlay: list[Any]) -> PreflightResult:
        result = lane_gpu_result(config, False, None, overlay)
        for ref in [r for r in (config.image, config.base_image) if r]:
            result.images[ref] = f"memory:{ref}"
            result.packages[ref] = PackageInfo(
                package_dir="/memory/vllm", vllm="0.0+memory", torch=None, python="3",
                snapshot_behaviour="base" if ref.endswith(":base") else "head",
                snapshot_behaviour_reason="the in-memory engine",
            )  # fmt: skip
        return result

    def image(self, ref: str, pre: PreflightResult) -> ImageInfo:
        return ImageInfo(id=pre.images[ref], repo_digests=[], labels=dict(LABELS), platform="memory")

    def start(self, spec: BoxSpec) -> MemoryBox:
        return MemoryBox(spec)

    def sweep(self, *, session: str | None = None, owner: str | None = None) -> list[str]:
        return []

    def host_facts(self) -> dict[str, Any]:
        return {"docker_version": None}

    def reachable(self) -> CheckResult:
        return CheckResult("memory runtime", "PASS", "in this process")

    def doctor(self, opts: Mapping[str, Any], want_gpu: bool) -> list[CheckResult]:
        return []

    def gpu_capable(self) -> bool:
        return False

    def close(self) -> None:
        return None


runtimes.register("memory", MemoryRuntime)
