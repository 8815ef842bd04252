"""A fault step's kind, as the views read it (``vsnap_qual.report.kinds.fault_kind``): the kind its record carries,
whatever its id or its ``injected`` record look like; the old recognition (the kill kind by its drawn moment or its
id, the identity kind by its id) only for records without one, as every run before kinds were recorded wrote them."""

from __future__ import annotations

from typing import cast

from vsnap_qual import model
from vsnap_qual.report.chaos import kill_steps
from vsnap_qual.report.kinds import fault_kind
from vsnap_qual.report.verdict import fault_kinds

DRAWN = {"seed": 3, "offset_s": 0.2, "command": "restore", "signal": "SIGKILL", "sent": ["x"]}


def test_the_recorded_kind_is_read_whatever_the_id_or_the_record_look_like() -> None:
    assert fault_kind("kill-create", {"kind": "hook"}) == "hook"
    assert fault_kind("lock-held", {"kind": "kill", "injected": {}}) == "kill"
    assert fault_kind("identity-host", {"kind": "identity"}) == "identity"
    assert fault_kind("my-own", {"kind": "my-own-kind", "injected": DRAWN}) == "my-own-kind"


def test_a_record_without_its_kind_is_recognised_as_before() -> None:
    assert fault_kind("kill-create.7", {}) == "kill" and fault_kind("term-restore", None) == "kill"
    assert fault_kind("my-kill", {"injected": DRAWN}) == "kill"  # the drawn moment, whatever the id
    assert fault_kind("identity-drift", {}) == "identity"
    assert fault_kind("wake-raise", {"injected": {}}) is None


def test_the_chaos_figures_and_the_coverage_line_read_the_recorded_kind() -> None:
    steps = cast(list[model.Step], [
        {"lane": "v1-head", "step": "fault:kill-create", "outcome": "passed", "results": {"kind": "hook",
                                                                                         "injected": DRAWN}},
        {"lane": "v1-head", "step": "fault:my-kill", "outcome": "passed", "results": {"kind": "kill",
                                                                                     "injected": DRAWN}},
    ])  # fmt: skip
    assert [s["step"] for s in kill_steps(cast(model.RunEvidence, {"steps": steps}))] == ["fault:my-kill"]
    assert fault_kinds(steps) == {"kill-create": "hook", "my-kill": "kill"}
