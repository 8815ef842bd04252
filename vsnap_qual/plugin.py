"""The pytest plugin: options, validation before anything starts, lanes as fixtures, evidence, reports.

Whether it acts at all is decided in one place, :func:`active` (docs/design.md §6, "Active"). Inactive (pytest
run on any other project where vsnap-qual is installed), it only registers its ``--vsnap-*`` options: no signal
handler, header line, environment read, marker or evidence. Only the controller process (not xdist workers) runs
preflight and writes the reports; with ``-n`` the plugin's own xdist scheduler keeps each runner's lanes on one
worker (:class:`LaneScheduling`).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import socket
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from vsnap_qual import (
    __version__,
    hookspecs,
    invocation,
    model,
    options,
    plan,
    probe_copy,
    procedure,
    progress,
    runtimes,
)
from vsnap_qual.box import RuntimeFailure, owner_label
from vsnap_qual.clock import utc_now
from vsnap_qual.config import Lane, QualConfig, build_config, new_run_id
from vsnap_qual.contract import Purpose
from vsnap_qual.evidence import EvidenceStore, ReportDirInUse, redact_tree, refuse_used_report_dir
from vsnap_qual.faults import FaultCatalogue
from vsnap_qual.lane import LaneRun
from vsnap_qual.preflight import check_report_dir, run_preflight
from vsnap_qual.preflight_result import PreflightError, PreflightResult
from vsnap_qual.recorder import StepRecorder
from vsnap_qual.redact import Redactor
from vsnap_qual.steps import OrdinaryReference

CONFIG_KEY = pytest.StashKey[QualConfig]()
PREFLIGHT_KEY = pytest.StashKey[PreflightResult]()
SESSION_KEY = pytest.StashKey[model.SessionRecord]()  # the session record, written first when the run starts
STORE_KEY = pytest.StashKey[EvidenceStore]()
FAULTS_KEY = pytest.StashKey[FaultCatalogue]()  # the session's faults: built-in and added (pytest_vsnap_add_faults)
PEERS_KEY = pytest.StashKey[dict[str, OrdinaryReference]]()  # lane name -> ordinary reference, within one worker
UNIT_PEERS_KEY = pytest.StashKey[dict[str, dict[str, model.UnitOutcome]]]()  # lane name -> unit outcomes, ditto
ACTIVE_KEY = pytest.StashKey[str]()  # why the plugin is active (vsnap_qual.plugin.active)
PREFLIGHT_FILE = "preflight.json"
SUITES_MARK = "VSNAP_SUITES"  # a module-level True in the qualification suites' conftest.py
SUITES_PACKAGE = "vsnap_qual.suites"  # the suites as installed (``pytest --pyargs vsnap_qual.suites``)


log = progress.log  # logger "vsnap_qual": the harness's own messages


def _lane_list(qual: QualConfig) -> str:
    return ", ".join(lane.name for lane in qual.lanes)


def _is_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """vsnap-qual's own hooks (``vsnap_qual.hookspecs``): ``pytest_vsnap_add_faults`` adds fault points."""
    pluginmanager.add_hookspecs(hookspecs)


def active(config: pytest.Config) -> str | None:
    """Why vsnap-qual acts in this session, or None when it must stay invisible. The one rule:

    1. a ``--vsnap-*`` option on the command line (or in ``addopts``);
    2. a ``vsnap_*`` key of the pytest configuration file set to a value other than its default;
    3. the session collects vsnap-qual's suites: their ``conftest.py`` is an initial conftest (``pytest suites/``
       from a checkout) or ``--pyargs vsnap_qual.suites``;
    4. an xdist worker of an active controller.

    The environment alone never activates it (``VSNAP_IMAGE`` exported changes no other project's run); once
    active, ``VSNAP_*`` variables are read as documented (command line > environment > ini > default).
    """
    if getattr(config, "workerinput", {}).get("vsnap_run_id"):
        return "worker of an active controller"
    given = [
        spec.given_as(value).split("=", 1)[0]
        for spec in options.OPTIONS
        if (value := config.getoption(spec.dest, None)) is not None
    ]
    if given:
        return f"option {given[0]}"
    for spec in options.OPTIONS:
        value = str(config.getini(spec.dest) or "").strip()
        if value and value != spec.default:
            return f"ini {spec.dest}"
    if any(getattr(plugin, SUITES_MARK, False) is True for plugin in config.pluginmanager.get_plugins()):
        return "the qualification suites are collected"
    if config.getoption("pyargs", False) and any(_is_suites_arg(str(arg)) for arg in config.args):
        return "the qualification suites are collected (--pyargs)"
    return None


