"""The harness's own time before and after a change, side by side in one session (issue 27): the same qualification
of the reference engine run from two trees of this repository, alternately (before, after, before, after, ...), so
that both meet the same machine load; medians over ``--runs`` each, from each run's own ``results.json``
(``vsnap_qual/timing/run_figures.py``'s figures: nothing re-judged, no profiler).

The "before" tree is a ``git worktree`` of ``--before`` (a commit), or, without ``--before``, this tree itself
with ``--before-args`` added (issue 45: ``--before-args=--vsnap-overlap=off`` compares the lanes' overlap off and on
in one tree); ``--after-args`` adds to the "after" runs alone. Both run with this Python and its installed
dependencies, each importing its own ``vsnap_qual`` (``PYTHONPATH``). Default selection: one runner (V1), head and
base arms, ``-n 2`` (8–9 minutes a run on 2 cores at 6a0923b: six runs, about 50 minutes); pass pytest
arguments after ``--`` to change it (``make qualify``'s: ``-- --vsnap-base-image=vsnap-reference:base -n 4``).
Each run's figures include its critical path (``timing.critical_path``: engine seconds, chains apart) and the wall
over it.

Run: ``python bench/before_after.py [--before <commit>] [--before-args ARGS] [--after-args ARGS] [--runs 3]
[--out reports/before-after] [-- pytest args]``. Not part of ``make bench`` (it takes 2 × runs qualifications).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from vsnap_qual.timing import critical_path, run_figures

ROOT = Path(__file__).resolve().parents[1]
SELECTION = ["--vsnap-runners=v1", "-n", "2", "--vsnap-base-image=vsnap-reference:base"]
COMMAND = ["suites/", "@suites/profiles/reference.args", "-q", "-p", "no:cacheprovider"]


def one_run(tree: Path, report: Path, selection: list[str]) -> dict[str, Any]:
    """One qualification from ``tree``; its figures (or why there are none)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", "pytest", *COMMAND, f"--vsnap-report-dir={report}", *selection]
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    try:
        results = json.loads((report / "results.json").read_text())
    except (OSError, ValueError) as exc:
        return {"exit_code": done.returncode, "error": f"{exc}: {done.stdout[-1000:]}"}
    found = run_figures.figures(results)
    path = critical_path.time_to_verdict(results).path("engine").seconds
    overlap = results["run"].get("overlap") or {}
    return {
        "exit_code": done.returncode,
        "verdict": results["verdict"]["status"],
        "wall_s": found["wall_s"],
        "engine_s": found["engine_s"],
        "wall_per_engine": round(found["wall_s"] / found["engine_s"], 3) if found["engine_s"] else None,
        "fault_harness_median_s": (found.get("fault_harness_s") or {}).get("median"),
        "critical_path_engine_s": path,
        "wall_per_critical_path": round(found["wall_s"] / path, 3) if path else None,
        "lanes_at_once": overlap.get("at_once"),
    }


KEYS = ("wall_s", "engine_s", "wall_per_engine", "fault_harness_median_s", "critical_path_engine_s",
        "wall_per_critical_path")  # fmt: skip


def medians(runs: list[dict[str, Any]]) -> dict[str, float | None]:
    keys = KEYS
    out: dict[str, float | None] = {}
    for key in keys:
        values = [r[key] for r in runs if isinstance(r.get(key), int | float)]
        out[key] = round(statistics.median(values), 3) if values else None
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", help="the commit to compare against (a git ref); without it, this tree")
    parser.add_argument("--before-args", default="", help="pytest arguments added to the before runs alone")
    parser.add_argument("--after-args", default="", help="pytest arguments added to the after runs alone")
    parser.add_argument("--runs", type=int, default=3, help="runs of each tree (default 3)")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "before-after")
    parser.add_argument("pytest_args", nargs="*", help="pytest arguments instead of the default selection")
    args = parser.parse_args(argv)
    if args.before is None and not (args.before_args or args.after_args):
        parser.error(
            "without --before the two sides are this tree: give --before-args or --after-args to tell them apart"
        )
    selection = args.pytest_args or SELECTION
    extra = {"before": shlex.split(args.before_args), "after": shlex.split(args.after_args)}
    args.out.mkdir(parents=True, exist_ok=True)
    after_commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    with tempfile.TemporaryDirectory(prefix="vsnap-before-") as scratch:
        before = Path(scratch) / "tree" if args.before else ROOT
        if args.before:
            subprocess.run(["git", "worktree", "add", "--detach", str(before), args.before], cwd=ROOT, check=True)
        try:
            runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
            for i in range(1, args.runs + 1):
                for name, tree in (("before", before), ("after", ROOT)):
                    outcome = one_run(tree, args.out / f"{name}-{i:02d}", [*selection, *extra[name]])
                    runs[name].append(outcome)
                    print(f"{name} {i}/{args.runs}: {outcome}", flush=True)
                    summary = {
                        "before": args.before or f"this tree, with {args.before_args or 'nothing'} added",
                        "after": after_commit.strip() + (f", with {args.after_args} added" if args.after_args else ""),
                        "selection": selection,
                        "extra": extra,
                        "runs": runs,
                        "medians": {k: medians(v) for k, v in runs.items()},
                    }
                    (args.out / "before-after.json").write_text(json.dumps(summary, indent=2))
        finally:
            if args.before:
                subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, check=False)
    table = ["| | before | after |", "|---|---|---|"]
    for key in KEYS:
        table.append(f"| {key} (median, n={args.runs}) | {summary['medians']['before'][key]} | "
                     f"{summary['medians']['after'][key]} |")  # fmt: skip
    (args.out / "before-after.md").write_text("\n".join(table) + "\n")
    print("\n".join(table))
    failed = [r for rs in runs.values() for r in rs if r.get("verdict") != "pass"]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
