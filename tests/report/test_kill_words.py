"""The kill kind in the summary's words (issue 29): when the signal went and what was running, vLLM's own cleanup
and what outlived the harness's sweep, what became of a killed create's target, and a chaos run's repeats as one
counted line per fault and lane."""

from __future__ import annotations

from typing import Any, cast

from vsnap_qual.report.frames import FaultRow
from vsnap_qual.report.markdown import _chaos_lines, chaos_base, fault_result_text


def _row(fault: str = "kill-create", **over: Any) -> FaultRow:
    row: dict[str, Any] = {
        "runner": "v1", "arm": "head", "fault": fault, "title": "t", "outcome": "passed", "exit_code": 137,
        "http_bound": None, "phase": None, "fired": True, "cleanup_judged": False, "cleanup_ok": True,
        "followup_exit": None, "followup_canary_ok": None, "kill": "SIGKILL at 1.5 s", "kill_phase": "criu dump",
        "kill_left": 2, "kill_swept_ok": True, "kill_artifact": "refused by inspect", "mismatches": "", "message": "",
    }  # fmt: skip
    return cast(FaultRow, {**row, **over})


def test_a_killed_create_says_when_what_was_left_and_what_became_of_its_target() -> None:
    text = fault_result_text(_row())
    assert text == (
        "exit 137, SIGKILL at 1.5 s (criu dump), 2 process(es) of the killed tree left, swept by the harness, "
        "nothing left after the sweep, its target: refused by inspect"
    ), text
    term = fault_result_text(_row(cleanup_judged=True, kill_left=0, kill_swept_ok=False))
    assert "vLLM's own cleanup verified" in term and "something outlived the harness's sweep" in term


def test_chaos_repeats_are_one_counted_line_naming_each_failed_repeat() -> None:
    assert (chaos_base("kill-create.12"), chaos_base("kill-create"), chaos_base("identity-drift")) == (
        "kill-create", "kill-create", "identity-drift",
    )  # fmt: skip
    group = [
        _row(),
        _row("kill-create.2", kill_phase="engine child running", kill_left=0, kill_artifact="absent"),
        _row("kill-create.3", outcome="failed", kill_swept_ok=False, kill_artifact="restored, WRONG"),
    ]
    text = _chaos_lines(group)
    assert text.startswith("2/3 as expected; killed during criu dump 2, engine child running 1;"), text
    assert "before the harness's sweep in 2, after it in 1" in text
    assert "the artifact: absent 1, refused by inspect 1, restored, WRONG 1" in text
    assert text.endswith("**FAIL**: `kill-create.3` on v1/head"), text
