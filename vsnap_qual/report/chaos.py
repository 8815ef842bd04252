"""The chaos figures of one finished run (issue 29), from its ``results.json``: every fault step of the kill kind
(``results.kind``; ``--vsnap-chaos=N`` runs each kill fault N times a lane), per command, signal and phase reached
(what was running when the signal went: ``faults.kinds.kill.phase_reached``), side by side:

- runs: kill steps whose signal went (a step whose every draw missed the command is counted apart);
- left by the command: runs after which a process of the killed tree was still there before the harness swept,
  and how (``left_how``: stopped, parked on a futex in CRIU's restorer, or running), and restores that had
  completed before the signal took effect (their server runs by design)
  (vLLM's own cleanup, where the arm has one, had its grace first);
- leaks after the sweep: runs after which anything (a process, a listener, a GPU app, a link remap of the lane)
  outlived the harness's sweep: must be 0;
- what became of the artifact: a killed create's target absent, refused by ``inspect`` or ``restore`` with a
  message, restored and answering as the ordinary engine, or a finding (refused without a message, or served other
  answers); a killed restore's artifact restored again afterwards, or refused: unrestorable, a finding (issue 44);
- the steps that failed, with the seed, the fault and the attempt that replay each.

Nothing is re-judged here: the figures count what each step recorded. Run:
``.venv/bin/python bench/chaos.py reports/<run>/results.json``; ``bench/chaos.py --run N`` runs the chaos first.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import TypedDict, cast

from vsnap_qual import model, procedure
from vsnap_qual.report.kinds import fault_kind

#: the columns of the table, in order
COLUMNS = ("runs", "left by the command", "leaks after the sweep", "artifact", "failed")

#: one row of the table: (command, signal, phase reached) → its counts (the keys are the columns' words)
ChaosRow = TypedDict(
    "ChaosRow",
    {
        "runs": int,
        "left by the command": int,
        "left_how": Counter[str],
        "completed": int,
        "leaks after the sweep": int,
        "artifact": Counter[str],
        "failed": int,
    },
)


class FailedKill(TypedDict):
    """A kill step that failed, with what replays it."""

    lane: str
    step: str
    seed: int
    attempt: int | None
    offset_s: float | None
    phase: str | None
    why: str


class ChaosFigures(TypedDict):
    """The table's rows (command, signal, phase) → counts, the failed steps, the draws that missed the command,
    and the seeds."""

    rows: dict[tuple[str, str, str], ChaosRow]
    failed: list[FailedKill]
    missed: int
    seeds: list[int]


def kill_steps(results: model.RunEvidence) -> list[model.Step]:
    """Every step of the kill kind that drew its moment (the latest record of each lane and step)."""
    latest: dict[tuple[str, str], model.Step] = {}
    for step in results["steps"]:
        res = procedure.results_as(step, model.FaultResults)
        name = step["step"]
        if res is not None and _drew(name, res):
            latest[(step["lane"], name)] = step
    return list(latest.values())


def _drew(name: str, res: model.FaultResults) -> bool:
    """A fault step of the kill kind whose injector drew its moment (its record carries the seed)."""
    kind = fault_kind(name.removeprefix(procedure.FAULT_PREFIX), res)
    return kind == "kill" and "seed" in (res.get("injected") or {})


def artifact_outcome(results: model.FaultResults) -> str:
    """What became of the artifact after one kill, in the words of the table."""
    killed = results.get("killed_artifact")
    if killed is not None:
        outcome = str(killed.get("outcome"))
        if outcome.startswith("refused"):
            return outcome if killed.get("message") else f"{outcome} without a message"
        if outcome == "restored":
            return "restored, answers as ordinary" if (killed.get("canaries") or {}).get("ok") else "restored, WRONG"
        return outcome
    follow = results.get("followup_restore") or model.FollowupRestore()
    if follow.get("exit_code") == 0:
        return "restores again" if follow.get("canary_ok") else "restores again, WRONG"
    if follow.get("consumed"):
        return "consumed (not self-contained)"
    # the artifact was whole before a killed restore: a refusal of it is a finding, with or without a message
    said = "with a message" if follow.get("criu_reason") or follow.get("stderr_tail") else "no message"
    return f"refused, UNRESTORABLE ({said})"


def left_how(cleanup: model.CleanupAudit) -> str:
    """How vLLM left its tree: ``stopped`` (a state T), ``parked`` (every process waiting on a futex: CRIU's
    restorer, never resumed), ``running``; ``wait not recorded`` where the run predates the kernel-wait record
    (a sleeping process may then be either of the last two)."""
    states = list((cleanup.get("leftover_states") or {}).values())
    waits = list((cleanup.get("leftover_wchan") or {}).values())
    if any(s[:1] in ("T", "t") for s in states):
        return "stopped"
    if not waits:
        return "wait not recorded"
    return "parked" if all(w.startswith("futex") for w in waits) else "running"


def _row() -> ChaosRow:
    return {
        "runs": 0,
        "left by the command": 0,
        "left_how": Counter(),
        "completed": 0,
        "leaks after the sweep": 0,
        "artifact": Counter(),
        "failed": 0,
    }


def figures(results: model.RunEvidence) -> ChaosFigures:
    """The table's rows (command, signal, phase) → counts, the artifact outcomes, and the failed steps."""
    rows: defaultdict[tuple[str, str, str], ChaosRow] = defaultdict(_row)
    failed: list[FailedKill] = []
    missed = 0
    seeds: set[int] = set()
    for step in kill_steps(results):
        res = procedure.results_as(step, model.FaultResults) or model.FaultResults()
        injected = cast(model.KillInjected, res.get("injected"))  # the kill kind's record (kill_steps: it drew)
        seeds.add(int(injected["seed"]))
        if not injected.get("sent"):
            missed += 1
        else:
            row = rows[(str(injected["command"]), str(injected["signal"]), str(injected.get("phase") or "?"))]
            cleanup = res.get("cleanup") or model.CleanupAudit()
            row["runs"] += 1
            row["left by the command"] += bool(cleanup.get("leftover_processes"))
            if cleanup.get("leftover_processes"):
                row["left_how"][left_how(cleanup)] += 1
            row["completed"] += bool(injected.get("completed"))
            row["leaks after the sweep"] += not (cleanup.get("after_sweep") or {}).get("ok", False)
            row["artifact"][artifact_outcome(res)] += 1
            row["failed"] += step["outcome"] != "passed"
        if step["outcome"] != "passed":
            failed.append(
                FailedKill(
                    lane=step["lane"],
                    step=step["step"],
                    seed=injected["seed"],
                    attempt=injected.get("attempt"),
                    offset_s=injected.get("offset_s"),
                    phase=injected.get("phase"),
                    why="; ".join(res.get("mismatches") or [step.get("message") or ""])[:400],
                )
            )
    return ChaosFigures(rows=dict(rows), failed=failed, missed=missed, seeds=sorted(seeds))


