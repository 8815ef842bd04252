"""The false-alarm soak (issue 13): the full qualification of the unmodified reference engine, N times in a row
(``make qualify``'s command: both runners × head and base, lifecycle and all faults, ``-n 2``). The engine is
unchanged, so every run must PASS: any FAIL or PARTIAL is a false alarm of the harness (a fault whose injection
did not hold judged as an engine failure, a race, a leak), listed with its failed steps and messages.

Not a timed test and not part of ``make test`` or ``make bench`` (it takes N full runs); run it by hand:
``python bench/soak_false_alarms.py --runs 10 [--out reports/soak] [pytest args...]``. It writes
``OUT/soak.json`` and ``OUT/soak.md`` as it goes (each run's report stays in ``OUT/run-NN/``), and exits 1 on any
false alarm.

A nightly shares its host (issue 44 item 6): ``--co-tenant`` starts CPU-heavy work beside the whole soak and stops
it at the end. ``stress:N`` is N busy Python processes on the host (a ``stress``-like load); ``build`` is a
``docker build`` of a throwaway image (``vsnap-soak-cotenant:<pid>``, removed at the end) whose steps compress
random data and run a busy Python loop, built again and again without cache (the shape of the build that installed
packages beside the run that false-alarmed). Each run records the load average at its start and end, the machine's
busy CPUs over the run (``/proc/stat``), the co-tenant's own CPU seconds where it can be read (``stress``), the
busiest other processes at its start (the machine's other users), and every restore's decode judgement
(measured, the machine's slowdown by the run queue and by the calibration, judged): ``OUT/decode.json``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
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


BUILD = """FROM vsnap-reference:head
RUN head -c 256M /dev/urandom | gzip -6 > /tmp/a.gz && rm /tmp/a.gz
RUN python3 -c "import time; t = time.time(); exec('while time.time() - t < 60: sum(range(10000))')"
RUN head -c 256M /dev/urandom | xz -1 -T1 > /tmp/b.xz && rm /tmp/b.xz
"""


def _busy(stop: Any) -> None:
    while not stop.is_set():
        sum(range(100_000))


class CoTenant:
    """CPU-heavy work beside the soak (``stress:N`` or ``build``), started once and stopped at the end."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.stop = multiprocessing.Event()
        self.procs: list[multiprocessing.Process] = []
        self.builder: subprocess.Popen[bytes] | None = None
        self.tag = f"vsnap-soak-cotenant:{os.getpid()}"

    def start(self) -> None:
        if self.kind.startswith("stress:"):
            count = int(self.kind.split(":", 1)[1])
            self.procs = [multiprocessing.Process(target=_busy, args=(self.stop,), daemon=True) for _ in range(count)]
            for proc in self.procs:
                proc.start()
        elif self.kind == "build":
            dockerfile = Path(f"/tmp/vsnap-soak-cotenant-{os.getpid()}.Dockerfile")
            dockerfile.write_text(BUILD)
            build = f"docker build -q --no-cache -t {self.tag} - < {dockerfile} >/dev/null 2>&1"
            self.builder = subprocess.Popen(
                ["sh", "-c", f"while :; do {build} || sleep 5; done"], stdin=subprocess.DEVNULL, start_new_session=True
            )

    def cpu_s(self) -> float | None:
        """The co-tenant's CPU seconds so far (``stress``: its processes'; a build's run in the daemon: None)."""
        if not self.procs:
            return None
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for proc in self.procs:
            try:
                fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / ticks
        return round(total, 1)

    def end(self) -> None:
        self.stop.set()
        for proc in self.procs:
            proc.join(5)
        if self.builder is not None:
            os.killpg(self.builder.pid, 15)
            self.builder.wait(30)
            subprocess.run(["docker", "image", "rm", "-f", self.tag], capture_output=True)
            Path(f"/tmp/vsnap-soak-cotenant-{os.getpid()}.Dockerfile").unlink(missing_ok=True)


