"""Fault hooks on fake worker / wrapper classes shaped like vLLM's (no vLLM, no Docker)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from vsnap_probe import faults


class FakeWorker:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def sleep(self, level: int = 1) -> None:
        self.calls.append(("sleep", level))

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.calls.append(("wake_up", tags))

    def reload_weights(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("reload_weights", args))

    def checkpoint_prepare(self) -> None:
        self.calls.append(("checkpoint_prepare", None))

    def checkpoint_restore(self) -> None:
        self.calls.append(("checkpoint_restore", None))

    def synchronize_device(self) -> None:
        self.calls.append(("synchronize_device", None))


def arm(cdir: Path, point: str, stall_s: float | None = None) -> None:
    (cdir / "faults").mkdir(exist_ok=True)
    (cdir / "faults" / "armed.json").write_text(json.dumps({"point": point, "stall_s": stall_s}))


def fired(cdir: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((cdir / "faults").glob("fired-*.json"))]


# --- armed.json ---


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"point": "wake-raise", "stall_s": null}', faults.Armed("wake-raise", None)),
        ('{"point": "wake-stall", "stall_s": 2}', faults.Armed("wake-stall", 2.0)),
        ('{"point": "communicators-raise"}', faults.Armed("communicators-raise", None)),
        ('{"point": "reload-raise"}', None),  # no fault uses it: not a point
        ('{"point": "no-such-point"}', None),
        ('{"point": "wake-stall", "stall_s": -1}', None),
        ('{"point": "wake-stall", "stall_s": true}', None),
        ('{"point": "wake-stall", "stall_s": "5"}', None),
        ('["wake-raise"]', None),
        ("not json", None),
    ],
)
def test_parse_armed(text: str, expected: faults.Armed | None) -> None:
    assert faults.parse_armed(text) == expected


def test_nothing_armed_without_file_or_control_dir(control: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert faults.read_armed() is None
    monkeypatch.delenv("VSNAP_CONTROL_DIR")
    assert faults.read_armed() is None
    worker = FakeWorker()
    faults.instrument_worker(worker)
    worker.wake_up(tags=["kv_cache"])
    assert worker.calls == [("wake_up", ["kv_cache"])]


def test_catalogue_matches_design() -> None:
    assert {p.id: (p.method, p.moment, p.action) for p in faults.POINTS.values()} == {
        "wake-raise": ("wake_up", "after", "raise"),
        "communicators-raise": ("checkpoint_restore", "before", "raise"),
        "canary-perturb": ("wake_up", "after", "perturb"),
        "wake-stall": ("wake_up", "before", "stall"),
        "sleep-raise": ("sleep", "after", "raise"),
    }
    assert faults.DEVICE_SYNC_METHOD == "synchronize_device"
    assert set(faults.HOOKED_METHODS) == {
        "sleep",
        "wake_up",
        "reload_weights",
        "checkpoint_prepare",
        "checkpoint_restore",
        "synchronize_device",
    }


# --- actions ---


def test_wake_raise_after_call_with_kv_cache_and_fired_record(control: Path) -> None:
    worker = FakeWorker()
    faults.instrument_worker(worker)
    arm(control, "wake-raise")
    worker.wake_up(tags=["weights"])  # weights only: not this point
    assert fired(control) == []
    with pytest.raises(RuntimeError, match="^vsnap fault: wake-raise$"):
        worker.wake_up(tags=["kv_cache"])
    assert worker.calls == [("wake_up", ["weights"]), ("wake_up", ["kv_cache"])]  # the call itself ran
    (record,) = fired(control)
    assert record["point"] == "wake-raise"
    assert record["pid"] == os.getpid()
    assert record["method"] == "wake_up"
    assert record["kwargs"] == {"tags": ["kv_cache"]}
    assert record["time"].endswith("Z")
    assert (control / "faults" / f"fired-wake-raise-{os.getpid()}.json").exists()


def test_wake_raise_when_tags_none_positional_and_kw(control: Path) -> None:
    arm(control, "wake-raise")
    calls: list[Callable[[FakeWorker], object]] = [
        lambda w: w.wake_up(),
        lambda w: w.wake_up(None),
        lambda w: w.wake_up(["kv_cache", "x"]),
    ]
    for call in calls:
        worker = FakeWorker()
        faults.instrument_worker(worker)
        with pytest.raises(RuntimeError):
            call(worker)


def test_communicators_raise_before_call(control: Path) -> None:
    worker = FakeWorker()
    faults.instrument_worker(worker)
    arm(control, "communicators-raise")
    worker.checkpoint_prepare()
    with pytest.raises(RuntimeError, match="communicators-raise"):
        worker.checkpoint_restore()
    assert worker.calls == [("checkpoint_prepare", None)]
    assert [r["method"] for r in fired(control)] == ["checkpoint_restore"]


def test_sleep_raise_after_call(control: Path) -> None:
    worker = FakeWorker()
    faults.instrument_worker(worker)
    arm(control, "sleep-raise")
    with pytest.raises(RuntimeError, match="sleep-raise"):
        worker.sleep(level=2)
    assert worker.calls == [("sleep", 2)]


def test_wake_stall_sleeps_then_continues(control: Path) -> None:
    worker = FakeWorker()
    faults.instrument_worker(worker)
    arm(control, "wake-stall", 0.2)
    t0 = time.monotonic()
    worker.wake_up(tags=["kv_cache"])
    assert time.monotonic() - t0 >= 0.2
    assert worker.calls == [("wake_up", ["kv_cache"])]
    (record,) = fired(control)
    assert record["stall_s"] == 0.2


def test_armed_file_is_read_at_call_time(control: Path) -> None:
    worker = FakeWorker()
    faults.instrument_worker(worker)
    worker.checkpoint_restore()
    arm(control, "communicators-raise")
    with pytest.raises(RuntimeError):
        worker.checkpoint_restore()
    (control / "faults" / "armed.json").unlink()
    worker.checkpoint_restore()
    assert len(worker.calls) == 2


def test_fired_record_is_written_before_acting(control: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    worker = FakeWorker()
    faults.instrument_worker(worker)
    arm(control, "wake-stall", 0.0)
    seen: list[bool] = []
    monkeypatch.setattr(faults.time, "sleep", lambda s: seen.append(bool(fired(control))))
    worker.wake_up(tags=["kv_cache"])
    assert seen == [True]


def test_instrument_is_idempotent() -> None:
    worker = FakeWorker()
    assert set(faults.instrument_worker(worker)) == set(faults.HOOKED_METHODS)
    assert faults.instrument_worker(worker) == []


def test_canary_perturb_changes_last_norm_weight(control: Path) -> None:
    torch: Any = pytest.importorskip("torch")

    class Model(torch.nn.Module):  # type: ignore[misc]  # torch from importorskip is a module object: Any
        def __init__(self) -> None:
            super().__init__()
            self.input_layernorm = torch.nn.Module()
            self.input_layernorm.weight = torch.nn.Parameter(torch.ones(4))
            self.norm = torch.nn.Module()
            self.norm.weight = torch.nn.Parameter(torch.ones(4))

    class Runner:
        model = Model()

    worker = FakeWorker()
    worker.model_runner = Runner()  # type: ignore[attr-defined]
    faults.instrument_worker(worker)
    arm(control, "canary-perturb")
    worker.wake_up(tags=["weights"])
    assert float(Runner.model.norm.weight[0].detach()) == 1.0
    worker.wake_up(tags=["kv_cache"])
    assert float(Runner.model.norm.weight[0].detach()) == 1001.0
    assert float(Runner.model.input_layernorm.weight[0]) == 1.0
    (record,) = fired(control)
    assert record["parameter"] == "norm.weight"


# --- attaching to WorkerWrapperBase ---


def make_wrapper_class(on_init: Any = None) -> type:
    class WorkerWrapperBase:
        def __init__(self, rpc_rank: int = 0) -> None:
            self.rpc_rank = rpc_rank

        def init_worker(self, all_kwargs: list[dict[str, Any]]) -> None:
            if on_init is not None:
                on_init(type(self))  # vLLM loads the general plugins here, inside init_worker
            self.worker = FakeWorker()

        def init_device(self) -> None:
            pass

        def __getattr__(self, attr: str) -> Any:
            return getattr(self.__dict__["worker"], attr)

    return WorkerWrapperBase


def test_patched_init_worker_instruments_the_worker(control: Path) -> None:
    cls = make_wrapper_class()
    assert faults.patch_wrapper_class(cls)
    assert not faults.patch_wrapper_class(cls)
    wrapper = cls()
    wrapper.init_worker([{}])
    arm(control, "communicators-raise")
    with pytest.raises(RuntimeError, match="communicators-raise"):
        wrapper.checkpoint_restore()


def test_patch_during_in_flight_init_worker_still_instruments(control: Path) -> None:
    cls = make_wrapper_class(on_init=faults.patch_wrapper_class)
    wrapper = cls()
    wrapper.init_worker([{}])  # the original, unpatched call is the one running
    arm(control, "communicators-raise")
    with pytest.raises(RuntimeError, match="communicators-raise"):
        wrapper.checkpoint_restore()  # through __getattr__, as run_method does


def test_late_wrapper_method_instruments(control: Path) -> None:
    cls = make_wrapper_class(on_init=faults.patch_wrapper_class)
    wrapper = cls()
    wrapper.init_worker([{}])
    wrapper.init_device()
    assert getattr(wrapper.__dict__["worker"].wake_up, "_vsnap_fault_hooks", False)


def test_getattr_before_init_does_not_recurse() -> None:
    cls = make_wrapper_class()
    faults.patch_wrapper_class(cls)
    with pytest.raises(KeyError):
        cls().sleep  # noqa: B018 - the original __getattr__'s own error, no recursion from the patch


def test_install_defers_until_module_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "fakepkg_vsnap"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "worker_base.py").write_text(
        textwrap.dedent(
            """
            class WorkerWrapperBase:
                def init_worker(self, all_kwargs):
                    self.worker = object()
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(faults, "WRAPPER_MODULE", "fakepkg_vsnap.worker_base")
    saved = list(sys.meta_path)
    try:
        assert faults.install() == "deferred"
        assert faults.install() == "deferred"
        assert sum(isinstance(f, faults._PostImportHook) for f in sys.meta_path) == 1
        import fakepkg_vsnap.worker_base as mod

        assert mod.WorkerWrapperBase.__dict__.get("_vsnap_patched") is True
        assert not any(isinstance(f, faults._PostImportHook) for f in sys.meta_path)
        assert faults.install() == "patched"
    finally:
        sys.meta_path[:] = saved
        sys.modules.pop("fakepkg_vsnap.worker_base", None)
        sys.modules.pop("fakepkg_vsnap", None)
