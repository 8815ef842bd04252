"""The committed CPU before/after run (evidence/before-after/) backs what the docs say about it (issue 27)."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "evidence" / "before-after" / "2026-12-03-v1-975826d-vs-18cd881"


def test_the_cpu_before_after_figures_are_its_evidence() -> None:
    """The CPU before/after (bench/before_after.py) docs/measured.md and evidence/before-after state are its medians."""
    found = json.loads((RUN / "before-after.json").read_text())
    before, after = found["medians"]["before"], found["medians"]["after"]
    assert all(r["verdict"] == "pass" for runs in found["runs"].values() for r in runs)
    assert len(found["runs"]["before"]) == len(found["runs"]["after"]) == 3 and found["before"] == "975826d"
    said = (
        f"median {before['fault_harness_median_s']:.2f} s → {after['fault_harness_median_s']:.2f} s; "
        f"wall / engine {before['wall_per_engine']:.2f} → {after['wall_per_engine']:.2f}"
    )
    assert said in (ROOT / "docs" / "measured.md").read_text()
    docs = (RUN.parent / "README.md").read_text()
    assert said.replace("median ", "harness time per fault ") in docs
