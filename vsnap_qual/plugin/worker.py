"""An xdist worker's part of an active session. It runs no preflight: what preflight learned and the session record
come from the controller (xdist's ``workerinput``, not the report directory). It writes its own records (its
``plan``, its lanes' steps) and, when one of its lanes is the run's first to start, the session's files and record
as the controller would; never the session's end or the reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vsnap_qual.plugin.process import VsnapProcess
from vsnap_qual.run.preflight_result import PreflightResult


class VsnapWorker(VsnapProcess):
    """A worker's session object (see the module docstring); registered as :attr:`NAME`."""

    NAME = "vsnap_qual-worker"

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.register_junit_names()
        workerinput = getattr(self.config, "workerinput", {})
        self.hold_session(
            PreflightResult.from_json(workerinput["vsnap_preflight"]), json.loads(workerinput["vsnap_session"])
        )

    def selected(self, labels: list[str], deselected: int) -> None:
        """Hand the collected steps to the controller for its plan line (``vsnap_plan_dir``: xdist sends the
        controller only node ids, and this runs before it does)."""
        where = getattr(self.config, "workerinput", {}).get("vsnap_plan_dir")
        if where:
            worker = getattr(self.config, "workerinput", {}).get("workerid", "gw")
            target = Path(where) / f"{worker}.json"
            target.with_suffix(".tmp").write_text(json.dumps({"selected": labels, "deselected": deselected}))
            target.with_suffix(".tmp").replace(target)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        handoff = self.peers.handoff
        if handoff is not None:  # stopped early (-x, an interrupt): no lane of another process waits for these
            for lane, step in handoff.expected:
                if lane in self.lanes_run and not handoff.has_ended(lane, step):
                    handoff.ended(lane, step)
        if self.store.started:
            self.store.open()  # this worker's held records (its plan) join the run another process started
