"""Audits and commands fail closed, and a restore's failure is never replaced by its cleanup's (no Docker)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import docker.errors
import pytest

from vsnap_qual import steps
from vsnap_qual.docker_lane import LaneRun
from vsnap_qual.runtime import ContainerSpec, EngineContainer, RuntimeFailure, exec_timed_out


def test_exit_137_is_a_timeout_only_past_the_deadline() -> None:
    assert exec_timed_out(None, 3.0, 60.0)  # abandoned by the host deadline
    assert exec_timed_out(124, 60.2, 60.0)  # coreutils timeout's own code
    assert exec_timed_out(137, 70.5, 60.0)  # its --kill-after SIGKILL
    assert not exec_timed_out(137, 2.0, 60.0)  # killed by someone else (OOM, a stop) well before the deadline
    assert not exec_timed_out(1, 70.0, 60.0)


class _Top:
    def top(self, **_: Any) -> dict[str, Any]:
        raise docker.errors.APIError("500 Server Error: container is restarting")


def test_a_process_listing_docker_refuses_raises_instead_of_returning_nothing() -> None:
    box = EngineContainer(None, _Top(), ContainerSpec(image_id="x", name="vsnap-lane", labels={}, environment={}))  # type: ignore[arg-type]
    with pytest.raises(RuntimeFailure, match="cannot list the processes of vsnap-lane: 500 Server Error"):
        box.processes()


class _BrokenBox:
    def sh(self, *_: Any, **__: Any) -> Any:
        raise RuntimeFailure("Docker API error: 502 Bad Gateway")

    def processes(self) -> list[dict[str, Any]]:
        raise RuntimeFailure("cannot list the processes of vsnap-lane")


def _lane(box: Any) -> LaneRun:
    config = SimpleNamespace(gpus="none", privileges="host-namespaces", cleanup_grace=5.0)
    lane = SimpleNamespace(name="v1-head", runner="v1", arm="head")
    return LaneRun(config=config, lane=lane, store=None, client=None, overlay=[], session_id="s", container=box)  # type: ignore[arg-type]


def test_an_error_while_auditing_is_a_failed_audit_that_names_it() -> None:
    audit = _lane(_BrokenBox()).cleanup_audit([101, 102], [8000])
    assert audit["ok"] is False and audit["pids_gone"] is False and audit["ports_closed"] is False
    assert audit["error"] == "RuntimeFailure: Docker API error: 502 Bad Gateway"
    assert steps._audit_problems(audit) == "the audit itself failed (RuntimeFailure: Docker API error: 502 Bad Gateway)"


def test_stopping_a_server_whose_processes_cannot_be_listed_fails_instead_of_stopping_nothing() -> None:
    run = _lane(_BrokenBox())
    with pytest.raises(RuntimeFailure, match="cannot list the processes"):
        run.stop_server(steps.ServerHandle(port=8000, root_pid=101, pids=[101]))


def test_a_restore_failure_is_not_replaced_by_the_cleanup_failure_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def restore(run: Any, rec: dict[str, Any], n: int) -> None:
        raise steps.StepFailed(f"restore-{n}: canary differs from the ordinary reference")

    def stop_restored(run: Any, rec: dict[str, Any]) -> None:
        raise steps.StepFailed("cleanup after restore incomplete: PIDs alive [101]")

    monkeypatch.setattr(steps, "restore", restore)
    monkeypatch.setattr(steps, "stop_restored", stop_restored)
    rec: dict[str, Any] = {"results": {}, "logs": []}
    with pytest.raises(steps.StepFailed, match="restore-2: canary differs"):
        steps.restore_then_stop(None, rec, 2)  # type: ignore[arg-type]
    assert rec["results"]["cleanup_error"] == "StepFailed: cleanup after restore incomplete: PIDs alive [101]"
    assert rec["results"]["cleanup"]["ok"] is False and "PIDs alive [101]" in rec["results"]["cleanup"]["detail"]


def test_a_passing_restore_still_has_its_cleanup_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(steps, "restore", lambda run, rec, n: None)

    def stop_restored(run: Any, rec: dict[str, Any]) -> None:
        raise steps.StepFailed("cleanup after restore incomplete: ports open [8001]")

    monkeypatch.setattr(steps, "stop_restored", stop_restored)
    with pytest.raises(steps.StepFailed, match="ports open"):
        steps.restore_then_stop(None, {"results": {}}, 2)  # type: ignore[arg-type]


def test_no_module_but_the_runtime_imports_docker() -> None:
    package = Path(steps.__file__).parent
    offenders = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if path.name != "runtime.py"
        and any(
            line.strip().startswith(("import docker", "from docker"))
            for line in path.read_text(encoding="utf-8").splitlines()
        )
    ]
    assert offenders == []