def _is_suites_arg(arg: str) -> bool:
    name = arg.split("::", 1)[0]
    return name == SUITES_PACKAGE or name.startswith(SUITES_PACKAGE + ".")


def _only_informs(config: pytest.Config) -> bool:
    """``--help`` and ``--version``: pytest shows the help (every ``--vsnap-*`` option in it) or its version and
    exits; nothing is validated, started or written."""
    return bool(getattr(config.option, "help", False) or getattr(config.option, "version", 0))


def _sigterm_to_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)  # "SIGTERM": the words the evidence keeps


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    why = active(config)
    if why is None or _only_informs(config):
        return
    config.addinivalue_line("markers", "fault: an injected-failure qualification test")
    config.addinivalue_line(
        "markers", "vsnap_step(name): the procedure step a suite test runs (vsnap_qual/procedure.py)"
    )
    parsed = options.resolve(config)
    workerinput = getattr(config, "workerinput", {})
    run_id = workerinput.get("vsnap_run_id") or new_run_id()
    qual = build_config(parsed, Path(config.invocation_params.dir), run_id=run_id)
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        # SIGTERM (CI cancel, `timeout`, pkill) would skip every finalizer: make it an interrupt, so the
        # containers this session started are removed, vsnap-qual's lanes or a test's own
        signal.signal(signal.SIGTERM, _sigterm_to_interrupt)
    config.stash[CONFIG_KEY] = qual
    catalogue = FaultCatalogue.builtin()
    config.hook.pytest_vsnap_add_faults(catalogue=catalogue)
    catalogue.repeat_kills(qual.chaos)
    config.stash[FAULTS_KEY] = catalogue
    _CONFIG["config"] = config
    workers = config.getoption("numprocesses", None) if config.pluginmanager.hasplugin("xdist") else None
    if workers and config.getoption("dist", "no") == "each":
        raise pytest.UsageError(
            f"-n {workers} --dist each would run every lane's steps on every worker at once; drop --dist "
            "(vsnap-qual schedules the workers itself: each runner's lanes on one worker)"
        )
    if _is_controller(config):
        try:
            refuse_used_report_dir(qual.report_dir)
            check_report_dir(qual.report_dir)
        except (PreflightError, ReportDirInUse) as exc:
            raise pytest.UsageError(str(exc)) from None
    config.stash[STORE_KEY] = EvidenceStore(qual.report_dir, Redactor(qual.secret_values()), deferred=True)
    from vsnap_qual.report.junit import JunitNames  # every process: workers tag the items, the controller writes

    config.pluginmanager.register(JunitNames(qual.report_dir, _item_step), "vsnap_qual.junit")
    if _is_controller(config):
        progress.register(config, [lane.name for lane in qual.lanes])
    config.stash[ACTIVE_KEY] = why


