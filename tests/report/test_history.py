"""``vsnap-qual history``: trends over the committed evidence runs, and the gate against the median of recent
compatible passed runs, which a copy of a committed H200 run with its times doubled fails."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from vsnap_qual.report import history

ROOT = Path(__file__).resolve().parents[2]
EVIDENCE = ROOT / "evidence"
GPU = EVIDENCE / "gpu"


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vsnap_qual.cli", "history", *map(str, args)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def evidence_runs() -> list[history.Run]:
    return history.read_runs([EVIDENCE])


def test_every_committed_run_is_read_and_the_page_renders(evidence_runs: list[history.Run], tmp_path: Path) -> None:
    files = [*EVIDENCE.rglob("results.json"), *EVIDENCE.rglob("results.json.gz")]
    assert len(evidence_runs) == len(files) > 30
    written = history.write(evidence_runs, tmp_path, gate_result=None, tolerance=0.25, window=7)
    page, md = (p.read_text() for p in written)
    assert "<script" not in page and "http" not in page.split("<body>")[1]  # self-contained
    groups = history.groups(evidence_runs)
    assert len(groups) > 1  # H200 and CPU runs never share an axis
    assert page.count('<svg class="chart"') == sum(1 for _ in groups) * len(history.FIGURES) - page.count(
        "not recorded in these runs"
    )
    assert any(key[1] == "NVIDIA H200 ×1" for key in groups) and any(key[1] == "no GPU" for key in groups)
    for key in groups:  # the compatibility key is shown with each group
        assert f"image {key[0]} · GPU {key[1]}" in md
    assert "### Steps × nights" in md and "| v1/head/restore-1 |" in md


def test_a_chart_has_a_zero_based_labelled_axis_and_a_colour_and_legend_entry_per_lane(
    evidence_runs: list[history.Run],
) -> None:
    key, group = max(history.groups(evidence_runs).items(), key=lambda kv: len(kv[1]))
    lanes = list(dict.fromkeys(lane for r in group for lane in r.figures))
    svg = str(history.line_chart(history.FIGURES[3], group, lanes))
    ticks = re.findall(r'class="tick" text-anchor="end">([^<]+)<', svg)
    assert ticks[0] == "0 s" and len(ticks) >= 3
    legend = re.findall(r'class="legend">([^<]+)<', svg)
    assert legend == lanes
    colours = re.findall(r'<line [^>]*stroke="(#[0-9A-Fa-f]{6})" stroke-width="3"', svg)
    assert len(set(colours)) == min(len(lanes), 12)


def test_ticks_start_at_zero_and_cover_the_top() -> None:
    assert history._ticks(0.9) == [0.0, 0.5, 1.0]
    assert history._ticks(0.0021) == [0.0, 0.001, 0.002, 0.003]  # a small figure is drawn small, not full height
    ticks = history._ticks(13_496_288)
    assert ticks[0] == 0 and ticks[-1] >= 13_496_288 and len(ticks) <= 6


def test_compatibility_is_image_family_gpu_and_engine(evidence_runs: list[history.Run]) -> None:
    assert history._family("vllm/vllm-openai:nightly-abc") == "vllm/vllm-openai"
    assert history._family("localhost:5000/vllm@sha256:0123") == "localhost:5000/vllm"
    assert history._family("vsnap-vllm-cpu:0.32.0") == "vsnap-vllm-cpu"
    real = [r for r in evidence_runs if "real-vllm" in r.source]
    assert {r.key[2] for r in real if "2026-12-03" in r.source} == {"vLLM 0.32 (CPU smoke)"}


def doubled(results: dict[str, Any], factor: float, suffix: str) -> dict[str, Any]:
    """A copy of a run started a day later, every time in it multiplied by ``factor``."""
    out: dict[str, Any] = json.loads(json.dumps(results))
    out["run"]["run_id"] = out["run"]["run_id"] + suffix
    out["run"]["started"] = "2099-01-01T00:00:00+00:00"
    for step in out["steps"]:
        step["seconds"] = step["seconds"] * factor
        step["engine_seconds"] = (step.get("engine_seconds") or 0.0) * factor
        if isinstance(step["results"].get("ready_seconds"), (int, float)):
            step["results"]["ready_seconds"] *= factor
    return out


@pytest.fixture(scope="module")
def h200_newest(evidence_runs: list[history.Run]) -> tuple[Path, list[history.Run]]:
    """The newest passed H200 run of the largest H200 group, and the group's runs."""
    h200 = {k: g for k, g in history.groups(evidence_runs).items() if k[1].startswith("NVIDIA H200")}
    group = max(h200.values(), key=len)
    passed = [r for r in group if r.status == "pass"]
    assert len(passed) >= 3
    return Path(passed[-1].source), group


@pytest.mark.parametrize(("factor", "fails"), [(2.0, True), (1.0, False)])
def test_the_gate_fails_a_run_made_twice_as_slow(
    h200_newest: tuple[Path, list[history.Run]], tmp_path: Path, factor: float, fails: bool
) -> None:
    source, group = h200_newest
    copy = tmp_path / "night" / "results.json"
    copy.parent.mkdir()
    copy.write_text(json.dumps(doubled(json.loads(source.read_text()), factor, "-copy")))
    runs = history.read_runs([GPU, copy])
    result = history.gate(runs, window=7, tolerance=0.25)
    assert result.run is not None and result.run.run_id.endswith("-copy")
    assert result.compared
    harness = [f for f in result.failures if f.figure.key == "harness_s"]
    assert bool(harness) is fails, [str(f) for f in result.failures]
    if fails:
        assert all(f.value > f.median * 1.25 for f in harness)
        assert "harness time" in str(harness[0]) and "compatible passed run" in str(harness[0])
    done = cli(GPU, copy, "--gate", "--out", tmp_path / "out")
    assert done.returncode == (1 if fails else 0), done.stdout + done.stderr
    assert ("gate: worse:" in done.stderr) is fails
    assert (tmp_path / "out" / "history.html").is_file() and (tmp_path / "out" / "history.md").is_file()


def test_no_run_is_one_clear_error(tmp_path: Path) -> None:
    done = cli(tmp_path, "--out", tmp_path / "out")
    assert done.returncode == 2 and "no results.json" in done.stderr
    assert not (tmp_path / "out").exists()
    bad = cli(GPU, "--window", "0")
    assert bad.returncode == 2 and "--window" in bad.stderr
