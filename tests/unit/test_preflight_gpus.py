"""Preflight gives each runner lane its GPUs and refuses -n 2 on one GPU before any image is touched (Docker and
the host runtime; the Docker client is a stand-in: no container is involved in these decisions)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from vsnap_qual import options, runtimes
from vsnap_qual.config import QualConfig
from vsnap_qual.run import gpus as gpus_mod
from vsnap_qual.run import preflight
from vsnap_qual.run.configure import build_config
from vsnap_qual.run.preflight_result import PreflightError, PreflightResult
from vsnap_qual.runtimes import docker as docker_runtime
from vsnap_qual.runtimes import host as host_runtime

A, B = "GPU-aaaaaaaa-1111", "GPU-bbbbbbbb-2222"
BASE = ["--vsnap-model=m/m", "--vsnap-revision=" + "a" * 40]


def _config(tmp_path: Path, *argv: str, workers: int = 0) -> QualConfig:
    parsed = options.parse_standalone([*BASE, f"--vsnap-report-dir={tmp_path / 'r'}", *argv], env={})
    parsed["vsnap_workers"] = workers
    return build_config(parsed, tmp_path)


def _preflight(config: QualConfig) -> PreflightResult:
    return preflight.run_preflight(config, runtimes.create(config.runtime, runtimes.settings_for(config)))


@pytest.fixture
def docker_host(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A Docker host with an NVIDIA runtime whose GPUs are ``state['gpus']``; images resolve to fixed IDs."""
    state: dict[str, Any] = {"gpus": [A], "resolved": []}
    monkeypatch.setattr(preflight, "check_io_uring", lambda: None)
    monkeypatch.setattr(docker_runtime, "connect", lambda: object())
    monkeypatch.setattr(docker_runtime, "nvidia_runtime_present", lambda client: True)
    monkeypatch.setattr(gpus_mod, "host_gpus", lambda **kw: state["gpus"])

    def resolve_image(client: object, ref: str, pull_timeout: float) -> SimpleNamespace:
        state["resolved"].append(ref)
        return SimpleNamespace(id="sha256:" + ref.encode().hex())

    monkeypatch.setattr(docker_runtime, "resolve_image", resolve_image)
    monkeypatch.setattr(docker_runtime, "local_image", lambda client, ref: None if "absent" in ref else _built(ref))
    monkeypatch.setattr(docker_runtime, "probe_package", lambda *a, **k: {"package_dir": "/p/vllm"})
    monkeypatch.setattr(docker_runtime, "check_engine", lambda *a, **k: None)  # the engine's own answers: not here
    return state


def test_two_workers_on_one_gpu_are_refused_before_any_image(tmp_path: Path, docker_host: dict[str, Any]) -> None:
    with pytest.raises(PreflightError) as info:
        _preflight(_config(tmp_path, "--vsnap-image=img:1", workers=2))
    assert "-n 2 runs 2 runner lanes at once (v1, v2) but this host has 1 GPU" in str(info.value)
    assert docker_host["resolved"] == [], "refused before anything else started"


def test_two_workers_on_two_gpus_get_one_each_and_workers_see_it(tmp_path: Path, docker_host: dict[str, Any]) -> None:
    docker_host["gpus"] = [A, B]
    config = _config(tmp_path, "--vsnap-image=img:1", workers=2)
    result = _preflight(config)
    assert result.lane_gpus == {"v1": A, "v2": B}
    by_runner = {lane.runner: result.gpus_for(lane) for lane in config.lanes}
    assert by_runner == {"v1": A, "v2": B}
    again = PreflightResult.from_json(result.to_json())  # what an xdist worker reads
    assert {lane.name: again.gpus_for(lane) for lane in config.lanes} == {"v1-head": A, "v2-head": B}


