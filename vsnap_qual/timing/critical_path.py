"""Time to a verdict, from one finished run's ``results.json``: the measured wall beside the critical path, the
longest chain of work that must happen in order (issue 45).

The run's steps are the nodes of a graph. A **lane** is runner × arm × variant (``v1-head``, ``v1-head-lora``); it
has two **chains**, each a box that runs its steps one after another:

- the lifecycle chain: ``ordinary``, ``vs-head``, ``create``, ``inspect``, the restores, ``restart``, ``overlay``,
  ``unit`` (and ``fresh-box``, in a box of its own that holds the lifecycle's artifact), in the order they ran;
- the fault chain: ``fault-artifact`` (its own artifact, in its own box), then each ``fault:<id>``.

Across chains, a step waits only for what the code hands it from another chain (:data:`NEEDS`): the base arm's
``vs-head`` compares with the head arm's ``ordinary`` and its ``unit`` judges the head arm's ``unit``; a lane's
``fault:weight-tampered`` reads that lane's lifecycle ``ordinary`` reference. Nothing else of a lifecycle chain
reaches its fault chain: the fault chain has its own box, artifact and expectation, and its follow-up restores
compare with the artifact's own oracle. With unlimited machines each chain may run alone, so the critical path is
the longest path of that graph, weighed by the engine's own seconds (``engine_seconds``) or by the steps' seconds
(engine + harness). The same is computed with each lane's fault chain after its lifecycle chain, the order a
worker runs them today (``suites/conftest.py`` sorts the faults after the lifecycle).

Nothing is re-judged and no figure is invented: a step that ran without ``engine_seconds`` makes every engine
figure it would enter "not recorded" (never zero), and a window whose idle time was not recorded is said so. The
per-step arithmetic is :mod:`vsnap_qual.report.step_times`'s, as :mod:`vsnap_qual.timing.run_figures` sums it.
Pure: ``bench/critical_path.py`` reads the run and prints.
"""

from __future__ import annotations

import datetime as dt
import graphlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from vsnap_qual import model, procedure
from vsnap_qual.faults.catalogue import BUILTIN_FAULTS, FAULTS_BY_ID
from vsnap_qual.faults.kinds.hook import HookParams
from vsnap_qual.report import figures as shown
from vsnap_qual.report.step_times import idle_total, step_times, totals

Chain = Literal["lifecycle", "faults"]
Weight = Literal["engine", "steps"]
#: How the chains may be laid out: each chain alone (the floor), or each lane's fault chain after its lifecycle
#: chain (a lane on one worker, as today), lanes apart
Layout = Literal["chains apart", "faults after lifecycle"]
TOP: Final = 10
#: each weight as the views name it
WEIGHED_BY: Final[dict[str, str]] = {"engine": "engine seconds", "steps": "step seconds"}


@dataclass(frozen=True)
class Need:
    """A step of one chain that uses what a step of another chain delivered (read in the code, named in ``where``).
    ``arm`` is the arm of the needing lane (None: either); ``from_arm`` the arm of the lane it needs ("same": its
    own); ``from_chain`` and ``from_step`` what it needs there."""

    step: str
    arm: str | None
    from_arm: str
    from_chain: Chain
    from_step: str
    where: str


#: Every cross-chain need of the procedure, as the code has it.
NEEDS: Final[tuple[Need, ...]] = (
    Need(
        procedure.VS_HEAD, "base", "head", "lifecycle", procedure.ORDINARY,
        "steps.compare_arms: the head arm's ordinary reference, lane.peers.ordinary[lane.spec.peer('head')] "
        "(set by steps.ordinary_reference)",
    ),
    Need(
        procedure.UNIT, "base", "head", "lifecycle", procedure.UNIT,
        "steps.unit_step: the head arm's unit outcomes, lane.peers.unit[lane.spec.peer('head')]",
    ),
    Need(
        procedure.FAULT_ARTIFACT, None, "same", "lifecycle", procedure.RESTORE_1,
        "faults.tools.recovery_deadline: the fault artifact's recovery deadline is derived from the lane's own create "
        "and restores, lane.peers.measured[lane.spec.name] (set by steps.create and steps.restore); without them it "
        "is --vsnap-fault-timeout (faults.deadline)",
    ),
    Need(
        FAULTS_BY_ID["weight-tampered"].step, None, "same", "lifecycle", procedure.ORDINARY,
        "faults.WeightsInjector: the tensor to damage and the comparison from the lane's own ordinary reference, "
        "lane.peers.ordinary[lane.spec.name]; without it an exit-0 restore is a finding (tamper.problems)",
    ),
)  # fmt: skip


