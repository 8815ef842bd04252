"""Assemble ``results.json`` (schema ``vsnap-qual/results@1``) from the run's ``evidence.jsonl``.

The evidence file is the only input (docs/design.md §4). A run that was killed has no ``session_end`` record;
its results are marked incomplete and name the last step that reached the evidence file.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, cast

from vsnap_qual import model, procedure
from vsnap_qual.clock import utc_stamp
from vsnap_qual.evidence import EVIDENCE_FILE, Evidence, read_evidence

__all__ = ["EVIDENCE_FILE", "RESULTS_FILE", "SCHEMA", "Evidence", "assemble_file", "load_results", "read_evidence"]

SCHEMA = model.SCHEMA
RESULTS_FILE = "results.json"

#: The lifecycle steps in the order the report shows them; fault steps (``fault:<id>``) follow.
CORE_STEPS: tuple[str, ...] = procedure.DISPLAY_ORDER
_ARM_ORDER = ("head", "base")


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` if the evidence holds an object there, else ``{}``: odd evidence never crashes a report."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` when the evidence holds an array there, else ``[]``."""
    return value if isinstance(value, list) else []


is_fault_step = procedure.is_fault_step


def step_label(record: Mapping[str, Any]) -> str:
    """``runner/arm/step``, the name a step goes by in every view."""
    return f"{record.get('runner', '?')}/{record.get('arm', '?')}/{record.get('step', '?')}"


