"""With ``-n``, each lane runs on an xdist worker of its own where lanes overlap (``--vsnap-overlap=lanes``, no GPU),
else each runner's lanes (both arms) on one worker, through the plugin's own scheduler: no ``--dist loadgroup``, no
``@group`` suffix in node ids or JUnit names, and no ceiling on pytest.

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
from vsnap_qual.plugin.lane_scheduling import lane_group, overlap_plan, xdist_workers

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


def test_a_lanes_scope_is_its_own_where_lanes_overlap() -> None:
    lanes = [LaneSpec("v1", "head", "i", "head", False), LaneSpec("v1", "base", "b", "base", False)]
    assert lane_group("t.py::T::test_a[v1-head]", lanes, "lane") == "vsnap-lane-v1-head"
    assert lane_group("t.py::T::test_fault[v1-base-wake-raise]", lanes, "lane") == "vsnap-lane-v1-base"
    nopc = Variant("nopc", ("--no-enable-prefix-caching",))
    variant = [*lanes, LaneSpec("v1", "head", "i", "head", False, nopc)]
    assert lane_group("t.py::T::test_a[v1-head-nopc]", variant, "lane") == "vsnap-lane-v1-head-nopc"
    assert lane_group("t.py::T::test_a[v1-head]", variant, "lane") == "vsnap-lane-v1-head"
    assert lane_group("t.py::test_plain", lanes, "lane") is None


def _lanes(*runners: str) -> list[LaneSpec]:
    heads = [LaneSpec(r, "head", "i", "head", False) for r in runners]  # type: ignore[arg-type]
    return heads + [LaneSpec(r, "base", "b", "base", False) for r in runners]  # type: ignore[arg-type]


def test_lanes_overlap_only_with_workers_to_run_them_and_no_gpu() -> None:
    """Issue 45: lanes run at once (each a worker's scope) under ``lanes`` with two workers or more and no lane
    holding a GPU; else each runner's lanes one after another, and the plan says why."""
    four = _lanes("v1", "v2")
    plan = overlap_plan("lanes", 4, four, {"v1": "none", "v2": "none"})
    assert (plan["scope"], plan["at_once"]) == ("lane", 4)
    assert plan["lanes"] == ["v1-head", "v2-head", "v1-base", "v2-base"] and "no GPU" in plan["shared"]
    assert overlap_plan("lanes", 2, four, {})["at_once"] == 2  # two lanes at a time on two workers
    assert overlap_plan("lanes", 8, _lanes("v1"), {})["at_once"] == 2  # never more than the lanes
    off = overlap_plan("off", 4, four, {})
    assert (off["scope"], off["at_once"]) == ("runner", 2) and "--vsnap-overlap=off" in off["why"]
    alone = overlap_plan("lanes", 0, four, {})
    assert (alone["scope"], alone["at_once"], alone["lanes"], alone["shared"]) == ("runner", 1, [], "")
    gpu = overlap_plan("lanes", 4, four, {"v1": "GPU-a", "v2": "GPU-b"})
    assert gpu["scope"] == "runner" and gpu["at_once"] == 2 and "GPU-a, GPU-b" in gpu["why"]
    assert "each runner its own GPU" in gpu["shared"]
    assert overlap_plan("lanes", 4, four, {"v1": "all", "v2": "all"})["scope"] == "runner"
    assert overlap_plan("lanes", 4, _lanes("v1")[:1], {})["scope"] == "runner"  # one lane


def _run_fake_suite(tmp_path: Path, *args: str) -> tuple[list[dict[str, str]], Path, str]:
    project, notes = tmp_path / "suite", tmp_path / "notes"
    project.mkdir(parents=True)
    notes.mkdir()
    (project / "conftest.py").write_text(CONFTEST)
    (project / "test_lanes.py").write_text(SUITE)
    junit = tmp_path / "junit.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VSNAP_"))}
    done = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "vsnap_qual", *args,
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
    return seen, junit, output


@pytest.mark.parametrize("dist", [[], ["--dist", "loadgroup"]], ids=["default", "loadgroup"])
def test_each_runner_lanes_run_on_one_worker_without_overlap(tmp_path: Path, dist: list[str]) -> None:
    seen, junit, _ = _run_fake_suite(tmp_path, "-n", "2", *dist, "--vsnap-overlap=off")
    workers = {runner: {s["worker"] for s in seen if s["runner"] == runner} for runner in ("v1", "v2")}
    assert all(len(w) == 1 for w in workers.values()), workers
    assert workers["v1"] != workers["v2"], f"-n 2 did not spread the runners: {workers}"
    assert {s["lane"] for s in seen if s["runner"] == "v1"} == {"v1-head", "v1-base"}
    cases = ET.parse(junit).getroot().iter("testcase")
    names = [f"{c.get('classname')}::{c.get('name')}" for c in cases]
    assert len(names) == 24 and not [n for n in names if "@" in n], names


def test_each_lane_runs_on_a_worker_of_its_own_where_lanes_overlap(tmp_path: Path) -> None:
    """Issue 45: ``-n 4`` and the default ``--vsnap-overlap=lanes`` (no GPU): four lanes, four workers, each lane's
    tests all on its one worker; ``off`` keeps each runner's lanes on one worker, two workers idle."""
    seen, junit, output = _run_fake_suite(tmp_path / "lanes", "-n", "4")
    workers = {lane: {s["worker"] for s in seen if s["lane"] == lane} for lane in {s["lane"] for s in seen}}
    assert all(len(w) == 1 for w in workers.values()), workers
    assert len({next(iter(w)) for w in workers.values()}) == 4, f"-n 4 did not give each lane a worker: {workers}"
    seen, _, _ = _run_fake_suite(tmp_path / "off", "-n", "4", "--vsnap-overlap=off")
    assert len({s["worker"] for s in seen}) == 2, "--vsnap-overlap=off: the runners' two workers alone"


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