@dataclass(frozen=True)
class StepNode:
    """One step record, placed: its lane and chain, when it ran (seconds after the run's first step began)."""

    index: int
    lane: str
    arm: str
    chain: Chain
    step: str
    outcome: str
    worker: str | None
    started_s: float | None
    ended_s: float | None
    seconds: float
    #: the engine's own seconds; None where the record has no ``engine_seconds``
    engine_s: float | None
    #: the observation window's idle seconds (``results.soak.idle_s``); None where the step had no window
    idle_s: float | None
    #: the step had a window (``results.soak``) whose idle time was not recorded
    idle_unrecorded: bool
    #: the step's results, read as JSON (``results.json`` as written, of any harness version)
    results: Mapping[str, object] = field(repr=False, compare=False)

    @property
    def label(self) -> str:
        return f"{self.lane}/{self.step}"

    @property
    def ran(self) -> bool:
        """Whether the step took time (``step_times``' rule: a recorded, non-zero ``seconds``)."""
        return self.seconds > 0

    @property
    def harness_s(self) -> float | None:
        return None if self.engine_s is None else self.seconds - self.engine_s

    def weight(self, by: Weight) -> float | None:
        if by == "steps":
            return self.seconds
        return self.engine_s if self.ran else 0.0  # a step that took no time weighs nothing, recorded or not


@dataclass(frozen=True)
class ChainFigures:
    """One lane's chain: its steps' seconds, the engine's, the harness's (seconds − engine) and the windows' idle
    (a part of the harness's)."""

    lane: str
    chain: Chain
    workers: tuple[str, ...]
    steps: int
    started_s: float | None
    ended_s: float | None
    seconds: float
    engine_s: float | None
    harness_s: float | None
    idle_s: float | None
    #: the steps that ran without ``engine_seconds`` (their chain's engine and harness figures are not recorded)
    engine_missing: tuple[str, ...]
    #: the windows whose idle time was not recorded
    idle_unrecorded: tuple[str, ...]


@dataclass(frozen=True)
class Edge:
    """A step that waits for a step of another chain."""

    before: str
    after: str
    why: str


@dataclass(frozen=True)
class CriticalPath:
    """The longest path of the run's graph, by one weight and one layout; ``seconds`` None with ``missing`` saying
    why where a step on some path has no such weight."""

    weight: Weight
    layout: Layout
    seconds: float | None
    steps: tuple[str, ...]
    #: each step's weight on the path, in order
    step_seconds: tuple[float, ...]
    missing: str | None = None


@dataclass(frozen=True)
class WorkerLoad:
    """One worker of the measured run (``environment.worker``: xdist's ``gw0``, ``main`` without ``-n``)."""

    worker: str
    chains: tuple[str, ...]
    steps: int
    seconds: float
    started_s: float | None
    ended_s: float | None


@dataclass(frozen=True)
class Concurrency:
    """How the measured run overlapped its steps on its one machine."""

    workers: tuple[WorkerLoad, ...]
    #: the most steps that ran at one moment (each chain runs one step at a time: chains at once)
    most_at_once: int
    #: Σ step seconds / the time any step ran: how many ran at once on average
    mean_at_once: float | None
    #: the time any step ran (the union of the steps' intervals)
    busy_s: float
    #: Σ step seconds: the wall of one step at a time, as measured
    serial_s: float
    #: steps whose ``started``/``ended`` could not be read (left out of the overlap)
    untimed: tuple[str, ...] = ()


@dataclass(frozen=True)
class Wall:
    #: the qualification: the first step's start to the last step's end
    steps_s: float | None
    #: the session: its ``session`` record to its ``session_end`` (after preflight; ``run_figures``' wall)
    session_s: float | None
    #: pytest's own session time (``junit.xml``'s testsuite ``time``), where the caller found one
    pytest_s: float | None


@dataclass(frozen=True)
class StepTime:
    label: str
    seconds: float
    engine_s: float | None
    harness_s: float | None


