"""JUnit XML a CI reads the same way on every machine: the suite is ``vsnap-qual``, each suite test's classname
and name come from its procedure step (``vsnap-qual.v1.head`` / ``restore-1``), whatever the rootdir or worker,
and ``<properties>`` carry the run (run id, verdict, image, image ID and digest, base image, CI build).

pytest's own ``--junitxml`` writer does the work; :class:`JunitNames` (a plugin object the vsnap plugin
registers when it is active) only names things: it tags each suite item with its step label
(``user_properties``: ``vsnap_step``), sets the classname and name before the writer records a test, and, once
the run's reports are written, adds the run's properties to the file pytest wrote and lists its test cases
in a fixed order (lane, then the procedure table's order; not xdist's completion order). It renders
``results.json``; it never judges.
"""

from __future__ import annotations

import json
import os
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Callable, Generator, Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any

import pytest

from vsnap_qual import model
from vsnap_qual.report import parse
from vsnap_qual.report.assemble import RESULTS_FILE
from vsnap_qual.report.recorded import option_value

SUITE_NAME = "vsnap-qual"
#: The ``user_properties`` key that carries a suite item's ``runner/arm/step`` label into its reports.
STEP_PROPERTY = "vsnap_step"
_PYTEST_DEFAULT_SUITE = "pytest"


def step_names(label: str) -> tuple[str, str]:
    """(classname, name) of a step label: ``v1/head/fault:wake-raise`` → ``vsnap-qual.v1.head``,
    ``fault:wake-raise``."""
    runner, arm, step = label.split("/", 2)
    return f"{SUITE_NAME}.{runner}.{arm}", step


def other_names(nodeid: str) -> tuple[str, str]:
    """(classname, name) of a test that is no procedure step: the module's file name (not its path, which
    depends on the rootdir) and classes, then the test name; an xdist ``@group`` suffix is dropped."""
    parts = nodeid.split("::")
    module = PurePath(parts[0]).stem if parts[0] else "session"
    name = parts[-1].split("@", 1)[0] if len(parts) > 1 else module
    return ".".join([SUITE_NAME, module, *parts[1:-1]]), name


def _label(report: pytest.TestReport) -> str | None:
    for key, value in getattr(report, "user_properties", ()) or ():
        if key == STEP_PROPERTY and isinstance(value, str) and value.count("/") >= 2:
            return value
    return None


def run_properties(results: model.Results | None) -> list[tuple[str, str]]:
    """The run's ``<properties>``, from ``results.json`` (None: there is none): what a CI dashboard shows beside
    the test list."""
    if not results:
        return [("verdict", "incomplete")]
    run = results["run"]
    verdict = results["verdict"]
    props: list[tuple[str, str]] = [
        ("run_id", run["run_id"] or ""),
        ("verdict", verdict["status"]),
        ("headline", verdict["headline"]),
        ("qualified", "; ".join(verdict.get("qualified") or [])),
        ("qualified_target", verdict.get("target") or ""),
        ("harness_version", run["harness_version"] or ""),
    ]
    props += [(f"known_finding.{n}", o["said"]) for n, o in enumerate(verdict.get("known") or [], 1)]
    images: dict[str, model.Image] = {}
    build = model.CiBuild()
    for lane in results["lanes"]:
        env = lane["environment"]
        if env is None:
            continue
        images.setdefault(env["arm"], env["image"])
        build = build or env.get("ci", model.CiBuild())
    for arm, prefix, option in (("head", "image", "image"), ("base", "base_image", "base-image")):
        image = images.get(arm, model.Image())
        ref = image.get("ref") or option_value(results, option)
        if not ref:
            continue
        digests = image.get("repo_digests", [])
        props += [(prefix, str(ref)), (f"{prefix}_id", image.get("id") or "")]
        props.append((f"{prefix}_digest", digests[0] if digests else ""))
    if build.get("build_url"):
        props.append(("ci_build_url", build.get("build_url", "")))
    return [(name, value) for name, value in props if value]


def add_run_properties(junit_path: Path, results: model.Results | None, *, suite_name: str | None = SUITE_NAME) -> None:
    """Add the run's properties to each ``<testsuite>`` of the JUnit file (before its test cases, where the
    schema puts them) and name the suite ``suite_name`` (None: keep the name)."""
    tree = ET.parse(junit_path)
    root = tree.getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    for suite in suites:
        if suite_name:
            suite.set("name", suite_name)
        _order_cases(suite, results["coverage"].get("faults", []) if results else [])
        _mark_known(suite, (results["verdict"].get("known_failures") or {}) if results else {})
        properties = suite.find("properties")
        if properties is None:
            properties = ET.Element("properties")
            suite.insert(0, properties)
        have = {p.get("name") for p in properties.findall("property")}
        for name, value in run_properties(results):
            if name not in have:
                ET.SubElement(properties, "property", name=name, value=value)
    temporary = junit_path.with_name(f".{junit_path.name}.tmp")
    tree.write(temporary, encoding="utf-8", xml_declaration=True)
    os.replace(temporary, junit_path)


