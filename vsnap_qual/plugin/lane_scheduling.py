"""The xdist side of a session (``-n``): how many workers run it, which lanes may run at once
(:func:`overlap_plan`, issue 45: ``--vsnap-overlap``), and the scheduler that gives each worker whole lanes: each
lane a scope of its own where lanes overlap (the base arm takes the head arm's answers as the head's worker hands
them on: ``lane.handoff``), else each runner's lanes one scope (both arms of a runner, and its variants' lanes,
share a worker and its GPU). xdist itself is imported only when it asks for a scheduler."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pytest

from vsnap_qual.config import LaneSpec
from vsnap_qual.model import Overlap

Scope = Literal["lane", "runner"]


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


def overlap_plan(mode: str, workers: int, lanes: Sequence[LaneSpec], lane_gpus: Mapping[str, str]) -> Overlap:
    """Which lanes may run at once, decided before any starts (pure). ``mode``: ``--vsnap-overlap``; ``workers``:
    xdist's (0: no ``-n``); ``lane_gpus``: each runner's GPUs as preflight gave them (``none``, ``all``, a UUID).

    Lanes overlap (each lane a worker's scope) under ``lanes`` with two workers or more, unless a lane holds a GPU:
    two engines of one runner on its one GPU are not qualified, so GPU lanes keep each runner's lanes on one
    worker, one after another, as ``off`` does."""
    runners = list(dict.fromkeys(lane.runner for lane in lanes))
    held = sorted({gpus for runner, gpus in lane_gpus.items() if runner in runners and gpus != "none"})
    scope: Scope = "runner"
    if mode == "off":
        why = "--vsnap-overlap=off: each runner's lanes one after another on one worker"
    elif workers < 2:
        why = "one process (no -n, or -n 1): every lane one after another"
    elif held:
        why = (
            f"lanes hold a GPU ({', '.join(held)}): each runner's lanes one after another on one worker, one engine "
            "per GPU at a time (lanes sharing a GPU are not qualified)"
        )
    elif len(lanes) < 2:
        why = "one lane"
    else:
        scope = "lane"
        why = f"--vsnap-overlap={mode}: each lane on a worker of its own; a base arm waits for its head arm's answers"
    units = len(lanes) if scope == "lane" else len(runners)
    at_once = max(1, min(workers, units)) if lanes else 0
    return Overlap(
        mode=mode,
        scope=scope,
        workers=workers,
        at_once=at_once,
        lanes=[lane.name for lane in lanes] if at_once > 1 else [],
        shared=(
            (
                "the machine's CPUs and memory (no GPU)"
                if not held
                else "the machine's CPUs and memory, each runner its own GPU"
            )
            if at_once > 1
            else ""
        ),
        why=why,
    )


def lane_group(nodeid: str, lanes: Sequence[LaneSpec], scope: Scope = "runner") -> str | None:
    """The worker group of a suite item, from the lane id among its parameters (``[v1-head]``,
    ``[v2-base-wake-raise]``, ``[v1-head-lora]``): its lane (``scope="lane"``: lanes run at once) or its lane's
    runner (both arms of a runner, and its variants' lanes, share a worker and its GPU); None for any other
    test."""
    last = nodeid.rsplit("::", 1)[-1]
    if "[" not in last or not last.endswith("]"):
        return None
    parts = last[last.index("[") + 1 : -1].split("-")
    for lane in sorted(lanes, key=lambda lane: -len(lane.name)):  # v1-head-lora before v1-head
        name = lane.name.split("-")
        if any(parts[i : i + len(name)] == name for i in range(len(parts) - len(name) + 1)):
            return f"vsnap-lane-{lane.name}" if scope == "lane" else f"vsnap-runner-{lane.runner}"
    return None


def lane_scheduling(config: pytest.Config, log: Any, lanes: Sequence[LaneSpec], scope: Scope = "runner") -> Any:
    """xdist's scope scheduling with each lane (or each runner's lanes) as one scope (node ids stay pytest's own:
    no ``@group`` suffix); every other test is a scope of its own. xdist hands out scopes in the order collected,
    and the lanes are collected head arm first (``QualConfig.matrix_lanes``): a base arm's scope never starts
    before its head arm's, which it may wait for."""
    from xdist.scheduler import LoadScopeScheduling

    class LaneScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no type information
        def _split_scope(self, nodeid: str) -> str:
            return lane_group(nodeid, lanes, scope) or nodeid

    return LaneScheduling(config, log)