@dataclass(frozen=True)
class FaultGroup:
    """Fault steps of one kind of cost: their seconds, the engine's, and their follow-up restores'."""

    name: str
    rule: str
    steps: tuple[str, ...]
    seconds: float
    engine_s: float | None
    followup_s: float
    #: fault ids that look like the group but do not meet its rule, with why (said, not counted)
    left_out: tuple[str, ...] = ()

    @property
    def n(self) -> int:
        return len(self.steps)


@dataclass(frozen=True)
class Followups:
    """The faults' follow-up restores (``results.followup_restore``)."""

    n: int
    seconds: float
    #: follow-ups recorded without ``seconds`` (not counted in ``seconds``)
    untimed: int


@dataclass(frozen=True)
class Totals:
    steps: int
    seconds: float
    engine_s: float | None
    harness_s: float | None
    idle_s: float | None


@dataclass(frozen=True)
class Ratios:
    wall_per_engine_path: float | None
    wall_per_steps_path: float | None
    wall_per_engine: float | None


@dataclass(frozen=True)
class TimeToVerdict:
    """Everything the benchmark says of one run."""

    verdict: str
    wall: Wall
    totals: Totals
    engine_missing: tuple[str, ...]
    idle_unrecorded: tuple[str, ...]
    chains: tuple[ChainFigures, ...]
    needs: tuple[Edge, ...]
    paths: tuple[CriticalPath, ...]
    ratios: Ratios
    concurrency: Concurrency
    top_seconds: tuple[StepTime, ...]
    top_harness: tuple[StepTime, ...]
    stall: FaultGroup
    refusals: FaultGroup
    followups: Followups

    def path(self, weight: Weight, layout: Layout = "chains apart") -> CriticalPath:
        return next(p for p in self.paths if p.weight == weight and p.layout == layout)


# ---- reading the run ------------------------------------------------------------------------------------------
def _time(value: object) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value)
    except ValueError:
        return None


def session_seconds(run: model.RunInfo) -> float | None:
    """The session's wall: its ``session`` record's start to its ``session_end`` (``results.run``), as
    ``run_figures`` says it; None where either is missing (a killed run has no end)."""
    started, ended = _time(run.get("started")), _time(run.get("ended"))
    return (ended - started).total_seconds() if started and ended else None


def lane_name(step: Mapping[str, object]) -> str:
    """The step's lane (``v1-head``, ``v1-head-lora``): its record's ``lane``, else made from its column
    (``runner``: ``v1``, ``v1+lora``) and arm as ``config.LaneSpec.name`` makes it."""
    if step.get("lane"):
        return str(step["lane"])
    runner, _, variant = str(step["runner"]).partition("+")
    variant = variant or str(step.get("variant") or "")
    return f"{runner}-{step['arm']}" + (f"-{variant}" if variant else "")


def chain_of(step_name: str) -> Chain:
    """The chain a step runs in: the procedure's purpose of the step (``fresh-box`` runs the lifecycle's artifact in
    a box of its own, one after the lifecycle's other steps: it is the lifecycle chain's)."""
    if step_name == procedure.FAULT_ARTIFACT or procedure.is_fault_step(step_name):
        return "faults"
    return "lifecycle"


def workers_by_box(results: model.RunEvidence) -> dict[tuple[str, str], str]:
    """Which worker ran each (lane, purpose)'s box, from the run's environment records (empty where none says)."""
    found: dict[tuple[str, str], str] = {}
    for lane in results.get("lanes") or []:
        for env in [lane.get("environment"), *(lane.get("other_environments") or [])]:
            if env and env.get("worker"):
                name = env.get("lane") or lane_name({**env, "runner": lane["runner"], "arm": lane["arm"]})
                found[(str(name), str(env.get("purpose") or "lifecycle"))] = str(env["worker"])
    return found


