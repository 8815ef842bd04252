"""The committed CPU chaos run backs what evidence/chaos/README.md and docs/measured.md say about it (issue 29)."""

from __future__ import annotations

import json
from pathlib import Path

from vsnap_qual.report import chaos

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "evidence" / "chaos" / "2026-12-02-cpu-n50-5147b56"


def test_the_cpu_chaos_runs_figures_are_its_evidence() -> None:
    results = json.loads((RUN / "results.json").read_text())
    fig = chaos.figures(results)
    rows = list(fig["rows"].items())
    assert sum(r["runs"] for _, r in rows) == 400 and fig["missed"] == 0
    assert sum(r["leaks after the sweep"] for _, r in rows) == 0
    assert sum(r["left by the command"] for _, r in rows) == 58
    creates = [r for (command, _, _), r in rows if command == "create"]
    assert sum(r["artifact"]["absent"] for r in creates) == 11
    assert sum(r["artifact"]["refused by inspect"] for r in creates) == 189
    restores = [r for (command, _, _), r in rows if command == "restore"]
    assert sum(r["artifact"]["restores again"] for r in restores) == 200
    assert [(f["lane"], f["step"]) for f in fig["failed"]] == [("v1-head", "fault:term-restore.37")]
    assert (RUN / "figures.txt").read_text().strip() == chaos.render(fig)
    doc = (RUN.parent / "README.md").read_text()
    assert "400 kills on CPU, 0 leaks after the sweep, 1 failed step" in doc and "`v1/head term-restore.37`" in doc
    assert "11 left no target and 189 a target" in doc and str(fig["seeds"][0]) in doc
    readme = (ROOT / "docs" / "measured.md").read_text()
    assert "400 kills, 0 left anything after the harness's sweep" in readme and "1 failed step" in readme
