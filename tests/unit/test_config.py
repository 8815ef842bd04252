"""Cross-field validation in build_config: refused before anything starts, naming the option and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from vsnap_qual import options
from vsnap_qual.config import build_config

BASE = ["--vsnap-model=m/m", "--vsnap-revision=" + "a" * 40]


def _config(tmp_path: Path, *argv: str):
    return build_config(options.parse_standalone([*BASE, *argv], env={}), tmp_path)


def test_a_base_image_equal_to_the_image_under_test_is_refused(tmp_path):
    with pytest.raises(pytest.UsageError) as info:
        _config(tmp_path, "--vsnap-image=vllm/vllm-openai:nightly", "--vsnap-base-image=vllm/vllm-openai:nightly")
    message = str(info.value)
    assert "--vsnap-base-image is the image under test (vllm/vllm-openai:nightly)" in message
    assert "--vsnap-base-image=vllm/vllm-openai:v0.33.0" in message and "--vsnap-overlay" in message


def test_the_same_image_as_base_arm_is_allowed_with_an_overlay(tmp_path):
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


def test_expectations_default_to_auto_per_arm(tmp_path):
    config = _config(tmp_path, "--vsnap-image=img:1", "--vsnap-base-image=img:0")
    assert {lane.expect for lane in config.lanes} == {"auto"}
    forced = _config(tmp_path, "--vsnap-image=img:1", "--vsnap-base-image=img:0", "--vsnap-base-expect=base")
    assert {lane.name: lane.expect for lane in forced.lanes}["v1-base"] == "base"


def test_concurrent_runner_lanes(tmp_path):
    parsed = options.parse_standalone([*BASE, "--vsnap-image=img:1"], env={})
    assert build_config(parsed, tmp_path).concurrent_runners == 1
    assert build_config({**parsed, "vsnap_workers": 2}, tmp_path).concurrent_runners == 2
    assert build_config({**parsed, "vsnap_workers": 8}, tmp_path).concurrent_runners == 2, "one worker a runner"
    one = options.parse_standalone([*BASE, "--vsnap-image=img:1", "--vsnap-runners=v1"], env={})
    assert build_config({**one, "vsnap_workers": 2}, tmp_path).concurrent_runners == 1


def test_cpu_smoke_mode_with_chosen_gpus_is_refused_naming_the_fix(tmp_path):
    with pytest.raises(pytest.UsageError) as info:
        _config(tmp_path, "--vsnap-image=i:1", "--vsnap-cpu-smoke", "--vsnap-gpus=all")
    assert "--vsnap-cpu-smoke cannot run with --vsnap-gpus=all" in str(info.value)
    assert "use --vsnap-gpus=none" in str(info.value)
    assert _config(tmp_path, "--vsnap-image=i:1", "--vsnap-cpu-smoke", "--vsnap-gpus=none").cpu_smoke
    assert not _config(tmp_path, "--vsnap-image=i:1").cpu_smoke


def test_a_unit_command_needs_the_overlay_checkout_it_runs_from(tmp_path):
    with pytest.raises(pytest.UsageError) as info:
        _config(tmp_path, "--vsnap-image=i:1", "--vsnap-unit-command=pytest tests")
    assert "--vsnap-unit-command runs from the overlay checkout" in str(info.value)
    assert "--vsnap-overlay=" in str(info.value)