def option_value(results: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """The run's value of option ``name`` (``logprob-tolerance``), however the session record spelled it."""
    wanted = _option_key(name)
    for key, value in (results.get("run", {}).get("options") or {}).items():
        if _option_key(str(key)) == wanted:
            return value
    return default


def _option_key(name: str) -> str:
    key = name.strip().lower().lstrip("-").replace("_", "-")
    for prefix in ("vsnap-",):
        if key.startswith(prefix):
            key = key[len(prefix) :]
    return key


def _ordered(values: Iterable[str], preferred: Iterable[str] = ()) -> list[str]:
    seen = list(dict.fromkeys(values))
    first = [v for v in preferred if v in seen]
    return first + [v for v in seen if v not in first]


def assemble_results(evidence: Evidence, *, source: str = EVIDENCE_FILE) -> model.Results:
    """Build ``results.json`` (``model.Results``, schema ``vsnap-qual/results@1``) from parsed evidence."""
    session: dict[str, Any] = {}
    session_end: dict[str, Any] | None = None
    environments: dict[tuple[str, str], dict[str, Any]] = {}
    steps: list[dict[str, Any]] = []
    plans: list[dict[str, Any]] = []
    harness_errors: list[dict[str, Any]] = []
    kinds: Counter[str] = Counter()
    last_time: str | None = None
    for record in evidence.records:
        kind = record["kind"]
        kinds[kind] += 1
        last_time = record.get("time") or last_time
        if kind == "session":
            session = record
        elif kind == "session_end":
            session_end = record
        elif kind == "environment":
            environments[(str(record.get("runner")), str(record.get("arm")))] = record
        elif kind == "step":
            steps.append({k: v for k, v in record.items() if k != "kind"})
        elif kind == "plan":
            plans.append(record)
        elif kind == "harness_error":
            harness_errors.append({k: v for k, v in record.items() if k != "kind"})

    options = as_dict(session.get("options"))
    configured = options.get("runners") or options.get("vsnap_runners") or []
    if isinstance(configured, str):
        configured = configured.split(",")
    # The configured order (v1 before v2) wins over the order the lanes happened to finish in.
    configured_runners = (
        [str(r).strip() for r in configured if str(r).strip()] if isinstance(configured, (list, tuple)) else []
    )
    lane_keys = [(str(s.get("runner")), str(s.get("arm"))) for s in steps] + list(environments)
    runners = _ordered([r for r, _ in lane_keys], configured_runners)
    arms = _ordered([a for _, a in lane_keys], _ARM_ORDER)
    lanes = [
        {
            "runner": runner,
            "arm": arm,
            "environment": {k: v for k, v in environments[(runner, arm)].items() if k != "kind"}
            if (runner, arm) in environments
            else None,
        }
        for runner in runners
        for arm in arms
        if (runner, arm) in set(lane_keys)
    ]

    complete = bool(session_end and session_end.get("complete", True))
    last_step = None
    if steps:
        last = steps[-1]
        last_step = {
            "label": step_label(last),
            "runner": last.get("runner"),
            "arm": last.get("arm"),
            "step": last.get("step"),
            "outcome": last.get("outcome"),
            "ended": last.get("ended") or last.get("time"),
        }
    steps = ordered_steps(steps, runners, arms)
    run = {
        "run_id": session.get("run_id"),
        "harness_version": session.get("harness_version"),
        "started": session.get("started") or session.get("time"),
        "ended": (session_end or {}).get("ended"),
        "exitstatus": (session_end or {}).get("exitstatus"),
        "complete": complete,
        "last_step": last_step,
        "last_record_time": last_time,
        "options": options,
        "probe": session.get("probe"),
        "host": as_dict(session.get("host")),
    }
    results: dict[str, Any] = {
        "schema": SCHEMA,
        "generated": utc_stamp(),
        "run": run,
        "verdict": {},
        "runners": runners,
        "arms": arms,
        "lanes": lanes,
        "steps": steps,
        "coverage": _coverage(as_dict(session.get("coverage")), plans),
        "harness_errors": harness_errors,
        "evidence": {
            "file": source,
            "records": len(evidence.records),
            "malformed_lines": evidence.malformed_lines,
            "kinds": dict(kinds),
            "has_session": bool(session),
        },
    }
    from vsnap_qual.report.verdict import judge

    results["verdict"] = judge(results)  # the one verdict, recorded here; views render it
    return cast(model.Results, results)


def ordered_steps(steps: list[dict[str, Any]], runners: list[str], arms: list[str]) -> list[dict[str, Any]]:
    """The step records in a fixed order, whatever order the lanes finished in (``pytest -n``): the procedure
    table's order (``procedure.STEPS``; a step it does not name after them, as first seen), then runner, then
    arm. A repeated step's records keep their written order, so the last one stays the one that counts."""
    procedure_order = {name: i for i, name in enumerate(procedure.STEPS)}
    unknown: dict[str, int] = {}
    for record in steps:
        name = str(record.get("step"))
        if name not in procedure_order:
            unknown.setdefault(name, len(procedure_order) + len(unknown))

    def key(record: dict[str, Any]) -> tuple[int, int, int]:
        name, runner, arm = str(record.get("step")), str(record.get("runner")), str(record.get("arm"))
        return (
            procedure_order.get(name, unknown.get(name, 0)),
            runners.index(runner) if runner in runners else len(runners),
            arms.index(arm) if arm in arms else len(arms),
        )

    return sorted(steps, key=key)


def _coverage(required: dict[str, Any], plans: list[dict[str, Any]]) -> dict[str, Any]:
    """What a full qualification requires (the session record) and what the run selected (its plan records:
    one per collecting process, the same selection each)."""
    out = dict(required)
    if plans:
        out["selected"] = list(dict.fromkeys(str(x) for p in plans for x in as_list(p.get("selected"))))
        out["deselected"] = list(dict.fromkeys(str(x) for p in plans for x in as_list(p.get("deselected"))))
        out["selection"] = as_dict(plans[0].get("selection"))
    return out


def assemble_file(evidence_path: Path) -> model.Results:
    """Read ``evidence_path`` and assemble its results dictionary."""
    return assemble_results(read_evidence(evidence_path), source=evidence_path.name)


def load_results(path: Path) -> dict[str, Any]:
    """Read a ``results.json`` and check its schema; raises ``ValueError`` naming the problem."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{path} is not a vsnap-qual results file (schema {found!r}, expected {SCHEMA!r})")
    return data
