"""The procedure's table carries each step's body, the type of what it records and which lanes it applies to: the
suites and the report read them there (``vsnap_qual.procedure``)."""

from __future__ import annotations

import inspect
from typing import Any, TypedDict, cast

import pytest

from vsnap_qual import model, procedure
from vsnap_qual.plugin.step import step_body

FAULT_STEP = procedure.FAULT_PREFIX + "any-fault"


@pytest.mark.parametrize("name", [*procedure.STEPS, FAULT_STEP])
def test_every_step_names_a_body_that_takes_its_lane_and_its_record(name: str) -> None:
    entry = procedure.step(name)
    body = step_body(entry)
    given = ("fault", "catalogue") if procedure.is_fault_step(name) else ()
    inspect.signature(body).bind("lane", "rec", *given)  # as the vsnap_step fixture calls it
    assert model.is_typeddict(entry.results) and entry.results.__module__ == model.__name__


def test_a_step_body_that_is_not_there_is_a_usage_error_naming_the_step() -> None:
    missing = procedure.Step("restore-9", "a typo", run="vsnap_qual.steps:restore_9", results=model.RestoreResults)
    with pytest.raises(pytest.UsageError, match=r"step 'restore-9': its body 'vsnap_qual.steps:restore_9' cannot"):
        step_body(missing)


def test_the_restores_share_one_results_type_and_each_step_has_its_own() -> None:
    types = {name: procedure.step(name).results for name in (*procedure.STEPS, FAULT_STEP)}
    assert {types[name] for name in procedure.RESTORES} == {model.RestoreResults}
    others = [t for name, t in types.items() if name not in procedure.RESTORES]
    assert len(others) == len(set(others)) == len(types) - len(procedure.RESTORES)
    assert types[FAULT_STEP] is model.FaultResults and "kind" in model.fields_of(model.FaultResults).types


@pytest.mark.parametrize(
    ("name", "arm", "overlaid", "unit", "why"),
    [
        (procedure.VS_HEAD, "head", False, False, "compared from the base arm"),
        (procedure.VS_HEAD, "base", False, False, None),
        (procedure.OVERLAY, "head", False, False, "no overlay on this arm"),
        (procedure.OVERLAY, "base", False, False, "no overlay on this arm"),
        (procedure.OVERLAY, "head", True, False, None),
        (procedure.UNIT, "base", False, False, "no --vsnap-unit-command"),
        (procedure.UNIT, "base", False, True, None),
        (procedure.RESTORE_1, "base", False, False, None),
    ],
)
def test_where_a_step_does_not_apply_the_table_says_why(
    name: str, arm: str, overlaid: bool, unit: bool, why: str | None
) -> None:
    """The suite's three hand-written not-applicable branches, now the table's (the arm, the overlay, the unit
    command), in the words the suite said them."""
    entry = procedure.step(name)
    assert entry.not_applicable(arm, overlaid, unit) == why
    assert entry.applies(arm, overlaid, unit) is (why is None)


def test_a_record_is_read_as_a_piece_only_where_its_steps_type_declares_it() -> None:
    class Canaried(TypedDict, total=False):
        canary: list[model.Canary]

    def record(step: str) -> model.Step:
        return {"step": step, "results": {"canary": []}}  # type: ignore[typeddict-item]

    assert procedure.results_as(record(procedure.RESTORE_2), Canaried) == {"canary": []}
    assert procedure.results_as(record(procedure.ORDINARY), model.RestoreResults) is None
    assert procedure.results_as(record(procedure.INSPECT), Canaried) is None
    assert procedure.results_as(record("no-such-step"), Canaried) is None
    assert procedure.results_as(None, Canaried) is None


def test_the_step_a_test_runs_is_recorded_under_its_node_once_with_the_tables_prerequisites() -> None:
    """``vsnap_step.run()``: the body runs in the step's record, named by the table entry and the node; a second run
    in the same test is refused (pytest-benchmark's fixture refuses a second use the same way)."""
    from tests.support.fake_lane import lifecycle_lane
    from vsnap_qual.lane import LaneRun
    from vsnap_qual.plugin.step import VsnapStep

    lane = lifecycle_lane()
    as_run = cast("LaneRun[Any]", lane)  # the fake lane in LaneRun's shape (the step reads its recorder)
    seen: list[tuple[str, object]] = []
    body = lambda lane, rec: seen.append((rec.step, type(rec.results)))  # noqa: E731
    step = VsnapStep(procedure.step(procedure.ORDINARY), as_run, "suites/test_lifecycle.py::t[v1-head]", body)
    step.run()
    assert seen == [("ordinary", dict)] and lane.recorder.outcomes == {"ordinary": "passed"}
    with pytest.raises(pytest.UsageError, match="run\\(\\) is called once per test"):
        step.run()
    restore = VsnapStep(procedure.step(procedure.RESTORE_1), as_run, "t", body)
    with pytest.raises(pytest.skip.Exception, match="prerequisite inspect did not pass"):
        restore.run()  # the table's prerequisites, before the body
    assert len(seen) == 1
