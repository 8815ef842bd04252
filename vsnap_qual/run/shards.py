"""Shards (issue 46): which share of the qualification matrix this machine runs, and the matrix it belongs to.

Pure: no Docker, no pytest, no clock. The configuration (``run.configure``) asks :func:`resolve_shard` which shard
this is (``--vsnap-shard=K/N``, or the scheduler's own environment: a Slurm array task, a Buildkite parallel job, a
Kubernetes Indexed Job with ``--vsnap-shard-count``) and :func:`assign` which units go to which shard; the session
computes the :func:`matrix_id` once preflight has the images' IDs.

A unit is what travels whole: a lane's column (its runner, and its variant), both arms of it, since the base arm
is compared with the head arm during the run. Assignment is greedy longest-first (each unit, heaviest first, to the
least loaded shard, the lowest-numbered on a tie): deterministic for the same lanes and weights, so every shard
computes the same assignment on its own. Weights are a previous run's step seconds per lane
(``--vsnap-shard-times``) where it ran that lane, else the lanes' count (a unit of two lanes weighs two).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

#: the scheduler variables read when no ``--vsnap-shard`` is given (``docs/scheduling.md``)
SLURM_ID, SLURM_COUNT, SLURM_MIN, SLURM_STEP = (
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_STEP",
)
BUILDKITE_JOB, BUILDKITE_COUNT = "BUILDKITE_PARALLEL_JOB", "BUILDKITE_PARALLEL_JOB_COUNT"
K8S_INDEX = "JOB_COMPLETION_INDEX"


class ShardError(ValueError):
    """A shard that cannot be told, or told two ways: the message names the option or variable and the fix."""


@dataclass(frozen=True)
class ShardId:
    """Shard ``k`` of ``n`` (1-based), and where that was read (``--vsnap-shard``, ``SLURM_ARRAY_TASK_ID=2 ...``)."""

    k: int
    n: int
    source: str

    def __str__(self) -> str:
        return f"{self.k}/{self.n}"


def parse_shard(value: str) -> tuple[int, int]:
    """``K/N`` (1-based K, 1 <= K <= N); a ValueError that says what a good value looks like."""
    text = value.strip()
    k_text, slash, n_text = text.partition("/")
    if not slash or not k_text.strip().isdigit() or not n_text.strip().isdigit():
        raise ValueError(f"{text!r} is not K/N (this shard's number and the shard count, e.g. 2/4)")
    k, n = int(k_text), int(n_text)
    if n < 1:
        raise ValueError(f"{text!r}: the shard count N must be at least 1")
    if not 1 <= k <= n:
        raise ValueError(f"{text!r}: K counts from 1 to N (the first of 4 shards is 1/4, the last 4/4)")
    return k, n


def _int(env: Mapping[str, str], name: str) -> int:
    text = env[name].strip()
    if not text.lstrip("-").isdigit():
        raise ShardError(f"{name}={env[name]!r} is not a whole number")
    return int(text)


def _from_environment(env: Mapping[str, str], count: int | None) -> list[ShardId]:
    """Every shard the scheduler variables present name (a variable set without its partner is an error)."""
    found: list[ShardId] = []
    if SLURM_ID in env:
        if SLURM_COUNT not in env:
            raise ShardError(f"{SLURM_ID} is set without {SLURM_COUNT}: give --vsnap-shard=K/N, or unset {SLURM_ID}")
        task, n = _int(env, SLURM_ID), _int(env, SLURM_COUNT)
        low = _int(env, SLURM_MIN) if SLURM_MIN in env else 0
        step = _int(env, SLURM_STEP) if SLURM_STEP in env else 1
        if step < 1 or (task - low) % step:
            raise ShardError(f"{SLURM_ID}={task} is not on the array's steps from {SLURM_MIN}={low} by {step}")
        k = (task - low) // step + 1
        said = f"{SLURM_ID}={task}, {SLURM_COUNT}={n}, {SLURM_MIN}={low}"
        found.append(_checked(k, n, said))
    if BUILDKITE_JOB in env or BUILDKITE_COUNT in env:
        if BUILDKITE_JOB not in env or BUILDKITE_COUNT not in env:
            raise ShardError(
                f"{BUILDKITE_JOB} and {BUILDKITE_COUNT} come together (a step with parallelism:); one is missing"
            )
        job, n = _int(env, BUILDKITE_JOB), _int(env, BUILDKITE_COUNT)
        found.append(_checked(job + 1, n, f"{BUILDKITE_JOB}={job}, {BUILDKITE_COUNT}={n}"))
    if K8S_INDEX in env and count is not None:
        index = _int(env, K8S_INDEX)
        found.append(_checked(index + 1, count, f"{K8S_INDEX}={index}, --vsnap-shard-count={count}"))
    return found


def _checked(k: int, n: int, said: str) -> ShardId:
    if n < 1:
        raise ShardError(f"{said}: the shard count must be at least 1")
    if not 1 <= k <= n:
        raise ShardError(f"{said} is shard {k} of {n}: outside 1..{n}")
    return ShardId(k, n, said)


def resolve_shard(given: tuple[int, int] | None, count: int | None, env: Mapping[str, str]) -> ShardId | None:
    """This run's shard: ``--vsnap-shard`` (``given``) or the scheduler's environment; None for an unsharded run.
    ``count`` is ``--vsnap-shard-count`` (Kubernetes' Indexed Jobs give the index alone). Raises
    :class:`ShardError` when the shard cannot be told or two sources disagree."""
    if count is not None and K8S_INDEX not in env:
        raise ShardError(
            f"--vsnap-shard-count={count} is the count of a Kubernetes Indexed Job's shards and needs its "
            f"{K8S_INDEX}, which is not set: run it in the Indexed Job, or give --vsnap-shard=K/N instead"
        )
    if given is not None and count is not None and given[1] != count:
        raise ShardError(f"--vsnap-shard={given[0]}/{given[1]} and --vsnap-shard-count={count} disagree on N")
    found = _from_environment(env, count)
    if given is not None:
        mine = ShardId(given[0], given[1], "--vsnap-shard")
        other = [s for s in found if (s.k, s.n) != (mine.k, mine.n)]
        if other:
            raise ShardError(
                f"--vsnap-shard={mine} disagrees with the scheduler's environment ({other[0].source}: shard "
                f"{other[0]}): drop the option to take the scheduler's, or unset those variables"
            )
        return mine
    if len({(s.k, s.n) for s in found}) > 1:
        told = "; ".join(f"{s.source} (shard {s})" for s in found)
        raise ShardError(f"the scheduler variables name different shards: {told}; give --vsnap-shard=K/N")
    return found[0] if found else None


@dataclass(frozen=True)
class Unit:
    """What travels to one shard whole: a lane column (``v1``, ``v1+lora``) and its lanes (head, then base)."""

    name: str
    lanes: tuple[str, ...]


def units(lanes: Sequence[tuple[str, str]]) -> list[Unit]:
    """The units of the matrix's lanes, given as (lane name, column) in the matrix's order."""
    grouped: dict[str, list[str]] = {}
    for name, column in lanes:
        grouped.setdefault(column, []).append(name)
    return [Unit(column, tuple(names)) for column, names in grouped.items()]


def weights(all_units: Sequence[Unit], lane_seconds: Mapping[str, float] | None) -> dict[str, float]:
    """Each unit's weight: its lanes' seconds in a previous run where it ran them (a lane it did not run weighs
    the mean of those it ran), else its lanes' count."""
    if not lane_seconds:
        return {u.name: float(len(u.lanes)) for u in all_units}
    known = [s for s in lane_seconds.values() if s > 0]
    mean = sum(known) / len(known) if known else 1.0
    return {u.name: sum(lane_seconds.get(lane, mean) or mean for lane in u.lanes) for u in all_units}


def assign(all_units: Sequence[Unit], n: int, unit_weights: Mapping[str, float]) -> dict[str, int]:
    """Unit name → shard (1..n): heaviest first (the matrix's order on a tie) to the least loaded shard (the
    lowest-numbered on a tie)."""
    order = {u.name: i for i, u in enumerate(all_units)}
    loads = [0.0] * n
    out: dict[str, int] = {}
    for unit in sorted(all_units, key=lambda u: (-unit_weights[u.name], order[u.name])):
        k = min(range(n), key=lambda i: (loads[i], i))
        loads[k] += unit_weights[unit.name]
        out[unit.name] = k + 1
    return out


@dataclass(frozen=True)
class ShardPlan:
    """This run's shard, the whole matrix's assignment (lane name → shard) and how it was balanced."""

    shard: ShardId
    assignment: dict[str, int]
    balanced_by: str
    #: each shard's load as assigned (its lanes' weight): seconds by step times, else lanes
    loads: dict[int, float] = field(default_factory=dict)

    @property
    def lanes(self) -> tuple[str, ...]:
        """The lanes this shard runs, in the matrix's order."""
        return tuple(lane for lane, k in self.assignment.items() if k == self.shard.k)


def plan(
    shard: ShardId, lanes: Sequence[tuple[str, str]], lane_seconds: Mapping[str, float] | None, times_source: str
) -> ShardPlan:
    """The assignment of the matrix's ``lanes`` ((name, column), in order) over ``shard.n`` shards."""
    all_units = units(lanes)
    unit_weights = weights(all_units, lane_seconds)
    by_unit = assign(all_units, shard.n, unit_weights)
    assignment = {lane: by_unit[u.name] for u in all_units for lane in u.lanes}
    assignment = {name: assignment[name] for name, _ in lanes}  # the matrix's order
    loads = dict.fromkeys(range(1, shard.n + 1), 0.0)
    for unit in all_units:
        loads[by_unit[unit.name]] += unit_weights[unit.name]
    how = f"step times of {times_source}" if lane_seconds else "lane counts"
    return ShardPlan(shard, assignment, how, loads)


def lane_seconds(steps: Sequence[Mapping[str, object]]) -> dict[str, float]:
    """A finished run's seconds per lane (``column-arm``, the lane's name) from its step records."""
    out: dict[str, float] = {}
    for step in steps:
        column, arm, seconds = step.get("runner"), step.get("arm"), step.get("seconds")
        if not isinstance(column, str) or not isinstance(arm, str) or not isinstance(seconds, (int, float)):
            continue
        runner, plus, variant = column.partition("+")
        name = step.get("lane") if isinstance(step.get("lane"), str) else None
        lane = str(name) if name else f"{runner}-{arm}" + (f"-{variant}" if plus else "")
        out[lane] = out.get(lane, 0.0) + float(seconds)
    return out


def matrix_id(defining: Mapping[str, object]) -> str:
    """The matrix's id: sha256 of the options that define it (``defining``, canonical JSON), 16 hex digits."""
    text = json.dumps(defining, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