def nodes(results: model.RunEvidence) -> list[StepNode]:
    """The run's step records as nodes, in record order."""
    steps = list(results.get("steps") or [])
    starts = [t for t in (_time(s.get("started")) for s in steps) if t is not None]
    origin = min(starts) if starts else None
    workers = workers_by_box(results)

    def since(value: object) -> float | None:
        moment = _time(value)
        return None if moment is None or origin is None else (moment - origin).total_seconds()

    out = []
    for index, step in enumerate(steps):
        name, lane = str(step["step"]), lane_name(step)
        recorded = step.get("results") or {}
        soak = recorded.get("soak")
        idle = soak.get("idle_s") if isinstance(soak, Mapping) else None
        engine = step.get("engine_seconds")
        out.append(
            StepNode(
                index=index,
                lane=lane,
                arm=str(step["arm"]),
                chain=chain_of(name),
                step=name,
                outcome=str(step.get("outcome")),
                worker=workers.get((lane, str(step.get("purpose") or chain_of(name)))),
                started_s=since(step.get("started")),
                ended_s=since(step.get("ended")),
                seconds=float(step.get("seconds") or 0.0),
                engine_s=None if engine is None else float(engine),
                idle_s=None if idle is None else float(idle),
                idle_unrecorded=bool(soak) and idle is None,
                results=recorded,
            )
        )
    return out


def chains(run: Sequence[StepNode]) -> dict[tuple[str, Chain], list[StepNode]]:
    """Each lane's chains, their steps in the order they ran (record order where a start is not recorded)."""
    out: dict[tuple[str, Chain], list[StepNode]] = {}
    for node in run:
        out.setdefault((node.lane, node.chain), []).append(node)
    for members in out.values():
        members.sort(key=lambda n: (n.started_s if n.started_s is not None else float("inf"), n.index))
    return out


def _record(node: StepNode) -> dict[str, object]:
    """The node as ``step_times`` reads a step record."""
    record: dict[str, object] = {"step": node.step, "seconds": node.seconds, "results": node.results}
    if node.engine_s is not None:
        record["engine_seconds"] = node.engine_s
    return record


def chain_figures(lane: str, chain: Chain, members: Sequence[StepNode]) -> ChainFigures:
    """One chain's sums (``step_times``' arithmetic; engine and harness not recorded where a step that ran has no
    ``engine_seconds``, the idle where a window's was not recorded)."""
    times = step_times(_record(n) for n in members)
    seconds, engine = totals(times)
    missing = tuple(n.label for n in members if n.ran and n.engine_s is None)
    unrecorded = tuple(n.label for n in members if n.idle_unrecorded)
    starts = [n.started_s for n in members if n.started_s is not None]
    ends = [n.ended_s for n in members if n.ended_s is not None]
    return ChainFigures(
        lane=lane,
        chain=chain,
        workers=tuple(dict.fromkeys(n.worker for n in members if n.worker)),
        steps=len(members),
        started_s=min(starts) if starts else None,
        ended_s=max(ends) if ends else None,
        seconds=seconds,
        engine_s=None if missing else engine,
        harness_s=None if missing else seconds - engine,
        idle_s=None if unrecorded else idle_total(times),
        engine_missing=missing,
        idle_unrecorded=unrecorded,
    )


# ---- the graph ------------------------------------------------------------------------------------------------
def cross_edges(run: Sequence[StepNode]) -> list[tuple[StepNode, StepNode, str]]:
    """The cross-chain needs (:data:`NEEDS`) this run's steps meet: (needed, needing, where)."""
    by_key = {(n.lane, n.chain, n.step): n for n in run}
    out = []
    for node in run:
        for need in NEEDS:
            if node.step != need.step or (need.arm is not None and node.arm != need.arm):
                continue
            lane = node.lane if need.from_arm == "same" else peer(node.lane, node.arm, need.from_arm)
            found = by_key.get((lane, need.from_chain, need.from_step))
            if found is not None:
                out.append((found, node, need.where))
    return out


def peer(lane: str, arm: str, other: str) -> str:
    """The lane's twin on ``other`` arm (``config.LaneSpec.peer``): the same name with the arm replaced."""
    parts = lane.split("-")
    return "-".join(other if i == 1 and part == arm else part for i, part in enumerate(parts))