def _mark_known(suite: ET.Element, known: Mapping[str, str]) -> None:
    """A test case that failed on a known finding (``report.known``) says so: a ``vsnap_known`` property with the
    finding's link, and its failure's message begins ``KNOWN (<link>):``."""
    links = {step_names(label): link for label, link in known.items() if not label.startswith("check:")}
    for case in suite.iter("testcase"):
        link = links.get((case.get("classname") or "", case.get("name") or ""))
        failure = case.find("failure")
        if link is None or failure is None:
            continue
        failure.set("message", f"KNOWN ({link}): {failure.get('message') or ''}")
        properties = case.find("properties")
        if properties is None:
            properties = ET.Element("properties")
            case.insert(0, properties)
        ET.SubElement(properties, "property", name="vsnap_known", value=link)


def _case_key(case: ET.Element, order: Mapping[str, int]) -> tuple[str, int, str]:
    """Suite tests in the procedure's order within their lane (``vsnap-qual.v1.head``), lanes and other tests by
    name: the order no longer depends on which xdist worker finished first."""
    name = case.get("name") or ""
    return case.get("classname") or "", order.get(name, len(order)), name


def _order_cases(suite: ET.Element, faults: Sequence[str]) -> None:
    from vsnap_qual import procedure

    cases = [child for child in suite if child.tag == "testcase"]
    if not cases:
        return
    first = list(suite).index(cases[0])
    for case in cases:
        suite.remove(case)
    order = procedure.step_order(faults)
    for offset, case in enumerate(sorted(cases, key=lambda case: _case_key(case, order))):
        suite.insert(first + offset, case)


class JunitNames:
    """The pytest plugin object that names the JUnit output (see the module docstring).

    ``label_of(item)`` is the suite item's ``runner/arm/step`` label or None; ``report_dir`` holds the run's
    ``results.json`` once the vsnap plugin has written it."""

    def __init__(self, report_dir: Path, label_of: Callable[[pytest.Item], str | None]) -> None:
        self.report_dir = report_dir
        self.label_of = label_of

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            label = self.label_of(item)
            if label and not any(key == STEP_PROPERTY for key, _ in item.user_properties):
                item.user_properties.append((STEP_PROPERTY, label))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        xml = _log_xml(self._config)
        if xml is None or not (report.when == "call" or report.failed or report.skipped):
            return  # a passing setup or teardown opens no test case
        label = _label(report)
        classname, name = step_names(label) if label else other_names(report.nodeid)
        # pytest's writer keeps attributes set before it records the report (its "user-defined attributes")
        reporter = xml.node_reporter(report)
        reporter.attrs["classname"] = classname
        reporter.attrs["name"] = name

    _config: pytest.Config | None = None

    def pytest_configure(self, config: pytest.Config) -> None:
        self._config = config  # the writer itself is looked up when used (it may be configured after this)

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Generator[None, None, None]:
        try:
            return (yield)  # pytest's writer and the vsnap plugin's reports run first
        finally:
            self._finish(session.config)

    def _finish(self, config: pytest.Config) -> None:
        xml = _log_xml(config)
        if xml is None or not Path(xml.logfile).is_file():
            return
        results_path = self.report_dir / RESULTS_FILE
        results: model.Results | None = None
        try:
            if results_path.is_file():
                results = parse.results(json.loads(results_path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            results = None
        explicit = config.getini("junit_suite_name") != _PYTEST_DEFAULT_SUITE
        try:
            add_run_properties(Path(xml.logfile), results, suite_name=None if explicit else SUITE_NAME)
        except (OSError, ET.ParseError) as exc:  # the JUnit file stays as pytest wrote it
            warnings.warn(
                pytest.PytestWarning(f"vsnap-qual: could not add the run's JUnit properties: {exc}"), stacklevel=1
            )


def _log_xml(config: pytest.Config | None) -> Any:
    if config is None:
        return None
    from _pytest.junitxml import xml_key

    return config.stash.get(xml_key, None)


def merged_junit(sources: Sequence[Path], out: Path, results: model.Results) -> Path:
    """``vsnap-qual merge``'s JUnit: the test cases of each shard's JUnit file (``sources``, the ones present) in
    one ``vsnap-qual`` suite, its totals counted again, with the merged run's properties and its cases in the
    procedure's order."""
    suite = ET.Element("testsuite", name=SUITE_NAME)
    for path in sources:
        root = ET.parse(path).getroot()
        for shard_suite in [root] if root.tag == "testsuite" else root.findall("testsuite"):
            suite.extend(case for case in shard_suite if case.tag == "testcase")
    cases = [case for case in suite if case.tag == "testcase"]
    suite.set("tests", str(len(cases)))
    for tag, attribute in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
        suite.set(attribute, str(sum(1 for case in cases if case.find(tag) is not None)))
    root = ET.Element("testsuites")
    root.append(suite)
    ET.ElementTree(root).write(out, encoding="utf-8", xml_declaration=True)
    add_run_properties(out, results)
    return out
