"""ci/nightly.sh keeps its history (VSNAP_NIGHTLY_STATE/history: a night's results.json each) and renders it each
night with ``vsnap-qual history --gate`` (the real command), against the stand-ins of ``nightly_script``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.ci.nightly_script import NightlyRunner
from vsnap_qual.timing import plan

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "evidence/gpu/2026-12-03-all-checks-6a0923b/results.json"
ENV = {"VSNAP_IMAGE": "vllm/vllm-openai:nightly-0123abc", "VSNAP_WORKERS": "1"}


def night(results: dict[str, Any], day: int, factor: float, path: Path) -> Path:
    """The committed run as night ``day`` (its own run id and start), every time multiplied by ``factor``."""
    out = json.loads(json.dumps(results))
    out["run"]["run_id"] = f"night-{day}"
    out["run"]["started"] = f"2099-01-{day:02d}T00:00:00+00:00"
    for step in out["steps"]:
        step["seconds"] *= factor
        step["engine_seconds"] = (step.get("engine_seconds") or 0.0) * factor
    path.write_text(json.dumps(out))
    return path


@pytest.fixture
def nightly(tmp_path: Path) -> NightlyRunner:
    return NightlyRunner(tmp_path)


def test_each_night_is_kept_and_rendered_and_the_gate_fails_a_slower_night(
    nightly: NightlyRunner, tmp_path: Path
) -> None:
    results = json.loads(RUN.read_text())
    for day in (1, 2):
        run = nightly(ENV, FAKE_PYTEST_RESULTS=str(night(results, day, 1.0, tmp_path / f"n{day}.json")),
                      FAKE_HISTORY="real", VSNAP_HISTORY_GATE="1")  # fmt: skip
        assert run.returncode == 0, run.stdout + run.stderr
        assert (nightly.report / "history" / "history.html").is_file()
        # the plan line estimates from the kept nights (--vsnap-plan-history through its variable): no night
        # before the first, night 1 before the second; and the real estimate reads tonight for tomorrow's plan
        handed, kept = (run.calls_dir / "plan-history").read_text().split()
        assert (Path(handed), kept) == (nightly.state / "history", str(day - 1)), "the nights before this one"
        found = plan.estimate(Path(handed), results["run"]["options"]["image"], False)
        assert found.runs[:1] == (f"night-{day}",) and found.medians, found.none
    slow = night(results, 3, 2.0, tmp_path / "n3.json")
    run = nightly(ENV, FAKE_PYTEST_RESULTS=str(slow), FAKE_HISTORY="real", VSNAP_HISTORY_GATE="1")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "gate: worse:" in run.stderr and "harness time" in run.stderr
    assert len(list((nightly.state / "history").glob("*/results.json"))) == 3
    assert "History gate" in (nightly.report / "summary.md").read_text()
    history_md = (nightly.report / "history" / "history.md").read_text()
    assert "## Gate: FAIL for `night-3`" in history_md
    # without VSNAP_HISTORY_GATE the night keeps pytest's status, and still says what the gate found
    run = nightly(ENV, FAKE_PYTEST_RESULTS=str(night(results, 4, 2.0, tmp_path / "n4.json")), FAKE_HISTORY="real")
    assert run.returncode == 0 and "gate: worse:" in run.stderr