def predecessors(run: Sequence[StepNode], layout: Layout) -> dict[int, set[int]]:
    """Each node's direct predecessors: the step before it in its chain, the steps of other chains it needs and,
    laid out "faults after lifecycle", a fault chain's first step after its lane's last lifecycle step."""
    before: dict[int, set[int]] = {n.index: set() for n in run}
    grouped = chains(run)
    for members in grouped.values():
        for earlier, later in zip(members, members[1:], strict=False):
            before[later.index].add(earlier.index)
    for needed, needing, _ in cross_edges(run):
        before[needing.index].add(needed.index)
    if layout == "faults after lifecycle":
        for (lane, chain), members in grouped.items():
            lifecycle = grouped.get((lane, "lifecycle"))
            if chain == "faults" and lifecycle:
                before[members[0].index].add(lifecycle[-1].index)
    return before


def critical_path(run: Sequence[StepNode], weight: Weight, layout: Layout = "chains apart") -> CriticalPath:
    """The longest path through the run's graph by ``weight``; not computed (``missing``) where a step that ran
    has no such weight. ``graphlib.CycleError`` if the needs ever made a cycle."""
    unweighed = [n.label for n in run if n.weight(weight) is None]
    if unweighed:
        return CriticalPath(
            weight, layout, None, (), (),
            missing=f"engine_seconds not recorded for {len(unweighed)} step(s) that ran: {', '.join(unweighed[:5])}"
            + (" …" if len(unweighed) > 5 else ""),
        )  # fmt: skip
    by_index = {n.index: n for n in run}
    before = predecessors(run, layout)
    length: dict[int, float] = {}
    came_from: dict[int, int | None] = {}
    for index in graphlib.TopologicalSorter(before).static_order():
        own = by_index[index].weight(weight) or 0.0
        best = max(before[index], key=lambda p: (length[p], -p), default=None)
        length[index] = own + (length[best] if best is not None else 0.0)
        came_from[index] = best
    if not length:
        return CriticalPath(weight, layout, 0.0, (), ())
    end: int | None = max(length, key=lambda i: (length[i], -i))
    path: list[StepNode] = []
    while end is not None:
        path.append(by_index[end])
        end = came_from[end]
    path.reverse()
    weighed = [n for n in path if n.weight(weight)]  # steps that took no time say nothing on the path
    return CriticalPath(
        weight, layout, length[path[-1].index], tuple(n.label for n in weighed),
        tuple(n.weight(weight) or 0.0 for n in weighed),
    )  # fmt: skip


# ---- the measured schedule ------------------------------------------------------------------------------------
def concurrency(run: Sequence[StepNode]) -> Concurrency:
    """How many steps ran at once in the measured run, from their ``started``/``ended``, and each worker's load."""
    timed = [n for n in run if n.ran and n.started_s is not None and n.ended_s is not None]
    events = sorted([(n.started_s or 0.0, 1) for n in timed] + [(n.ended_s or 0.0, -1) for n in timed])
    running = most = 0
    busy = 0.0
    last: float | None = None
    for moment, change in events:  # an end before a start at the same moment: touching steps do not overlap
        if running and last is not None:
            busy += moment - last
        running += change
        most = max(most, running)
        last = moment
    loads = []
    for worker in dict.fromkeys(n.worker for n in run if n.worker):
        mine = [n for n in run if n.worker == worker]
        starts = [n.started_s for n in mine if n.started_s is not None]
        ends = [n.ended_s for n in mine if n.ended_s is not None]
        loads.append(
            WorkerLoad(
                worker=worker,
                chains=tuple(dict.fromkeys(f"{n.lane} {n.chain}" for n in mine)),
                steps=len(mine),
                seconds=sum(n.seconds for n in mine),
                started_s=min(starts) if starts else None,
                ended_s=max(ends) if ends else None,
            )
        )
    serial = sum(n.seconds for n in run)
    interval = sum((n.ended_s or 0.0) - (n.started_s or 0.0) for n in timed)
    return Concurrency(
        workers=tuple(loads),
        most_at_once=most,
        mean_at_once=interval / busy if busy else None,
        busy_s=busy,
        serial_s=serial,
        untimed=tuple(n.label for n in run if n.ran and n not in timed),
    )


# ---- where the time went --------------------------------------------------------------------------------------
def _step_time(node: StepNode) -> StepTime:
    return StepTime(node.label, node.seconds, node.engine_s, node.harness_s)


def _followup_seconds(node: StepNode) -> float:
    follow = node.results.get("followup_restore")
    return float(follow.get("seconds") or 0.0) if isinstance(follow, Mapping) else 0.0


