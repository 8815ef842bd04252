"""`make qualify` keeps each run's results.json outside the report directory it deletes (``scripts/keep-run.sh``
into ``HISTORY_DIR``, default reports/history) and hands that directory to the plan line
(``--vsnap-plan-history``): the first run says "no estimate: no previous run", every later one estimates from the
runs kept before it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from vsnap_qual.timing import plan

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "evidence" / "real-vllm" / "2026-12-02-full-f7df29a" / "results.json"


def test_make_qualify_hands_the_kept_runs_to_the_plan_and_keeps_this_one_after(tmp_path: Path) -> None:
    report, history = tmp_path / "reports" / "latest", tmp_path / "reports" / "history"
    # run under `make test` (CI), the inner make would inherit MAKELEVEL and print "make[1]: Leaving directory"
    env = {k: v for k, v in os.environ.items() if k not in {"MAKELEVEL", "MAKEFLAGS", "MFLAGS"}}
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "qualify", f"REPORT_DIR={report}", f"HISTORY_DIR={history}",
         f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    removed = next(i for i, line in enumerate(lines) if line == f"rm -rf {report}")
    made = next(i for i, line in enumerate(lines) if line == f"mkdir -p {history}")
    pytest_at = next(i for i, line in enumerate(lines) if "-m pytest suites/" in line)
    assert removed < made < pytest_at
    command = " ".join(lines[pytest_at:])
    assert f"--vsnap-plan-history={history}" in command
    assert f"bash scripts/keep-run.sh {report} {history}" in command, "kept after the run, whatever its status"
    assert command.rstrip().endswith("exit $status"), "the run's own status"


def _keep(report: Path, history: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "keep-run.sh"), str(report), str(history)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_the_second_run_estimates_from_the_first(tmp_path: Path) -> None:
    history, report = tmp_path / "history", tmp_path / "latest"
    history.mkdir()
    image = json.loads(REAL.read_text())["run"]["options"]["image"]
    assert plan.estimate(history, image, True).none == f"no estimate: no previous run of vsnap-vllm-cpu in {history}"
    report.mkdir()
    refused = _keep(report, history)  # a run refused before it started wrote no results.json: nothing kept
    assert refused.returncode == 0 and "nothing kept" in refused.stderr and not list(history.iterdir())
    (report / "results.json").write_bytes(REAL.read_bytes())
    kept = _keep(report, history)
    assert kept.returncode == 0, kept.stderr
    run_id = json.loads(REAL.read_text())["run"]["run_id"]
    assert (history / run_id / "results.json").read_bytes() == REAL.read_bytes()
    found = plan.estimate(history, image, True)
    assert found.runs == (run_id,) and found.medians["create"] > 0
    line = plan.plan_line(["v1/head/create", "v1/head/restore-1"], 300.0, 30.0, 1, found)
    assert f"by the step medians of 1 previous run (newest {run_id})" in line, line
