"""Reports come out of any evidence: odd values never crash the rendering (it runs in a pytest hook)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from tests.report.synthetic_runs import MakeRun, RunSpec
from vsnap_qual.report import write_reports

ODD_VALUES: list[Any] = [None, "x", 3, [], {}, 1.5, True]


def _mutate(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            roll = rng.random()
            if key == "kind" or roll >= 0.2:
                out[key] = _mutate(item, rng)
            elif roll >= 0.05:
                out[key] = rng.choice(ODD_VALUES)
        return out
    if isinstance(value, list):
        return [_mutate(item, rng) for item in value if rng.random() > 0.05]
    return value


@pytest.mark.parametrize("seed", range(6))
def test_mangled_evidence_still_reports(make_run: MakeRun, seed: int) -> None:
    directory = make_run(f"odd{seed}", RunSpec(params=6, log_lines=3))
    evidence = directory / "evidence.jsonl"
    rng = random.Random(seed)
    lines = [json.dumps(_mutate(json.loads(line), rng)) for line in evidence.read_text().splitlines()]
    evidence.write_text("\n".join(lines) + "\n")
    paths = write_reports(directory, github_step_summary=False)
    assert paths.notes == ()
    assert '<section id="verdict">' in paths.report_html.read_text()
    assert paths.summary_md.read_text().startswith("## vsnap-qual")


def test_a_rendering_failure_still_writes_every_file(report_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import vsnap_qual.report.html as html

    def broken(*_args: Any, **_kwargs: Any) -> str:
        raise RuntimeError("template exploded")

    monkeypatch.setattr(html, "render_html", broken)
    paths = write_reports(report_dir, github_step_summary=False)
    assert "template exploded" in paths.notes[0]
    page = paths.report_html.read_text()
    assert "vsnap-qual: FAIL" in page and "results.json" in page
    assert "| check | result |" in paths.summary_md.read_text()
    assert json.loads(paths.results_json.read_text())["verdict"]["status"] == "fail"