def _group(name: str, rule: str, members: Sequence[StepNode], left_out: Iterable[str] = ()) -> FaultGroup:
    engine = [n.engine_s for n in members if n.ran]
    return FaultGroup(
        name=name,
        rule=rule,
        steps=tuple(n.label for n in members),
        seconds=sum(n.seconds for n in members),
        engine_s=None if any(e is None for e in engine) else sum(e or 0.0 for e in engine),
        followup_s=sum(_followup_seconds(n) for n in members),
        left_out=tuple(left_out),
    )


def stall_faults(run: Sequence[StepNode]) -> FaultGroup:
    """The faults whose hook stalls recovery (``HookParams.stall``: past the frozen deadline, or until a signal ends
    it)."""
    stalls = {f.step for f in BUILTIN_FAULTS if isinstance(f.params, HookParams) and f.params.stall}
    members = [n for n in run if n.step in stalls and n.ran]
    return _group("stall faults", "HookParams.stall (the hook stalls recovery)", members)


def _expected(node: StepNode) -> Mapping[str, object]:
    expected = node.results.get("expected")
    return expected if isinstance(expected, Mapping) else {}


#: The fault kinds whose command is refused before it touches anything, in the issue's words (identity drifts, an
#: occupied PID or port, a bad manifest): the rule below decides which of their steps count
REFUSAL_KINDS: Final = ("identity", "pid", "port", "manifest")


def refused_before_mutation(run: Sequence[StepNode]) -> FaultGroup:
    """The faults expected refused before they touch anything: ``expected.exit_code == 1`` and
    ``expected.artifact_unchanged`` (``procedure.before_mutation``). A fault of a refusal kind
    (:data:`REFUSAL_KINDS`) that does not meet the rule (the port kind's artifact is not judged) is named in
    ``left_out`` with its expectation and what was observed, not counted."""
    faults = [n for n in run if procedure.is_fault_step(n.step) and n.ran]
    members = [n for n in faults if _expected(n).get("exit_code") == 1 and _expected(n).get("artifact_unchanged")]
    expected: dict[str, str] = {}
    seen: dict[str, list[str]] = {}
    for n in faults:
        table = FAULTS_BY_ID.get(n.step.removeprefix(procedure.FAULT_PREFIX))
        if n in members or table is None or table.kind not in REFUSAL_KINDS:
            continue
        observed, wanted = n.results.get("observed"), _expected(n)
        expected[table.id] = (
            f"expected exit {wanted.get('exit_code')}, artifact_unchanged {wanted.get('artifact_unchanged')}"
        )
        seen.setdefault(table.id, []).append(
            str(observed.get("artifact_unchanged") if isinstance(observed, Mapping) else None)
        )
    left = [
        f"{fault} ({expected[fault]}; observed artifact_unchanged "
        + ", ".join(f"{value} in {values.count(value)}" for value in dict.fromkeys(values))
        + ")"
        for fault, values in seen.items()
    ]
    return _group(
        "refused before mutation",
        "expected.exit_code == 1 and expected.artifact_unchanged (procedure.before_mutation)",
        members,
        left,
    )


def followups(run: Sequence[StepNode]) -> Followups:
    recorded = [follow for n in run if isinstance(follow := n.results.get("followup_restore"), Mapping)]
    timed = [float(f["seconds"]) for f in recorded if f.get("seconds") is not None]
    return Followups(n=len(recorded), seconds=sum(timed), untimed=len(recorded) - len(timed))


