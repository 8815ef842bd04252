"""Assemble ``results.json`` (schema ``vsnap-qual/results@1``) from the run's ``evidence.jsonl``.

The evidence file is the only input (docs/design.md §4); each of its lines is read as the model once, here
(``report.parse``). A run that was killed has no ``session_end`` record; its results are marked incomplete and
name the last step that reached the evidence file. The run's comparisons (``frames.compare_all``) are computed
once: the verdict is judged from them, and :func:`assemble` hands them on to the views.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, cast

from vsnap_qual import model, procedure
from vsnap_qual.clock import utc_stamp
from vsnap_qual.contract import column
from vsnap_qual.evidence import EVIDENCE_FILE, Evidence, read_evidence
from vsnap_qual.report import parse, step_times
from vsnap_qual.report.frames import Comparisons, compare_all
from vsnap_qual.report.verdict import judge

__all__ = [
    "EVIDENCE_FILE",
    "RESULTS_FILE",
    "SCHEMA",
    "Assembled",
    "Evidence",
    "assemble",
    "assemble_file",
    "assemble_path",
    "load_results",
    "read_evidence",
]

SCHEMA: Final = model.SCHEMA
RESULTS_FILE = "results.json"

_ARM_ORDER = ("head", "base")


@dataclass(frozen=True)
class Assembled:
    """A run's ``results.json`` and the comparisons its verdict was judged from (the views render them); None
    when they could not be computed from this evidence (the verdict says why)."""

    results: model.Results
    comparisons: Comparisons | None


def _ordered(values: Iterable[str], preferred: Iterable[str] = ()) -> list[str]:
    seen = list(dict.fromkeys(values))
    first = [v for v in preferred if v in seen]
    return first + [v for v in seen if v not in first]


def assemble(evidence: Evidence, *, source: str = EVIDENCE_FILE) -> Assembled:
    """Build ``results.json`` from parsed evidence, with the comparisons it was judged from: each line is checked
    against the model here, once (``report.parse``); a line that cannot be placed counts as malformed."""
    session: model.SessionRecord | None = None
    session_end: model.SessionEndRecord | None = None
    # by the container it describes: lane and purpose (a lane's lifecycle and faults run in two), last one kept
    environments: dict[tuple[str, str | None], model.Environment] = {}
    steps: list[model.Step] = []
    plans: list[model.PlanRecord] = []
    harness_errors: list[model.HarnessError] = []
    kinds: Counter[str] = Counter()
    last_time: str | None = None
    unplaced = 0
    for raw in evidence.records:
        kinds[str(raw["kind"])] += 1
        if raw["kind"] not in model.RECORD_TYPES:
            continue  # a kind this harness does not know (a newer writer's): counted, not read
        record = parse.record(raw)
        if record is None:
            unplaced += 1
            continue
        last_time = record["time"] or last_time
        if record["kind"] == "session":
            session = record
        elif record["kind"] == "session_end":
            session_end = record
        elif record["kind"] == "environment":
            box = (record.get("lane") or f"{record['runner']}-{record['arm']}", record.get("purpose"))
            environments.pop(box, None)  # a container's later record replaces its earlier one, in the record order
            environments[box] = cast(model.Environment, _without_kind(record))
        elif record["kind"] == "step":
            steps.append(cast(model.Step, _without_kind(record)))
        elif record["kind"] == "plan":
            plans.append(record)
        elif record["kind"] == "harness_error":
            harness_errors.append(cast(model.HarnessError, _without_kind(record)))

    options = session["options"] if session else {}
    configured = options.get("runners") or options.get("vsnap_runners") or []
    if isinstance(configured, str):
        configured = configured.split(",")
    # The configured order (v1 before v2) wins over the order the lanes happened to finish in.
    configured_runners = (
        [str(r).strip() for r in configured if str(r).strip()] if isinstance(configured, (list, tuple)) else []
    )
    # a variant's lanes are columns of their own after the plain ones, in the variants' order (config.LaneSpec.column)
    variants = options.get("variants") or {}
    configured_runners += [column(r, v) for v in variants for r in list(configured_runners)]
    lane_keys = [(s["runner"], s["arm"]) for s in steps] + [(e["runner"], e["arm"]) for e in environments.values()]
    runners = _ordered([r for r, _ in lane_keys], configured_runners)
    arms = _ordered([a for _, a in lane_keys], _ARM_ORDER)
    lanes = [
        _lane(runner, arm, [e for e in environments.values() if (e["runner"], e["arm"]) == (runner, arm)])
        for runner in runners
        for arm in arms
        if (runner, arm) in set(lane_keys)
    ]

    last_step = None
    if steps:
        last = steps[-1]
        last_step = model.LastStep(
            label=procedure.label(last["runner"], last["arm"], last["step"]),
            runner=last["runner"],
            arm=last["arm"],
            step=last["step"],
            outcome=last["outcome"],
            ended=last["ended"] or last["time"],
        )
    run = model.RunInfo(
        run_id=session["run_id"] if session else None,
        harness_version=session["harness_version"] if session else None,
        started=(session["started"] or session["time"]) if session else None,
        ended=session_end["ended"] if session_end else None,
        exitstatus=session_end["exitstatus"] if session_end else None,
        complete=bool(session_end and session_end["complete"]),
        last_step=last_step,
        last_record_time=last_time,
        options=options,
        probe=session.get("probe") if session else None,
        host=session["host"] if session else {},
    )
    if session and "smoke" in session:
        run["smoke"] = session["smoke"]
    if session and "invocation" in session:
        run["invocation"] = session["invocation"]
    if session and "harness_source" in session:
        run["harness_source"] = session["harness_source"]
    if session and "shard" in session:
        run["shard"] = session["shard"]
    if session and "merge" in session:
        run["merge"] = session["merge"]
    if session and "overlap" in session:
        pairs = step_times.lanes_overlapped(steps)
        run["overlap"] = model.RunOverlap(
            **session["overlap"],
            overlapped=[model.LanesOverlapped(lanes=[a, b], seconds=seconds) for a, b, seconds in pairs],
        )
    if session_end and session_end.get("interrupted"):
        run["interrupted"] = session_end["interrupted"]
    if session_end and "pytest_counts" in session_end:
        run["pytest_counts"] = session_end["pytest_counts"]
    coverage = _coverage(session.get("coverage", {}) if session else {}, plans)
    found = model.RunEvidence(
        run=run,
        runners=runners,
        arms=arms,
        lanes=lanes,
        steps=ordered_steps(steps, runners, arms, coverage.get("faults") or ()),
        coverage=coverage,
        harness_errors=harness_errors,
        evidence=model.EvidenceInfo(
            file=source,
            records=len(evidence.records),
            malformed_lines=evidence.malformed_lines + unplaced,
            kinds=dict(kinds),
            has_session=session is not None,
        ),
    )
    comparisons: Comparisons | None = None
    try:
        comparisons = compare_all(found)  # once: the verdict is judged from them, the views render them
        verdict = judge(found, comparisons)  # the one verdict, recorded here; views render it
    except Exception as exc:  # odd evidence: the verdict says so instead of losing the run
        verdict = judge(found, None, failure=f"{type(exc).__name__}: {exc}")
    results = model.Results(
        schema=SCHEMA,
        generated=utc_stamp(),
        run=found["run"],
        verdict=verdict,
        runners=found["runners"],
        arms=found["arms"],
        lanes=found["lanes"],
        steps=found["steps"],
        coverage=found["coverage"],
        harness_errors=found["harness_errors"],
        evidence=found["evidence"],
    )
    return Assembled(results, comparisons)


def _lane(runner: str, arm: str, environments: list[model.Environment]) -> model.Lane:
    """A lane and the environments of its containers: the lifecycle container's is the one the views show
    (else the last recorded); the others follow it."""
    shown = next((e for e in reversed(environments) if e.get("purpose") == "lifecycle"), None)
    if shown is None and environments:
        shown = environments[-1]
    lane = model.Lane(runner=runner, arm=arm, environment=shown)
    others = [e for e in environments if e is not shown]
    if others:
        lane["other_environments"] = others
    return lane


def _without_kind(record: Mapping[str, object]) -> dict[str, object]:
    """A record as ``results.json`` carries it (``model.Step``, ``model.Environment``, ``model.HarnessError``):
    the record less its ``kind``."""
    return {key: value for key, value in record.items() if key != "kind"}


def ordered_steps(
    steps: list[model.Step], runners: list[str], arms: list[str], faults: Sequence[str] = ()
) -> list[model.Step]:
    """The step records in a fixed order, whatever order the lanes finished in (``pytest -n``): the procedure's
    order (``procedure.step_order`` of the session's faults, ``coverage.faults``; a step it does not name after
    them, as first seen), then runner, then arm. A repeated step's records keep their written order, so the last
    one stays the one that counts."""
    procedure_order = procedure.step_order(faults)
    unknown: dict[str, int] = {}
    for record in steps:
        name = record["step"]
        if name not in procedure_order:
            unknown.setdefault(name, len(procedure_order) + len(unknown))

    def key(record: model.Step) -> tuple[int, int, int]:
        name, runner, arm = record["step"], record["runner"], record["arm"]
        return (
            procedure_order.get(name, unknown.get(name, 0)),
            runners.index(runner) if runner in runners else len(runners),
            arms.index(arm) if arm in arms else len(arms),
        )

    return sorted(steps, key=key)


def _coverage(required: model.Coverage, plans: list[model.PlanRecord]) -> model.Coverage:
    """What a full qualification requires (the session record) and what the run selected (its plan records:
    one per collecting process, the same selection each)."""
    out = required.copy()
    if plans:
        out["selected"] = list(dict.fromkeys(x for p in plans for x in p["selected"]))
        out["deselected"] = list(dict.fromkeys(x for p in plans for x in p["deselected"]))
        out["selection"] = plans[0]["selection"]
    return out


def assemble_file(evidence_path: Path) -> model.Results:
    """Read ``evidence_path`` and assemble its ``results.json``."""
    return assemble_path(evidence_path).results


def assemble_path(evidence_path: Path) -> Assembled:
    """Read ``evidence_path`` and assemble its ``results.json``, with the comparisons it was judged from."""
    return assemble(read_evidence(evidence_path), source=evidence_path.name)


def load_results(path: Path) -> model.Results:
    """Read a ``results.json`` (or a committed ``results.json.gz``), check its schema and read it as the model
    (``report.parse``); raises ``ValueError`` naming the problem (``OSError`` where the file cannot be opened)."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (EOFError, gzip.BadGzipFile) as exc:
        raise ValueError(f"{path} cannot be read: {exc}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{path} is not a vsnap-qual results file (schema {found!r}, expected {SCHEMA!r})")
    try:
        return parse.results(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
