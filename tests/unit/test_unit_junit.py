"""The unit step's JUnit reading and its head-vs-base judgement (pure)."""

from __future__ import annotations

import pytest

from vsnap_qual.lane import unit

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.vsnap_snapshot.test_manifest" name="test_ok" time="0.01"/>
<testcase classname="tests.vsnap_snapshot.test_manifest" name="test_oracle"><failure message="x">t</failure></testcase>
<testcase classname="tests.vsnap_snapshot.test_cli" name="test_env"><error message="setup">e</error></testcase>
<testcase classname="tests.vsnap_snapshot.test_cli" name="test_gpu"><skipped message="no gpu"/></testcase>
</testsuite></testsuites>"""


def test_each_test_case_is_one_outcome_by_its_id() -> None:
    found = unit.outcomes(JUNIT)
    assert found == {
        "tests.vsnap_snapshot.test_manifest::test_ok": "passed",
        "tests.vsnap_snapshot.test_manifest::test_oracle": "failed",
        "tests.vsnap_snapshot.test_cli::test_env": "failed",
        "tests.vsnap_snapshot.test_cli::test_gpu": "skipped",
    }
    assert unit.counts(found) == {"passed": 1, "failed": 2, "skipped": 1}
    with pytest.raises(ValueError, match="not JUnit XML"):
        unit.outcomes("pytest: error: unrecognized arguments")


def test_only_failures_the_base_arm_does_not_share_are_new() -> None:
    head = {"a": "failed", "b": "failed", "c": "passed", "d": "failed"}
    base = {"a": "failed", "b": "passed", "c": "failed"}  # d: not on the base arm at all (a new test)
    assert unit.against_base(head, base) == (["b", "d"], ["a"], ["c"])  # type: ignore[arg-type]