def lane_group(nodeid: str, lanes: Sequence[Lane]) -> str | None:
    """The worker group of a suite item: its lane's runner (both arms of a runner, and its variants' lanes, share
    a worker and its GPU, so the base arm compares with the head arm), from the lane id among its parameters
    (``[v1-head]``, ``[v2-base-wake-raise]``, ``[v1-head-lora]``); None for any other test."""
    last = nodeid.rsplit("::", 1)[-1]
    if "[" not in last or not last.endswith("]"):
        return None
    parts = last[last.index("[") + 1 : -1].split("-")
    for lane in sorted(lanes, key=lambda lane: -len(lane.name)):  # v1-head-lora before v1-head
        name = lane.name.split("-")
        if any(parts[i : i + len(name)] == name for i in range(len(parts) - len(name) + 1)):
            return f"vsnap-runner-{lane.runner}"
    return None


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``-n``: xdist's scope scheduling with each runner's lanes as one scope (node ids stay pytest's own:
    no ``@group`` suffix); every other test is a scope of its own."""
    qual = config.stash.get(CONFIG_KEY, None)
    if qual is None:
        return None
    from xdist.scheduler import LoadScopeScheduling

    lanes = qual.lanes

    class LaneScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no type information
        def _split_scope(self, nodeid: str) -> str:
            return lane_group(nodeid, lanes) or nodeid

    return LaneScheduling(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist hook: hand the run id, what preflight learned and the session record to the workers (after the
    controller's preflight: xdist starts its workers in its own, later, ``pytest_sessionstart``)."""
    qual = node.config.stash.get(CONFIG_KEY, None)
    if qual is not None:
        node.workerinput["vsnap_run_id"] = qual.run_id
        if PREFLIGHT_KEY in node.config.stash:
            node.workerinput["vsnap_preflight"] = node.config.stash[PREFLIGHT_KEY].to_json()
            node.workerinput["vsnap_session"] = json.dumps(node.config.stash[SESSION_KEY], default=str)


def pytest_report_header(config: pytest.Config) -> list[str]:
    qual = config.stash.get(CONFIG_KEY, None)
    if qual is None:
        return []  # inactive: invisible
    catalogue = config.stash[FAULTS_KEY]
    lanes = [(lane.column, lane.arm, lane.overlaid and qual.overlay is not None) for lane in qual.lanes]
    required = procedure.required(lanes, catalogue.ids, unit=bool(qual.unit_command))
    workers = config.getoption("numprocesses", None) if config.pluginmanager.hasplugin("xdist") else None
    runners = len({lane.runner for lane in qual.lanes})
    line = plan.plan_line(
        [lane.name for lane in qual.lanes], required, catalogue.ids, qual.fault_timeout, qual.observe_s,
        min(int(workers or 1), runners), plan.previous_run(qual.report_dir.parent, qual.report_dir),
    )  # fmt: skip
    return [
        f"vsnap-qual {__version__}: image {qual.image}, model {qual.model}@{qual.revision[:12]}, "
        f"lanes {_lane_list(qual)}, report {qual.report_dir}",
        f"vsnap-qual {line}",
    ]


def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    qual = config.stash.get(CONFIG_KEY, None)
    if qual is None:
        return
    store = config.stash[STORE_KEY]
    if _is_controller(config):
        log.info(
            "active (%s): run %s, lanes %s, report %s",
            config.stash[ACTIVE_KEY], qual.run_id, _lane_list(qual), qual.report_dir,
        )  # fmt: skip
        if qual.doctor:
            _doctor_or_usage_error(config)
        runtime = runtimes.create(qual.runtime, qual.runtime_settings(say=progress.say_line(config)))
        try:
            result = run_preflight(qual, runtime)
        except PreflightError as exc:
            raise pytest.UsageError(str(exc)) from None
        log.info("preflight passed: images %s; GPUs %s; overlay files %d", result.images, result.gpus,
                 len(result.overlay))  # fmt: skip
        probe = probe_copy.describe_probe(qual.probe_dir)  # what every lane binds: copied when the first starts
        smoke = probe_copy.describe_smoke() if qual.cpu_smoke else None
        swept = runtime.sweep()  # boxes of owners that are gone
        facts = runtime.host_facts()
        runtime.close()
        if swept:
            log.info("removed %d lane(s) left by sessions that are gone: %s", len(swept), ", ".join(map(str, swept)))
        session_record = model.SessionRecord(
            kind="session",
            time=utc_now(),
            run_id=qual.run_id,
            harness_version=__version__,
            started=utc_now(),
            options=qual.public_options(),
            preflight={
                "gpus": result.gpus,
                "lane_gpus": result.lane_gpus,
                "images": result.images,
                "packages": result.packages,
                "pulls": result.pulls,
            },
            coverage=_required_coverage(qual, result, config.stash[FAULTS_KEY]),
            probe=probe,
            host={
                "kernel": platform.release(),
                "hostname": socket.gethostname(),
                "python": platform.python_version(),
                "docker_version": facts.get("docker_version"),
                "machine": platform.machine(),
                "cpus": os.cpu_count(),
            },
        )
        if smoke is not None:
            session_record["smoke"] = smoke
        # how to run it again (summary.md): the command as given, and the harness's own commit
        session_record["invocation"] = invocation.invocation(
            config.invocation_params.args, config.invocation_params.dir, os.environ
        )
        source = invocation.harness_source()
        if source is not None:
            session_record["harness_source"] = source
    else:
        workerinput = getattr(config, "workerinput", {})
        result = PreflightResult.from_json(workerinput["vsnap_preflight"])
        session_record = json.loads(workerinput["vsnap_session"])
    config.stash[PREFLIGHT_KEY] = result
    config.stash[SESSION_KEY] = session_record
    store.stage([session_record], _session_files(qual, result, session_record))


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


