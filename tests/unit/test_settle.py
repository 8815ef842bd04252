"""The wait for what a faulted or killed command left (vsnap_qual.faults.tools.settle_timed) and whose time it is: a
wait that ends with everything gone by itself is the engine's own teardown (credit_teardown), one that ends with
processes left is the harness's. The box is a fake whose listing changes look by look, not by the clock."""

from __future__ import annotations

import time
from types import SimpleNamespace

from vsnap_qual.box import ProcessRow
from vsnap_qual.faults.tools import credit_teardown, settle_timed


def row(pid: int) -> ProcessRow:
    return {"pid": pid, "ppid": 1, "sid": 1, "stat": "S", "args": "python -m vllm.v1.engine.core"}


class ListingBox:
    """``processes()`` lists the baseline and, for the first ``left_for`` looks, a leftover; records each look."""

    def __init__(self, left_for: int | None) -> None:
        self.left_for, self.looks = left_for, []  # type: ignore[var-annotated]

    def processes(self) -> list[ProcessRow]:
        self.looks.append(time.monotonic())
        leftover = self.left_for is None or len(self.looks) <= self.left_for
        return [row(1), *([row(4316)] if leftover else [])]


def _lane() -> SimpleNamespace:
    return SimpleNamespace(recorder=SimpleNamespace(engine_time=0.0))


def test_a_leftover_that_goes_by_itself_is_held_until_the_last_look_that_saw_it_and_that_is_the_engines() -> None:
    box = ListingBox(left_for=4)
    left, held_s = settle_timed(box, {1}, set(), limit=5.0)  # type: ignore[arg-type]
    assert left == [] and len(box.looks) == 5
    # from the first look to the fourth, the last that found the leftover; not to the fifth, which found none
    assert abs(held_s - (box.looks[3] - box.looks[0])) < 0.005 and held_s < box.looks[4] - box.looks[0] - 0.01
    lane = _lane()
    assert credit_teardown(lane, left, held_s) == held_s
    assert lane.recorder.engine_time == held_s


def test_a_wait_that_ends_with_processes_left_stays_the_harnesss() -> None:
    box = ListingBox(left_for=None)  # never goes: the limit ends the wait
    left, held_s = settle_timed(box, {1}, set(), limit=0.2)  # type: ignore[arg-type]
    assert [p["pid"] for p in left] == [4316] and held_s > 0
    lane = _lane()
    assert credit_teardown(lane, left, held_s) is None
    assert lane.recorder.engine_time == 0.0


def test_nothing_left_at_the_first_look_is_no_wait_and_no_credit() -> None:
    box = ListingBox(left_for=0)
    assert settle_timed(box, {1}, set(), limit=5.0) == ([], 0.0)  # type: ignore[arg-type]
    assert len(box.looks) == 1