def machine_busy() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, wall clock) now (``/proc/stat``'s first line)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    busy = sum(fields[i] for i in (0, 1, 2, 5, 6, 7) if i < len(fields))
    return busy / os.sysconf("SC_CLK_TCK"), time.time()


def busiest() -> list[str]:
    """The ten busiest processes now (``ps``): the machine's other users."""
    out = subprocess.run(["ps", "-eo", "pcpu,etime,args", "--sort=-pcpu"], capture_output=True, text=True).stdout
    return [line.strip()[:160] for line in out.splitlines()[1:11]]


def decode_rows(results: dict[str, Any], run: int) -> list[dict[str, Any]]:
    """Every restore's decode judgement in one run's results."""
    rows = []
    for step in results["steps"]:
        judged = (step.get("results") or {}).get("decode_judgement")
        if not judged or judged.get("ok") is None:
            continue
        keys = ("measured_slowdown", "queued_slowdown", "calibrated_slowdown", "machine_slowdown", "slowdown", "ok")
        rows.append({"run": run, "lane": step.get("lane"), "step": step["step"], "retried": judged.get("retried"),
                     **{k: judged.get(k) for k in keys}})  # fmt: skip
    return rows


def one_run(report: Path, extra: list[str], cotenant: CoTenant | None = None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "pytest", *COMMAND, f"--vsnap-report-dir={report}", *extra]
    started = time.time()
    load_before, others = os.getloadavg()[0], busiest()
    busy_before, co_before = machine_busy(), cotenant.cpu_s() if cotenant else None
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    busy_after, co_after = machine_busy(), cotenant.cpu_s() if cotenant else None
    outcome: dict[str, Any] = {"exit_code": done.returncode, "wall_s": round(time.time() - started, 1)}
    outcome["machine"] = {
        "loadavg_start": load_before,
        "loadavg_end": os.getloadavg()[0],
        "busy_cpus": round((busy_after[0] - busy_before[0]) / max(1e-9, busy_after[1] - busy_before[1]), 2),
        "cotenant": cotenant.kind if cotenant else None,
        "cotenant_cpus": round((co_after - co_before) / outcome["wall_s"], 2)
        if co_before is not None and co_after is not None
        else None,
        "busiest_at_start": others,
    }
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
    outcome["decode"] = decode_rows(results, int(report.name.split("-")[-1]))
    return outcome


def write(out: Path, runs: list[dict[str, Any]], target: int) -> None:
    alarms = [r for r in runs if r.get("verdict") != "pass" or r["exit_code"] != 0]
    (out / "soak.json").write_text(json.dumps({"target": target, "runs": runs}, indent=2))
    restores = [row for run in runs for row in run.get("decode") or []]
    (out / "decode.json").write_text(json.dumps({"restores": restores}, indent=2))
    lines = [
        "# False-alarm soak: the unmodified reference engine, full qualification",
        "",
        f"{len(runs)} of {target} runs done; {len(runs) - len(alarms)} clean, {len(alarms)} false alarm(s).",
        "",
        "| run | verdict | exit | wall s | load 1 min (start, end) | busy CPUs | co-tenant CPUs | decode judged "
        "(measured) | not passed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n, run in enumerate(runs, 1):
        bad = "; ".join(f"{f['lane']} {f['step']}: {f['message'][:160]}" for f in run.get("failed") or [])
        machine = run.get("machine") or {}
        judged = [r["slowdown"] for r in run.get("decode") or []]
        measured = [r["measured_slowdown"] for r in run.get("decode") or []]
        decode = f"{min(judged):.2f}–{max(judged):.2f}× ({min(measured):.2f}–{max(measured):.2f}×)" if judged else "-"
        lines.append(
            f"| {n} | {run.get('verdict')} | {run['exit_code']} | {run['wall_s']} | "
            f"{machine.get('loadavg_start', 0):.1f}, {machine.get('loadavg_end', 0):.1f} | "
            f"{machine.get('busy_cpus', '-')} | {machine.get('cotenant_cpus') or '-'} | {decode} | {bad or '-'} |"
        )
    (out / "soak.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "soak")
    parser.add_argument(
        "--co-tenant", default="none", help="CPU-heavy work beside the soak: none, stress:N (N busy processes), build"
    )
    parser.add_argument("--deadline", type=float, help="a Unix time: no run starts after it (the soak says so)")
    args, extra = parser.parse_known_args()
    if (
        args.co_tenant != "none"
        and args.co_tenant != "build"
        and not (args.co_tenant.startswith("stress:") and args.co_tenant[7:].isdigit() and int(args.co_tenant[7:]) > 0)
    ):
        parser.error(f"--co-tenant {args.co_tenant!r}: give none, build or stress:N with N > 0 (e.g. stress:2)")
    if args.out.exists() and any(args.out.iterdir()):
        parser.error(f"--out {args.out} is not empty: choose a new directory (runs are never merged)")
    args.out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a TERM still stops the co-tenant
    runs: list[dict[str, Any]] = []
    cotenant = CoTenant(args.co_tenant) if args.co_tenant != "none" else None
    if cotenant is not None:
        cotenant.start()
    try:
        for n in range(1, args.runs + 1):
            if args.deadline is not None and time.time() >= args.deadline:
                print(f"the deadline passed: {n - 1} of {args.runs} runs done", flush=True)
                break
            run = one_run(args.out / f"run-{n:02d}", extra, cotenant)
            runs.append(run)
            write(args.out, runs, args.runs)
            print(f"run {n}/{args.runs}: {run.get('verdict')} (exit {run['exit_code']}, {run['wall_s']} s)", flush=True)
    finally:
        if cotenant is not None:
            cotenant.end()
    clean = sum(1 for r in runs if r.get("verdict") == "pass" and r["exit_code"] == 0)
    print(f"{clean} of {len(runs)} clean; report: {args.out / 'soak.md'}")
    return 0 if clean == len(runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
