"""Issue 45: what a head arm hands its base arm when the two run at once in processes of their own
(``lane.handoff``, ``lane.state.Peers``): the answers as handed on, a wait only for a step the run runs and only
until that step ends, and a step that ended without an answer said so (no wait for a deadline)."""

from __future__ import annotations

from pathlib import Path

from vsnap_qual.lane.handoff import Handoff
from vsnap_qual.lane.state import OrdinaryReference, Peers
from vsnap_qual.model import Canary


class Clock:
    """A clock that moves only when the waiting side pauses (no real time passes in these tests)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pauses = 0
        self.on_pause: list[tuple[int, object]] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.pauses += 1
        for at, action in self.on_pause:
            if at == self.pauses:
                action()  # type: ignore[operator]


def _handoff(directory: Path, clock: Clock, expected: set[tuple[str, str]], wait_s: float = 60.0) -> Handoff:
    return Handoff(directory, frozenset(expected), wait_s, clock=clock, sleep=clock.sleep)


def _reference() -> OrdinaryReference:
    canary = Canary(prompt="p", token_ids=[1, 2], text="ab", logprob=-0.5)
    return OrdinaryReference(
        canary=[canary],
        digests={"w": {"sha256": "00", "shape": [2], "dtype": "float16", "source": "parameter"}},
        kv_tokens=4096,
        adapters={"a": [canary]},
    )


def test_the_base_arm_in_another_process_reads_what_the_head_arm_handed_on(tmp_path: Path) -> None:
    clock = Clock()
    head = Peers(handoff=_handoff(tmp_path, clock, {("v1-head", "ordinary"), ("v1-head", "unit")}))
    base = Peers(handoff=_handoff(tmp_path, clock, {("v1-head", "ordinary"), ("v1-head", "unit")}))
    head.hand_ordinary("v1-head", _reference())
    head.handoff.ended("v1-head", "ordinary")  # type: ignore[union-attr]
    found, why = base.head_ordinary("v1-head")
    assert why == "" and found is not None
    reference = _reference()
    assert (found.canary, found.digests, found.kv_tokens, found.adapters) == (
        reference.canary, reference.digests, reference.kv_tokens, reference.adapters
    )  # fmt: skip
    head.hand_unit("v1-head", {"t::a": "passed", "t::b": "failed"})
    head.handoff.ended("v1-head", "unit")  # type: ignore[union-attr]
    assert base.head_unit("v1-head") == ({"t::a": "passed", "t::b": "failed"}, "")
    assert clock.pauses == 0, "both steps had ended: no wait"


def test_the_base_arm_waits_until_the_head_arms_step_ends(tmp_path: Path) -> None:
    clock = Clock()
    head = Peers(handoff=_handoff(tmp_path, clock, set()))
    base = Peers(handoff=_handoff(tmp_path, clock, {("v1-head", "ordinary")}))

    def head_ends() -> None:
        head.hand_ordinary("v1-head", _reference())
        head.handoff.ended("v1-head", "ordinary")  # type: ignore[union-attr]

    clock.on_pause.append((5, head_ends))  # the head's step ends while the base arm waits
    found, why = base.head_ordinary("v1-head")
    assert found is not None and found.kv_tokens == 4096 and why == ""
    assert clock.pauses == 5


def test_no_wait_for_a_step_the_run_does_not_run_and_a_failed_step_says_so(tmp_path: Path) -> None:
    clock = Clock()
    base = Peers(handoff=_handoff(tmp_path, clock, {("v1-head", "unit")}))
    assert base.head_ordinary("v1-head") == (None, "this run does not run v1-head's ordinary step")
    base.handoff.ended("v1-head", "unit")  # type: ignore[union-attr]  # ended (failed) without its outcomes
    assert base.head_unit("v1-head") == (None, "v1-head's unit step ended without handing on its unit")
    assert clock.pauses == 0


def test_a_step_that_never_ends_is_waited_for_no_longer_than_the_bound(tmp_path: Path) -> None:
    clock = Clock()
    base = Peers(handoff=_handoff(tmp_path, clock, {("v1-head", "ordinary")}, wait_s=3.0))
    assert base.head_ordinary("v1-head") == (None, "v1-head's ordinary step did not end within 3 s")
    assert 3.0 <= clock.now < 3.5


def test_one_process_peers_hand_on_in_memory_and_write_nothing(tmp_path: Path) -> None:
    peers = Peers()
    peers.hand_ordinary("v1-head", _reference())
    assert peers.head_ordinary("v1-head")[0] is peers.ordinary["v1-head"]
    assert peers.head_ordinary("v2-head") == (None, "not recorded in this process")
    handoff = Handoff(tmp_path / "handoff")
    handoff.ended("v1-head", "restore-1")  # a step no lane waits for
    assert not (tmp_path / "handoff").exists()
