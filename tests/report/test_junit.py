"""JUnit XML: suite ``vsnap-qual``, the run's properties, classnames and names that do not depend on the rootdir
or on xdist, from a real ``pytest --junitxml`` run of a small project with the naming plugin registered."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.report.synthetic_runs import RUN_ID, MakeRun, RunSpec
from vsnap_qual.report import write_reports
from vsnap_qual.report.junit import add_run_properties, other_names, step_names

CONFTEST = """
import os
from pathlib import Path

from vsnap_qual.report.junit import JunitNames


def _label(item):
    marker = item.get_closest_marker("step")
    return marker.args[0] if marker else None


def pytest_configure(config):
    config.addinivalue_line("markers", "step(label): the procedure step")
    config.pluginmanager.register(JunitNames(Path(os.environ["REPORT_DIR"]), _label), "vsnap_qual.junit")
"""

SUITE = """
import pytest


@pytest.mark.step("v1/head/create")
def test_create():
    pass


@pytest.mark.step("v1/head/ordinary")
def test_ordinary():
    pass


@pytest.mark.step("v1/head/restore-1")
def test_restore_1():
    pass


@pytest.mark.step("v1/base/fault:wake-raise")
def test_fault():
    assert False, "unexpected"


class TestOther:
    def test_plain(self):
        pass
"""


@pytest.fixture
def project(tmp_path: Path, make_run: MakeRun) -> tuple[Path, Path]:
    report_dir = make_run("run", RunSpec(changed_digests=()))
    write_reports(report_dir, github_step_summary=False)
    root = tmp_path / "ci-checkout"
    suites = root / "suites"
    suites.mkdir(parents=True)
    (suites / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (suites / "test_suite.py").write_text(textwrap.dedent(SUITE))
    (suites / "pytest.ini").write_text("[pytest]\n")
    return suites, report_dir


def _pytest(cwd: Path, report_dir: Path, *args: str) -> ET.Element:
    junit = cwd / f"junit-{len(list(cwd.glob('junit-*.xml')))}.xml"
    env = {**os.environ, "REPORT_DIR": str(report_dir)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:vsnap_qual", "-p", "no:cacheprovider", f"--junitxml={junit}", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]  # the one failing test
    return ET.parse(junit).getroot()


def _cases(root: ET.Element) -> dict[tuple[str, str], ET.Element]:
    return {(c.get("classname") or "", c.get("name") or ""): c for c in root.iter("testcase")}


def test_local_and_ci_runs_name_every_test_the_same(project: tuple[Path, Path]) -> None:
    suites, report_dir = project
    local = _pytest(suites, report_dir)  # from the suites directory (its own rootdir)
    ci = _pytest(suites.parent, report_dir, "--rootdir=.", "suites/", "-p", "xdist", "-n", "2")  # as CI runs it
    # the same names, in one order whichever worker finished first: by lane, then the procedure's (ordinary
    # before create, although the file has them the other way round)
    assert (
        list(_cases(local))
        == list(_cases(ci))
        == [
            ("vsnap-qual.test_suite.TestOther", "test_plain"),
            ("vsnap-qual.v1.base", "fault:wake-raise"),
            ("vsnap-qual.v1.head", "ordinary"),
            ("vsnap-qual.v1.head", "create"),
            ("vsnap-qual.v1.head", "restore-1"),
        ]
    )
    assert _cases(ci)[("vsnap-qual.v1.base", "fault:wake-raise")].find("failure") is not None
    for root in (local, ci):
        suite = root.find("testsuite")
        assert suite is not None and suite.get("name") == "vsnap-qual"
        assert list(suite)[0].tag == "properties"  # before the test cases, as the schema wants
        props = {p.get("name"): p.get("value") for p in suite.iter("property")}
        assert props["run_id"] == RUN_ID and props["verdict"] == "pass" and props["headline"] == "PASS"
        assert (
            props["qualified"] == "engine: head arm vLLM 0.33.1.dev42+g593df82f, base arm vLLM 0.33.1.dev42+g593df82f"
        )
        assert props["image"] == "vllm/vllm-openai:nightly-593df82f"
        assert str(props["image_id"]).startswith("sha256:")
        assert str(props["image_digest"]).startswith("vllm/vllm-openai@sha256:")
        assert props["base_image"] == "vllm/vllm-openai:v0.33.0"


def test_a_suite_name_the_user_chose_is_kept(project: tuple[Path, Path]) -> None:
    suites, report_dir = project
    root = _pytest(suites, report_dir, "-o", "junit_suite_name=nightly")
    suite = root.find("testsuite")
    assert suite is not None and suite.get("name") == "nightly"
    assert any(p.get("name") == "verdict" for p in suite.iter("property"))


def test_names() -> None:
    assert step_names("v2/base/fault:pid-occupied") == ("vsnap-qual.v2.base", "fault:pid-occupied")
    assert other_names("suites/test_x.py::TestA::test_b[v1-head]@v1") == ("vsnap-qual.test_x.TestA", "test_b[v1-head]")
    assert other_names("test_x.py::test_b") == ("vsnap-qual.test_x", "test_b")


def test_properties_from_a_run_without_results(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text('<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="0"/></testsuites>')
    add_run_properties(junit, None)
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("name") == "vsnap-qual"
    assert [(p.get("name"), p.get("value")) for p in suite.iter("property")] == [("verdict", "incomplete")]
