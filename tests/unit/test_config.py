"""Cross-field validation in build_config: refused before anything starts, naming the option and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vsnap_qual import options
from vsnap_qual.config import LaneSpec, QualConfig
from vsnap_qual.run.configure import build_config

BASE = ["--vsnap-model=m/m", "--vsnap-revision=" + "a" * 40]


def _config(tmp_path: Path, *argv: str) -> QualConfig:
    return build_config(options.parse_standalone([*BASE, *argv], env={}), tmp_path)


def test_a_base_image_equal_to_the_image_under_test_is_refused(tmp_path: Path) -> None:
    with pytest.raises(pytest.UsageError) as info:
        _config(tmp_path, "--vsnap-image=vllm/vllm-openai:nightly", "--vsnap-base-image=vllm/vllm-openai:nightly")
    message = str(info.value)
    assert "--vsnap-base-image is the image under test (vllm/vllm-openai:nightly)" in message
    assert "--vsnap-base-image=vllm/vllm-openai:v0.33.0" in message and "--vsnap-overlay" in message


def test_the_same_image_as_base_arm_is_allowed_with_an_overlay(tmp_path: Path) -> None:
    """With an overlay the two arms differ: the image with your change against the same image without it."""
    checkout = tmp_path / "vllm-src"
    checkout.mkdir()
    config = _config(tmp_path, "--vsnap-image=img:1", "--vsnap-base-image=img:1", f"--vsnap-overlay={checkout}")
    assert [(lane.name, lane.overlaid) for lane in config.lanes] == [
        ("v1-head", True),
        ("v2-head", True),
        ("v1-base", False),
        ("v2-base", False),
    ]


def test_expectations_default_to_auto_per_arm(tmp_path: Path) -> None:
    config = _config(tmp_path, "--vsnap-image=img:1", "--vsnap-base-image=img:0")
    assert {lane.expect for lane in config.lanes} == {"auto"}
    forced = _config(tmp_path, "--vsnap-image=img:1", "--vsnap-base-image=img:0", "--vsnap-base-expect=base")
    assert {lane.name: lane.expect for lane in forced.lanes}["v1-base"] == "base"


def test_concurrent_runner_lanes(tmp_path: Path) -> None:
    parsed = options.parse_standalone([*BASE, "--vsnap-image=img:1"], env={})
    assert build_config(parsed, tmp_path).concurrent_runners == 1
    assert build_config({**parsed, "vsnap_workers": 2}, tmp_path).concurrent_runners == 2
    assert build_config({**parsed, "vsnap_workers": 8}, tmp_path).concurrent_runners == 2, "one worker a runner"
    one = options.parse_standalone([*BASE, "--vsnap-image=img:1", "--vsnap-runners=v1"], env={})
    assert build_config({**one, "vsnap_workers": 2}, tmp_path).concurrent_runners == 1


def test_cpu_smoke_mode_with_chosen_gpus_is_refused_naming_the_fix(tmp_path: Path) -> None:
    with pytest.raises(pytest.UsageError) as info:
        _config(tmp_path, "--vsnap-image=i:1", "--vsnap-cpu-smoke", "--vsnap-gpus=all")
    assert "--vsnap-cpu-smoke cannot run with --vsnap-gpus=all" in str(info.value)
    assert "use --vsnap-gpus=none" in str(info.value)
    assert _config(tmp_path, "--vsnap-image=i:1", "--vsnap-cpu-smoke", "--vsnap-gpus=none").cpu_smoke
    assert not _config(tmp_path, "--vsnap-image=i:1").cpu_smoke


def test_a_unit_command_needs_the_overlay_checkout_it_runs_from(tmp_path: Path) -> None:
    with pytest.raises(pytest.UsageError) as info:
        _config(tmp_path, "--vsnap-image=i:1", "--vsnap-unit-command=pytest tests")
    assert "--vsnap-unit-command runs from the overlay checkout" in str(info.value)
    assert "--vsnap-overlay=" in str(info.value)


def test_each_variant_adds_lanes_per_runner_and_arm_after_the_plain_ones(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        "--vsnap-image=img:1",
        "--vsnap-base-image=img:0",
        "--vsnap-engine-args=--enforce-eager",
        "--vsnap-variant=lora=--enable-lora --max-loras 1",
        "--vsnap-variant=nopc=--no-enable-prefix-caching",
    )
    assert [lane.name for lane in config.lanes] == [
        "v1-head", "v2-head", "v1-base", "v2-base",
        "v1-head-lora", "v2-head-lora", "v1-base-lora", "v2-base-lora",
        "v1-head-nopc", "v2-head-nopc", "v1-base-nopc", "v2-base-nopc",
    ]  # fmt: skip
    assert config.columns == ("v1", "v2", "v1+lora", "v2+lora", "v1+nopc", "v2+nopc")
    lora_base = config.lanes[6]
    assert (lora_base.column, lora_base.peer("head"), lora_base.image) == ("v1+lora", "v1-head-lora", "img:0")
    assert lora_base.v2_flag == "0" and config.lanes[5].v2_flag == "1"
    # the variant's arguments come after the user's, on its lanes only
    assert config.engine_argv(lora_base)[-4:] == ["--enforce-eager", "--enable-lora", "--max-loras", "1"]
    assert config.engine_argv(config.lanes[0])[-1] == "--enforce-eager"
    assert config.public_options()["variants"] == {
        "lora": ["--enable-lora", "--max-loras", "1"],
        "nopc": ["--no-enable-prefix-caching"],
    }


def _fixed_ports(config: QualConfig, lane: LaneSpec) -> dict[str, int]:
    ports = config.fixed_ports(lane)
    assert ports is not None, f"{lane.name}: no fixed ports although --vsnap-port-base is set"
    return ports


def test_fixed_ports_keep_the_plain_lanes_offsets_and_give_each_variant_lane_its_own(tmp_path: Path) -> None:
    config = _config(
        tmp_path, "--vsnap-image=img:1", "--vsnap-base-image=img:0", "--vsnap-port-base=20000",
        "--vsnap-variant=nopc=--no-enable-prefix-caching",
    )  # fmt: skip
    starts = {lane.name: min(_fixed_ports(config, lane).values()) for lane in config.lanes}
    assert starts == {
        "v1-head": 20000, "v2-head": 20010, "v1-base": 20020, "v2-base": 20030,
        "v1-head-nopc": 20040, "v2-head-nopc": 20050, "v1-base-nopc": 20060, "v2-base-nopc": 20070,
    }  # fmt: skip
    ports = [p for lane in config.lanes for p in _fixed_ports(config, lane).values()]
    assert len(ports) == len(set(ports))


def test_a_port_base_too_high_for_every_lane_is_refused_naming_the_fix(tmp_path: Path) -> None:
    variants = [f"--vsnap-variant=x{i}=--enforce-eager" for i in range(26)]
    _config(tmp_path, "--vsnap-image=img:1", "--vsnap-port-base=65000", *variants[:25])  # 52 lanes fit
    with pytest.raises(pytest.UsageError) as info:
        _config(tmp_path, "--vsnap-image=img:1", "--vsnap-port-base=65000", *variants)
    assert "--vsnap-port-base=65000 leaves too few ports for 54 lanes" in str(info.value)
    assert "lower it to at most 64996" in str(info.value)


def test_a_variants_secret_is_redacted_like_an_engine_args_one(tmp_path: Path) -> None:
    config = _config(tmp_path, "--vsnap-image=img:1", "--vsnap-variant=auth=--api-key sk-variant-1234")
    assert "sk-variant-1234" in config.secret_values()


@pytest.mark.parametrize(
    ("profile", "adapter", "more"),
    [
        ("variants-reference.args", {"tiny-lora": "/opt/vsnap/adapters/tiny-lora"}, []),
        ("variants-vllm-cpu.args", {"vsnap-lora": "/opt/vsnap/adapters/vsnap-lora"}, ["v1-head-fp8kv"]),
    ],
)
def test_the_variant_profiles_parse_into_lanes_and_each_lora_variant_names_its_adapter(
    tmp_path: Path, profile: str, adapter: dict[str, str], more: list[str]
) -> None:
    """The documented variant profiles (pytest @file: one argument per line, no shell) are valid options."""
    from vsnap_qual.engine import adapters

    lines = (Path(__file__).parents[2] / "suites" / "profiles" / profile).read_text().splitlines()
    config = _config(tmp_path, "--vsnap-image=img:1", "--vsnap-runners=v1", *[line for line in lines if line])
    assert [lane.name for lane in config.lanes] == ["v1-head", "v1-head-lora", "v1-head-nopc", "v1-head-ngram", *more]
    lora = config.lanes[1]
    assert adapters.lora_modules(config.engine_argv(lora)) == adapter  # the adapter its image generates at build
    ngram = config.lanes[3].variant_args
    assert ngram[0] == "--speculative-config" and json.loads(ngram[1])["method"] == "ngram"