# ---- the whole ------------------------------------------------------------------------------------------------
def time_to_verdict(results: model.Results, pytest_seconds: float | None = None) -> TimeToVerdict:
    """The benchmark's figures of one run (``results.json`` as read); ``pytest_seconds``: pytest's own session
    time where the caller found it (``junit.xml``)."""
    run = nodes(results)
    grouped = chains(run)
    per_chain = tuple(chain_figures(lane, chain, members) for (lane, chain), members in grouped.items())
    per_chain = tuple(sorted(per_chain, key=lambda c: (c.started_s is None, c.started_s or 0.0, c.lane, c.chain)))
    times = step_times(_record(n) for n in run)  # the run's totals as run_figures sums them
    steps_s, engine_total = totals(times)
    missing = tuple(m for c in per_chain for m in c.engine_missing)
    unrecorded = tuple(m for c in per_chain for m in c.idle_unrecorded)
    starts = [n.started_s for n in run if n.started_s is not None]
    ends = [n.ended_s for n in run if n.ended_s is not None]
    wall = Wall(
        steps_s=(max(ends) - min(starts)) if starts and ends else None,
        session_s=session_seconds(results["run"]) if results.get("run") else None,
        pytest_s=pytest_seconds,
    )
    engine = None if missing else engine_total
    paths = tuple(
        critical_path(run, weight, layout)
        for layout in ("chains apart", "faults after lifecycle")
        for weight in ("engine", "steps")
    )
    found_paths = {(p.weight, p.layout): p.seconds for p in paths}

    def per(value: float | None, by: float | None) -> float | None:
        return value / by if value is not None and by else None

    ran = sorted((n for n in run if n.ran), key=lambda n: (-n.seconds, n.index))
    with_harness = sorted((n for n in ran if n.harness_s is not None), key=lambda n: (-(n.harness_s or 0.0), n.index))
    return TimeToVerdict(
        verdict=str((results.get("verdict") or {}).get("status")),
        wall=wall,
        totals=Totals(
            steps=len(ran),
            seconds=steps_s,
            engine_s=engine,
            harness_s=None if engine is None else steps_s - engine,
            idle_s=None if unrecorded else idle_total(times),
        ),
        engine_missing=missing,
        idle_unrecorded=unrecorded,
        chains=per_chain,
        needs=tuple(Edge(a.label, b.label, why) for a, b, why in cross_edges(run)),
        paths=paths,
        ratios=Ratios(
            wall_per_engine_path=per(wall.steps_s, found_paths[("engine", "chains apart")]),
            wall_per_steps_path=per(wall.steps_s, found_paths[("steps", "chains apart")]),
            wall_per_engine=per(wall.steps_s, engine),
        ),
        concurrency=concurrency(run),
        top_seconds=tuple(_step_time(n) for n in ran[:TOP]),
        top_harness=tuple(_step_time(n) for n in with_harness[:TOP]),
        stall=stall_faults(run),
        refusals=refused_before_mutation(run),
        followups=followups(run),
    )


# ---- the views ------------------------------------------------------------------------------------------------
def _s(value: float | None) -> str:
    return "not recorded" if value is None else shown.seconds(value)


def _ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _at(value: float | None) -> str:
    return "–" if value is None else f"+{value:.0f} s"


def _path_lines(path: CriticalPath) -> list[str]:
    """The path as one line per stretch of one chain: ``v1-base faults (25 steps, 109.7 s): fault-artifact 7.0 → …``."""
    head = f"- {WEIGHED_BY[path.weight]}, {path.layout}: "
    if path.seconds is None:
        return [f"{head}not computed: {path.missing}"]
    stretches: list[tuple[str, list[tuple[str, float]]]] = []
    for label, seconds in zip(path.steps, path.step_seconds, strict=True):
        lane, _, step = label.partition("/")
        where = f"{lane} {chain_of(step)}"
        if not stretches or stretches[-1][0] != where:
            stretches.append((where, []))
        stretches[-1][1].append((step, seconds))
    lines = [f"{head}**{_s(path.seconds)}**"]
    for where, steps in stretches:
        total = sum(seconds for _, seconds in steps)
        said = " → ".join(f"{step} {seconds:.1f}" for step, seconds in steps)
        lines.append(f"  - {where} ({len(steps)} steps, {_s(total)}): {said}")
    return lines


