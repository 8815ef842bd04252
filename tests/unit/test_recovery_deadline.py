"""The fault artifact's recovery deadline sized by measurement (``vsnap_qual/faults/deadline.py``, issue 45): the rule
alone, pure."""

from __future__ import annotations

from vsnap_qual.faults import deadline


def test_the_deadline_is_three_times_the_slowest_restore_plus_the_margin_when_that_is_the_largest() -> None:
    got = deadline.derive(300.0, 5.0, [1.2, 13.4, 9.0], [20.0], "lane v1-head's lifecycle")
    # max(10, 3 × 13.4 + 5 = 45.2, 2 × 20 + 5 = 45) rounded up
    assert (got["deadline_s"], got["derived_s"], got["option_s"]) == (46.0, 46.0, 300.0)
    assert (got["restore_ready_s"], got["restores"], got["create_s"]) == (13.4, 3, 20.0)
    assert got["rule"] == (
        "max(10, 3 × 13.40 s restore + 5, 2 × 20.00 s create + 5) rounded up = 46 s, under --vsnap-fault-timeout=300 s"
    )
    assert got["source"] == "lane v1-head's lifecycle"


def test_a_slow_create_raises_the_deadline_its_own_wait_for_the_child_is_bounded_by() -> None:
    # the same deadline bounds the fault artifact's create: a real engine's create of 76 s needs 157 s
    got = deadline.derive(300.0, 5.0, [13.5], [76.0], "s")
    assert got["deadline_s"] == 157.0 and "2 × 76.00 s create + 5" in got["rule"]


def test_the_option_is_the_upper_bound() -> None:
    got = deadline.derive(20.0, 5.0, [9.0], [4.0], "s")  # 3 × 9 + 5 = 32 > 20
    assert (got["deadline_s"], got["derived_s"]) == (20.0, 32.0)
    assert got["rule"].endswith("= 32 s, over --vsnap-fault-timeout=20 s: the option is the deadline")


def test_the_floor_and_twice_the_cleanup_grace_hold_for_a_fast_engine() -> None:
    fast = deadline.derive(20.0, 1.0, [0.3], [0.8], "s")  # 3 × 0.3 + 5 and 2 × 0.8 + 5 are under the floor
    assert fast["deadline_s"] == deadline.FLOOR_S == 10.0 and fast["rule"].startswith("max(10, ")
    assert deadline.derive(20.0, 6.0, [0.3], [0.8], "s")["deadline_s"] == 12.0  # 2 × the grace


def test_nothing_measured_leaves_the_option_said_with_what_was_missing() -> None:
    alone = deadline.derive(120.0, 5.0, [], [], "nothing of lane v1-head's lifecycle was measured")
    assert (alone["deadline_s"], alone["derived_s"], alone["restores"], alone["create_s"]) == (120.0, None, 0, None)
    assert alone["rule"] == "--vsnap-fault-timeout=120 s (no restore and no create of this lane measured before it)"
    no_restore = deadline.derive(120.0, 5.0, [], [30.0], "s")
    assert no_restore["deadline_s"] == 120.0 and "(no restore of this lane" in no_restore["rule"]