def render(fig: ChaosFigures) -> str:
    """The figures as a plain-text table (``bench/chaos.py``), then the failed steps with what replays each."""
    lines = [
        f"{'command':8} {'signal':8} {'phase reached':36} {'runs':>4} {'left':>5} {'leaks':>5} {'failed':>6}  artifact"
    ]
    total: Counter[str] = Counter()
    for (command, signal, phase), row in sorted(fig["rows"].items()):
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(row["artifact"].items()))
        if row["left_how"]:
            outcomes += "; left: " + ", ".join(f"{k} {v}" for k, v in sorted(row["left_how"].items()))
        if row["completed"]:
            outcomes += f"; completed before the signal {row['completed']}"
        lines.append(
            f"{command:8} {signal:8} {phase:36} {row['runs']:>4} {row['left by the command']:>5} "
            f"{row['leaks after the sweep']:>5} {row['failed']:>6}  {outcomes}"
        )
        for key in ("runs", "left by the command", "leaks after the sweep", "failed"):
            total[key] += row[key]
    lines.append(
        f"{'all':54} {total['runs']:>4} {total['left by the command']:>5} {total['leaks after the sweep']:>5} "
        f"{total['failed']:>6}  (signal never sent, every draw missed: {fig['missed']})"
    )
    lines.append(f"seeds: {', '.join(map(str, fig['seeds'])) or 'none'}")
    for f in fig["failed"]:
        lines.append(
            f"FAILED {f['lane']} {f['step']}: replay with --vsnap-kill-seed={f['seed']} (attempt {f['attempt']}, "
            f"offset {f['offset_s']} s, {f['phase']}): {f['why']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("results", type=Path, help="a run's results.json")
    parser.add_argument("--json", action="store_true", help="the figures as JSON")
    args = parser.parse_args(argv)
    fig = figures(json.loads(args.results.read_text()))  # results.json as written (nothing re-read as the model)
    if args.json:
        print(
            json.dumps({**fig, "rows": [[*k, {**v, "artifact": dict(v["artifact"])}] for k, v in fig["rows"].items()]})
        )
    else:
        print(render(fig))
    return 1 if fig["failed"] else 0
