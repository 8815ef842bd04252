"""Which fault kinds run once per image and arm, and where (``vsnap_qual/faults/once.py``): a record shows its
command ended before any engine process only when every sign of one is absent; a kind of ``ONCE_KINDS`` runs on
the first selected runner of its arm and variant, the others name that lane; every other kind runs everywhere."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from vsnap_qual.faults import once

REFUSED: dict[str, Any] = {
    "kind": "identity",
    "observed": {
        "exit_code": 1,
        "http_bound": False,
        "http_bound_by": [],
        "error_json": None,
        "phase": None,
        "fired": True,
        "fired_records": [],
        "artifact_unchanged": True,
    },
    "cleanup": {"pids": [], "leftover_processes": [], "ok": True},
}


def test_a_refusal_before_any_engine_is_shown_as_such() -> None:
    assert once.engine_reached(REFUSED) is None


@pytest.mark.parametrize(
    ("where", "value", "words"),
    [
        (("observed", "exit_code"), 0, "exited 0"),
        (("observed", "exit_code"), None, "no exit code"),
        (("observed", "http_bound"), True, "listener was bound"),
        (("observed", "error_json"), {"phase": "recovery: canary"}, "error.json"),
        (("observed", "phase"), "recovery: restore memory", "error.json"),
        (("observed", "fired_records"), [{"pid": 7, "point": "wake-raise"}], "probe hook fired"),
        (("observed", "artifact_unchanged"), False, "artifact changed"),
        (("observed", "artifact_unchanged"), None, "not compared"),
        (("cleanup", "leftover_processes"), ["12 python"], "processes left"),
        (("cleanup", "killed_by_harness"), [12], "processes left"),
    ],
)
def test_any_sign_of_an_engine_is_named(where: tuple[str, str], value: object, words: str) -> None:
    record = copy.deepcopy(REFUSED)
    record[where[0]][where[1]] = value
    found = once.engine_reached(record)
    assert found is not None and words in found, found


def test_no_observation_is_no_evidence() -> None:
    assert once.engine_reached({}) == "no observation recorded"
    assert once.engine_reached({"observed": {}}) == "no observation recorded"


LANES = ("v1-head", "v2-head")


def test_a_once_kind_runs_on_the_first_selected_runner_and_the_others_name_it() -> None:
    first = once.place("identity", "v1-head", LANES)
    assert first == once.Placement(runs_on=None, stands_for=("v2-head",))
    other = once.place("identity", "v2-head", LANES)
    assert other == once.Placement(runs_on="v1-head", stands_for=())
    assert "runs once per image and arm" in once.not_run_words("v1-head")
    assert once.not_run_words("v1-head").endswith("it runs on v1-head")


@pytest.mark.parametrize("kind", ["hook", "signal", "create", "port", "image", "weights", "kill", None, "mine"])
def test_a_kind_that_starts_an_engine_runs_on_every_lane(kind: str | None) -> None:
    for lane in LANES:
        assert once.place(kind, lane, LANES) == once.Placement()


def test_every_runner_when_asked_or_when_the_selection_gives_one_lane() -> None:
    for lane in LANES:
        assert once.place("pid", lane, LANES, every=True) == once.Placement()
    assert once.place("manifest", "v2-head", ("v2-head",)) == once.Placement()  # --vsnap-runners=v2, or -k v2
    assert once.place("manifest", "v2-head", ()) == once.Placement()  # not selected on any twin: as it is


def test_the_premise_is_checked_only_where_the_step_stood_for_others() -> None:
    reached = copy.deepcopy(REFUSED)
    reached["observed"]["http_bound"] = True
    assert once.premise_problem(reached, ()) is None
    assert once.premise_problem(REFUSED, ("v2-head",)) is None
    problem = once.premise_problem(reached, ("v2-head",))
    assert problem is not None
    assert "v2-head" in problem and "--vsnap-fault-runners=every" in problem and "listener was bound" in problem


def test_only_the_kinds_the_evidence_showed() -> None:
    assert {"identity", "pid", "manifest"} == once.ONCE_KINDS