def _required_coverage(qual: QualConfig, pre: PreflightResult, catalogue: FaultCatalogue) -> model.Coverage:
    """What a full qualification of this configuration runs: the verdict is a PASS only when all of it passed
    (or the user narrowed the selection, and then the verdict says what was left out)."""
    lanes = [(lane.column, lane.arm, lane.overlaid and bool(pre.overlay)) for lane in qual.lanes]
    return {
        "runners": list(qual.columns),
        "arms": list(dict.fromkeys(lane.arm for lane in qual.lanes)),
        "overlay": bool(pre.overlay),
        "faults": catalogue.ids,
        "observe_s": qual.observe_s,
        "request_shapes": list(qual.request_shapes),
        "required": procedure.required(lanes, catalogue.ids, unit=bool(qual.unit_command)),
    }


def _doctor_or_usage_error(config: pytest.Config) -> None:
    """``--vsnap-doctor``: the doctor's checks first; a failed required check stops the run before any lane."""
    from vsnap_qual import doctor

    results = doctor.run_checks(options.resolve(config))
    failed = [r for r in results if r.status == "FAIL" and r.required]
    if failed:
        raise pytest.UsageError("vsnap-qual doctor: " + "; ".join(r.line() for r in failed))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test asking for ``vsnap_lane`` runs once per runner × arm (one xdist worker owns a runner: both arms,
    head then base, so the base arm can be compared with the head arm); every test asking for ``vsnap_fault``
    once per fault of the session's catalogue."""
    qual = metafunc.config.stash.get(CONFIG_KEY, None)
    if qual is None:
        return  # inactive: the vsnap_config fixture says which options to set
    if "vsnap_lane" in metafunc.fixturenames:
        lanes = qual.lanes
        metafunc.parametrize("vsnap_lane", [pytest.param(lane, id=lane.name) for lane in lanes], scope="class")
    if "vsnap_fault" in metafunc.fixturenames:
        faults = metafunc.config.stash[FAULTS_KEY].faults
        metafunc.parametrize("vsnap_fault", [pytest.param(f, id=f.id) for f in faults])


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items and CONFIG_KEY in items[0].config.stash:
        config = items[0].config
        config.stash.setdefault(DESELECTED_KEY, []).extend(items)


def _item_lane_step(item: pytest.Item) -> tuple[Lane, str] | None:
    """The lane and step of a suite item (its ``vsnap_step`` mark and lane), None for any other test."""
    marker = item.get_closest_marker("vsnap_step")
    callspec = getattr(item, "callspec", None)
    lane = callspec.params.get("vsnap_lane") if callspec is not None else None
    if marker is None or not marker.args or not isinstance(lane, Lane):
        return None
    name = str(marker.args[0])
    if name == procedure.FAULT_PREFIX:
        fault = callspec.params.get("vsnap_fault") if callspec is not None else None
        if not isinstance(fault, procedure.Fault):
            return None
        name = fault.step
    return lane, name


def _item_step(item: pytest.Item) -> str | None:
    """``runner/arm/step`` of a suite item, None for any other test."""
    found = _item_lane_step(item)
    return procedure.label(found[0].column, found[0].arm, found[1]) if found else None


