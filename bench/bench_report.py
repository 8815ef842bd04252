"""Report render benchmark: 1,000 parameters × 3 arms × 2 runners (issue 5 goals: HTML ≤ 2 MB, render ≤ 1 s).

Run: ``python bench/bench_report.py [--params N] [--repeat N]``. Writes a synthetic run (the generator the
report tests use) into a temporary directory, then times ``write_reports`` (assemble evidence.jsonl →
results.json, pandas comparisons, report.html, summary.md) cold (first call in a fresh process, imports
included) and warm (median of the repeats), and prints the sizes and the machine it ran on.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
GOAL_HTML_BYTES = 2_000_000
GOAL_RENDER_S = 1.0


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("report_evidence", ROOT / "tests" / "report" / "synthetic_runs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return module


def machine_info() -> dict[str, str]:
    """CPU, cores, memory, OS, Python and library versions."""
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = "unknown"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    except OSError:
        pass
    import jinja2
    import pandas

    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "memory": memory,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "pandas": pandas.__version__,
        "jinja2": jinja2.__version__,
    }


def _cold_seconds(report_dir: Path) -> float:
    """``write_reports`` in a fresh interpreter: imports and template compilation included."""
    code = (
        "import time, sys; from pathlib import Path; t = time.perf_counter();"
        "from vsnap_qual.report import write_reports;"
        "write_reports(Path(sys.argv[1]), github_step_summary=False);"
        "print(time.perf_counter() - t)"
    )
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(report_dir)], capture_output=True, text=True, env=env, check=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures; exit 1 when a goal is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", type=Path, default=None, help="write the run here instead of a temp dir")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT))
    from vsnap_qual.report import write_reports

    generator = _generator()
    arms = ("head", "base", "previous")
    runners = ("v1", "v2")
    spec = generator.RunSpec(
        validate=False,  # the third arm is beyond the evidence model: this measures rendering at scale
        runners=runners,
        arms=arms,
        params=args.params,
        changed_digests=(("v2", "restore-2", "model.norm.weight"),),
        kv={(r, a): (61_440, 61_296) for r in runners for a in arms},
    )
    with tempfile.TemporaryDirectory() as scratch:
        report_dir = args.keep or Path(scratch) / "run"
        generator.write_evidence(report_dir, spec)
        evidence_bytes = (report_dir / "evidence.jsonl").stat().st_size
        cold = _cold_seconds(report_dir)
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            paths = write_reports(report_dir, github_step_summary=False)
            times.append(time.perf_counter() - start)
        warm = statistics.median(times)
        html_bytes = paths.report_html.stat().st_size
        sizes = {
            "evidence.jsonl": evidence_bytes,
            "results.json": paths.results_json.stat().st_size,
            "report.html": html_bytes,
            "summary.md": paths.summary_md.stat().st_size,
        }
        steps = len(json.loads(paths.results_json.read_text())["steps"])

    print(
        f"vsnap-qual report render benchmark: {args.params:,} parameters × {len(arms)} arms × "
        f"{len(runners)} runners ({steps} steps, 5 canaries, 12 faults)"
    )
    for key, value in machine_info().items():
        print(f"  machine {key:<7} {value}")
    for name, size in sizes.items():
        print(f"  size    {name:<15} {size / 1e6:8.3f} MB")
    html_ok = html_bytes <= GOAL_HTML_BYTES
    time_ok = warm <= GOAL_RENDER_S
    print(
        f"  render  warm median {warm:.3f} s (n={args.repeat}, min {min(times):.3f} s)"
        f"  goal ≤ {GOAL_RENDER_S:.1f} s: {'ok' if time_ok else 'MISSED'}"
    )
    print(f"  render  cold        {cold:.3f} s (fresh interpreter: pandas + jinja2 imports included)")
    print(
        f"  html    {html_bytes / 1e6:.3f} MB  goal ≤ {GOAL_HTML_BYTES / 1e6:.0f} MB: {'ok' if html_ok else 'MISSED'}"
    )
    print(f"  ratios  html/goal {html_bytes / GOAL_HTML_BYTES:.2f}  render/goal {warm / GOAL_RENDER_S:.2f}")
    return 0 if html_ok and time_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
