"""One object per process owns an active session (``vsnap_qual.plugin``): a ``VsnapSession`` on the controller and a
``VsnapWorker`` on each xdist worker, registered in ``pytest_configure`` only when the plugin is active and gone after
``pytest_unconfigure``. Registered before pytest's own plugin objects, its hooks run where a module's did: its
header lines before pytest's ``rootdir:``, pytest's JUnit line before vsnap-qual's summary, its session start before
xdist starts the workers (which are handed preflight's answer) and its session end after xdist stopped them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEAM = ROOT / "tests" / "seam"  # memory_runtime: a runtime with no Docker, registered with -p
MEMORY = [
    "-p", "memory_runtime", "--vsnap-runtime=memory", "--vsnap-image=memory:head", "--vsnap-model=org/tiny",
    "--vsnap-revision=0123456789abcdef0123456789abcdef01234567", "--vsnap-expect=base", "--vsnap-observe=0",
    "--vsnap-cleanup-grace=1", "--vsnap-decode-runs=0",  # the in-memory engine decodes nothing to time
]  # fmt: skip

#: Records, in every process, which session object is registered as the session starts and once it is over.
SPY = """
import json, os
import pytest

NAMES = ("vsnap_qual-session", "vsnap_qual-worker")


def _record(config, moment):
    found = {}
    for name in NAMES:
        plugin = config.pluginmanager.get_plugin(name)
        if plugin is not None:
            found[name] = type(plugin).__name__
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(os.environ["VSNAP_TEST_SPY"], f"{worker}-{moment}.json"), "w") as out:
        json.dump(found, out)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    _record(session.config, "start")


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    _record(config, "end")
"""


def _pytest(cwd: Path, spy: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (spy / "spy_plugin.py").write_text(SPY)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "spy_plugin", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")},  # this run's own workers
            "PYTHONPATH": os.pathsep.join([str(SEAM), str(spy), str(ROOT)]),
            "VSNAP_TEST_SPY": str(spy),
        },
    )


def _seen(spy: Path) -> dict[str, dict[str, str]]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(spy.glob("*.json"))}


def test_the_controller_and_each_worker_own_one_session_object(tmp_path: Path) -> None:
    spy, report, junit = tmp_path / "spy", tmp_path / "report", tmp_path / "junit.xml"
    spy.mkdir()
    done = _pytest(
        tmp_path, spy, str(ROOT / "suites"), *MEMORY, f"--vsnap-report-dir={report}", "-n", "2",
        "-k", "test_ordinary_reference", f"--junitxml={junit}",
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    seen = _seen(spy)
    assert seen.pop("main-start") == {"vsnap_qual-session": "VsnapSession"}, output[-3000:]
    assert seen.pop("gw0-start") == seen.pop("gw1-start") == {"vsnap_qual-worker": "VsnapWorker"}
    assert seen == {"main-end": {}, "gw0-end": {}, "gw1-end": {}}, "a session object outlived pytest_unconfigure"
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("vsnap-qual 0.1.0: image memory:head"))
    assert header < next(i for i, line in enumerate(lines) if line.startswith("rootdir: ")), lines[:10]
    junit_line = next(i for i, line in enumerate(lines) if "generated xml file" in line)
    assert junit_line < next(i for i, line in enumerate(lines) if " vsnap-qual " in line and line.startswith("=="))
    results = json.loads((report / "results.json").read_text())
    assert results["verdict"]["status"] == "pass", results["verdict"]


def test_an_inactive_session_registers_no_session_object(tmp_path: Path) -> None:
    spy = tmp_path / "spy"
    spy.mkdir()
    (tmp_path / "test_unrelated.py").write_text("def test_ok():\n    pass\n")
    done = _pytest(tmp_path, spy, "-p", "vsnap_qual", "-n", "2", "test_unrelated.py")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    processes = ("main", "gw0", "gw1")
    assert _seen(spy) == {f"{process}-{moment}": {} for process in processes for moment in ("start", "end")}
