"""Which suite item is which lane and step: read from its ``vsnap_step`` mark and its ``vsnap_lane`` (and, for a
fault, ``vsnap_fault``) parameters. Any other test is no lane's step."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from vsnap_qual import procedure
from vsnap_qual.config import LaneSpec


def item_lane_step(item: pytest.Item) -> tuple[LaneSpec, str] | None:
    """The lane and step of a suite item (its ``vsnap_step`` mark and lane), None for any other test."""
    marker = item.get_closest_marker("vsnap_step")
    callspec = getattr(item, "callspec", None)
    lane = callspec.params.get("vsnap_lane") if callspec is not None else None
    if marker is None or not marker.args or not isinstance(lane, LaneSpec):
        return None
    name = str(marker.args[0])
    if name == procedure.FAULT_PREFIX:
        fault = item_fault(item)
        if fault is None:
            return None
        name = fault.step
    return lane, name


def item_fault(item: pytest.Item) -> procedure.Fault | None:
    """The fault a suite item injects (its ``vsnap_fault`` parameter), None for any other item."""
    callspec = getattr(item, "callspec", None)
    fault = callspec.params.get("vsnap_fault") if callspec is not None else None
    return fault if isinstance(fault, procedure.Fault) else None


def item_step(item: pytest.Item) -> str | None:
    """``runner/arm/step`` of a suite item, None for any other test."""
    found = item_lane_step(item)
    return procedure.label(found[0].column, found[0].arm, found[1]) if found else None


def lane_fault_order(items: Sequence[pytest.Item], lane: str) -> tuple[str, ...]:
    """The ids of the faults the run selected for ``lane``, in the order its items run (``faults.group``: which
    refusals follow one another)."""
    found = []
    for item in items:
        fault, at = item_fault(item), item_lane_step(item)
        if fault is not None and at is not None and at[0].name == lane:
            found.append(fault.id)
    return tuple(dict.fromkeys(found))


def fault_lanes(items: Sequence[pytest.Item]) -> dict[str, list[LaneSpec]]:
    """Each fault's lanes whose step of it the run selected, in the order their items run (``faults.once``: which
    runner's lane runs a kind refused before any engine starts)."""
    found: dict[str, dict[str, LaneSpec]] = {}
    for item in items:
        fault, at = item_fault(item), item_lane_step(item)
        if fault is not None and at is not None:
            found.setdefault(fault.id, {}).setdefault(at[0].name, at[0])
    return {fault_id: list(lanes.values()) for fault_id, lanes in found.items()}
