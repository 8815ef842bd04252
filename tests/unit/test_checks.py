"""The judgements (vsnap_qual.checks) and the steps over a lane toolset, with no Docker engine involved.

Run with DOCKER_HOST=tcp://127.0.0.1:1 (no engine reachable): nothing here needs one.
"""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace
from typing import Any

import pytest

from vsnap_qual import checks, steps
from vsnap_qual.engine import CanaryOutput
from vsnap_qual.runtime import ExecResult

REF = CanaryOutput("The capital of France is", [12095], " Paris", -0.42)
AUDIT_OK = {"pids_gone": True, "ports_closed": True, "gpu_idle": None, "link_remaps_equal": True, "ok": True}


def _digests(**shas: str | None) -> dict[str, dict[str, Any]]:
    return {name: {"sha256": sha, "shape": [2], "dtype": "float16"} for name, sha in shas.items()}


def test_digest_comparison_never_passes_when_nothing_was_observed() -> None:
    blind = checks.compare_digests(_digests(a=None, b=None), _digests(a=None, b=None))
    assert (blind["ok"], blind["unobservable"]) == (False, ["a", "b"])
    same = checks.compare_digests(_digests(a="1", b=None), _digests(a="1", b=None))
    assert same["ok"] and same["unchanged"] == 1
    changed = checks.compare_digests(_digests(a="1", b="2"), _digests(a="1", b="3", c="4"))
    assert not changed["ok"] and changed["changed"] == ["b"] and changed["extra"] == ["c"]
    assert checks.digest_findings(changed)[0].detail.startswith("parameter digests differ")


def test_canary_tolerance_and_bit_exactness() -> None:
    within = checks.compare_canary(REF, CanaryOutput(REF.prompt, [12095], " Paris", -0.4205), 1e-3)
    assert within["ok"] and not within["bit_exact"]
    flipped = checks.compare_canary(REF, CanaryOutput(REF.prompt, [11], " Lyon", -0.42), 1e-3)
    (finding,) = checks.canary_findings([flipped])
    assert not finding.ok and "expected [12095] ' Paris'" in finding.detail and "got [11] ' Lyon'" in finding.detail
    assert not checks.canary_findings([])[0].ok  # nothing compared is never a pass


def test_ordinary_reference_findings() -> None:
    empty = hashlib.sha256(b"").hexdigest()
    assert checks.failure_message(checks.ordinary_findings(_digests(a="1"), AUDIT_OK)) is None
    message = checks.failure_message(checks.ordinary_findings(_digests(a=empty, b=None), AUDIT_OK))
    assert message is not None and "digested as empty bytes" in message and "['a']" in message
    assert "all unobservable" in str(checks.failure_message(checks.ordinary_findings(_digests(a=None), AUDIT_OK)))
    leaked = {**AUDIT_OK, "ok": False, "pids_gone": False, "pids_alive": [7]}
    assert "PIDs alive [7]" in str(checks.failure_message(checks.ordinary_findings(_digests(a="1"), leaked)))


def test_audit_rule() -> None:
    assert checks.audit_ok([], [], None, True)
    assert not checks.audit_ok([7], [], None, True)
    assert not checks.audit_ok([], [8000], None, True)
    assert not checks.audit_ok([], [], False, True)
    assert not checks.audit_ok([], [], True, False)
    assert checks.audit_problems({"error": "RuntimeFailure: x"}) == "the audit itself failed (RuntimeFailure: x)"


def _manifest(**over: Any) -> dict[str, Any]:
    manifest = {
        "schema_version": 1,
        "boundary": checks.BOUNDARY,
        "model": "org/m",
        "served_model_name": "org/m",
        "model_revision": "r" * 40,
        "tokenizer_revision": "r" * 40,
        "oracle_sampled_token_logprob": -0.42,
        "artifact_bytes": 123,
        "process_tree": [10, 11],
        "cuda_holders": [11],
        "oracle_token_ids": [12095],
        "oracle_text": " Paris",
    }
    return {**manifest, **over}


EXPECT = checks.InspectExpectations("org/m", "org/m", "r" * 40, "r" * 40, 1e-3, None, REF)


def test_inspect_checks_every_upstream_field_and_the_oracle() -> None:
    assert all(c["ok"] for c in checks.inspect_checks(_manifest(), EXPECT))
    bad = {
        c["name"]
        for c in checks.inspect_checks(
            _manifest(schema_version=True, cuda_holders=[99], oracle_text=" Lyon", artifact_bytes=0), EXPECT
        )
        if not c["ok"]
    }
    assert bad == {
        "schema_version",
        "cuda_holders_subset",
        "oracle_equals_ordinary_text",
        "artifact_bytes_positive_int",
    }


def test_restart_and_overlay_findings() -> None:
    fine = checks.restart_findings("c1", "c1", AUDIT_OK, 0, "s", "s")
    assert checks.failure_message(fine) is None
    moved = checks.failure_message(checks.restart_findings("c1", "c2", AUDIT_OK, 0, "s", "t"))
    assert moved is not None and "container ID changed" in moved and "inspect output changed" in moved
    imported = [{"role": "worker", "sha256": "h"}]
    assert checks.overlay_file_ok("h", imported, 0, "h")
    assert not checks.overlay_file_ok("h", [], 0, "h")  # no engine process imported it
    assert not checks.overlay_file_ok("h", [*imported, {"role": "api_server", "sha256": "old"}], 0, "h")
    assert not checks.overlay_file_ok("h", imported, 1, None)


