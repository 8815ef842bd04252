"""What every process of an active session holds and does: the controller's :class:`~vsnap_qual.plugin.session.
VsnapSession` (or a run without xdist) and each xdist worker's :class:`~vsnap_qual.plugin.worker.VsnapWorker`.

One object per process, built and registered by ``vsnap_qual.plugin.pytest_configure`` only in an active session,
owns the session's state (the validated configuration, the fault catalogue, the evidence store, preflight's answer,
the session record, the lanes' peers); its methods are the session's hooks. The fixtures reach it through
:data:`PLUGIN_KEY` (:func:`process_of`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

from vsnap_qual import model, progress
from vsnap_qual.clock import utc_now
from vsnap_qual.config import QualConfig
from vsnap_qual.evidence import EvidenceStore
from vsnap_qual.faults import FaultCatalogue
from vsnap_qual.lane import Peers
from vsnap_qual.lane.handoff import Handoff
from vsnap_qual.plugin.items import item_lane_step, item_step
from vsnap_qual.plugin.step import VsnapStep, out_of_order
from vsnap_qual.redact import Redactor
from vsnap_qual.run import probe_copy
from vsnap_qual.run.preflight_result import PreflightResult

log = progress.log  # logger "vsnap_qual": the harness's own messages
PREFLIGHT_FILE = "preflight.json"


class VsnapProcess:
    """One process's part of an active session (see the module docstring). Subclasses add the hooks that differ
    between the controller and a worker; the hooks here run wherever tests are collected and run."""

    #: the name it is registered under (``config.pluginmanager.get_plugin(NAME)``)
    NAME = "vsnap_qual-process"

    def __init__(self, config: pytest.Config, why: str, qual: QualConfig, catalogue: FaultCatalogue) -> None:
        self.config = config
        self.why = why  # why the plugin is active (vsnap_qual.plugin.active)
        self.qual = qual
        self.catalogue = catalogue  # the session's faults: built-in and added (pytest_vsnap_add_faults)
        self.store = EvidenceStore(qual.report_dir, Redactor(qual.secret_values()), deferred=True)
        self.preflight: PreflightResult | None = None  # what preflight learned (pytest_sessionstart)
        self.session_record: model.SessionRecord | None = None  # written first when the run starts
        self.peers = Peers()  # what this process's lanes hand each other (and, lanes at once, other processes')
        self.lanes_run: set[str] = set()  # the lanes whose tests ran in this process
        self.deselected: list[pytest.Item] = []  # what the user's selection left out (pytest_deselected)
        self.suite_problem: str | None = None  # a suite out of the procedure's order (collected, then nothing runs)

    def hold_session(self, result: PreflightResult, record: model.SessionRecord) -> None:
        """What preflight learned and the session record: written, with the session's files, by whichever
        process's lane starts first (:meth:`EvidenceStore.stage`)."""
        self.preflight = result
        self.session_record = record
        overlap = record.get("overlap")
        if overlap is not None and overlap["scope"] == "lane":  # each lane on a worker of its own (issue 45)
            self.peers.handoff = Handoff(handoff_dir(self.qual), wait_s=handoff_wait(self.qual))
        self.store.stage([record], _session_files(self.qual, result, record))

    def register_junit_names(self) -> None:
        """Every process: workers tag the items, the controller writes the JUnit file. Registered as the session
        starts, after pytest's own JUnit writer and terminal reporter (see ``vsnap_qual.plugin.pytest_configure``
        on hook order)."""
        from vsnap_qual.report.junit import JunitNames

        self.config.pluginmanager.register(JunitNames(self.qual.report_dir, item_step), "vsnap_qual.junit")

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Every test asking for ``vsnap_lane`` runs once per runner × arm (one xdist worker owns a runner: both
        arms, head then base, so the base arm can be compared with the head arm); every test asking for
        ``vsnap_fault`` once per fault of the session's catalogue."""
        if "vsnap_lane" in metafunc.fixturenames:
            lanes = self.qual.lanes
            metafunc.parametrize("vsnap_lane", [pytest.param(lane, id=lane.name) for lane in lanes], scope="class")
        if "vsnap_fault" in metafunc.fixturenames:
            faults = self.catalogue.faults
            metafunc.parametrize("vsnap_fault", [pytest.param(f, id=f.id) for f in faults])

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected.extend(items)

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Generator[None, Any, Any]:
        """The lifecycle suite's tests run in the procedure's order (``procedure.LIFECYCLE``), each lane's: a suite
        whose tests are out of it does not collect, its error naming the test out of order."""
        report = yield
        found = [entry for entry in report.result or () if isinstance(entry, pytest.Item)] if report.passed else []
        problem = out_of_order(found)
        if problem is not None:
            self.suite_problem = problem
            report.outcome, report.longrepr, report.result = "failed", f"usage error: {problem}", []
        return report

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """A suite out of the procedure's order runs nothing, nothing starts (also on xdist's workers, which go on
        past a collection error)."""
        if self.suite_problem is not None:
            items[:] = []
        elif self.qual.shard is not None and not self.qual.lanes:
            items[:] = []  # an empty shard (issue 46): its lanes' tests were never made; nothing else runs either

    @pytest.hookimpl(tryfirst=True)  # before xdist's worker sends the collected ids (the plan line waits on them)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Record what this run selected and what the user's selection left out (``-k``, ``-m``, ``--deselect``,
        paths): the verdict's coverage compares it with what a full qualification requires; the plan line says
        it (:meth:`selected`)."""
        config = self.config
        selected = [label for item in session.items if (label := item_step(item))]
        if self.peers.handoff is not None:  # a lane waits only for the steps this run runs
            found = (item_lane_step(item) for item in session.items)
            self.peers.handoff.expected = frozenset((lane.name, step) for lane, step in filter(None, found))
        deselected = [label for item in self.deselected if (label := item_step(item))]
        self.selected(list(dict.fromkeys(selected)), len(set(deselected)))
        self.store.write(
            model.PlanRecord(
                kind="plan",
                time=utc_now(),
                worker=os.environ.get("PYTEST_XDIST_WORKER", "main"),
                selected=list(dict.fromkeys(selected)),
                deselected=list(dict.fromkeys(deselected)),
                selection={
                    "args": [str(a) for a in config.args],
                    "keyword": config.option.keyword or "",
                    "markexpr": config.option.markexpr or "",
                    "deselect": [str(d) for d in (config.getoption("deselect", None) or [])],
                },
            )
        )

    def selected(self, labels: list[str], deselected: int) -> None:
        """The steps this process collected, as ``runner/arm/step`` (the session prints the plan line; an xdist
        worker hands them to the controller)."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """A lane's first step begins (its box starts in this setup): the run starts writing its report
        directory."""
        if item_lane_step(item) is not None:
            self.store.open()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        """Tag a suite item's reports with its lane and step (the controller's progress lines); attach the lane's
        recent logs to failing reports."""
        report = yield
        found = item_lane_step(item)
        if found is not None:
            progress.mark_report(report, found[0].name, found[1])
            self.lanes_run.add(found[0].name)
            if call.when == "teardown" and self.peers.handoff is not None:
                self.peers.handoff.ended(found[0].name, found[1])  # a lane of another process may wait for it
        step = getattr(item, "funcargs", {}).get("vsnap_step")
        if report.failed and call.when == "call" and isinstance(step, VsnapStep):
            recorder = step.lane.recorder
            for path in recorder.last_logs[-2:]:
                try:
                    text = (recorder.store.report_dir / path).read_text(errors="replace")[-4000:]
                except OSError:
                    continue
                report.sections.append((f"vsnap log {path}", text))
        return report


def handoff_dir(qual: QualConfig) -> Path:
    """The directory the session's processes hand lanes' answers on through (``lane.handoff``)."""
    return qual.report_dir / "handoff"


def handoff_wait(qual: QualConfig) -> float:
    """The longest a lane waits for a step of another process's lane to end: every step timeout once, longer than
    any one step can take (a step that ends, however, says so at once; so does the other process's end)."""
    return sum(qual.timeouts.values())


def _session_files(qual: QualConfig, result: PreflightResult, record: model.SessionRecord) -> Callable[[], None]:
    """What the run writes into its report directory when its first lane starts, before the session record:
    preflight's answer and the copies of the probe (and the CPU smoke platform) that every lane binds, checked
    against what the session record says of them."""

    def write() -> None:
        (qual.report_dir / PREFLIGHT_FILE).write_text(result.to_json())
        probe_copy.copy_probe(qual.probe_dir, qual.report_dir, expected=record["probe"])
        if "smoke" in record:
            probe_copy.copy_smoke(qual.report_dir, expected=record["smoke"])

    return write


#: the active session's object in this process (absent: vsnap-qual is not active in this session)
PLUGIN_KEY = pytest.StashKey[VsnapProcess]()


def process_of(config: pytest.Config) -> VsnapProcess | None:
    """This process's part of the active session, None when vsnap-qual is not active in it."""
    return config.stash.get(PLUGIN_KEY, None)
