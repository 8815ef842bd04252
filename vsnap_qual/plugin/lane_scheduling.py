"""The xdist side of a session (``-n``): how many workers run it, and the scheduler that keeps each runner's lanes
on one worker (both arms of a runner, and its variants' lanes, share a worker and its GPU, so the base arm compares
with the head arm). xdist itself is imported only when it asks for a scheduler."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from vsnap_qual.config import LaneSpec


def numprocesses(config: pytest.Config) -> Any:
    """``-n`` as given (None without it, or without xdist)."""
    return config.getoption("numprocesses", None) if config.pluginmanager.hasplugin("xdist") else None


def xdist_workers(config: pytest.Config) -> int:
    """How many xdist workers run this session's tests (0: no xdist, all in this process)."""
    if not config.pluginmanager.hasplugin("xdist"):
        return 0
    workers = getattr(config.option, "numprocesses", None)
    if isinstance(workers, int) and workers > 0:
        return workers
    if getattr(config.option, "dist", "no") == "no":
        return 0
    count = 0
    for spec in getattr(config.option, "tx", None) or []:  # --tx 2*popen: as xdist counts them
        times, star, _ = str(spec).partition("*")
        count += int(times) if star and times.isdigit() else 1
    return count


def refuse_dist_each(config: pytest.Config) -> None:
    """``--dist each`` would run every lane's steps on every worker at once: a usage error."""
    workers = numprocesses(config)
    if workers and config.getoption("dist", "no") == "each":
        raise pytest.UsageError(
            f"-n {workers} --dist each would run every lane's steps on every worker at once; drop --dist "
            "(vsnap-qual schedules the workers itself: each runner's lanes on one worker)"
        )


def lane_group(nodeid: str, lanes: Sequence[LaneSpec]) -> str | None:
    """The worker group of a suite item: its lane's runner (both arms of a runner, and its variants' lanes, share
    a worker and its GPU, so the base arm compares with the head arm), from the lane id among its parameters
    (``[v1-head]``, ``[v2-base-wake-raise]``, ``[v1-head-lora]``); None for any other test."""
    last = nodeid.rsplit("::", 1)[-1]
    if "[" not in last or not last.endswith("]"):
        return None
    parts = last[last.index("[") + 1 : -1].split("-")
    for lane in sorted(lanes, key=lambda lane: -len(lane.name)):  # v1-head-lora before v1-head
        name = lane.name.split("-")
        if any(parts[i : i + len(name)] == name for i in range(len(parts) - len(name) + 1)):
            return f"vsnap-runner-{lane.runner}"
    return None


def lane_scheduling(config: pytest.Config, log: Any, lanes: Sequence[LaneSpec]) -> Any:
    """xdist's scope scheduling with each runner's lanes as one scope (node ids stay pytest's own: no ``@group``
    suffix); every other test is a scope of its own."""
    from xdist.scheduler import LoadScopeScheduling

    class LaneScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no type information
        def _split_scope(self, nodeid: str) -> str:
            return lane_group(nodeid, lanes) or nodeid

    return LaneScheduling(config, log)
