"""What a user sees during a run, without -v: one line per lane and step from the controller (step, result,
elapsed), the harness's messages through logging (``--log-cli-level=INFO``), SKIPPED lines only for unexpected
skips, and vsnap-qual's counts equal to pytest's.

A fake suite over real lane parametrization (host runtime; its conftest replaces preflight, which would look for
vLLM, CRIU and root) with one step of each outcome.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from vsnap_qual import progress

CONFTEST = """
from vsnap_qual.plugin import session as controller
from vsnap_qual.run.preflight_result import PreflightResult

controller.run_preflight = lambda qual, runtime: PreflightResult(gpus="none")
"""

SUITE = """
import pytest
from vsnap_qual import progress

class TestSteps:
    @pytest.mark.vsnap_step("ordinary")
    def test_passes(self, vsnap_lane):
        pass

    @pytest.mark.vsnap_step("vs-head")
    def test_by_design(self, vsnap_lane):
        progress.not_applicable(f"{vsnap_lane.name}: compared from the base arm")

    @pytest.mark.vsnap_step("create")
    def test_unexpected_skip(self, vsnap_lane):
        pytest.skip(f"{vsnap_lane.name}: prerequisite ordinary did not pass (boom)")

    @pytest.mark.vsnap_step("inspect")
    def test_fails(self, vsnap_lane):
        assert vsnap_lane.runner == "v2", "inspect field mismatch"

def test_not_a_step():
    pass

class TestMore:
    @pytest.mark.parametrize("n", range(3))
    def test_plain(self, n):
        pass
"""

SUMMARY = re.compile(r"^=+ (.*) in [\d.]+s.* =+$")


def _run(tmp_path: Path, *args: str, suite: str = SUITE, conftest: str = CONFTEST) -> str:
    project = tmp_path / "suite"
    project.mkdir(exist_ok=True)
    (project / "conftest.py").write_text(conftest)
    (project / "test_steps.py").write_text(suite)
    report = tmp_path / f"report{len(list(tmp_path.glob('report*')))}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VSNAP_"))}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "vsnap_qual", "-ra",
         "--vsnap-runtime=host", "--vsnap-model=org/m", f"--vsnap-revision={'0' * 40}", "--vsnap-runners=v1,v2",
         f"--vsnap-host-root={tmp_path / 'lanes'}", f"--vsnap-report-dir={report}", *args],
        cwd=project, env={**env, "COLUMNS": "200"}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return done.stdout + done.stderr


def _progress_lines(output: str) -> dict[tuple[str, str], str]:
    found = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0] == "vsnap":
            found[(parts[1], parts[2])] = line
    return found


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_line_per_lane_and_step_without_verbose(tmp_path: Path, xdist: list[str]) -> None:
    output = _run(tmp_path, *xdist)
    lines = _progress_lines(output)
    steps = {"ordinary": "passed", "vs-head": "not applicable", "create": "skipped", "inspect": "failed"}
    assert set(lines) == {(lane, step) for lane in ("v1-head", "v2-head") for step in steps}, output[-3000:]
    for (lane, step), line in lines.items():
        expected = "passed" if (lane, step) == ("v2-head", "inspect") else steps[step]
        assert re.search(rf"\s{expected}\s+\d+\.\d s", line), line
    assert "inspect field mismatch" in lines[("v1-head", "inspect")]
    assert "prerequisite ordinary did not pass" in lines[("v1-head", "create")]


SLOW_SUITE = """
import time
import pytest

class TestSteps:
    @pytest.mark.vsnap_step("ordinary")
    def test_quick(self, vsnap_lane):
        pass

    @pytest.mark.vsnap_step("restore-1")
    def test_long(self, vsnap_lane):
        time.sleep(4)
"""


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_long_step_says_it_started_before_it_ends(tmp_path: Path, xdist: list[str]) -> None:
    """A step still running after ``STILL_RUNNING_AFTER`` (here 0.2 s, a 4 s step) gets a "running" line, from the
    controller under xdist too; its result line follows."""
    conftest = CONFTEST + "\nfrom vsnap_qual import progress\nprogress.STILL_RUNNING_AFTER = 0.2\n"
    output = _run(tmp_path, "--vsnap-runners=v1", *xdist, suite=SLOW_SUITE, conftest=conftest)
    lines = [line for line in output.splitlines() if line.startswith("vsnap v1-head")]
    running = [i for i, line in enumerate(lines) if "restore-1" in line and " running " in line]
    ended = [i for i, line in enumerate(lines) if "restore-1" in line and " passed " in line]
    assert len(running) == 1 and len(ended) == 1 and running[0] < ended[0], output[-3000:]
    assert "started" in lines[running[0]]


def test_skip_lines_only_for_the_unexpected_and_counts_agree_with_pytest(tmp_path: Path) -> None:
    output = _run(tmp_path)
    short = [line for line in output.splitlines() if line.startswith("SKIPPED")]
    assert len(short) == 2 and all("prerequisite ordinary did not pass" in line for line in short), short
    ours = [line for line in output.splitlines() if line.startswith("skipped: ")]
    assert sorted(ours) == [f"skipped: {lane} create: prerequisite ordinary did not pass (boom)"
                            for lane in ("v1-head", "v2-head")], ours  # fmt: skip
    (pytest_line,) = [m.group(1) for line in output.splitlines() if (m := SUMMARY.match(line))]
    (vsnap_line,) = [line for line in output.splitlines() if line.startswith("vsnap-qual: ")]
    counted = re.search(r"\(pytest: ([^)]*)\)", vsnap_line)
    assert counted, vsnap_line
    assert set(counted.group(1).split(", ")) == set(pytest_line.split(", ")), (vsnap_line, pytest_line)
    assert pytest_line == "1 failed, 7 passed, 2 skipped, 2 not applicable"


def test_harness_messages_are_logged_to_the_vsnap_qual_logger(tmp_path: Path) -> None:
    quiet = _run(tmp_path)
    assert "preflight passed" not in quiet
    shown = _run(tmp_path, "--log-cli-level=INFO")
    logged = [line for line in shown.splitlines() if line.startswith("INFO") and "vsnap_qual" in line]
    messages = " | ".join(logged)
    assert "active (option --vsnap-" in messages and "preflight passed" in messages, shown[-3000:]
    assert "verdict" in messages and "reports written to" in messages, messages


def test_pytest_counts_read_like_pytest() -> None:
    class R:
        count_towards_summary = True

    stats = {"passed": [R()] * 3, "error": [R(), R()], progress.NOT_APPLICABLE: [R()], "": [R()], "deselected": [R()]}
    assert progress.pytest_counts(stats) == {"passed": 3, "deselected": 1, "errors": 2, "not applicable": 1}
    assert list(progress.pytest_counts(stats)) == ["passed", "deselected", "errors", "not applicable"]  # pytest's order
