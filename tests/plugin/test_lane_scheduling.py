"""With ``-n``, each runner's lanes (both arms) run on one xdist worker, through the plugin's own scheduler: no
``--dist loadgroup``, no ``@group`` suffix in node ids or JUnit names, and no ceiling on pytest.

The fake suite's lanes run nothing; its conftest replaces preflight (which would look for vLLM, CRIU and root)
with an empty result, so what is exercised is the real xdist scheduling of real parametrized lane items.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from vsnap_qual.config import LaneSpec, Variant
from vsnap_qual.plugin.lane_scheduling import lane_group, xdist_workers

CONFTEST = """
from vsnap_qual.plugin import session as controller
from vsnap_qual.run.preflight_result import PreflightResult

controller.run_preflight = lambda qual, runtime: PreflightResult(gpus="none")
"""

SUITE = """
import json, os
import pytest

def _note(lane, test):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(os.environ["NOTES"], worker + ".jsonl"), "a") as out:
        out.write(json.dumps({"lane": lane.name, "runner": lane.runner, "worker": worker, "test": test}) + "\\n")

class TestLane:
    def test_first(self, vsnap_lane):
        _note(vsnap_lane, "first")

    @pytest.mark.parametrize("n", ["x", "y", "z"])
    def test_each(self, vsnap_lane, n):
        _note(vsnap_lane, "each-" + n)

    def test_last(self, vsnap_lane):
        _note(vsnap_lane, "last")

@pytest.mark.parametrize("k", range(4))
def test_not_a_lane(k):
    pass
"""


def test_xdist_worker_count_comes_from_the_session() -> None:
    def fake(has_xdist: bool, n: Any, dist: str = "no", tx: Any = None) -> Any:
        return SimpleNamespace(
            pluginmanager=SimpleNamespace(hasplugin=lambda name: has_xdist),
            option=SimpleNamespace(numprocesses=n, dist=dist, tx=tx),
        )

    assert xdist_workers(fake(True, 2)) == 2
    assert xdist_workers(fake(True, None)) == 0
    assert xdist_workers(fake(False, 2)) == 0
    assert xdist_workers(fake(True, 0)) == 0
    assert xdist_workers(fake(True, None, "load", ["2*popen"])) == 2, "--tx 2*popen --dist load"
    assert xdist_workers(fake(True, None, "load", ["popen", "popen"])) == 2
    assert xdist_workers(fake(True, None, "no", ["2*popen"])) == 0


def test_lane_group_reads_the_lane_among_the_parameters() -> None:
    lanes = [LaneSpec("v1", "head", "i", "head", False), LaneSpec("v2", "base", "b", "base", False)]
    assert lane_group("t.py::T::test_a[v1-head]", lanes) == "vsnap-runner-v1"
    assert lane_group("t.py::T::test_fault[v2-base-wake-raise]", lanes) == "vsnap-runner-v2"
    assert lane_group("t.py::T::test_x[wake-v2-base]", lanes) == "vsnap-runner-v2"
    assert lane_group("t.py::T::test_a[v1-base]", lanes) is None  # not a lane of this run
    assert lane_group("t.py::T::test_a[v1-headless]", lanes) is None
    assert lane_group("t.py::test_plain", lanes) is None


def test_a_variants_lanes_share_their_runners_worker() -> None:
    """A variant's lanes go with their runner (one worker, one GPU): its base arm after its head arm."""
    nopc = Variant("nopc", ("--no-enable-prefix-caching",))
    lanes = [LaneSpec("v1", "head", "i", "head", False), LaneSpec("v2", "head", "i", "head", False, nopc)]
    assert lane_group("t.py::T::test_a[v2-head-nopc]", lanes) == "vsnap-runner-v2"
    assert lane_group("t.py::T::test_fault[v2-head-nopc-wake-raise]", lanes) == "vsnap-runner-v2"
    assert lane_group("t.py::T::test_a[v2-head]", lanes) is None  # the plain v2 lane is not one of this run
    assert lane_group("t.py::T::test_a[v1-head-nopc]", lanes) == "vsnap-runner-v1"  # v1-head, then a fault id


@pytest.mark.parametrize("dist", [[], ["--dist", "loadgroup"]], ids=["default", "loadgroup"])
def test_each_runner_lanes_run_on_one_worker(tmp_path: Path, dist: list[str]) -> None:
    project, notes = tmp_path / "suite", tmp_path / "notes"
    project.mkdir()
    notes.mkdir()
    (project / "conftest.py").write_text(CONFTEST)
    (project / "test_lanes.py").write_text(SUITE)
    junit = tmp_path / "junit.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VSNAP_"))}
    done = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "vsnap_qual", "-n", "2", *dist,
            "--vsnap-runtime=host", f"--vsnap-base-python={Path('/usr/bin/python3').resolve()}",
            "--vsnap-model=org/m", f"--vsnap-revision={'0' * 40}", "--vsnap-runners=v1,v2",
            f"--vsnap-host-root={tmp_path / 'lanes'}", f"--vsnap-report-dir={tmp_path / 'report'}",
            f"--junitxml={junit}",
        ],
        cwd=project, env={**env, "NOTES": str(notes)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    output = done.stdout + done.stderr
    seen = [json.loads(line) for path in notes.glob("*.jsonl") for line in path.read_text().splitlines()]
    assert len(seen) == 4 * 5, output[-3000:]  # lanes v1-head v2-head v1-base v2-base, five tests each
    workers = {runner: {s["worker"] for s in seen if s["runner"] == runner} for runner in ("v1", "v2")}
    assert all(len(w) == 1 for w in workers.values()), workers
    assert workers["v1"] != workers["v2"], f"-n 2 did not spread the runners: {workers}"
    assert {s["lane"] for s in seen if s["runner"] == "v1"} == {"v1-head", "v1-base"}
    cases = ET.parse(junit).getroot().iter("testcase")
    names = [f"{c.get('classname')}::{c.get('name')}" for c in cases]
    assert len(names) == 24 and not [n for n in names if "@" in n], names


def test_dist_each_is_refused_naming_the_fix(tmp_path: Path) -> None:
    """``--dist each`` would run every lane's steps on every worker at once (two engines on one artifact)."""
    (tmp_path / "test_lanes.py").write_text(SUITE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VSNAP_"))}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "vsnap_qual", "-n", "2", "--dist", "each",
         "--vsnap-runtime=host", "--vsnap-model=org/m", f"--vsnap-revision={'0' * 40}",
         f"--vsnap-report-dir={tmp_path / 'report'}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert "--dist each" in done.stderr and "drop --dist" in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "report").exists()
