"""Shards of the matrix (issue 46, ``vsnap_qual.run.shards``, pure): which shard this is (the option, the
schedulers' variables, and one clear error when they cannot say or disagree), which lanes each shard runs (whole
columns: a runner's head and base arms together), how they are balanced, and the matrix's id."""

from __future__ import annotations

from pathlib import Path

import pytest

from vsnap_qual import options
from vsnap_qual.run import shards
from vsnap_qual.run.configure import build_config

# 8 columns × 2 arms: the variants profile's matrix (runners v1, v2; plain, lora, nopc, ngram)
COLUMNS = [f"{r}{v}" for v in ("", "+lora", "+nopc", "+ngram") for r in ("v1", "v2")]
LANES = [
    (f"{c.split('+')[0]}-{arm}" + (f"-{c.split('+')[1]}" if "+" in c else ""), c)
    for c in COLUMNS
    for arm in ("head", "base")
]


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("0/4", "K counts from 1"),
        ("5/4", "K counts from 1"),
        ("1/0", "at least 1"),
        ("2", "not K/N"),
        ("a/b", "not K/N"),
    ],
)
def test_a_bad_shard_value_says_what_a_good_one_is(value: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        shards.parse_shard(value)


def test_slurm_buildkite_and_kubernetes_each_give_k_and_n() -> None:
    slurm = {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "5"}
    found = shards.resolve_shard(None, None, slurm)
    assert found is not None and (found.k, found.n) == (3, 4)
    stepped = {**slurm, "SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_STEP": "2"}
    assert str(shards.resolve_shard(None, None, stepped)) == "4/4"  # --array=1-7:2: tasks 1, 3, 5, 7
    buildkite = {"BUILDKITE_PARALLEL_JOB": "0", "BUILDKITE_PARALLEL_JOB_COUNT": "3"}
    assert str(shards.resolve_shard(None, None, buildkite)) == "1/3"
    k8s = {"JOB_COMPLETION_INDEX": "3"}
    found = shards.resolve_shard(None, 4, k8s)
    assert found is not None and (found.k, found.n) == (4, 4) and "JOB_COMPLETION_INDEX=3" in found.source
    assert shards.resolve_shard(None, None, {}) is None
    assert shards.resolve_shard((2, 4), None, {}) == shards.ShardId(2, 4, "--vsnap-shard")


@pytest.mark.parametrize(
    ("given", "count", "env", "said"),
    [
        (None, 4, {}, "needs its JOB_COMPLETION_INDEX"),
        (None, 4, {"JOB_COMPLETION_INDEX": "4"}, "outside 1..4"),
        (None, None, {"SLURM_ARRAY_TASK_ID": "1"}, "without SLURM_ARRAY_TASK_COUNT"),
        (
            None,
            None,
            {"SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0"},
            "outside",
        ),
        (None, None, {"BUILDKITE_PARALLEL_JOB": "1"}, "come together"),
        ((1, 4), None, {"BUILDKITE_PARALLEL_JOB": "1", "BUILDKITE_PARALLEL_JOB_COUNT": "4"}, "disagrees"),
        ((1, 4), 3, {"JOB_COMPLETION_INDEX": "0"}, "disagree on N"),
        (
            None,
            None,
            {
                "BUILDKITE_PARALLEL_JOB": "1",
                "BUILDKITE_PARALLEL_JOB_COUNT": "4",
                "SLURM_ARRAY_TASK_ID": "0",
                "SLURM_ARRAY_TASK_COUNT": "4",
            },
            "name different shards",
        ),
        (None, None, {"SLURM_ARRAY_TASK_ID": "x", "SLURM_ARRAY_TASK_COUNT": "4"}, "not a whole number"),
    ],
)
def test_a_shard_that_cannot_be_told_or_is_told_two_ways_is_one_error(
    given: tuple[int, int] | None, count: int | None, env: dict[str, str], said: str
) -> None:
    with pytest.raises(shards.ShardError, match=said):
        shards.resolve_shard(given, count, env)


def test_the_option_and_the_scheduler_may_agree() -> None:
    env = {"BUILDKITE_PARALLEL_JOB": "1", "BUILDKITE_PARALLEL_JOB_COUNT": "4"}
    assert str(shards.resolve_shard((2, 4), None, env)) == "2/4"


def test_every_lane_runs_in_exactly_one_shard_with_its_other_arm() -> None:
    for n in range(1, 12):
        plan = shards.plan(shards.ShardId(1, n, "test"), LANES, None, "")
        assert list(plan.assignment) == [name for name, _ in LANES]  # every lane once, in the matrix's order
        assert set(plan.assignment.values()) <= set(range(1, n + 1))
        for name, column in LANES:
            twins = [other for other, c in LANES if c == column]
            assert {plan.assignment[t] for t in twins} == {plan.assignment[name]}, (n, column)


def test_lane_counts_balance_whole_columns_and_extra_shards_are_empty() -> None:
    plan = shards.plan(shards.ShardId(1, 4, "test"), LANES, None, "")
    assert plan.balanced_by == "lane counts"
    assert plan.loads == {1: 4.0, 2: 4.0, 3: 4.0, 4: 4.0}
    assert plan.lanes == ("v1-head", "v1-base", "v1-head-nopc", "v1-base-nopc")
    many = shards.plan(shards.ShardId(10, 10, "test"), LANES, None, "")
    assert many.lanes == () and sorted(set(many.assignment.values())) == list(range(1, 9))


def test_step_times_balance_by_seconds_and_are_deterministic() -> None:
    seconds = {name: (500.0 if name.endswith("-lora") and name.startswith("v1") else 30.0) for name, _ in LANES}
    plans = [shards.plan(shards.ShardId(1, 3, "test"), LANES, seconds, "prev.json") for _ in range(3)]
    assert plans[0] == plans[1] == plans[2]
    plan = plans[0]
    assert plan.balanced_by == "step times of prev.json"
    # the heavy column has a shard of its own; the seven light ones share the other two
    assert plan.lanes == ("v1-head-lora", "v1-base-lora")
    assert plan.loads == {1: 1000.0, 2: 240.0, 3: 180.0}
    by_count = shards.plan(shards.ShardId(1, 3, "test"), LANES, None, "")
    assert len(by_count.lanes) == 6 and by_count.loads == {1: 6.0, 2: 6.0, 3: 4.0}


def test_a_lane_the_previous_run_did_not_run_weighs_the_mean() -> None:
    weights = shards.weights(shards.units(LANES[:4]), {"v1-head": 10.0, "v1-base": 30.0})
    assert weights == {"v1": 40.0, "v2": 40.0}


def test_lane_seconds_read_a_results_steps_per_lane() -> None:
    steps: list[dict[str, object]] = [
        {"runner": "v1", "arm": "head", "seconds": 2.0},
        {"runner": "v1", "arm": "head", "seconds": 3.0},
        {"runner": "v2+lora", "arm": "base", "seconds": 4.0},
        {"runner": "v2", "arm": "base", "seconds": "x"},
    ]
    assert shards.lane_seconds(steps) == {"v1-head": 5.0, "v2-base-lora": 4.0}


def test_the_matrix_id_follows_what_defines_the_matrix_and_nothing_else() -> None:
    inputs = {"image": "img:head", "image_ids": {"img:head": "sha256:aa"}, "runners": ["v1", "v2"], "faults": ["a"]}
    same = dict(reversed(list(inputs.items())))
    assert shards.matrix_id(inputs) == shards.matrix_id(same)
    assert len(shards.matrix_id(inputs)) == 16
    for key, value in (("image_ids", {"img:head": "sha256:bb"}), ("runners", ["v1"]), ("faults", ["a", "b"])):
        assert shards.matrix_id({**inputs, key: value}) != shards.matrix_id(inputs), key


def _config(argv: list[str], environ: dict[str, str], tmp_path: Path):  # type: ignore[no-untyped-def]
    base = [
        "--vsnap-image=img:head",
        "--vsnap-base-image=img:base",
        "--vsnap-model=m/m",
        f"--vsnap-revision={'a' * 40}",
    ]
    parsed = options.parse_standalone([*base, *argv], env={})
    return build_config(parsed, tmp_path, run_id="r", environ=environ)


def test_the_configuration_runs_the_shards_lanes_only(tmp_path: Path) -> None:
    whole = _config([], {}, tmp_path)
    assert whole.shard is None and [lane.name for lane in whole.lanes] == ["v1-head", "v2-head", "v1-base", "v2-base"]
    second = _config(["--vsnap-shard=2/2"], {}, tmp_path)
    assert [lane.name for lane in second.lanes] == ["v2-head", "v2-base"]
    assert second.matrix_lanes == whole.lanes
    slurm = _config(
        [], {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_ARRAY_TASK_MIN": "0"}, tmp_path
    )
    assert [lane.name for lane in slurm.lanes] == ["v1-head", "v1-base"]
    empty = _config(["--vsnap-shard=3/3"], {}, tmp_path)
    assert empty.lanes == () and empty.shard is not None and empty.shard.lanes == ()


@pytest.mark.parametrize(
    ("argv", "environ", "said"),
    [
        (["--vsnap-shard=5/4"], {}, "--vsnap-shard: '5/4': K counts from 1"),
        (["--vsnap-shard-count=4"], {}, "needs its JOB_COMPLETION_INDEX"),
        (["--vsnap-shard=1/2"], {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "2"}, "disagrees"),
    ],
)
def test_bad_shard_input_is_refused_before_anything_starts(
    argv: list[str], environ: dict[str, str], said: str, tmp_path: Path
) -> None:
    with pytest.raises((pytest.UsageError, options.OptionError), match=said):
        _config(argv, environ, tmp_path)


def test_shard_times_need_a_shard_and_a_run_with_steps(tmp_path: Path) -> None:
    prev = tmp_path / "results.json"
    prev.write_text('{"steps": []}')
    with pytest.raises(pytest.UsageError, match="this run is none"):
        _config([f"--vsnap-shard-times={prev}"], {}, tmp_path)
    with pytest.raises(pytest.UsageError, match="has no step times"):
        _config([f"--vsnap-shard-times={prev}", "--vsnap-shard=1/2"], {}, tmp_path)
    with pytest.raises(options.OptionError, match="no results.json"):
        _config([f"--vsnap-shard-times={tmp_path / 'nowhere'}", "--vsnap-shard=1/2"], {}, tmp_path)
