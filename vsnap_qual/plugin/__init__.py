"""The pytest plugin (entry point ``vsnap_qual = vsnap_qual.plugin``): options, validation before anything starts,
lanes as fixtures, evidence, reports.

Whether it acts at all is decided in one place, :func:`active` (docs/design.md §6, "Active"). Inactive (pytest
run on any other project where vsnap-qual is installed), it only registers its ``--vsnap-*`` options: no signal
handler, header line, environment read, marker, hook or evidence. Active, ``pytest_configure`` builds one object
that owns the session's state and whose methods are the session's hooks: a :class:`VsnapSession` on the controller
(or in a run without xdist), which runs preflight and writes the reports, or a :class:`VsnapWorker` on each xdist
worker. Only what pytest must find here stays at module level: the options, vsnap-qual's own hooks, configure and
unconfigure, and the ``vsnap_*`` fixtures, which reach the object through :func:`process_of`.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest

from vsnap_qual import hookspecs, options, procedure, progress, runtimes
from vsnap_qual.box import owner_label
from vsnap_qual.config import LaneSpec, ParsedOptions, QualConfig, new_run_id
from vsnap_qual.contract import Purpose
from vsnap_qual.evidence import EvidenceStore
from vsnap_qual.faults import FaultCatalogue, once
from vsnap_qual.lane import FaultState, LaneEnvironment, LaneRun, LifecycleState
from vsnap_qual.lane.state import ArtifactState
from vsnap_qual.model import RunsOnce
from vsnap_qual.plugin.items import fault_lanes, item_fault, item_lane_step, lane_fault_order
from vsnap_qual.plugin.lane_scheduling import refuse_dist_each, xdist_workers
from vsnap_qual.plugin.process import PLUGIN_KEY, VsnapProcess, log, process_of
from vsnap_qual.plugin.session import VsnapSession
from vsnap_qual.plugin.step import VsnapStep, step_body
from vsnap_qual.plugin.worker import VsnapWorker
from vsnap_qual.procedure import Fault
from vsnap_qual.recorder import StepRecorder
from vsnap_qual.run.configure import build_config
from vsnap_qual.run.preflight_result import PreflightResult

__all__ = [
    "PLUGIN_KEY",
    "VsnapProcess",
    "VsnapSession",
    "VsnapStep",
    "VsnapWorker",
    "active",
    "lane_for",
    "process_of",
]

SUITES_MARK = "VSNAP_SUITES"  # a module-level True in the qualification suites' conftest.py
SUITES_PACKAGE = "vsnap_qual.suites"  # the suites as installed (``pytest --pyargs vsnap_qual.suites``)


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


def pytest_configure(config: pytest.Config) -> None:
    """Active: validate every input, then build this process's session object and register it.

    Hook order: the object is registered here, before pytest's own plugin objects (its terminal reporter, its
    JUnit writer, xdist's ``DSession``: each is registered by a configure hook that runs after this one), so
    pytest calls its hooks where it called this module's: its ``pytest_sessionstart`` before xdist starts the
    workers, its ``pytest_sessionfinish`` after xdist stopped them and pytest wrote its JUnit file. The plugins
    that must come after the terminal reporter (the step lines, the JUnit names) are registered as the session
    starts."""
    why = active(config)
    if why is None or _only_informs(config):
        return
    parsed: ParsedOptions = {**options.resolve(config), "vsnap_workers": xdist_workers(config)}  # runners at once
    workerinput = getattr(config, "workerinput", None)
    run_id = (workerinput or {}).get("vsnap_run_id") or new_run_id()
    qual = build_config(parsed, Path(config.invocation_params.dir), run_id=run_id)
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        # SIGTERM (CI cancel, `timeout`, pkill) would skip every finalizer: make it an interrupt, so the
        # containers this session started are removed, vsnap-qual's lanes or a test's own
        signal.signal(signal.SIGTERM, _sigterm_to_interrupt)
    catalogue = FaultCatalogue.builtin()
    config.hook.pytest_vsnap_add_faults(catalogue=catalogue)
    catalogue.repeat_kills(qual.chaos)
    refuse_dist_each(config)
    process: VsnapProcess = (
        VsnapSession(config, why, qual, catalogue) if workerinput is None else VsnapWorker(config, why, qual, catalogue)
    )
    config.stash[PLUGIN_KEY] = process
    config.pluginmanager.register(process, process.NAME)


@pytest.hookimpl(trylast=True, specname="pytest_configure")
def pytest_configure_markers(config: pytest.Config) -> None:
    """Active: vsnap-qual's markers, declared after pytest's and the other plugins' own (``pytest --markers``
    lists them in that order)."""
    if process_of(config) is not None:
        config.addinivalue_line("markers", "fault: an injected-failure qualification test")
        config.addinivalue_line(
            "markers", "vsnap_step(name): the procedure step a suite test runs (vsnap_qual/procedure.py)"
        )


def pytest_unconfigure(config: pytest.Config) -> None:
    process = config.stash.get(PLUGIN_KEY, None)
    if process is not None:
        del config.stash[PLUGIN_KEY]
        config.pluginmanager.unregister(process)


@pytest.fixture(scope="session")
def vsnap_config(request: pytest.FixtureRequest) -> QualConfig:
    """The validated qualification configuration (options → config)."""
    return _process(request).qual


def _process(request: pytest.FixtureRequest) -> VsnapProcess:
    process = process_of(request.config)
    if process is None:
        raise pytest.UsageError(
            "vsnap-qual is not active in this session: pass --vsnap-image (and --vsnap-model, "
            "--vsnap-revision) or set them in the ini file (VSNAP_* variables alone do not activate it)"
        )
    return process


@pytest.fixture(scope="session")
def vsnap_store(request: pytest.FixtureRequest, vsnap_config: QualConfig) -> EvidenceStore:
    """The run's evidence store (``<report dir>/evidence.jsonl``)."""
    return _process(request).store