class FakeLane:
    """A second implementation of ``steps.LaneTools`` (no Docker at all): the steps run on it unchanged."""

    def __init__(self, digests_after: dict[str, dict[str, Any]]) -> None:
        self.lane = SimpleNamespace(name="v1-head", runner="v1", arm="head")
        self.config = SimpleNamespace(
            logprob_tolerance=1e-3, model="org/m", revision="r" * 40, tokenizer_revision="r" * 40
        )
        self.peers: dict[str, dict[str, Any]] = {}
        self.ordinary: dict[str, Any] = {}
        self.manifest: dict[str, Any] = {}
        self.inspect_sha256: str | None = None
        self.server: steps.ServerHandle | None = None
        self.kv_snapshot: int | None = 4096
        self.digests_after = digests_after
        self.calls: list[str] = []

    served_model = "org/m"

    def serve(self, record: dict[str, Any]) -> steps.ServerHandle:
        self.calls.append("serve")
        return steps.ServerHandle(port=8000, root_pid=10, pids=[10, 11])

    def stop(self, handle: steps.ServerHandle) -> None:
        self.calls.append(f"stop {handle.port}")

    def server_log(self, record: dict[str, Any]) -> str:
        return "INFO GPU KV cache size: 4,096 tokens"

    def restored_server(self, port: int) -> steps.ServerHandle | None:
        return steps.ServerHandle(port=port, root_pid=20, pids=[20, 21])

    def listening(self, port: int) -> bool:
        return True

    def canaries(self, port: int) -> list[CanaryOutput]:
        return [REF]

    def digests(self, port: int) -> dict[str, dict[str, Any]]:
        return _digests(a="1", b="2") if port == 8000 else self.digests_after

    def kv(self, port: int, log_text: str | None = None) -> tuple[int | None, str]:
        return (4096, "log") if log_text else (None, "unavailable")

    def snapshot_kv(self) -> int | None:
        return 4096

    def _exec(self, stdout: str = "", code: int = 0) -> ExecResult:
        return ExecResult(["vllm"], code, stdout, "", 1.0, 2.0)

    def snapshot_create(self, record: dict[str, Any]) -> ExecResult:
        return self._exec()

    def snapshot_inspect(self, record: dict[str, Any], name: str = "inspect") -> ExecResult:
        return self._exec(json.dumps(_manifest()))

    def snapshot_restore(self, record: dict[str, Any], n: int) -> steps.RestoreRun:
        self.calls.append(f"restore-{n}")
        return steps.RestoreRun(self._exec(), 8000 + n, 1.5)

    def artifact_file(self, name: str) -> str:
        return json.dumps(_manifest()) if name == "manifest.json" else ""

    def keep_child_log(self, record: dict[str, Any]) -> None:
        pass

    def environment_id(self) -> str:
        return "env-1"

    def restart(self) -> None:
        self.calls.append("restart")

    def audit(self, pids: list[int], ports: list[int]) -> dict[str, Any]:
        self.calls.append(f"audit {pids}")
        return dict(AUDIT_OK)

    def overlay_imports(self) -> list[dict[str, Any]]:
        return []

    def fresh_import(self, module: str) -> dict[str, Any]:
        return {"exit_code": 0, "path": None, "sha256": None}

    def probe_loaded_pids(self) -> list[int]:
        return []


def _rec() -> dict[str, Any]:
    return {"results": {}, "logs": [], "argv": None, "exit_code": None}


def test_the_lifecycle_runs_over_any_lane_toolset() -> None:
    lane = FakeLane(digests_after=_digests(a="1", b="2"))
    for step, args in (
        (steps.ordinary_reference, ()),
        (steps.create, ()),
        (steps.inspect, (None,)),
        (steps.restore, (1,)),
        (steps.restart, ()),
        (steps.restore_then_stop, (2,)),
    ):
        step(lane, _rec(), *args)  # type: ignore[operator]
    assert lane.calls == [
        "serve",
        "stop 8000",
        "audit [10, 11]",
        "audit [10, 11]",
        "restore-1",
        "restart",
        "audit [20, 21]",
        "restore-2",
        "stop 8002",
        "audit [20, 21]",
    ]


def test_a_restore_whose_parameters_changed_fails_with_the_names() -> None:
    lane = FakeLane(digests_after=_digests(a="1", b="changed"))
    steps.ordinary_reference(lane, _rec())  # type: ignore[arg-type]
    rec = _rec()
    with pytest.raises(steps.StepFailed, match=r"parameter digests differ .* 1/2 unchanged; changed \['b'\]"):
        steps.restore(lane, rec, 1)  # type: ignore[arg-type]
    assert rec["results"]["digest_compare"]["ok"] is False and rec["results"]["ready_seconds"] == 0.5
