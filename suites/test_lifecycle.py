"""The snapshot lifecycle qualification, per model runner and image arm, in the order a maintainer runs it.

ordinary ``vllm serve`` reference → ``snapshot create`` → ``inspect`` → ``restore`` → container restart →
``restore`` again → overlay verification. Each step is one test, in the order of the procedure's table
(``vsnap_qual/procedure.py``, checked as the suite is collected), which also says what each step runs, what it
records and which lanes it applies to (a step that does not apply to a lane is reported as not applicable); a step
whose prerequisite failed is skipped with that failure named.
"""

from __future__ import annotations

import pytest

from vsnap_qual import procedure
from vsnap_qual.plugin import VsnapStep


class TestLifecycle:
    @pytest.mark.vsnap_step(procedure.ORDINARY)
    def test_ordinary_reference(self, vsnap_step: VsnapStep) -> None:
        """An ordinary ``vllm serve``: canary outputs, parameter digests and KV capacity to compare against."""
        vsnap_step.run()

    @pytest.mark.vsnap_step(procedure.VS_HEAD)
    def test_agrees_with_base_image(self, vsnap_step: VsnapStep) -> None:
        """Base arm only: its ordinary outputs and parameter bytes equal the image under test's."""
        vsnap_step.run()

    @pytest.mark.vsnap_step(procedure.CREATE)
    def test_create(self, vsnap_step: VsnapStep) -> None:
        """``vllm snapshot create`` offline, with the same engine arguments; the captured tree is gone after."""
        vsnap_step.run()

    @pytest.mark.vsnap_step(procedure.INSPECT)
    def test_inspect(self, vsnap_step: VsnapStep) -> None:
        """``vllm snapshot inspect``: every field the upstream e2e checks, and the output's sha256."""
        vsnap_step.run()

    @pytest.mark.vsnap_step(procedure.RESTORE_1)
    def test_restore_1(self, vsnap_step: VsnapStep) -> None:
        """First restore: exit 0, listener up, canary and digests equal to the ordinary reference."""
        vsnap_step.run()

    @pytest.mark.vsnap_step(procedure.RESTART)
    def test_container_restart(self, vsnap_step: VsnapStep) -> None:
        """Stop and start the same container: the restored server is gone, inspect output unchanged."""
        vsnap_step.run()

    @pytest.mark.vsnap_step(procedure.RESTORE_2)
    def test_restore_2(self, vsnap_step: VsnapStep) -> None:
        """Second restore after the restart: the same checks, then stop and audit cleanup."""
        vsnap_step.run()

    @pytest.mark.vsnap_step(procedure.RESTORE_AFTER_STOP)
    def test_restore_after_a_graceful_stop(self, vsnap_step: VsnapStep) -> None:
        """After the restored server's graceful stop (SIGTERM, its own cleanup), the artifact restores again."""
        vsnap_step.run()

    @pytest.mark.vsnap_step(procedure.FRESH_BOX)
    def test_restore_in_a_fresh_box(self, vsnap_step: VsnapStep) -> None:
        """A fresh box of the same image (own IPC, empty /dev/shm) holding only the artifact restores it."""
        vsnap_step.run()

    @pytest.mark.vsnap_step(procedure.OVERLAY)
    def test_overlay_verified(self, vsnap_step: VsnapStep) -> None:
        """Every overlaid file is the one the engine processes imported (head arm, with an overlay)."""
        vsnap_step.run()

    @pytest.mark.vsnap_step(procedure.UNIT)
    def test_unit_command(self, vsnap_step: VsnapStep) -> None:
        """``--vsnap-unit-command`` from the overlay checkout; failures new on the head arm fail (with a unit
        command)."""
        vsnap_step.run()
