"""What the ``vsnap_step`` fixture hands a suite test (:class:`VsnapStep`: the fixture knows its node, as
pytest-benchmark's does), the step body it runs (:func:`step_body`: the table entry's ``run``, resolved here, so the
procedure imports no step code), and the collection-time check that the lifecycle suite's tests run in the table's
order (:func:`out_of_order`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from vsnap_qual import procedure
from vsnap_qual.lane import LaneRun
from vsnap_qual.plugin.items import item_lane_step

#: A step's body: called with the lane, the step's open record and what its table entry gives it beyond them.
StepBody = Callable[..., None]


@dataclass
class VsnapStep:
    """One suite test's step: its table entry (``procedure.Step``), its lane, the node it is recorded under, and its
    body. :meth:`run` runs the body in the step's record (once)."""

    entry: procedure.Step
    lane: LaneRun[Any]
    nodeid: str
    body: StepBody
    #: what the body takes after the lane and the record: a fault's catalogue entry and the session's catalogue
    given: tuple[object, ...] = ()
    ran: bool = field(default=False, init=False)

    def run(self) -> None:
        """Run the step's body in its evidence record: prerequisites first (a step whose prerequisite did not pass is
        skipped, naming it), the outcome from how the body ends."""
        if self.ran:
            raise pytest.UsageError(f"{self.nodeid}: vsnap_step.run() is called once per test")
        self.ran = True
        with self.lane.recorder.step(self.entry.name, self.nodeid) as rec:
            self.body(self.lane, rec, *self.given)


def step_body(entry: procedure.Step) -> StepBody:
    """The body the table entry names (``run``: ``module:function``); a usage error names an entry whose body is
    not there."""
    module, _, name = entry.run.partition(":")
    try:
        found = getattr(importlib.import_module(module), name) if module and name else None
    except (ImportError, AttributeError) as exc:
        raise pytest.UsageError(f"step {entry.name!r}: its body {entry.run!r} cannot be found ({exc})") from None
    if not callable(found):
        raise pytest.UsageError(f"step {entry.name!r}: its body {entry.run!r} is not a function (module:function)")
    return cast(StepBody, found)


def out_of_order(items: Sequence[pytest.Item]) -> str | None:
    """The first suite test that runs a lifecycle step out of the table's order (``procedure.LIFECYCLE``), or a
    second time, for its lane, in words; None when each lane's lifecycle tests follow the table (a selection may
    leave steps out)."""
    place = {step.name: index for index, step in enumerate(procedure.LIFECYCLE)}
    last: dict[str, tuple[int, pytest.Item]] = {}
    for item in items:
        found = item_lane_step(item)
        if found is None or found[1] not in place:
            continue
        lane, name = found[0].name, found[1]
        before = last.get(lane)
        if before is not None and place[name] <= before[0]:
            earlier = procedure.LIFECYCLE[before[0]].name
            order = ", ".join(step.name for step in procedure.LIFECYCLE)
            return (
                f"{item.nodeid} runs step {name!r} after {before[1].nodeid} ({earlier!r}): the lifecycle suite's "
                f"tests must run in the procedure's order (vsnap_qual/procedure.py, LIFECYCLE: {order})"
            )
        last[lane] = (place[name], item)
    return None