def markdown(found: TimeToVerdict, source: str = "") -> str:
    """The figures as Markdown: the wall beside the critical path, the chains, the needs, where the time went."""
    wall, ratios, conc = found.wall, found.ratios, found.concurrency
    lines = [f"## Time to verdict{f': `{source}`' if source else ''}", ""]
    lines += [
        f"Verdict {found.verdict}; {found.totals.steps} steps that ran in {len(found.chains)} chains; "
        f"{len(conc.workers) or 'no'} worker(s) recorded ({', '.join(w.worker for w in conc.workers) or '–'}).",
        "",
        "| | |",
        "|---|---|",
        f"| measured wall (first step start → last step end) | {_s(wall.steps_s)} |",
        f"| session (session record → session_end) | {_s(wall.session_s)} |",
        f"| pytest's own session (junit.xml) | {'–' if wall.pytest_s is None else shown.seconds(wall.pytest_s)} |",
    ]
    for path in found.paths:
        lines.append(f"| critical path, {WEIGHED_BY[path.weight]}, {path.layout} | {_s(path.seconds)} |")
    lines += [
        f"| serial (Σ step seconds, one step at a time) | {_s(conc.serial_s)} |",
        f"| steps: engine / harness / window idle | {_s(found.totals.engine_s)} / {_s(found.totals.harness_s)} / "
        f"{_s(found.totals.idle_s)} |",
        f"| **measured wall / critical path (engine)** | **{_ratio(ratios.wall_per_engine_path)}** |",
        f"| measured wall / critical path (steps) | {_ratio(ratios.wall_per_steps_path)} |",
        f"| measured wall / engine (all steps) | {_ratio(ratios.wall_per_engine)} |",
        f"| steps at once in the measured run: most / mean (Σ step seconds / time any ran) | {conc.most_at_once} / "
        f"{_ratio(conc.mean_at_once)} |",
        "",
    ]
    if found.engine_missing:
        lines += [
            f"`engine_seconds` not recorded for {len(found.engine_missing)} step(s) that ran "
            f"({', '.join(found.engine_missing[:5])}{' …' if len(found.engine_missing) > 5 else ''}): every engine "
            "figure they enter is not recorded, not zero.",
            "",
        ]
    if found.idle_unrecorded:
        lines += [
            f"{len(found.idle_unrecorded)} observation window(s) without a recorded idle time "
            f"(`results.soak.idle_s`: {', '.join(found.idle_unrecorded[:5])}): the window idle is not recorded.",
            "",
        ]
    lines += ["### Critical path", ""]
    for path in found.paths:
        lines += _path_lines(path)
    lines += ["", "### Lane chains", ""]
    lines += [
        "| lane | chain | worker | steps | from | to | seconds | engine | harness | window idle |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in found.chains:
        lines.append(
            f"| {c.lane} | {c.chain} | {', '.join(c.workers) or '–'} | {c.steps} | {_at(c.started_s)} | "
            f"{_at(c.ended_s)} | {shown.seconds(c.seconds)} | {_s(c.engine_s)} | {_s(c.harness_s)} | "
            f"{_s(c.idle_s)} |"
        )
    lines += ["", "### What waits for what", ""]
    lines.append(
        "Within a chain, each step after the one before (one box). A fault chain needs of its lifecycle chain only "
        "what is listed below; across chains, in this run:"
    )
    lines.append("")
    lines += [f"- {e.before} → {e.after}: {e.why}" for e in found.needs] or ["- none"]
    lines += ["", "### Where the time went", ""]
    for by, top in (("seconds", found.top_seconds), ("harness seconds", found.top_harness)):
        lines += [f"| step (by {by}) | seconds | engine | harness |", "|---|---|---|---|"]
        lines += [f"| {t.label} | {shown.seconds(t.seconds)} | {_s(t.engine_s)} | {_s(t.harness_s)} |" for t in top]
        lines.append("")
    lines += ["| group | n | seconds | engine | of which follow-up restores |", "|---|---|---|---|---|"]
    for group in (found.stall, found.refusals):
        lines.append(
            f"| {group.name} | {group.n} | {shown.seconds(group.seconds)} | {_s(group.engine_s)} | "
            f"{shown.seconds(group.followup_s)} |"
        )
    follow = found.followups
    lines.append(f"| follow-up restores (all faults) | {follow.n} | {shown.seconds(follow.seconds)} | – | – |")
    lines.append("")
    lines.append(f"- stall faults: {found.stall.rule}.")
    lines.append(f"- refused before mutation: {found.refusals.rule}.")
    if found.refusals.left_out:
        lines.append(f"  Expected to exit 1 but not counted: {', '.join(found.refusals.left_out)}.")
    if follow.untimed:
        lines.append(f"- {follow.untimed} follow-up restore(s) recorded without `seconds` (not counted).")
    if conc.untimed:
        lines.append(f"- {len(conc.untimed)} step(s) without a readable start or end, left out of the overlap.")
    return "\n".join(lines) + "\n"