def test_serial_lanes_on_one_gpu_share_it_and_none_needs_no_gpu(tmp_path: Path, docker_host: dict[str, Any]) -> None:
    result = _preflight(_config(tmp_path, "--vsnap-image=img:1"))
    assert result.lane_gpus == {"v1": A, "v2": A} and result.gpus == A
    none = _preflight(_config(tmp_path, "--vsnap-image=img:1", "--vsnap-gpus=none", workers=2))
    assert none.lane_gpus == {"v1": "none", "v2": "none"}
    one_runner = _preflight(_config(tmp_path, "--vsnap-image=img:1", "--vsnap-runners=v2", workers=2))
    assert one_runner.lane_gpus == {"v2": A}, "-n 2 with one runner: one lane at a time"


def test_old_preflight_files_still_read(tmp_path: Path) -> None:
    old = '{"gpus": "all", "images": {}, "packages": {}, "overlay": []}'
    result = PreflightResult.from_json(old)
    config = _config(tmp_path, "--vsnap-image=img:1")
    assert [result.gpus_for(lane) for lane in config.lanes] == ["all", "all"]


def test_the_host_runtime_refuses_two_workers_on_one_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preflight, "check_io_uring", lambda: None)
    monkeypatch.setattr(host_runtime, "check_host", lambda root: [])
    monkeypatch.setattr(host_runtime, "host_gpus", lambda requested: True)
    seen: dict[str, Any] = {}

    def listed(**kw: object) -> list[str]:
        seen.update(kw)
        return [A]

    monkeypatch.setattr(gpus_mod, "host_gpus", listed)
    config = _config(tmp_path, "--vsnap-runtime=host", f"--vsnap-python={sys.executable}", workers=2)
    with pytest.raises(PreflightError, match="but this host has 1 GPU"):
        _preflight(config)
    assert seen == {"honour_cuda_visible": True}, "host lanes choose within this process's CUDA_VISIBLE_DEVICES"


def test_auto_expectations_need_a_snapshot_package_to_read(
    tmp_path: Path, docker_host: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        docker_runtime,
        "probe_package",
        lambda *a, **k: {"package_dir": "/p/vllm", "vllm": "0.30.0", "snapshot_behaviour": "none"},
    )
    with pytest.raises(PreflightError) as info:
        _preflight(_config(tmp_path, "--vsnap-image=img:1"))
    assert "--vsnap-image: the vllm of img:1 (0.30.0, /p/vllm) has no vllm/snapshot package" in str(info.value)
    assert "--vsnap-expect=auto" in str(info.value)
    explicit = _preflight(_config(tmp_path, "--vsnap-image=img:1", "--vsnap-expect=base"))
    assert explicit.packages["img:1"]["snapshot_behaviour"] == "none", "an explicit expectation is not second-guessed"
    monkeypatch.setattr(
        docker_runtime, "probe_package", lambda *a, **k: {"package_dir": "/p/vllm", "snapshot_behaviour": "base"}
    )
    assert _preflight(_config(tmp_path, "--vsnap-image=img:1")).packages["img:1"]["snapshot_behaviour"] == "base"


def test_cpu_smoke_mode_is_refused_on_a_lane_that_would_get_a_gpu(tmp_path: Path, docker_host: dict[str, Any]) -> None:
    """Smoke mode declares sleep mode on vLLM's CPU platform: never where a lane has a GPU."""
    with pytest.raises(PreflightError) as info:
        _preflight(_config(tmp_path, "--vsnap-image=img:1", "--vsnap-cpu-smoke"))  # --vsnap-gpus=auto finds A
    assert f"--vsnap-cpu-smoke: lanes would get GPUs (v1: {A}, v2: {A})" in str(info.value)
    assert "use --vsnap-gpus=none" in str(info.value)
    smoke = _preflight(_config(tmp_path, "--vsnap-image=img:1", "--vsnap-cpu-smoke", "--vsnap-gpus=none"))
    assert smoke.lane_gpus == {"v1": "none", "v2": "none"}


def _built(ref: str) -> Any:
    """A local image built on this host (no repository digest): --vsnap-pull=auto leaves it alone."""
    from vsnap_qual.box import ImageInfo

    return ImageInfo(id="sha256:" + ref.encode().hex(), repo_digests=[], labels={}, platform="linux/amd64")