def pytest_collection_finish(session: pytest.Session) -> None:
    """Record what this run selected and what the user's selection left out (``-k``, ``-m``, ``--deselect``,
    paths): the verdict's coverage compares it with what a full qualification requires."""
    config = session.config
    store = config.stash.get(STORE_KEY, None)
    if store is None:
        return
    selected = [label for item in session.items if (label := _item_step(item))]
    deselected = [label for item in config.stash.get(DESELECTED_KEY, []) if (label := _item_step(item))]
    store.write(
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


def _failure_message(report: pytest.CollectReport | pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", None)
    if not message:
        lines = [line for line in str(report.longreprtext or "").splitlines() if line.strip()]
        message = lines[-1] if lines else "(no message)"
    return str(message)[:2000]


def _harness_error(config: pytest.Config, phase: model.HarnessPhase, nodeid: str, message: str) -> None:
    """A collection, setup or teardown error goes into the evidence (the controller sees every worker's)."""
    store = config.stash.get(STORE_KEY, None)
    if store is None or not _is_controller(config):
        return
    store.write(
        model.HarnessErrorRecord(kind="harness_error", time=utc_now(), phase=phase, nodeid=nodeid, message=message)
    )


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        config = _CONFIG.get("config")
        if config is not None:
            _harness_error(config, "collection", report.nodeid, _failure_message(report))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed and report.when in ("setup", "teardown"):
        config = _CONFIG.get("config")
        if config is not None:
            phase: model.HarnessPhase = "setup" if report.when == "setup" else "teardown"
            _harness_error(config, phase, report.nodeid, _failure_message(report))


@pytest.fixture(scope="session")
def vsnap_config(request: pytest.FixtureRequest) -> QualConfig:
    """The validated qualification configuration (options → config)."""
    qual = request.config.stash.get(CONFIG_KEY, None)
    if qual is None:
        raise pytest.UsageError(
            "vsnap-qual is not active in this session: pass --vsnap-image (and --vsnap-model, "
            "--vsnap-revision) or set them in the ini file (VSNAP_* variables alone do not activate it)"
        )
    return qual


@pytest.fixture(scope="session")
def vsnap_store(request: pytest.FixtureRequest, vsnap_config: QualConfig) -> EvidenceStore:
    """The run's evidence store (``<report dir>/evidence.jsonl``)."""
    return request.config.stash[STORE_KEY]


@pytest.fixture(scope="session")
def vsnap_preflight(request: pytest.FixtureRequest, vsnap_config: QualConfig) -> PreflightResult:
    """What preflight learned: image IDs, the image's vllm package layout, GPUs, overlay files."""
    return request.config.stash[PREFLIGHT_KEY]


@pytest.fixture(scope="session")
def vsnap_runtime(vsnap_config: QualConfig) -> Iterator[runtimes.Runtime]:
    """Where this process's lanes run (``--vsnap-runtime``); this process's leftovers are swept at the end."""
    runtime = runtimes.create(vsnap_config.runtime, vsnap_config.runtime_settings())
    yield runtime
    runtime.sweep(session=vsnap_config.run_id, owner=owner_label())  # this process's leftovers only
    runtime.close()


@pytest.fixture(scope="session")
def vsnap_faults(request: pytest.FixtureRequest, vsnap_config: QualConfig) -> FaultCatalogue:
    """The session's faults: the built-in table and those added through the ``pytest_vsnap_add_faults`` hook."""
    return request.config.stash[FAULTS_KEY]


@pytest.fixture(scope="session")
def vsnap_lanes(vsnap_runtime: runtimes.Runtime) -> Iterator[dict[tuple[str, str], LaneRun | BaseException]]:
    """Every lane this process started, by (lane, purpose): a lane lives until the session ends, whatever order
    its steps run in; its box is always removed."""
    registry: dict[tuple[str, str], LaneRun | BaseException] = {}
    yield registry
    for run in registry.values():
        if isinstance(run, LaneRun):
            run.remove()


def lane_for(request: pytest.FixtureRequest, lane: Lane, purpose: Purpose) -> LaneRun:
    """The lane's run, starting its box on first use (a failed start is reported to every step)."""
    registry: dict[tuple[str, str], LaneRun | BaseException] = request.getfixturevalue("vsnap_lanes")
    key = (lane.name, purpose)
    if key in registry:
        found = registry[key]
        if isinstance(found, BaseException):
            pytest.fail(f"{lane.name} {purpose} lane could not start: {found}", pytrace=False)
        return found
    qual: QualConfig = request.getfixturevalue("vsnap_config")
    pre: PreflightResult = request.getfixturevalue("vsnap_preflight")
    runtime: runtimes.Runtime = request.getfixturevalue("vsnap_runtime")
    store: EvidenceStore = request.getfixturevalue("vsnap_store")
    run = LaneRun(
        config=qual,
        lane=lane,
        recorder=StepRecorder(lane=lane, store=store, purpose=purpose),
        runtime=runtime,
        overlay=pre.overlay if lane.overlaid else [],
        session_id=qual.run_id,
        peers=request.config.stash.setdefault(PEERS_KEY, {}),
        unit_peers=request.config.stash.setdefault(UNIT_PEERS_KEY, {}),
    )
    registry[key] = run
    store.open()  # open already (pytest_runtest_setup), unless a test outside the suites' steps starts a lane
    log.info("%s %s lane: starting (%s)", lane.name, purpose, lane.image)
    try:
        run.start(runtime.image(lane.image, pre), pre.packages[lane.image], pre.gpus_for(lane))
    except Exception as exc:
        log.warning("%s %s lane could not start: %s", lane.name, purpose, exc)
        registry[key] = exc
        run.remove()
        raise
    return run


@pytest.fixture
def vsnap_lane_run(request: pytest.FixtureRequest, vsnap_lane: Lane) -> LaneRun:
    """One lifecycle lane: a long-lived container for one runner on one image arm."""
    return lane_for(request, vsnap_lane, "lifecycle")


@pytest.fixture
def vsnap_fault_lane(request: pytest.FixtureRequest, vsnap_lane: Lane) -> LaneRun:
    """A lane for injected failures: its own container and its own artifact (short snapshot timeout)."""
    return lane_for(request, vsnap_lane, "faults")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A lane's first step begins (its box starts in this setup): the run starts writing its report directory."""
    store = item.config.stash.get(STORE_KEY, None)
    if store is not None and _item_lane_step(item) is not None:
        store.open()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Tag a suite item's reports with its lane and step (the controller's progress lines); attach the lane's
    recent logs to failing reports."""
    report = yield
    found = _item_lane_step(item) if CONFIG_KEY in item.config.stash else None
    if found is not None:
        progress.mark_report(report, found[0].name, found[1])
    if report.failed and call.when == "call":
        for name in ("vsnap_lane_run", "vsnap_fault_lane"):
            run = getattr(item, "funcargs", {}).get(name)
            if isinstance(run, LaneRun) and run.recorder.last_logs:
                for path in run.recorder.last_logs[-2:]:
                    try:
                        text = (run.recorder.store.report_dir / path).read_text(errors="replace")[-4000:]
                    except OSError:
                        continue
                    report.sections.append((f"vsnap log {path}", text))
    return report


def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    """Ctrl-C, or SIGTERM (made an interrupt in ``pytest_configure``): the run was stopped, not failed; its
    ``session_end`` says so and the verdict is INTERRUPTED."""
    config = _CONFIG.get("config")
    if config is not None and CONFIG_KEY in config.stash:
        config.stash[INTERRUPTED_KEY] = str(excinfo.value) or "Ctrl-C"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    qual = config.stash.get(CONFIG_KEY, None)
    if qual is None or STORE_KEY not in config.stash:
        return
    store = config.stash[STORE_KEY]
    if not _is_controller(config):
        if store.started:
            store.open()  # this worker's held records (its plan) join the run another process started
        return
    with contextlib.suppress(RuntimeFailure):
        runtime = runtimes.create(qual.runtime, qual.runtime_settings())
        runtime.sweep(session=qual.run_id)
        runtime.close()
    if config.option.collectonly or not (store.started or store.holds("harness_error")):
        # nothing ran (refused, --co, nothing selected, stopped before the first lane): the report directory is
        # left as it was, no verdict is rendered and nothing is appended to a CI summary. A harness error (a
        # suite that does not collect, a fixture that breaks) is a failed run: its evidence is written.
        return
    store.open()
    redact_tree(qual.report_dir, store.redact)  # engine logs were written by the engine, unfiltered
    limited = _environment_limitations(store)
    end = model.SessionEndRecord(
        kind="session_end",
        time=utc_now(),
        ended=utc_now(),
        exitstatus=int(session.exitstatus),
        complete=True,
        environment_limitations=limited,
    )
    if INTERRUPTED_KEY in config.stash:
        end["interrupted"] = config.stash[INTERRUPTED_KEY]
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:  # what pytest's summary line will say: the report's header says the same
        end["pytest_counts"] = progress.pytest_counts(reporter.stats)
    store.write(end)
    from vsnap_qual.report import write_reports

    paths = write_reports(
        qual.report_dir, github_step_summary=True, annotate=qual.annotate, extra_secret_names=qual.secret_names
    )
    config.stash[REPORT_PATHS_KEY] = paths
    log.info("verdict %s; reports written to %s", paths.verdict, qual.report_dir)
    if paths.verdict != "pass" and session.exitstatus == 0:
        # a PARTIAL (a required step skipped or not reached) or failed verdict is not a qualification
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


REPORT_PATHS_KEY = pytest.StashKey[Any]()
DESELECTED_KEY = pytest.StashKey[list[pytest.Item]]()
INTERRUPTED_KEY = pytest.StashKey[str]()  # what stopped the run (pytest_keyboard_interrupt)
_CONFIG: dict[str, pytest.Config] = {}  # report hooks get no config argument


def _environment_limitations(store: EvidenceStore) -> list[str]:
    """Steps skipped because vLLM said this host or image cannot do them (see ``steps.LIMITATIONS``)."""
    from vsnap_qual.evidence import read_records

    return [
        f"{r.get('lane')} {r.get('step')}: {r.get('message')}"
        for r in read_records(store.path)
        if r.get("kind") == "step"
        and r.get("outcome") == "skipped"
        and str(r.get("message", "")).startswith("environment limitation")
    ]


def pytest_unconfigure(config: pytest.Config) -> None:
    if _CONFIG.get("config") is config:
        del _CONFIG["config"]


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    qual = config.stash.get(CONFIG_KEY, None)
    paths = config.stash.get(REPORT_PATHS_KEY, None)
    if qual is not None and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and _is_controller(config):
        _nothing_selected(terminalreporter, config, qual)
    if qual is None or paths is None:
        return
    from vsnap_qual.report.terminal import terminal_summary_lines

    terminalreporter.section("vsnap-qual")
    counts = progress.pytest_counts(terminalreporter.stats)
    for line in terminal_summary_lines(paths.results, paths, pytest_counts=counts):
        terminalreporter.write_line(line)
    for report in terminalreporter.stats.get("skipped", []):  # by-design skips are "not applicable", not here
        if getattr(report, "vsnap_step", None) is not None:
            reason = progress.without_lane(progress.skip_reason(report), report.vsnap_lane)
            terminalreporter.write_line(f"skipped: {report.vsnap_lane} {report.vsnap_step}: {reason}", yellow=True)
    for note in paths.notes:
        terminalreporter.write_line(f"note: {note}")
    for line in _environment_limitations(config.stash[STORE_KEY]):
        terminalreporter.write_line(f"not qualified (environment limitation): {line}", red=True)


def _nothing_selected(terminalreporter: Any, config: pytest.Config, qual: QualConfig) -> None:
    """pytest's exit 5 on the suites: say what the selection could have chosen."""
    from vsnap_qual.selection import nothing_selected_lines

    items = config.stash.get(DESELECTED_KEY, [])
    terminalreporter.section("vsnap-qual")
    for line in nothing_selected_lines(
        lanes=[lane.name for lane in qual.lanes],
        faults=config.stash[FAULTS_KEY].ids,
        tests=[getattr(item, "originalname", item.name) for item in items if _item_step(item)],
        keyword=config.option.keyword or "",
        markexpr=config.option.markexpr or "",
    ):
        terminalreporter.write_line(line, yellow=True)
