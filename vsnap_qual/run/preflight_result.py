"""What preflight learns before any lane starts and the lanes need (each runtime fills it): the arms' engines,
their ``vllm`` packages, each lane's GPUs and the overlay's files. Also the one error preflight raises."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from vsnap_qual.config import LaneSpec, QualConfig
from vsnap_qual.overlay import OverlayFile
from vsnap_qual.run import gpus as gpus_mod
from vsnap_qual.run.package_probe import PackageInfo


class PreflightError(Exception):
    """Bad input found before anything started; the message names the option and the fix."""


@dataclass
class PreflightResult:
    """What preflight learned and the lanes need: images, package layout, GPUs, overlay."""

    gpus: str  # the first runner lane's GPUs (all lanes' when they share them); per lane: gpus_for
    images: dict[str, str] = field(default_factory=dict)  # ref -> image id (host runtime: the Python's identity)
    packages: dict[str, PackageInfo] = field(default_factory=dict)  # ref -> the package probe's answer
    overlay: list[OverlayFile] = field(default_factory=list)
    lane_gpus: dict[str, str] = field(default_factory=dict)  # runner -> "none" | "all" | "GPU-<uuid>"
    #: ref -> what preflight's pull did (``vsnap_qual.runtimes.pull``): why, the digest pulled, Docker's status or error
    pulls: dict[str, dict[str, str]] = field(default_factory=dict)

    def gpus_for(self, lane: LaneSpec) -> str:
        """The GPUs of ``lane``: its runner's own GPU under ``--vsnap-gpus=auto`` (or a list), else the shared value."""
        return self.lane_gpus.get(lane.runner, self.gpus)

    def to_json(self) -> str:
        return json.dumps(
            {
                "gpus": self.gpus,
                "lane_gpus": self.lane_gpus,
                "images": self.images,
                "pulls": self.pulls,
                "packages": self.packages,
                "overlay": [
                    {"relative": f.relative, "host_path": str(f.host_path), "sha256": f.sha256} for f in self.overlay
                ],
            }
        )

    @classmethod
    def from_json(cls, text: str) -> PreflightResult:
        data = json.loads(text)
        files = [OverlayFile(f["relative"], Path(f["host_path"]), f["sha256"]) for f in data["overlay"]]
        return cls(
            gpus=data["gpus"],
            images=data["images"],
            packages=data["packages"],
            overlay=files,
            lane_gpus=data.get("lane_gpus") or {},
            pulls=data.get("pulls") or {},
        )


def lane_gpu_result(
    config: QualConfig, present: bool, available: list[str] | None, files: list[OverlayFile]
) -> PreflightResult:
    """Each runner lane's GPUs (``gpus.assign``); two lanes that would run at once on one GPU are refused."""
    try:
        per_runner = gpus_mod.assign(config.gpus, config.runners, config.concurrent_runners, present, available)
    except gpus_mod.GpuError as exc:
        raise PreflightError(str(exc)) from None
    return PreflightResult(gpus=per_runner[config.runners[0]], overlay=files, lane_gpus=per_runner)
