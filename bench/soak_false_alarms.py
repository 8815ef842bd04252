"""The false-alarm soak (issue 13): the full qualification of the unmodified reference engine, N times in a row
(``make qualify``'s command: both runners × head and base, lifecycle and all faults, ``-n 2``). The engine is
unchanged, so every run must PASS: any FAIL or PARTIAL is a false alarm of the harness (a fault whose injection
did not hold judged as an engine failure, a race, a leak), listed with its failed steps and messages.

Not a timed test and not part of ``make test`` or ``make bench`` (it takes N full runs); run it by hand:
``python bench/soak_false_alarms.py --runs 10 [--out reports/soak] [pytest args...]``. It writes
``OUT/soak.json`` and ``OUT/soak.md`` as it goes (each run's report stays in ``OUT/run-NN/``), and exits 1 on any
false alarm.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
COMMAND = [
    "suites/",
    "@suites/profiles/reference.args",
    "-n",
    "2",
    "--vsnap-base-image=vsnap-reference:base",
    "-q",
    "-p",
    "no:cacheprovider",
]


def one_run(report: Path, extra: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "pytest", *COMMAND, f"--vsnap-report-dir={report}", *extra]
    started = time.time()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    outcome: dict[str, Any] = {"exit_code": done.returncode, "wall_s": round(time.time() - started, 1)}
    try:
        results = json.loads((report / "results.json").read_text())
    except (OSError, ValueError) as exc:
        outcome.update(verdict="no results.json", detail=f"{exc}; {done.stdout[-1500:]}")
        return outcome
    verdict = results["verdict"]
    outcome["verdict"] = verdict["status"]
    outcome["coverage"] = verdict.get("coverage_line")
    outcome["failed"] = [
        {"lane": s.get("lane"), "step": s["step"], "message": (s.get("message") or "")[:600]}
        for s in results["steps"]
        if s["outcome"] != "passed" and not str(s["outcome"]).startswith("not applicable")
    ]
    outcome["harness_errors"] = results.get("harness_errors") or []
    return outcome


def write(out: Path, runs: list[dict[str, Any]], target: int) -> None:
    alarms = [r for r in runs if r.get("verdict") != "pass" or r["exit_code"] != 0]
    (out / "soak.json").write_text(json.dumps({"target": target, "runs": runs}, indent=2))
    lines = [
        "# False-alarm soak: the unmodified reference engine, full qualification",
        "",
        f"{len(runs)} of {target} runs done; {len(runs) - len(alarms)} clean, {len(alarms)} false alarm(s).",
        "",
        "| run | verdict | exit | wall s | not passed |",
        "|---|---|---|---|---|",
    ]
    for n, run in enumerate(runs, 1):
        bad = "; ".join(f"{f['lane']} {f['step']}: {f['message'][:160]}" for f in run.get("failed") or [])
        lines.append(f"| {n} | {run.get('verdict')} | {run['exit_code']} | {run['wall_s']} | {bad or '-'} |")
    (out / "soak.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "soak")
    args, extra = parser.parse_known_args()
    if args.out.exists() and any(args.out.iterdir()):
        parser.error(f"--out {args.out} is not empty: choose a new directory (runs are never merged)")
    args.out.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    for n in range(1, args.runs + 1):
        run = one_run(args.out / f"run-{n:02d}", extra)
        runs.append(run)
        write(args.out, runs, args.runs)
        print(f"run {n}/{args.runs}: {run.get('verdict')} (exit {run['exit_code']}, {run['wall_s']} s)", flush=True)
    clean = sum(1 for r in runs if r.get("verdict") == "pass" and r["exit_code"] == 0)
    print(f"{clean} of {len(runs)} clean; report: {args.out / 'soak.md'}")
    return 0 if clean == len(runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
