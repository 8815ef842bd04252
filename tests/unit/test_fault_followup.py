"""The follow-up restore after a fault: a captured PID/TID taken by another host process is the host's doing
(restored once more, recorded), and CRIU's own reason (on vLLM's stdout) is kept (pure: a fake lane box)."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

from vsnap_qual import faults
from vsnap_qual.runtime import ExecResult

TAIL = "CRIU restore.log (tail):\n"
COLLISION = TAIL + "(00.2) pie: 41: Error (criu/pie/restorer.c:2185): Unable to create a thread: -17\n"
CORRUPT = TAIL + "(00.1) Error (criu/protobuf.c:72): Read 9 bytes while 18 expected\nRestoring FAILED.\n"


class Box:
    def __init__(self, outputs: list[tuple[int, str]]) -> None:
        self.outputs = outputs
        self.restores = 0

    def exec(self, argv: list[str], timeout: float, **_: Any) -> ExecResult:
        code, stdout = self.outputs[self.restores]
        self.restores += 1
        return ExecResult(argv, code, stdout, "subprocess.CalledProcessError: returned non-zero exit status 1.", 0, 1)

    def processes(self) -> list[dict[str, Any]]:
        return []

    def sh(self, script: str, timeout: float = 60.0) -> ExecResult:
        return ExecResult(["sh"], 0, "", "", 0, 0)


def _run(box: Box) -> Any:
    return SimpleNamespace(
        box=box,
        ports={"fault": 1},  # nothing listens on port 1
        manifest={"process_tree": [40, 41]},
        engine_wait=contextlib.nullcontext,
        config=SimpleNamespace(timeouts={"restore": 60, "http": 5}, cleanup_grace=5.0),
    )


def test_a_taken_captured_id_is_restored_once_more_and_recorded():
    box = Box([(1, COLLISION), (1, CORRUPT)])
    outcome = faults.followup_restore(_run(box), undo_injection=False)
    assert box.restores == 2
    assert "Unable to create a thread: -17" in outcome["retried_after"]
    assert outcome["exit_code"] == 1 and outcome["canary_ok"] is False
    assert outcome["criu_reason"][-1] == "Restoring FAILED."
    assert "Read 9 bytes while 18 expected" in outcome["criu_reason"][0]


def test_any_other_failure_is_not_retried():
    box = Box([(1, CORRUPT), (0, "")])
    outcome = faults.followup_restore(_run(box), undo_injection=False)
    assert box.restores == 1 and "retried_after" not in outcome
    assert outcome["exit_code"] == 1


def test_the_follow_up_waits_for_the_faulted_tree_to_be_gone():
    """The captured PIDs of the faulted restore's tree must be free before CRIU is asked to recreate them."""
    box = Box([(1, CORRUPT)])
    listings = [[{"pid": 40}], [{"pid": 40}], [{"pid": 40}], []]
    seen: list[int] = []

    def processes() -> list[dict[str, Any]]:
        seen.append(box.restores)
        return listings.pop(0) if listings else []

    box.processes = processes  # type: ignore[method-assign]
    faults.followup_restore(_run(box), undo_injection=False)
    assert seen[:4] == [0, 0, 0, 0], "no restore while a captured PID is still alive"
