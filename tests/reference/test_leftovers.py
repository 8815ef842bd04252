"""A test process killed mid-run must not leave its engine containers for ever: they carry the harness's session
and owner labels, so the next session's dead-owner sweep removes them (seen: a SIGTERMed CI run left three)."""

from __future__ import annotations

from tests.reference.refsupport import LaneFactory
from vsnap_qual import box as vbox


def test_lane_containers_are_labelled_for_the_dead_owner_sweep(lane_factory: LaneFactory) -> None:
    lane = lane_factory("head")
    lane.container.reload()
    labels = lane.container.labels
    assert labels.get(vbox.LABEL_SESSION, "").startswith("reftest-")
    assert labels.get(vbox.LABEL_OWNER) == vbox.owner_label()
