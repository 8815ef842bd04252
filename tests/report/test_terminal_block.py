"""The terminal's closing block (issue 47 item 2): what was qualified in full, whatever its length, never cut at
the terminal's width; every check, the "not run" ones included. Over the committed real-vLLM run, whose "what was
qualified" lines are the longest the harness writes (CPU smoke mode, vLLM's words for each lane it does not have)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from vsnap_qual.report import parse
from vsnap_qual.report.terminal import terminal_summary_lines

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "evidence/real-vllm/2026-12-03-variants-make-fb96162/results.json.gz"


def test_what_was_qualified_is_whole_and_not_run_checks_are_shown() -> None:
    results = parse.results(json.loads(gzip.decompress(RUN.read_bytes())))
    lines = terminal_summary_lines(results, width=120)
    text = " ".join(" ".join(lines).split())
    verdict = results["verdict"]
    assert verdict.get("qualified") and max(len(q) for q in verdict.get("qualified", [])) > 120
    for said in [*verdict.get("qualified", []), verdict.get("target", ""), verdict["coverage_line"]]:
        assert " ".join(said.split()) in text, said[:80]
    not_run = [c for c in verdict["checks"] if c["status"] == "not run"]
    assert not_run and all(any(line.split()[:3] == ["not", "run", c["short"]] for line in lines) for c in not_run)
    # the text above the step × lane table is wrapped at the width where a word allows it (a link or a path longer
    # than a line stays whole); the table itself is as wide as its lanes
    table = next(n for n, line in enumerate(lines) if line.split()[:1] == ["step"])
    assert all(len(line) <= 120 or " " not in line.strip() for line in lines[1:table])
