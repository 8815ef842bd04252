"""The probe's fault hooks attach to real vLLM's worker and fire when its methods run via /collective_rpc.

On a CPU no snapshot can be captured, so the hooks are driven directly: the same worker methods the snapshot
session calls (``wake_up``, ``sleep``, ``checkpoint_restore``, ``reload_weights``) are invoked through the real
``/collective_rpc`` route, and the hook must act inside the real worker process and leave its fired record.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.real.realtier import RealContainer, Served, http


def arm(real: RealContainer, point: str, stall_s: float | None = None) -> None:
    for old in (real.control / "faults").glob(f"fired-{point}-*.json"):
        old.unlink()
    (real.control / "faults" / "armed.json").write_text(json.dumps({"point": point, "stall_s": stall_s}))


def disarm(real: RealContainer) -> None:
    (real.control / "faults" / "armed.json").unlink(missing_ok=True)


def fired(real: RealContainer, point: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in (real.control / "faults").glob(f"fired-{point}-*.json")]


def worker_pid(real: RealContainer, served: Served) -> int:
    pids = [int(r["pid"]) for r in real.probe_files("loaded") if r["role"] == "worker"]
    assert pids, real.probe_files("loaded")
    return pids[-1]


@pytest.mark.parametrize(
    ("point", "method", "kwargs"),
    [
        ("wake-raise", "wake_up", {"tags": ["kv_cache"]}),
        ("sleep-raise", "sleep", {"level": 1}),
        ("communicators-raise", "checkpoint_restore", {}),
    ],
)
def test_raise_point_fires_in_the_real_worker(
    real: RealContainer, served: Served, point: str, method: str, kwargs: dict[str, Any]
) -> None:
    arm(real, point)
    try:
        status, body = served.rpc(method, **kwargs)
    finally:
        disarm(real)
    assert status == 500, body
    assert f"Worker failed with error 'vsnap fault: {point}'" in body["error"]["message"]
    (record,) = fired(real, point)
    assert record["method"] == method
    assert record["pid"] == worker_pid(real, served)
    # The engine survives a failing collective_rpc.
    assert http("GET", f"{served.url}/health")[0] == 200


def test_unarmed_hooks_are_transparent(served: Served) -> None:
    status, body = served.rpc("wake_up", tags=["kv_cache"])
    assert status == 200, body  # the CPU worker only logs "sleep mode is not supported on CPU"
    assert body == {"results": [None]}


def test_wake_stall_delays_then_continues(real: RealContainer, served: Served) -> None:
    arm(real, "wake-stall", 2.0)
    try:
        t0 = time.monotonic()
        status, body = served.rpc("wake_up", tags=["kv_cache"])
        elapsed = time.monotonic() - t0
    finally:
        disarm(real)
    assert status == 200, body
    assert elapsed >= 2.0
    (record,) = fired(real, "wake-stall")
    assert record["stall_s"] == 2.0


def test_wake_with_weights_tag_only_does_not_fire_kv_points(real: RealContainer, served: Served) -> None:
    arm(real, "wake-raise")
    try:
        status, body = served.rpc("wake_up", tags=["weights"])
    finally:
        disarm(real)
    assert status == 200, body


def test_canary_perturb_changes_the_real_output_and_digest(real: RealContainer, served: Served) -> None:
    before = served.canary()
    status, digests_before = served.rpc("vsnap_param_digests")
    assert status == 200
    arm(real, "canary-perturb")
    served.dirty = True  # the weights change: the next test gets a fresh server
    try:
        status, body = served.rpc("wake_up", tags=["kv_cache"])
    finally:
        disarm(real)
    assert status == 200, body
    (record,) = fired(real, "canary-perturb")
    assert record["parameter"] == "model.norm.weight"
    after = served.canary()
    assert after != before
    status, digests_after = served.rpc("vsnap_param_digests")
    old, new = digests_before["results"][0], digests_after["results"][0]
    assert [n for n in old if old[n]["sha256"] != new[n]["sha256"]] == ["model.norm.weight"]
