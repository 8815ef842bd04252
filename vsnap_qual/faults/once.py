"""Fault kinds that run once per image and arm (issue 45 item 4), pure: which kinds, shown by the runs' own records
(:data:`ONCE_KINDS`, :func:`engine_reached`), and where each of their faults runs in a run's selection
(:func:`place`).

The runner (``VLLM_USE_V2_MODEL_RUNNER``) is read by an engine process only: a fault whose judged path, the faulted
command from its start until it exits, ends before any engine process starts meets the same code on every runner.
A fault step's record shows that it ended so (:func:`engine_reached` is None) when the command exited non-zero, no
HTTP listener was bound (the host's connect poll and the box's listener scan), vLLM's ``error.json`` (written by
the restored engine's recovery) was not written, no probe hook fired (the probe registers in every engine process),
the artifact was byte-identical after the command (CRIU's restore writes its log into it) and the command left no
process behind. A kind is in :data:`ONCE_KINDS` only where every record of it, on every lane of every committed full
run, shows that (``bench/engine_reach.py`` prints the table from those runs; ``docs/procedure.md`` keeps it;
``tests/evidence/test_engine_reach.py`` holds the two together). Any kind that starts an engine keeps running on
every lane.

Such a fault runs on the first runner (in ``--vsnap-runners``' order) whose lane the selection gives it, per arm
and variant; the other runners' lanes record the step as not applicable, naming the lane that runs it. The premise
is checked again in every run, on the lane that ran it: where its own record shows an engine reached, the step fails
naming ``--vsnap-fault-runners=every`` (:func:`premise_problem`), so a run never leans on the committed evidence
alone, also on a runtime or an engine that none of those runs had. ``--vsnap-fault-runners=every`` runs them on
every runner as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vsnap_qual.model import RUNS_ONCE

#: Why, in the words every view uses (the coverage line, the fault table, the step's record and message).
WHY = RUNS_ONCE

#: The kinds whose judged path ended before any engine process started on every lane of every committed full run
#: (the runs: :data:`EVIDENCE`; the table: docs/procedure.md, "Faults that run once per image and arm").
ONCE_KINDS: frozenset[str] = frozenset({"identity", "pid", "manifest"})

#: The committed full runs the table is made from (repository paths): runner V1 on the GPU, runner V2 on the GPU,
#: both runners on the 2-core CPU machine (`make qualify`), real vLLM's CPU builds (runner V1, both arms).
EVIDENCE: tuple[str, ...] = (
    "evidence/gpu/2026-12-07-v1-full-d575706/results.json.gz",
    "evidence/gpu/2026-12-04-teardown-credit-9ffe76a/results.json",
    "bench/data/2026-12-07-make-qualify-5330513.json.gz",
    "evidence/real-vllm/2026-12-02-full-f7df29a/results.json",
)


def engine_reached(results: Mapping[str, Any]) -> str | None:
    """What in a fault step's record (``results``: its ``FaultResults``) shows, or cannot rule out, that an engine
    process started during its faulted command, in words; None where the record shows the command ended before any
    did (see the module docstring)."""
    observed = results.get("observed")
    if not isinstance(observed, Mapping) or not observed:
        return "no observation recorded"
    code = observed.get("exit_code")
    if code is None:
        return "no exit code recorded"
    if code == 0:
        return "exited 0: a restored server ran"
    if observed.get("http_bound"):
        return "an HTTP listener was bound"
    if observed.get("error_json") is not None or observed.get("phase"):
        return "error.json written: a restored engine's recovery ran"
    if observed.get("fired_records"):
        return "a probe hook fired in an engine process"
    unchanged = observed.get("artifact_unchanged")
    if unchanged is None:
        return "the artifact's digest not compared"
    if unchanged is not True:
        return "the artifact changed: CRIU's restore wrote into it"
    cleanup = results.get("cleanup")
    cleanup = cleanup if isinstance(cleanup, Mapping) else {}
    if cleanup.get("leftover_processes") or cleanup.get("killed_by_harness") or cleanup.get("pids"):
        return "processes left behind"
    return None


@dataclass(frozen=True)
class Placement:
    """Where one fault runs for one lane: ``runs_on`` the lane that runs it instead (None: this lane runs it), and
    ``stands_for`` the lanes this lane runs it for (their steps say not applicable, naming this lane)."""

    runs_on: str | None = None
    stands_for: tuple[str, ...] = ()


def place(kind: str | None, lane: str, twins: Sequence[str], every: bool = False) -> Placement:
    """Where a fault of ``kind`` runs, for ``lane``. ``twins``: the lanes of ``lane``'s arm and variant whose steps
    of this fault the run selected, in ``--vsnap-runners``' order (``lane`` among them). A kind of
    :data:`ONCE_KINDS` runs on the first of them (unless ``every``: ``--vsnap-fault-runners=every``); any other
    kind, and a fault selected on one lane alone, runs where it is."""
    if every or kind not in ONCE_KINDS or lane not in twins or len(twins) < 2:
        return Placement()
    first = twins[0]
    if lane == first:
        return Placement(stands_for=tuple(t for t in twins if t != lane))
    return Placement(runs_on=first)


def not_run_words(runs_on: str) -> str:
    """What a lane that does not run the fault says (its step's not-applicable message)."""
    return f"{WHY}; it runs on {runs_on}"


def premise_problem(results: Mapping[str, Any], stands_for: Sequence[str]) -> str | None:
    """Where a fault ran once for other lanes (``stands_for``) and its own record shows an engine reached: the
    mismatch that fails its step (the other lanes did not run it); None where the premise held, or it stood for none."""
    if not stands_for:
        return None
    reached = engine_reached(results)
    if reached is None:
        return None
    return (
        f"it ran once for {', '.join(stands_for)} too ({WHY}), but this run's record shows an engine reached: "
        f"{reached}; those lanes did not run it: run again with --vsnap-fault-runners=every"
    )


# ---- the table over committed runs (bench/engine_reach.py, docs/procedure.md) ------------------------------------
@dataclass(frozen=True)
class Reach:
    """One kind on one lane of one run: how many of its fault steps ran (a record with an observation), how many of
    them ended before any engine process started, and why the others did not (each reason once)."""

    kind: str
    lane: str
    ran: int
    before: int
    reasons: tuple[str, ...] = ()

    @property
    def shown(self) -> bool:
        return self.ran > 0 and self.before == self.ran


def reach(steps: Sequence[Mapping[str, Any]], kind_of: Any) -> list[Reach]:
    """Each (kind, lane) of a run's step records (``results.json``'s ``steps``): the fault steps that ran, judged by
    :func:`engine_reached`. ``kind_of(fault_id, results)``: the fault's kind (its record's ``kind``, or for older
    evidence the catalogue's). A step that never ran its command (not applicable, skipped) is no evidence either
    way and is left out."""
    cells: dict[tuple[str, str], list[str | None]] = {}
    for step in steps:
        name = str(step.get("step", ""))
        results = step.get("results") or {}
        if not name.startswith("fault:") or not results.get("observed"):
            continue
        kind = kind_of(name.removeprefix("fault:"), results) or "?"
        cells.setdefault((kind, str(step.get("lane"))), []).append(engine_reached(results))
    return [
        Reach(kind, lane, len(found), sum(r is None for r in found), tuple(dict.fromkeys(r for r in found if r)))
        for (kind, lane), found in cells.items()
    ]


def shown_once(runs: Mapping[str, Sequence[Reach]]) -> list[str]:
    """The kinds that ended before any engine process started on every lane of every run that ran them, in the
    order first met."""
    kinds = list(dict.fromkeys(r.kind for cells in runs.values() for r in cells))
    return [k for k in kinds if all(r.shown for cells in runs.values() for r in cells if r.kind == k)]


def reach_markdown(runs: Mapping[str, Sequence[Reach]]) -> str:
    """The table: a row per kind and run, a column per lane (``ended before any engine / fault steps that ran``,
    the reasons where not every one did; ``–``: the kind did not run there), then the verdict per kind."""
    lanes = list(dict.fromkeys(r.lane for cells in runs.values() for r in cells))
    kinds = list(dict.fromkeys(r.kind for cells in runs.values() for r in cells))
    once = shown_once(runs)
    lines = [
        "| kind | run | " + " | ".join(lanes) + " | runs once per image and arm |",
        "|---|---|" + "---|" * len(lanes) + "---|",
    ]
    for kind in kinds:
        for run, cells in runs.items():
            by_lane = {r.lane: r for r in cells if r.kind == kind}
            if not by_lane:
                continue
            shown = []
            for lane in lanes:
                cell = by_lane.get(lane)
                if cell is None:
                    shown.append("–")
                else:
                    why = f" ({'; '.join(cell.reasons)})" if cell.reasons else ""
                    shown.append(f"{cell.before}/{cell.ran}{why}")
            verdict = "yes" if kind in once else "no"
            lines.append(f"| {kind} | {run} | " + " | ".join(shown) + f" | {verdict} |")
    return "\n".join(lines)
