"""--vsnap-gpus: each runner lane its own GPU; lanes that would share one at once are refused (pure)."""

from __future__ import annotations

import pytest

from vsnap_qual.run import gpus

A, B, C = "GPU-aaaaaaaa-1111", "GPU-bbbbbbbb-2222", "GPU-cccccccc-3333"
RUNNERS = ("v1", "v2")


def test_auto_gives_each_runner_lane_its_own_gpu() -> None:
    assert gpus.assign("auto", RUNNERS, 2, True, [A, B]) == {"v1": A, "v2": B}
    assert gpus.assign("auto", RUNNERS, 2, True, [A, B, C]) == {"v1": A, "v2": B}
    assert gpus.assign("auto", ("v2",), 1, True, [A, B]) == {"v2": A}


def test_auto_on_one_gpu_shares_it_only_when_lanes_run_one_after_another() -> None:
    assert gpus.assign("auto", RUNNERS, 1, True, [A]) == {"v1": A, "v2": A}
    with pytest.raises(gpus.GpuError) as info:
        gpus.assign("auto", RUNNERS, 2, True, [A])
    message = str(info.value)
    assert "-n 2 runs 2 runner lanes at once (v1, v2) but this host has 1 GPU" in message
    assert A in message and "Drop -n" in message and "--vsnap-runners" in message


def test_auto_without_gpus_is_none_and_without_a_listing_is_all_serially() -> None:
    assert gpus.assign("auto", RUNNERS, 2, False, None) == {"v1": "none", "v2": "none"}
    assert gpus.assign("auto", RUNNERS, 2, True, []) == {"v1": "none", "v2": "none"}
    assert gpus.assign("auto", RUNNERS, 1, True, None) == {"v1": "all", "v2": "all"}
    with pytest.raises(gpus.GpuError, match="cannot list this host's GPUs.*--vsnap-gpus=GPU-<uuid>,GPU-<uuid>"):
        gpus.assign("auto", RUNNERS, 2, True, None)


def test_existing_values_keep_working() -> None:
    assert gpus.assign("none", RUNNERS, 2, True, [A, B]) == {"v1": "none", "v2": "none"}
    assert gpus.assign("all", RUNNERS, 1, True, [A, B]) == {"v1": "all", "v2": "all"}
    assert gpus.assign(A, RUNNERS, 1, True, [A, B]) == {"v1": A, "v2": A}
    assert gpus.assign(f"{B},{A}", RUNNERS, 2, True, [A, B]) == {"v1": B, "v2": A}
    assert gpus.assign(f"{B},{A}", RUNNERS, 2, True, None) == {"v1": B, "v2": A}, "no listing: taken as given"


def test_all_or_one_uuid_for_lanes_running_at_once_is_refused() -> None:
    with pytest.raises(gpus.GpuError, match="--vsnap-gpus=all gives every lane all GPUs, but -n 2"):
        gpus.assign("all", RUNNERS, 2, True, [A, B])
    with pytest.raises(gpus.GpuError, match=f"--vsnap-gpus={A} names 1 GPU.*or name more GPUs"):
        gpus.assign(A, RUNNERS, 2, True, [A, B])


def test_a_uuid_the_host_does_not_have_is_refused() -> None:
    with pytest.raises(gpus.GpuError, match=f"{C} is not a GPU of this host .*nvidia-smi -L"):
        gpus.assign(f"{A},{C}", RUNNERS, 2, True, [A, B])


def test_listing_and_cuda_visible_devices() -> None:
    listing = gpus.parse_listing(f"0, {A}\n1, {B}\n2, {C}\nNo devices were found\n")
    assert listing == [("0", A), ("1", B), ("2", C)]
    assert gpus.restrict(listing, None) == [A, B, C]
    assert gpus.restrict(listing, "2,0") == [C, A], "a scheduler's allocation, in its order"
    assert gpus.restrict(listing, "GPU-bbbbbbbb") == [B], "a UUID prefix, as CUDA reads it"
    assert gpus.restrict(listing, "1,-1,2") == [B], "CUDA stops at the first invalid entry"
    assert gpus.restrict(listing, "") == []
    assert gpus.restrict(listing, "MIG-1234") is None, "MIG devices cannot be mapped here"


def test_describe() -> None:
    assert gpus.describe({"v1": "none", "v2": "none"}) == "none"
    assert gpus.describe({"v1": A, "v2": B}) == f"v1: {A}, v2: {B}"


def test_a_lane_gpu_becomes_dockers_device_request_for_that_gpu() -> None:
    from vsnap_qual.box import RuntimeFailure
    from vsnap_qual.runtimes import docker

    (one,) = docker.gpu_device_requests(A)
    assert one["DeviceIDs"] == [A] and one["Capabilities"] == [["gpu"]] and one["Count"] in (0, None)
    (every,) = docker.gpu_device_requests("all")
    assert every["Count"] == -1 and not every["DeviceIDs"]
    assert docker.gpu_device_requests("none") == []
    with pytest.raises(RuntimeFailure, match="a lane gets one GPU"):
        docker.gpu_device_requests(f"{A},{B}")


def test_a_host_lane_sees_only_its_gpu() -> None:
    from vsnap_qual.runtimes import host as host_runtime

    env = host_runtime.host_environment("/usr/bin/python3", {}, A)
    assert env["CUDA_VISIBLE_DEVICES"] == A
    assert host_runtime.host_environment("/usr/bin/python3", {}, "none")["CUDA_VISIBLE_DEVICES"] == ""
