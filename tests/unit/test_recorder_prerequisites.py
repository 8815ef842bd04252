"""The step recorder's prerequisites: a step that needs only what an earlier step delivered (restore-after-stop:
restore-2's restored server stopped cleanly; inspect: create's published artifact) runs after that step failed on
its checks alone, and is skipped, naming the prerequisite, after one that never delivered."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vsnap_qual import procedure
from vsnap_qual.config import LaneSpec
from vsnap_qual.evidence import EvidenceStore
from vsnap_qual.recorder import StepRecorder
from vsnap_qual.vllm_words import StepFailed


def _recorder(tmp_path: Path) -> StepRecorder:
    spec = LaneSpec(runner="v1", arm="head", image="img", expect="head", overlaid=False)
    return StepRecorder(spec=spec, store=EvidenceStore(tmp_path))


def _fail(recorder: StepRecorder, step: str, delivered: bool) -> None:
    with pytest.raises(StepFailed), recorder.step(step) as rec:
        rec.delivered = delivered
        raise StepFailed(f"{step}: decode speed: 2.4x slower than the ordinary engine")


def _records(tmp_path: Path) -> dict[str, dict[str, Any]]:
    lines = (tmp_path / "evidence.jsonl").read_text().splitlines()
    return {r["step"]: r for r in map(json.loads, lines) if r.get("kind") == "step"}


def _skipped(recorder: StepRecorder, step: str, tmp_path: Path) -> dict[str, Any]:
    with pytest.raises(pytest.skip.Exception), recorder.step(step):
        pass
    record = _records(tmp_path)[step]
    assert record["outcome"] == "skipped"
    return record


def _prepared(recorder: StepRecorder) -> None:
    for step in (procedure.ORDINARY, procedure.CREATE, procedure.INSPECT, procedure.RESTART):
        with recorder.step(step):
            pass


def test_a_step_that_needs_a_stopped_restored_server_runs_after_a_restore_failed_on_its_checks(tmp_path: Path) -> None:
    recorder = _recorder(tmp_path)
    _prepared(recorder)
    _fail(recorder, procedure.RESTORE_2, delivered=True)
    try:
        with recorder.step(procedure.RESTORE_AFTER_STOP):
            pass
    except pytest.skip.Exception as exc:  # a skip would otherwise pass as a skipped test
        pytest.fail(f"restore-after-stop was skipped: {exc}")
    records = _records(tmp_path)
    assert records[procedure.RESTORE_2]["outcome"] == "failed"
    assert records[procedure.RESTORE_AFTER_STOP]["outcome"] == "passed"


def test_it_is_skipped_naming_the_prerequisite_after_a_restore_that_never_served(tmp_path: Path) -> None:
    recorder = _recorder(tmp_path)
    _prepared(recorder)
    _fail(recorder, procedure.RESTORE_2, delivered=False)
    record = _skipped(recorder, procedure.RESTORE_AFTER_STOP, tmp_path)
    assert "prerequisite restore-2 did not pass" in record["message"] and "slower" in record["message"]


def test_a_served_step_satisfies_only_the_steps_that_ask_for_a_served_one(tmp_path: Path) -> None:
    """restore-1 failing on its checks still skips nothing it never served for: a plain prerequisite must pass."""
    recorder = _recorder(tmp_path)
    _prepared(recorder)
    _fail(recorder, procedure.ORDINARY, delivered=True)
    record = _skipped(recorder, procedure.RESTORE_2, tmp_path)
    assert "prerequisite ordinary did not pass" in record["message"]


@pytest.mark.parametrize("delivered", [True, False])
def test_inspect_runs_after_a_create_that_delivered_its_artifact_only(tmp_path: Path, delivered: bool) -> None:
    """A create that published its artifact, its tree gone, and then failed on what it left in /dev/shm is no
    reason to skip inspect; one that failed before publishing is."""
    recorder = _recorder(tmp_path)
    with recorder.step(procedure.ORDINARY):
        pass
    _fail(recorder, procedure.CREATE, delivered=delivered)
    if delivered:
        try:
            with recorder.step(procedure.INSPECT):
                pass
        except pytest.skip.Exception as exc:  # a skip would otherwise pass as a skipped test
            pytest.fail(f"inspect was skipped: {exc}")
        assert _records(tmp_path)[procedure.INSPECT]["outcome"] == "passed"
    else:
        assert "prerequisite create did not pass" in _skipped(recorder, procedure.INSPECT, tmp_path)["message"]