@pytest.fixture(scope="session")
def vsnap_preflight(request: pytest.FixtureRequest, vsnap_config: QualConfig) -> PreflightResult:
    """What preflight learned: image IDs, the image's vllm package layout, GPUs, overlay files."""
    preflight = _process(request).preflight
    assert preflight is not None, "preflight runs as the session starts, before any fixture"
    return preflight


@pytest.fixture(scope="session")
def vsnap_runtime(vsnap_config: QualConfig) -> Iterator[runtimes.Runtime]:
    """Where this process's lanes run (``--vsnap-runtime``); this process's leftovers are swept at the end."""
    runtime = runtimes.create(vsnap_config.runtime, runtimes.settings_for(vsnap_config))
    yield runtime
    runtime.sweep(session=vsnap_config.run_id, owner=owner_label())  # this process's leftovers only
    runtime.close()


@pytest.fixture(scope="session")
def vsnap_faults(request: pytest.FixtureRequest, vsnap_config: QualConfig) -> FaultCatalogue:
    """The session's faults: the built-in table and those added through the ``pytest_vsnap_add_faults`` hook."""
    return _process(request).catalogue


#: what the lane registry holds for a (lane, purpose): the lane, its environment while its box starts, or why it
#: could not start
Lanes = LaneRun[Any] | LaneEnvironment | BaseException
S = TypeVar("S", bound=ArtifactState)


@pytest.fixture(scope="session")
def vsnap_lanes(vsnap_runtime: runtimes.Runtime) -> Iterator[dict[tuple[str, str], Lanes]]:
    """Every lane this process started, by (lane, purpose) (its environment while its box starts): a lane lives
    until the session ends, whatever order its steps run in; its box is always removed."""
    registry: dict[tuple[str, str], Lanes] = {}
    yield registry
    for found in registry.values():
        if isinstance(found, (LaneRun, LaneEnvironment)):
            found.remove()


def lane_for(request: pytest.FixtureRequest, spec: LaneSpec, purpose: Purpose, state: Callable[[], S]) -> LaneRun[S]:
    """The lane, starting its box on first use with a new ``state`` (a failed start is reported to every step)."""
    registry: dict[tuple[str, str], Lanes] = request.getfixturevalue("vsnap_lanes")
    key = (spec.name, purpose)
    if key in registry:
        found = registry[key]
        if not isinstance(found, LaneRun):
            pytest.fail(f"{spec.name} {purpose} lane could not start: {found}", pytrace=False)
        return cast(LaneRun[S], found)
    qual: QualConfig = request.getfixturevalue("vsnap_config")
    pre: PreflightResult = request.getfixturevalue("vsnap_preflight")
    runtime: runtimes.Runtime = request.getfixturevalue("vsnap_runtime")
    store: EvidenceStore = request.getfixturevalue("vsnap_store")
    environment = LaneEnvironment(
        config=qual,
        spec=spec,
        recorder=StepRecorder(spec=spec, store=store, purpose=purpose),
        runtime=runtime,
        overlay=pre.overlay if spec.overlaid else [],
        session_id=qual.run_id,
    )
    registry[key] = environment  # removed at the end, whatever its start does
    store.open()  # open already (pytest_runtest_setup), unless a test outside the suites' steps starts a lane
    log.info("%s %s lane: starting (%s)", spec.name, purpose, spec.image)
    try:
        environment.start(runtime.image(spec.image, pre), pre.packages[spec.image], pre.gpus_for(spec))
    except Exception as exc:
        log.warning("%s %s lane could not start: %s", spec.name, purpose, exc)
        registry[key] = exc
        environment.remove()
        raise
    lane = LaneRun.over(environment, state(), _process(request).peers)
    registry[key] = lane
    return lane


