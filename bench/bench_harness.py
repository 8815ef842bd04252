"""Harness performance, side by side in one run (ratios, never timed tests):

1. harness overhead = wall time of the whole suite (lifecycle and faults) / the time spent waiting on the engine
   (its commands, its start and stop, its HTTP answers; goal ≤ 1.10), with the serial run's per-step and
   per-fault-phase table (``bench/run_figures.py``: the observation window's idle time apart);
   1b. the same wall time / the sum of the steps' own durations (what pytest, fixtures, container starts and the
   report add around the steps);
2. readiness-notice latency = time from the listener binding to the harness noticing ready (goal ≤ 100 ms);
3. parallel speed-up = wall time with ``-n 2`` / serial wall time, for two runners (goal ≤ 0.6);
4. peak RSS of the pytest process (and its xdist workers).

Run: ``python bench/bench_harness.py [--image vsnap-reference:head]`` (``make bench`` runs every benchmark).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from vsnap_qual.timing import run_figures

ROOT = Path(__file__).resolve().parents[1]


def run_suite(report: Path, *args: str) -> tuple[float, int]:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "suites/",
        "@suites/profiles/reference.args",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--vsnap-report-dir={report}",
        *args,
    ]
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-3000:])
    return wall, done.returncode


def steps(report: Path) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in (report / "evidence.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in records if r["kind"] == "step"]


def machine() -> str:
    cpu = "unknown cpu"
    with contextlib.suppress(OSError, StopIteration):
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    return f"{platform.node()}: {os.cpu_count()} cores, {cpu}, Linux {platform.release()}, " + (
        f"Python {platform.python_version()}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--image", default="", help="image under test (default: the reference profile)")
    args = parser.parse_args()
    extra = [f"--vsnap-image={args.image}"] if args.image else []
    with tempfile.TemporaryDirectory() as tmp:
        serial_dir, parallel_dir = Path(tmp) / "serial", Path(tmp) / "parallel"
        serial_wall, serial_rc = run_suite(serial_dir, "--vsnap-runners=v1,v2", *extra)
        parallel_wall, parallel_rc = run_suite(parallel_dir, "--vsnap-runners=v1,v2", "-n", "2", *extra)
        serial_steps = steps(serial_dir)
        engine = sum(s.get("engine_seconds") or 0.0 for s in serial_steps)
        step_total = sum(s.get("seconds") or 0.0 for s in serial_steps)
        notices = [
            s["results"]["notice_latency_s"]
            for s in serial_steps + steps(parallel_dir)
            if "notice_latency_s" in (s.get("results") or {})
        ]
        if (serial_dir / "results.json").is_file():  # the serial run's own figures: per step and per fault phase
            print("=== the serial run's figures (bench/run_figures.py)", flush=True)
            run_figures.main([str(serial_dir / "results.json")])
            print(flush=True)
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"machine: {machine()}")
    print(f"suite exit codes: serial {serial_rc}, -n 2 {parallel_rc}")
    print(
        f"1. harness overhead (serial wall {serial_wall:.1f} s / in-container step time {engine:.1f} s): "
        f"{serial_wall / engine:.3f}  (goal <= 1.10)"
        if engine
        else "1. harness overhead: no step times"
    )
    if step_total:
        print(
            f"1b. framework overhead (serial wall {serial_wall:.1f} s / sum of step times {step_total:.1f} s): "
            f"{serial_wall / step_total:.3f}"
        )
    if notices:
        print(
            f"2. readiness-notice latency: median {statistics.median(notices) * 1000:.1f} ms, "
            f"max {max(notices) * 1000:.1f} ms over n={len(notices)}  (goal <= 100 ms)"
        )
    print(
        f"3. -n 2 / serial wall time for two runners: {parallel_wall:.1f} / {serial_wall:.1f} = "
        f"{parallel_wall / serial_wall:.3f}  (goal <= 0.6)"
    )
    print(f"4. peak RSS of a pytest process (largest child): {peak_mib:.0f} MiB")
    return 0 if serial_rc == 0 and parallel_rc == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
