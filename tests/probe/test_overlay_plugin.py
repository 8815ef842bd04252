"""Overlay report, plugin registration and the entry point (stdlib only; no vLLM, no Docker)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from vsnap_probe import overlay_report, plugin

PROBE_ROOT = Path(__file__).resolve().parents[2] / "vsnap_qual" / "probe"


def test_role_from_stack() -> None:
    worker_stack = [("/x/vllm/v1/worker/worker_base.py", "init_worker"), ("/x/vllm/plugins/__init__.py", "f")]
    assert overlay_report.role_from_stack(worker_stack) == "worker"
    assert overlay_report.role_from_stack([("/x/vllm/v1/engine/core.py", "__init__")]) == "engine_core"
    assert overlay_report.role_from_stack([("/x/vllm/engine/arg_utils.py", "add_cli_args")]) is None


@pytest.mark.parametrize(
    ("cmdline", "mp_name", "role"),
    [
        (["/opt/vllm/bin/python", "/opt/vllm/bin/vllm", "serve", "m"], "MainProcess", "api_server"),
        (["python", "-m", "vllm.snapshot.server", "--ready-file", "r"], "MainProcess", "api_server"),
        (["VLLM::EngineCore"], "MainProcess", "engine_core"),
        (["python", "-c", "from multiprocessing.spawn import spawn_main"], "EngineCore_DP0", "engine_core"),
        (["VLLM::Worker"], "MainProcess", "worker"),
        (["python", "-c", "x"], "VllmWorker-0", "worker"),
        (["python", "-c", "x"], "MainProcess", "other"),
    ],
)
def test_role_from_process(cmdline: list[str], mp_name: str, role: str) -> None:
    assert overlay_report.role_from_process(cmdline, mp_name) == role


def test_read_overlay_modules(control: Path) -> None:
    assert overlay_report.read_overlay_modules(control) is None
    (control / "overlay.json").write_text('{"modules": ["a.b", "c"]}')
    assert overlay_report.read_overlay_modules(control) == ["a.b", "c"]
    (control / "overlay.json").write_text('{"modules": "a.b"}')
    assert overlay_report.read_overlay_modules(control) is None
    (control / "overlay.json").write_text("{")
    assert overlay_report.read_overlay_modules(control) is None


def test_watcher_reports_overlaid_module_with_file_hash(
    control: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "src"
    (src / "vsnapfake").mkdir(parents=True)
    (src / "vsnapfake" / "__init__.py").write_text("")
    body = b"# overlaid by vsnap-qual\nVALUE = 1\n"
    (src / "vsnapfake" / "server.py").write_bytes(body)
    monkeypatch.syspath_prepend(str(src))
    watcher = overlay_report.OverlayWatcher(control, ["vsnapfake.server", "vsnapfake.absent"], poll_s=0.02)
    watcher.start()
    try:
        assert overlay_report.wait_for_writes(watcher, 1)
        path = control / "probe" / f"imports-{os.getpid()}.json"
        assert json.loads(path.read_text())["modules"] == {}
        import vsnapfake.server  # noqa: F401

        assert overlay_report.wait_for_writes(watcher, 2)
        report = json.loads(path.read_text())
        assert report["pid"] == os.getpid()
        assert report["role"] in overlay_report.ROLES
        assert report["cmdline"]
        assert report["modules"] == {
            "vsnapfake.server": {
                "path": str(src / "vsnapfake" / "server.py"),
                "sha256": hashlib.sha256(body).hexdigest(),
            }
        }
        writes = watcher.writes
        watcher.poll_once(frozenset({"vsnapfake.server"}))  # unchanged set: no rewrite
        assert watcher.writes == writes
    finally:
        watcher.stop()
        watcher.join(2)
        sys.modules.pop("vsnapfake.server", None)
        sys.modules.pop("vsnapfake", None)


def test_register_writes_loaded_and_never_raises(control: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plugin, "_registered", False)
    monkeypatch.setattr(plugin.faults, "install", lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    plugin.register()
    plugin.register()  # once per process
    loaded = json.loads((control / "probe" / f"loaded-{os.getpid()}.json").read_text())
    assert loaded["pid"] == os.getpid()
    assert set(loaded) == {"pid", "cmdline", "role", "time"}


def test_register_without_control_dir_is_quiet_noop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VSNAP_CONTROL_DIR", raising=False)
    monkeypatch.setattr(plugin, "_registered", False)
    monkeypatch.setattr(plugin.faults, "install", lambda: "deferred")
    plugin.register()


def _run(code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(PROBE_ROOT)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_entry_point_is_discoverable_from_pythonpath() -> None:
    proc = _run(
        "import importlib.metadata as m;"
        "eps = [e for e in m.entry_points(group='vllm.general_plugins') if e.name == 'vsnap_probe'];"
        "print(eps[0].value); eps[0].load()"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "vsnap_probe.plugin:register"


def test_probe_imports_only_stdlib() -> None:
    proc = _run(
        "import sys\n"
        "import vsnap_probe.plugin, vsnap_probe.digest, vsnap_probe.faults, vsnap_probe.overlay_report\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'torch', 'vllm', 'numpy'})\n"
        "assert not bad, bad"
    )
    assert proc.returncode == 0, proc.stderr
