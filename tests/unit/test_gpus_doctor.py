"""vsnap-qual doctor says which GPU each runner lane gets and whether -n 2 could run them at once (pure: the
host's GPU list is given)."""

from __future__ import annotations

import pytest

from vsnap_qual.cli import doctor
from vsnap_qual.run import gpus as gpus_mod

A, B = "GPU-aaaaaaaa-1111", "GPU-bbbbbbbb-2222"


def test_one_gpu_lanes_one_after_another(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus_mod, "host_gpus", lambda **kw: [A])
    check = doctor._lane_gpus("auto", ("v1", "v2"), True)
    assert check.status == "PASS" and check.detail.startswith(A)
    assert "-n 2 would be refused" in check.detail


def test_two_gpus_one_each(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus_mod, "host_gpus", lambda **kw: [A, B])
    check = doctor._lane_gpus("auto", ("v1", "v2"), True)
    assert check.detail.startswith(f"v1: {A}, v2: {B}") and "-n 2 can run the runner lanes at once" in check.detail


def test_a_named_gpu_the_host_lacks_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus_mod, "host_gpus", lambda **kw: [A])
    check = doctor._lane_gpus(B, ("v1", "v2"), True)
    assert check.status == "FAIL" and f"{B} is not a GPU of this host" in check.detail and check.required
