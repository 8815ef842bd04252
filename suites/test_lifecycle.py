"""The snapshot lifecycle qualification, per model runner and image arm, in the order a maintainer runs it.

ordinary ``vllm serve`` reference → ``snapshot create`` → ``inspect`` → ``restore`` → container restart →
``restore`` again → overlay verification. Each step is one test; a step whose prerequisite failed is skipped
with that failure named.
"""

from __future__ import annotations

import pytest

from vsnap_qual import procedure, progress, steps
from vsnap_qual.lane import LaneRun, LifecycleState

LifecycleLane = LaneRun[LifecycleState]  # the lane every lifecycle step runs in


class TestLifecycle:
    @pytest.mark.vsnap_step(procedure.ORDINARY)
    def test_ordinary_reference(self, vsnap_lane_run: LifecycleLane, request: pytest.FixtureRequest) -> None:
        """An ordinary ``vllm serve``: canary outputs, parameter digests and KV capacity to compare against."""
        with vsnap_lane_run.recorder.step(procedure.ORDINARY, request.node.nodeid) as rec:
            steps.ordinary_reference(vsnap_lane_run, rec)

    @pytest.mark.vsnap_step(procedure.VS_HEAD)
    def test_agrees_with_base_image(self, vsnap_lane_run: LifecycleLane, request: pytest.FixtureRequest) -> None:
        """Base arm only: its ordinary outputs and parameter bytes equal the image under test's."""
        if vsnap_lane_run.spec.arm != "base":
            progress.not_applicable(f"{vsnap_lane_run.spec.name}: compared from the base arm")
        with vsnap_lane_run.recorder.step(procedure.VS_HEAD, request.node.nodeid) as rec:
            steps.compare_arms(vsnap_lane_run, rec)

    @pytest.mark.vsnap_step(procedure.CREATE)
    def test_create(self, vsnap_lane_run: LifecycleLane, request: pytest.FixtureRequest) -> None:
        """``vllm snapshot create`` offline, with the same engine arguments; the captured tree is gone after."""
        with vsnap_lane_run.recorder.step(procedure.CREATE, request.node.nodeid) as rec:
            steps.create(vsnap_lane_run, rec)

    @pytest.mark.vsnap_step(procedure.INSPECT)
    def test_inspect(self, vsnap_lane_run: LifecycleLane, request: pytest.FixtureRequest) -> None:
        """``vllm snapshot inspect``: every field the upstream e2e checks, and the output's sha256."""
        with vsnap_lane_run.recorder.step(procedure.INSPECT, request.node.nodeid) as rec:
            steps.inspect(vsnap_lane_run, rec)

    @pytest.mark.vsnap_step(procedure.RESTORE_1)
    def test_restore_1(self, vsnap_lane_run: LifecycleLane, request: pytest.FixtureRequest) -> None:
        """First restore: exit 0, listener up, canary and digests equal to the ordinary reference."""
        with vsnap_lane_run.recorder.step(procedure.RESTORE_1, request.node.nodeid) as rec:
            steps.restore(vsnap_lane_run, rec, procedure.RESTORE_1)

    @pytest.mark.vsnap_step(procedure.RESTART)
    def test_container_restart(self, vsnap_lane_run: LifecycleLane, request: pytest.FixtureRequest) -> None:
        """Stop and start the same container: the restored server is gone, inspect output unchanged."""
        with vsnap_lane_run.recorder.step(procedure.RESTART, request.node.nodeid) as rec:
            steps.restart(vsnap_lane_run, rec)

    @pytest.mark.vsnap_step(procedure.RESTORE_2)
    def test_restore_2(self, vsnap_lane_run: LifecycleLane, request: pytest.FixtureRequest) -> None:
        """Second restore after the restart: the same checks, then stop and audit cleanup."""
        with vsnap_lane_run.recorder.step(procedure.RESTORE_2, request.node.nodeid) as rec:
            steps.restore_then_stop(vsnap_lane_run, rec, procedure.RESTORE_2)

    @pytest.mark.vsnap_step(procedure.RESTORE_AFTER_STOP)
    def test_restore_after_a_graceful_stop(self, vsnap_lane_run: LifecycleLane, request: pytest.FixtureRequest) -> None:
        """After the restored server's graceful stop (SIGTERM, its own cleanup), the artifact restores again."""
        with vsnap_lane_run.recorder.step(procedure.RESTORE_AFTER_STOP, request.node.nodeid) as rec:
            steps.restore_after_stop(vsnap_lane_run, rec)

    @pytest.mark.vsnap_step(procedure.FRESH_BOX)
    def test_restore_in_a_fresh_box(self, vsnap_lane_run: LifecycleLane, request: pytest.FixtureRequest) -> None:
        """A fresh box of the same image (own IPC, empty /dev/shm) holding only the artifact restores it."""
        with vsnap_lane_run.recorder.step(procedure.FRESH_BOX, request.node.nodeid) as rec:
            steps.fresh_box_restore(vsnap_lane_run, rec)

    @pytest.mark.vsnap_step(procedure.OVERLAY)
    def test_overlay_verified(self, vsnap_lane_run: LifecycleLane, request: pytest.FixtureRequest) -> None:
        """Every overlaid file is the one the engine processes imported (skipped without an overlay)."""
        if not vsnap_lane_run.overlay.files:
            progress.not_applicable(f"{vsnap_lane_run.spec.name}: no overlay on this arm")
        with vsnap_lane_run.recorder.step(procedure.OVERLAY, request.node.nodeid) as rec:
            steps.overlay_verification(vsnap_lane_run, rec)

    @pytest.mark.vsnap_step(procedure.UNIT)
    def test_unit_command(self, vsnap_lane_run: LifecycleLane, request: pytest.FixtureRequest) -> None:
        """``--vsnap-unit-command`` from the overlay checkout; failures new on the head arm fail (not applicable
        without a unit command)."""
        if not vsnap_lane_run.config.unit_command:
            progress.not_applicable(f"{vsnap_lane_run.spec.name}: no --vsnap-unit-command")
        with vsnap_lane_run.recorder.step(procedure.UNIT, request.node.nodeid) as rec:
            steps.unit_step(vsnap_lane_run, rec)
