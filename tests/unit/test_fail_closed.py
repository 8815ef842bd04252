"""Audits and commands fail closed, and a restore's failure is never replaced by its cleanup's (no Docker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import docker.errors
import pytest

from vsnap_qual import checks, procedure, steps
from vsnap_qual.box import BoxSpec, RuntimeFailure, exec_timed_out
from vsnap_qual.lane import audit
from vsnap_qual.recorder import StepEvidence
from vsnap_qual.runtimes.docker import EngineContainer
from vsnap_qual.vllm_words import StepFailed


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
    spec = BoxSpec(name="vsnap-lane", engine="x", image_id="x", labels={}, environment={})
    box = EngineContainer(None, _Top(), spec, Path("/nonexistent"))
    with pytest.raises(RuntimeFailure, match="cannot list the processes of vsnap-lane: 500 Server Error"):
        box.processes()


class _BrokenBox:
    def look(self, *_: Any, **__: Any) -> Any:
        raise RuntimeFailure("Docker API error: 502 Bad Gateway")

    def processes(self) -> list[dict[str, Any]]:
        raise RuntimeFailure("cannot list the processes of vsnap-lane")


def _scope(tmp_path: Path) -> audit.AuditScope:
    return audit.AuditScope(lane="v1-head", grace=5.0, gpus=False, claims=tmp_path)


def test_an_error_while_auditing_is_a_failed_audit_that_names_it(tmp_path: Path) -> None:
    found = audit.cleanup_audit(_BrokenBox(), _scope(tmp_path), [101, 102], [8000])  # type: ignore[arg-type]
    assert found["ok"] is False and found["pids_gone"] is False and found["ports_closed"] is False
    assert found["error"] == "RuntimeFailure: Docker API error: 502 Bad Gateway"
    assert checks.audit_problems(found) == "the audit itself failed (RuntimeFailure: Docker API error: 502 Bad Gateway)"


def test_stopping_a_server_whose_processes_cannot_be_listed_fails_instead_of_stopping_nothing() -> None:
    with pytest.raises(RuntimeFailure, match="cannot list the processes"):
        audit.strict_stop(_BrokenBox(), audit.ServerHandle(port=8000, root_pid=101, pids=[101]), 5.0, [])  # type: ignore[arg-type]


def test_a_restore_failure_is_not_replaced_by_the_cleanup_failure_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def restore(lane: Any, rec: StepEvidence[Any]) -> None:
        raise StepFailed(f"{rec.step}: canary differs from the ordinary reference")

    def stop_restored(lane: Any, rec: StepEvidence[Any]) -> None:
        raise StepFailed("cleanup after restore incomplete: PIDs alive [101]")

    monkeypatch.setattr(steps, "restore", restore)
    monkeypatch.setattr(steps, "stop_restored", stop_restored)
    rec = StepEvidence.of(procedure.RESTORE_2)
    with pytest.raises(StepFailed, match="restore-2: canary differs"):
        steps.restore_then_stop(None, rec)  # type: ignore[arg-type]
    assert rec.results["cleanup_error"] == "StepFailed: cleanup after restore incomplete: PIDs alive [101]"
    assert rec.results["cleanup"]["ok"] is False and "PIDs alive [101]" in rec.results["cleanup"]["detail"]


def test_a_passing_restore_still_has_its_cleanup_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(steps, "restore", lambda lane, rec: None)

    def stop_restored(lane: Any, rec: StepEvidence[Any], in_flight: bool = False) -> None:
        raise StepFailed("cleanup after restore incomplete: ports open [8001]")

    monkeypatch.setattr(steps, "stop_restored", stop_restored)
    with pytest.raises(StepFailed, match="ports open"):
        steps.restore_then_stop(None, StepEvidence.of(procedure.RESTORE_2))  # type: ignore[arg-type]


def test_no_module_but_the_docker_runtime_imports_docker() -> None:
    package = Path(steps.__file__).parent
    offenders = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if path.relative_to(package) != Path("runtimes/docker.py")
        and any(
            line.strip().startswith(("import docker", "from docker"))
            for line in path.read_text(encoding="utf-8").splitlines()
        )
    ]
    assert offenders == []