@pytest.fixture
def vsnap_step(request: pytest.FixtureRequest, vsnap_lane: LaneSpec) -> VsnapStep:
    """The step a suite test runs, read from its ``vsnap_step`` mark (``fault:<id>`` of its ``vsnap_fault``): not
    applicable to this lane where the procedure's table says so (``procedure.Step.not_applicable``: the arm, the
    overlay, the unit command); else its lane (the lifecycle's or the faults' box, started on first use), its body
    (the table entry's ``run``) and the test's node id, for :meth:`VsnapStep.run`."""
    found = item_lane_step(request.node)
    if found is None:
        pytest.fail(f"{request.node.nodeid}: vsnap_step needs a vsnap_step(<step>) mark naming the step", pytrace=False)
    entry = procedure.step(found[1])
    qual = _process(request).qual
    why = entry.not_applicable(vsnap_lane.arm, vsnap_lane.overlaid, unit=bool(qual.unit_command))
    if why is not None:
        progress.not_applicable(f"{vsnap_lane.name}: {why}")
    body = step_body(entry)
    fault = item_fault(request.node)
    placement = once.Placement()
    if fault is not None:
        placement = _placement(request, vsnap_lane, fault)
        if placement.runs_on is not None:  # a kind refused before any engine starts: another runner's lane runs it
            _not_run_here(request, vsnap_lane, entry.name, fault, placement.runs_on)
    elif entry.name == procedure.FAULT_ARTIFACT:
        elsewhere = _faults_elsewhere(request, vsnap_lane)
        if elsewhere:  # recorded, without starting this lane's box
            with StepRecorder(spec=vsnap_lane, store=_process(request).store, purpose="faults").step(
                entry.name, request.node.nodeid, requires=()
            ):
                progress.not_applicable(f"{vsnap_lane.name}: every fault selected for this lane {elsewhere}")
    if entry.purpose == "faults":
        lane: LaneRun[Any] = lane_for(request, vsnap_lane, "faults", FaultState)
    else:
        lane = lane_for(request, vsnap_lane, "lifecycle", LifecycleState)
    given = (
        (fault, _process(request).catalogue, _lane_order(request, vsnap_lane), placement.stands_for)
        if fault is not None and procedure.is_fault_step(entry.name)
        else ()
    )
    return VsnapStep(entry, lane, request.node.nodeid, body, given)


#: each fault's selected lanes (``plugin.items.fault_lanes``), read once per session
_FAULT_LANES = pytest.StashKey[dict[str, list[LaneSpec]]]()


def _placement(request: pytest.FixtureRequest, spec: LaneSpec, fault: Fault) -> once.Placement:
    """Where ``fault`` runs for the lane ``spec`` (``faults.once.place``): its twins are the lanes of the same arm
    and variant whose step of it the run selected, in ``--vsnap-runners``' order."""
    qual = _process(request).qual
    selected = request.session.stash.get(_FAULT_LANES, None)
    if selected is None:  # the selection is made by now: read once
        selected = request.session.stash[_FAULT_LANES] = fault_lanes(request.session.items)
    twins = [lane for lane in selected.get(fault.id, []) if lane.arm == spec.arm and lane.variant == spec.variant]
    twins.sort(key=lambda lane: qual.runners.index(lane.runner) if lane.runner in qual.runners else len(qual.runners))
    return once.place(fault.kind, spec.name, [t.name for t in twins], every=qual.fault_runners == "every")


def _lane_order(request: pytest.FixtureRequest, spec: LaneSpec) -> tuple[str, ...]:
    """The lane's fault ids as the run selected them, less those another runner's lane runs (``faults.group``'s
    order: the refusals that follow one another on this lane)."""
    catalogue = _process(request).catalogue
    order = lane_fault_order(request.session.items, spec.name)
    return tuple(
        f for f in order if (found := catalogue.get(f)) is None or _placement(request, spec, found).runs_on is None
    )


def _faults_elsewhere(request: pytest.FixtureRequest, spec: LaneSpec) -> str | None:
    """Where every fault selected for this lane runs on another lane (its fault artifact would serve none), in
    words; None where one runs here, or none is selected."""
    catalogue = _process(request).catalogue
    where = []
    for fault_id in lane_fault_order(request.session.items, spec.name):
        found = catalogue.get(fault_id)
        runs_on = _placement(request, spec, found).runs_on if found is not None else None
        if runs_on is None:
            return None
        where.append(runs_on)
    if not where:
        return None
    return f"{once.WHY}; they run on {', '.join(dict.fromkeys(where))}"


def _not_run_here(request: pytest.FixtureRequest, spec: LaneSpec, step: str, fault: Fault, runs_on: str) -> None:
    """The step of a fault another runner's lane runs (``faults.once``): recorded as not applicable, naming that
    lane, without starting this lane's box."""
    recorder = StepRecorder(spec=spec, store=_process(request).store, purpose="faults")
    with recorder.step(step, request.node.nodeid, requires=()) as rec:
        rec.results["kind"] = fault.kind
        rec.results["runs_once"] = RunsOnce(why=once.WHY, ran_on=runs_on)
        progress.not_applicable(f"{spec.name}: {once.not_run_words(runs_on)}")
