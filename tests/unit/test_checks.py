"""The judgements (vsnap_qual.checks) and the steps over a lane toolset, with no Docker engine involved.

Run with DOCKER_HOST=tcp://127.0.0.1:1 (no engine reachable): nothing here needs one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from vsnap_qual import checks, faults, model, options, package_probe, steps, vllm_words
from vsnap_qual.box import ExecResult, ShmHolders
from vsnap_qual.config import Lane, Variant, build_config
from vsnap_qual.engine import adapters, prefix_cache, shapes
from vsnap_qual.engine.client import CanaryOutput
from vsnap_qual.lane import lane_environment
from vsnap_qual.model import Canary
from vsnap_qual.recorder import StepEvidence
from vsnap_qual.vllm_words import StepFailed

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


def test_a_changed_buffer_is_named_as_a_buffer_and_fails_the_digests() -> None:
    reference = {**_digests(w="1"), "rotary.cos_sin_cache": {"sha256": "c", "source": "buffer"}}
    reference["attn.k_scale"] = {"sha256": "s", "source": "buffer"}
    zeroed = {**reference, "attn.k_scale": {"sha256": "0", "source": "buffer"}}
    compare = checks.compare_digests(reference, zeroed)
    assert not compare["ok"] and compare["changed"] == compare["changed_buffers"] == ["attn.k_scale"]
    assert compare["buffers"] == 2 and compare["unchanged"] == 2 and compare["total"] == 3
    detail = checks.digest_findings(compare)[0].detail
    assert detail.startswith("buffer digests differ") and "buffers changed ['attn.k_scale'] (of 2 buffers)" in detail
    both = checks.compare_digests(reference, {**zeroed, "w": {"sha256": "2"}})
    detail = checks.digest_findings(both)[0].detail
    assert detail.startswith("parameter digests differ") and "changed ['w']" in detail and "buffers changed" in detail
    assert checks.compare_digests(reference, dict(reference))["ok"]


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
    text = '{"a": 1, "b": 2}'
    fine = checks.restart_findings("c1", "c1", AUDIT_OK, 0, text, text)
    assert checks.failure_message(fine) is None
    moved = checks.failure_message(checks.restart_findings("c1", "c2", AUDIT_OK, 0, text, '{"a": 1, "b": 3}'))
    assert moved is not None and "container ID changed" in moved and "inspect output changed" in moved
    assert "fields b (b: 2 -> 3)" in moved
    reordered = checks.failure_message(checks.restart_findings("c1", "c1", AUDIT_OK, 0, text, '{"b": 2, "a": 1}'))
    assert reordered is not None and "same fields and values, different order or spacing" in reordered
    assert '-{"a": 1, "b": 2} | +{"b": 2, "a": 1}' in reordered  # the diff itself
    failed = checks.failure_message(checks.restart_findings("c1", "c1", AUDIT_OK, 2, text, "no such artifact"))
    assert failed is not None and "vllm snapshot inspect exited 2: 'no such artifact'" in failed
    imported = [{"role": "worker", "sha256": "h"}]
    assert checks.overlay_file_ok("h", imported, 0, "h")
    assert checks.overlay_file_ok("h", [], 0, "h")  # CLI-only code: the fresh interpreter's import verifies it
    assert not checks.overlay_file_ok("h", [], 0, "other")
    assert not checks.overlay_file_ok("h", [*imported, {"role": "api_server", "sha256": "old"}], 0, "h")
    assert not checks.overlay_file_ok("h", imported, 1, None)
    fresh = {"exit_code": 0, "path": "/o/vllm/x.py", "sha256": "h"}
    unused = {"relative": "vllm/snapshot/unused_mod.py", "host_sha256": "h", "imported": [], "fresh_import": fresh}
    (finding,) = checks.overlay_findings([unused])
    assert finding.ok and "overlaid, not imported by the engine" in finding.detail and "{" not in finding.detail
    elsewhere = {**unused, "imported": [{"pid": 41, "role": "engine_core", "path": "/opt/x.py", "sha256": "old"}]}
    (finding,) = checks.overlay_findings([elsewhere])
    assert not finding.ok and finding.detail.startswith("overlay not in effect: vllm/snapshot/unused_mod.py")
    assert "{" not in finding.detail and "/opt/x.py" in finding.detail


class FakeLane:
    """A second implementation of ``steps.LaneTools`` (no Docker at all): the steps run on it unchanged."""

    def __init__(self, digests_after: dict[str, dict[str, Any]]) -> None:
        self.lane = SimpleNamespace(name="v1-head", runner="v1", arm="head")
        self.config = SimpleNamespace(
            logprob_tolerance=1e-3,
            model="org/m",
            revision="r" * 40,
            tokenizer_revision="r" * 40,
            kv_tolerance=0.02,
            soak_s=0.0,  # one look, no waiting: the soak's rule is tested with a lane that dies on cue
            observe_s=0.0,
            request_shapes=(),
            concurrent_requests=3,
            max_model_len=64,
            canary_tokens=4,
            prompts=("p0", "p1"),
            cleanup_grace=5.0,
            decode_tolerance=1.75,
            engine_argv=lambda lane=None: ["org/m", *self.engine_extra],
        )
        self.engine_extra: list[str] = []  # engine arguments beyond the model (a variant's --lora-modules)
        #: each adapter's answer (its logprob offset from the base model's), and whether restores dropped them
        self.adapter_shift: dict[str, float] = {}
        self.adapters_dropped = False
        self.peers: dict[str, steps.OrdinaryReference] = {}
        self.state = steps.LaneState(kv_snapshot=4096)
        self.digests_after = digests_after
        self.calls: list[str] = []
        self.kv_restored: int | None = 4096
        self.decode_after = 390.0  # tokens/s of every restored server's fixed generation
        self.prefix_hits_after = True  # whether a restored server's prefix cache hits the repeated prompt
        self.leftovers: list[dict[str, Any]] = []
        self.probes_until_death: int | None = None  # the restored server dies after this many liveness looks
        self.inspected: dict[str, Any] = _manifest()
        self.start_times: dict[int, str] = {}
        self.gpu_listed: set[int] | None = None  # nvidia-smi's compute apps after a restore (None: no GPU)
        self.shape_calls: list[int] = []
        self.wrong_shape: str | None = None
        self.unsteady_shape: str | None = None
        self.shm_named: list[str] = []  # the /dev/shm files the artifact's images name (existing at create)
        self.shm_gone: set[str] = set()  # of those, the ones gone now
        #: /dev/shm as the create finds it before and leaves it after (names), which of them a process holds, and
        #: whether the box sees every process that could (None from ``shm_unheld``: it does not)
        self.shm_listed: list[set[str]] = []
        self.shm_held: set[str] = set()
        self.sees_every_holder = True
        self.shm_unread: list[str] = []  # processes the holder look cannot read ("PID comm")
        self.files: dict[str, str] = {}  # artifact files other than the manifest
        self.unit_peers: dict[str, dict[str, str]] = {}
        self.junit: str | None = None  # what the unit command writes to $VSNAP_JUNIT

    served_model = "org/m"

    def serve(self, record: dict[str, Any]) -> steps.ServerHandle:
        self.calls.append("serve")
        return steps.ServerHandle(port=8000, root_pid=10, pids=[10, 11])

    def stop(self, handle: steps.ServerHandle) -> list[dict[str, Any]]:
        self.calls.append(f"stop {handle.port}")
        return list(self.leftovers)

    def health(self, port: int) -> bool:
        return self._alive()

    def gpu_apps(self) -> set[int] | None:
        return self.gpu_listed

    def alive(self, pids: list[int]) -> list[int]:
        return list(pids) if self._alive() else []

    def _alive(self) -> bool:
        if self.probes_until_death is None:
            return True
        self.probes_until_death -= 1
        return self.probes_until_death >= 0

    def restored_log_tail(self, lines: int = 40) -> str:
        return "EngineCore: killed"

    def identify(self, pids: list[int]) -> dict[int, str]:
        return {p: self.start_times.get(p, "100") for p in pids}

    def server_log(self, record: dict[str, Any]) -> str:
        return "INFO GPU KV cache size: 4,096 tokens"

    def restored_server(self, port: int) -> steps.ServerHandle | None:
        return steps.ServerHandle(port=port, root_pid=20, pids=[20, 21])

    def listening(self, port: int) -> bool:
        return True

    def keep_adapter(self, name: str, path: str) -> dict[str, Any]:
        self.calls.append(f"keep adapter {name}")
        return {"path": path, "files": {"adapter_config.json": "ab" * 32}, "kept": f"adapters/v1-head/{name}"}

    def canaries(self, port: int, model: str | None = None) -> list[CanaryOutput]:
        if model is None or (self.adapters_dropped and port != 8000):  # a dropped adapter: the base model answers
            return [REF]
        return [dataclasses.replace(REF, logprob=REF.logprob + self.adapter_shift[model])]

    def shape_answers(self, port: int, requests: list[shapes.Request]) -> dict[str, list[Canary]]:
        """Each request's answer from what it asks (the same every time), unless the restored engine is told
        to answer one shape wrong (``wrong_shape``) or the ordinary engine to be unsteady in one."""
        self.shape_calls.append(port)

        def ask(r: shapes.Request) -> CanaryOutput:
            base = sum(map(ord, r.label)) + r.seed + int(r.temperature * 10)
            ids = [base + i for i in range(r.max_tokens)]
            if port != 8000 and r.shape == self.wrong_shape and r.index == 1:
                ids[2] += 1  # the third token differs
            if port == 8000 and r.shape == self.unsteady_shape:
                ids[0] += len(self.shape_calls)  # another answer each time
            return CanaryOutput(r.label, ids, "t", -0.5, [-0.5] * r.max_tokens)

        return shapes.send(requests, ask)

    def digests(self, port: int) -> dict[str, dict[str, Any]]:
        return _digests(a="1", b="2") if port == 8000 else self.digests_after

    def decode_speed(self, port: int) -> dict[str, Any]:
        rate = 400.0 if port == 8000 else self.decode_after
        return {"tokens": 64, "runs_tps": [rate] * 3, "median_tps": rate}

    def prefix_cache(self, port: int, canary_ids: list[int]) -> dict[str, Any]:
        """Every server asked the prompt afresh: the second ask hits its two full blocks (unless told not to)."""
        counted = {"queries": 0.0, "hits": 0.0}
        hits = port == 8000 or self.prefix_hits_after

        def ask(ids: list[int]) -> CanaryOutput:
            counted["hits"] += 32.0 if counted["queries"] and hits else 0.0
            counted["queries"] += len(ids)
            return CanaryOutput("<ids>", [7, 8], "t", -0.5, [-0.5, -0.25])

        def metrics() -> str:
            return (
                'vllm:cache_config_info{block_size="16"} 1.0\n'
                f"vllm:prefix_cache_queries_total {counted['queries']}\n"
                f"vllm:prefix_cache_hits_total {counted['hits']}\n"
            )

        return prefix_cache.measure(ask, metrics, canary_ids, 512)  # type: ignore[return-value]

    def kv(self, port: int, log_text: str | None = None) -> tuple[int | None, str]:
        return (4096, "log") if log_text else (self.kv_restored, "metrics")

    def snapshot_kv(self) -> int | None:
        return 4096

    def _exec(self, stdout: str = "", code: int = 0) -> ExecResult:
        now = time.time()  # a command that just ended (the observation window counts from its end)
        return ExecResult(["vllm"], code, stdout, "", now - 1.0, now)

    def snapshot_create(self, record: dict[str, Any]) -> ExecResult:
        return self._exec()

    def snapshot_inspect(self, record: dict[str, Any], name: str = "inspect") -> ExecResult:
        return self._exec(json.dumps(_manifest() if name == "inspect" else self.inspected))

    def snapshot_restore(self, record: dict[str, Any], step: str) -> steps.RestoreRun:
        self.calls.append(step)
        result = self._exec()
        port = 8000 + sum(c.startswith(("restore", "fresh-box")) for c in self.calls)
        return steps.RestoreRun(result, port, result.started + 0.5)

    def artifact_file(self, name: str) -> str:
        return json.dumps(_manifest()) if name == "manifest.json" else self.files.get(name, "")

    def run_unit_command(self, record: dict[str, Any]) -> tuple[ExecResult, str | None, str | None]:
        self.calls.append("unit")
        return self._exec(code=0 if self.junit and "<failure" not in self.junit else 1), self.junit, "logs/u.xml"

    def outside_files(self) -> list[str]:
        return list(self.shm_named)

    def claim_made_remaps(self, step: str) -> list[str]:
        return []

    def shm_names(self) -> set[str]:
        return self.shm_listed.pop(0) if self.shm_listed else set()

    def shm_unheld(self, names: list[str]) -> ShmHolders | None:
        if not self.sees_every_holder:
            return None
        return ShmHolders([n for n in names if n not in self.shm_held], list(self.shm_unread))

    def watch_exits(self, pids: list[int]) -> Any:
        from vsnap_qual.exits import ExitWatch

        return ExitWatch(pids, why_not="a fake lane")

    def absent_files(self, paths: list[str]) -> list[str]:
        return [p for p in paths if p in self.shm_gone]

    def keep_child_log(self, record: dict[str, Any]) -> None:
        pass

    def environment_id(self) -> str:
        return "env-1"

    def restart(self) -> None:
        self.calls.append("restart")

    @contextlib.contextmanager
    def fresh_box(self) -> Iterator[FakeLane]:
        self.calls.append("fresh box")
        try:
            yield self
        finally:
            self.calls.append("fresh box removed")

    def audit(self, pids: list[int], ports: list[int]) -> dict[str, Any]:
        self.calls.append(f"audit {pids}")
        return {**AUDIT_OK, "lane": self.lane.name}

    def overlay_imports(self) -> list[dict[str, Any]]:
        return []

    def fresh_import(self, module: str) -> dict[str, Any]:
        return {"exit_code": 0, "path": None, "sha256": None}

    def probe_loaded_pids(self) -> list[int]:
        return []


def _rec() -> StepEvidence:
    return StepEvidence()


def test_the_lifecycle_runs_over_any_lane_toolset() -> None:
    lane = FakeLane(digests_after=_digests(a="1", b="2"))
    for step, args in (
        (steps.ordinary_reference, ()),
        (steps.create, ()),
        (steps.inspect, (None,)),
        (steps.restore, ("restore-1",)),
        (steps.restart, ()),
        (steps.restore_then_stop, ("restore-2",)),
        (steps.restore_after_stop, ()),
        (steps.fresh_box_restore, ()),
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
        "restore-after-stop",
        "stop 8003",
        "audit [20, 21]",
        "fresh box",
        "fresh-box",
        "stop 8004",
        "audit [20, 21]",
        "fresh box removed",
    ]


def test_a_restore_whose_parameters_changed_fails_with_the_names() -> None:
    lane = FakeLane(digests_after=_digests(a="1", b="changed"))
    steps.ordinary_reference(lane, _rec())  # type: ignore[arg-type]
    rec = _rec()
    with pytest.raises(StepFailed, match=r"parameter digests differ .* 1/2 unchanged; changed \['b'\]"):
        steps.restore(lane, rec, "restore-1")  # type: ignore[arg-type]
    assert rec.results["digest_compare"]["ok"] is False and rec.results["ready_seconds"] == 0.5


def _restored_lane(**change: Any) -> FakeLane:
    lane = FakeLane(digests_after=_digests(a="1", b="2"))
    steps.ordinary_reference(lane, _rec())  # type: ignore[arg-type]
    steps.inspect(lane, _rec(), None)  # type: ignore[arg-type]
    for key, value in change.items():
        setattr(lane, key, value)
    return lane


def test_a_restore_that_decodes_slowly_fails_after_a_second_set_of_runs_and_a_passing_one_records_one() -> None:
    rec = _rec()
    steps.restore(_restored_lane(), rec, "restore-1")  # type: ignore[arg-type]
    assert rec.results["decode_judgement"]["ok"] is True and "decode_retry" not in rec.results
    assert rec.results["decode_speed"]["median_tps"] == 390.0
    slow = _restored_lane(decode_after=160.0)  # 2.5x slower than the ordinary 400 tokens/s
    rec = _rec()
    with pytest.raises(StepFailed, match=r"decodes 2\.50× slower than the ordinary engine: 160\.0 vs 400\.0"):
        steps.restore(slow, rec, "restore-1")  # type: ignore[arg-type]
    assert rec.results["decode_judgement"]["retried"] and rec.results["decode_retry"]["median_tps"] == 160.0


def test_a_restore_that_lost_prefix_caching_fails_with_every_answer_right() -> None:
    rec = _rec()
    steps.restore(_restored_lane(), rec, "restore-1")  # type: ignore[arg-type]
    assert rec.results["prefix_cache_judgement"]["ok"] is True
    assert rec.results["prefix_cache"]["asks"][1]["hit_tokens"] == 32.0
    rec = _rec()
    with pytest.raises(StepFailed, match=r"prefix caching lost after the restore: the repeated \d+-token prompt"):
        steps.restore(_restored_lane(prefix_hits_after=False), rec, "restore-1")  # type: ignore[arg-type]
    assert all(c["ok"] for c in rec.results["canary_compare"]) and rec.results["digest_compare"]["ok"]


def test_restored_kv_capacity_must_equal_the_create_time_capacity() -> None:
    assert steps.restore(_restored_lane(), _rec(), "restore-1") is None  # type: ignore[func-returns-value]
    rec = _rec()
    with pytest.raises(StepFailed, match=r"KV capacity after restore is 3,072 tokens, but the snapshot was "):
        steps.restore(_restored_lane(kv_restored=3072), rec, "restore-1")  # type: ignore[arg-type]
    judged = rec.results["kv_judgement"]
    assert (judged["ok"], judged["restored"], judged["created"]) == (False, 3072, 4096)
    with pytest.raises(StepFailed, match="not observable"):
        steps.restore(_restored_lane(kv_restored=None), _rec(), "restore-1")  # type: ignore[arg-type]


def test_kv_judgement_tolerance_and_unobservable_figures() -> None:
    assert checks.kv_judgement(1000, 1000, 1010, 0.02, "metrics")["ok"]
    wide = checks.kv_judgement(1000, 1000, 1100, 0.02, "metrics")
    assert not wide["ok"] and "differs from ordinary serving (1,100) by 9.09 %" in wide["problems"][0]
    blind = checks.kv_judgement(None, None, None, 0.02, "unavailable")
    assert not blind["ok"] and not blind["observable"] and len(blind["problems"]) == 3


def test_a_restored_server_that_dies_during_the_soak_fails_naming_when_with_its_log() -> None:
    lane = _restored_lane(probes_until_death=2)  # alive for the first look, dead at the next
    lane.config.soak_s = 60.0
    rec = _rec()
    with pytest.raises(StepFailed, match=r"restored server died [0-9.]+ s after vllm snapshot restore exited 0"):
        steps.restore(lane, rec, "restore-1")  # type: ignore[arg-type]
    soak = rec.results["soak"]
    assert soak["alive"] is False and soak["log_tail"] == "EngineCore: killed" and soak["probes"] == 1
    assert "log tail:\nEngineCore: killed" in checks.soak_findings(soak, "soak")[0].detail


def test_the_observation_window_outlasts_the_soak_and_is_recorded() -> None:
    # the soak alone (0 s) would pass after one look; the window keeps watching and sees the death
    lane = _restored_lane(probes_until_death=4)
    lane.config.observe_s = 60.0
    rec = _rec()
    died = r"restored server died [0-9.]+ s after .*\(watched 60 s after restore-1\)"
    with pytest.raises(StepFailed, match=died):
        steps.restore(lane, rec, "restore-1")  # type: ignore[arg-type]
    soak = rec.results["soak"]
    assert soak["alive"] is False and soak["probes"] == 2 and soak["window_s"] == 60.0
    # a server that lives through it: watched until the window closed, and said so
    lasting = _restored_lane()
    lasting.config.observe_s = 0.6
    rec = _rec()
    steps.restore(lasting, rec, "restore-1")  # type: ignore[arg-type]
    soak = rec.results["soak"]
    assert soak["alive"] is True and soak["window_s"] == 0.6 and soak["observed_after_restore_s"] >= 0.6
    # the watch's pauses are the window's own time, recorded apart (the figures keep them out of the harness's)
    assert soak["idle_s"] == steps.PROBE_PAUSE * (soak["probes"] - 1) and soak["idle_s"] <= soak["seconds"]


def test_a_process_that_outlives_the_grace_fails_the_stop_gpu_holders_first() -> None:
    lane = FakeLane(digests_after=_digests(a="1", b="2"))
    lane.leftovers = [
        {"pid": 11, "start_time": "100", "cmdline": "vllm serve org/m", "gpu_holder": False},
        {"pid": 12, "start_time": "101", "cmdline": "python3 -m vllm.v1.engine.core", "gpu_holder": True},
    ]
    rec = _rec()
    with pytest.raises(StepFailed) as failure:
        steps.ordinary_reference(lane, rec)  # type: ignore[arg-type]
    message = str(failure.value)
    assert "still alive 5 s after SIGTERM" in message
    assert message.index("GPU holder pid 12") < message.index("pid 11 (started 100)")
    assert rec.results["cleanup"]["ok"] is False


def test_multi_token_canaries_report_the_first_diverging_position() -> None:
    ref = CanaryOutput("p", [1, 2, 3, 4], "abcd", -0.1, [-0.1, -0.2, -0.3, -0.4])
    same = checks.compare_canary(ref, ref, 1e-3)
    assert same["ok"] and same["bit_exact"] and same["first_divergence"] is None
    swapped = checks.compare_canary(ref, CanaryOutput("p", [1, 9, 3, 4], "a?cd", -0.1, [-0.1, -2, -0.3, -0.4]), 1e-3)
    assert not swapped["ok"] and swapped["first_divergence"] == 1
    drift = checks.compare_canary(ref, CanaryOutput("p", [1, 2, 3, 4], "abcd", -0.1, [-0.1, -0.2, -0.3, -0.5]), 1e-3)
    assert not drift["ok"] and drift["first_divergence"] == 3 and drift["max_logprob_delta"] == pytest.approx(0.1)
    one = checks.compare_canary(REF, REF, 1e-3)
    findings = checks.canary_findings([one, swapped])
    assert [f.check for f in findings] == ["canary", "multi-token canary"]
    assert findings[0].ok and not findings[1].ok and "first diverging position 1" in findings[1].detail


def test_canary_plan_keeps_the_one_token_vllm_canary_first() -> None:
    config = SimpleNamespace(prompts=("The capital of France is", "a", "b"), canary_tokens=16)
    assert steps.canary_plan(config) == [  # type: ignore[arg-type]
        ("The capital of France is", 1),
        ("The capital of France is", 16),
        ("a", 16),
        ("b", 16),
    ]


def test_an_inspect_field_changed_by_a_restore_is_named_with_the_step() -> None:
    lane = _restored_lane()
    lane.inspected = {**_manifest(), "artifact_bytes": 999}
    with pytest.raises(StepFailed, match=r"inspect output changed after restore-1: fields artifact_bytes"):
        steps.restore(lane, _rec(), "restore-1")  # type: ignore[arg-type]


def test_link_remaps_name_the_file_and_the_lane() -> None:
    audit = {
        **AUDIT_OK,
        "ok": False,
        "link_remaps_equal": False,
        "lane": "v1-head",
        "step": "restart",
        "link_remaps_ours": ["/dev/shm/link_remap.42|2049|7|600|0"],
    }
    text = checks.audit_problems(audit)
    assert text == "link remap left in /dev/shm by lane v1-head (found after restart): /dev/shm/link_remap.42"


def _expecting(expect: str, arm: str, probed: dict[str, Any]) -> Any:
    """A fault lane whose box answers the package probe with ``probed`` (counting how often it is asked)."""
    box = SimpleNamespace(asked=0)

    def probe(argv: list[str], timeout: float) -> ExecResult:
        box.asked += 1
        return ExecResult(argv, 0, json.dumps(probed) + "\n", "", 0.0, 0.1)

    box.exec = probe
    return SimpleNamespace(
        lane=SimpleNamespace(expect=expect, arm=arm),
        state=steps.LaneState(),
        box=box,
        config=SimpleNamespace(timeouts={"exec": 10.0}),
    )


def test_expectations_come_from_what_the_image_implements_unless_an_option_names_them() -> None:
    head = {"snapshot_behaviour": "head", "snapshot_behaviour_reason": "engine.py defines SnapshotSession"}
    base = {"snapshot_behaviour": "base", "snapshot_behaviour_reason": "no SnapshotSession"}
    assert package_probe.detected_behaviour(head) == ("head", "engine.py defines SnapshotSession")  # type: ignore[arg-type]
    lane = _expecting("auto", "head", head)
    assert faults.lane_expectation(lane) == ("head", "detected from the image: engine.py defines SnapshotSession")
    assert faults.lane_expectation(lane) and lane.box.asked == 1  # probed once per lane
    assert faults.lane_expectation(_expecting("auto", "head", base))[0] == "base"
    overridden = _expecting("head", "head", base)
    assert faults.lane_expectation(overridden) == ("head", "--vsnap-expect=head") and overridden.box.asked == 0
    with pytest.raises(StepFailed, match="--vsnap-base-expect=auto: cannot tell"):
        faults.lane_expectation(_expecting("auto", "base", {"snapshot_behaviour": "none"}))


def test_gpu_engaged_after_restore_is_judged_only_with_a_gpu() -> None:
    assert checks.gpu_engaged_findings([21], None, "restore-1") == []
    assert checks.failure_message(checks.gpu_engaged_findings([21], {21, 99}, "restore-1")) is None
    lost = checks.failure_message(checks.gpu_engaged_findings([21], {99}, "restore-1"))
    assert lost == "after restore-1 the CUDA holders [21] are not on the GPU (nvidia-smi lists [99])"
    assert checks.failure_message(checks.gpu_engaged_findings([], set(), "restore-2")) is not None


def test_a_restore_whose_cuda_holders_left_the_gpu_fails() -> None:
    lane = FakeLane(digests_after=_digests(a="1", b="2"))
    steps.ordinary_reference(lane, _rec())  # type: ignore[arg-type]
    steps.create(lane, _rec())  # type: ignore[arg-type]
    steps.inspect(lane, _rec(), None)  # type: ignore[arg-type]
    holders = lane.state.manifest["cuda_holders"]
    lane.gpu_listed = set(holders)
    rec = _rec()
    steps.restore(lane, rec, "restore-1")  # type: ignore[arg-type]
    assert rec.results["gpu_engaged"] == {"holders": holders, "gpu_apps": sorted(holders)}
    lane.gpu_listed = set()
    with pytest.raises(StepFailed, match="CUDA holders .* are not on the GPU"):
        steps.restore(lane, _rec(), "restore-1")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("files", "behaviour"),
    [
        ({"engine.py": "class SnapshotSession:\n    pass\n", "server.py": "x = 'error.json'\n"}, "head"),
        ({"server.py": "x = 1\n"}, "base"),
        ({}, "none"),
    ],
)
def test_the_package_probe_tells_the_snapshot_behaviour_from_the_installed_package(
    tmp_path, files: dict[str, str], behaviour: str
) -> None:
    import subprocess
    import sys

    package = tmp_path / "vllm"
    package.mkdir()
    (package / "__init__.py").write_text("")
    if files:
        (package / "snapshot").mkdir()
        for name, text in files.items():
            (package / "snapshot" / name).write_text(text)
    done = subprocess.run(
        [sys.executable, "-c", package_probe.SCRIPT],
        env={"PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    info = json.loads(done.stdout.strip().splitlines()[-1])
    assert info["snapshot_behaviour"] == behaviour and info["snapshot_behaviour_reason"]


def test_a_pid_reused_by_another_process_is_not_a_leftover() -> None:
    lane = FakeLane(digests_after=_digests(a="1", b="2"))
    audit = {**AUDIT_OK, "ok": False, "pids_gone": False, "pids_alive": [7, 8], "ports_open": []}
    lane.start_times = {7: "999"}  # PID 7 now belongs to a process started later; PID 8 is the same one
    steps.drop_reused(lane, audit, {7: "100", 8: "100"})  # type: ignore[arg-type]
    assert audit["pids_alive"] == [8] and audit["pids_reused"] == [7] and audit["ok"] is False
    steps.drop_reused(lane, audit := {**audit, "pids_alive": [7]}, {7: "100"})  # type: ignore[arg-type]
    assert audit["pids_gone"] and audit["ok"]


def test_a_captured_id_taken_by_another_host_process_is_told_apart_from_an_engine_failure() -> None:
    busy = "INFO CRIU restore.log (tail):\n(00.1) Error (criu/cr-restore.c:123): Unable to create a thread: -17\n"
    assert (
        vllm_words.captured_id_collision(busy, "")
        == "(00.1) Error (criu/cr-restore.c:123): Unable to create a thread: -17"
    )
    truncated = "INFO CRIU restore.log (tail):\nRead 10 bytes while 20 expected from core-1.img\nRestoring FAILED.\n"
    assert vllm_words.captured_id_collision(truncated, "") is None
    assert vllm_words.captured_id_collision("Unable to create a thread: -17", "") is None  # not CRIU's log tail


def test_a_failed_restore_names_criu_s_own_reason_from_vllm_s_stdout() -> None:
    """vLLM logs CRIU's reason on stdout (``CRIU restore.log (tail):``); its stderr has only the exit status."""
    lane = _restored_lane()
    stdout = (
        "CRIU restore.log (tail):\n(00.01) 1: Error (criu/files-reg.c:2130): Can't open file dev/shm/psm_2196: "
        "No such file or directory\n(00.02) Error (criu/cr-restore.c:2447): Restoring FAILED.\n"
    )
    failed = ExecResult(["vllm"], 1, stdout, "subprocess.CalledProcessError: returned non-zero exit status 1.", 0, 1)
    lane.snapshot_restore = lambda record, step: steps.RestoreRun(failed, 8001, 1.0)  # type: ignore[method-assign]
    rec = _rec()
    with pytest.raises(StepFailed, match=r"exited 1: subprocess.Called.*; error.json=None; CRIU: .*psm_2196"):
        steps.restore(lane, rec, "restore-1")  # type: ignore[arg-type]
    assert rec.results["criu_reason"][-1].endswith("Restoring FAILED.")


SEGMENTS = ["/dev/shm/psm_2021c414", "/dev/shm/psm_302eb8ff"]
CRIU_031 = (
    "(00.4) Error (criu/tun.c:85): tun: Unable to create tun: No such file or directory\n"
    "(01.2) Error (criu/files-reg.c:2353): Can't open file dev/shm/psm_302eb8ff on restore: No such file or "
    "directory\n(01.3) Error (criu/cr-restore.c:2447): Restoring FAILED.\n"
)
SAYS_031 = (
    "SnapshotRestoreError: Command '['/opt/vsnap-criu/criu', 'restore', '-D', …]' returned non-zero exit status 1."
)


def test_an_artifact_whose_outside_files_are_gone_is_one_named_finding_in_criu_s_words() -> None:
    """create records the /dev/shm files the artifact needs and does not carry; a restore that fails once they
    are gone says so first, then vLLM's words, then CRIU's (0.31 logs nothing: its images/restore.log)."""
    lane = _restored_lane()
    lane.shm_named = list(SEGMENTS)
    steps.create(lane, rec := _rec())  # type: ignore[arg-type]
    assert rec.results["outside_files"] == SEGMENTS == lane.state.outside_files
    lane.shm_gone = {SEGMENTS[1]}
    lane.files["images/restore.log"] = CRIU_031
    failed = ExecResult(["vllm"], 1, "", f"Traceback …\n{SAYS_031}", 0, 1)
    lane.snapshot_restore = lambda record, step: steps.RestoreRun(failed, 8003, 1.0)  # type: ignore[method-assign]
    with pytest.raises(StepFailed) as info:
        steps.restore(lane, rec := _rec(), "restore-after-stop")  # type: ignore[arg-type]
    first = str(info.value).splitlines()[0]
    assert first.startswith(
        f"the artifact is not self-contained: its restore needs {SEGMENTS[1]}, which it does not carry and which are "
        f"gone; vllm snapshot restore exited 1: {vllm_words.short_command(SAYS_031)}; CRIU: (01.2) Error "
        "(criu/files-reg.c:2353): Can't open"
    )
    assert "Command '[… criu restore …]' returned non-zero exit status 1." in first
    assert rec.results["vllm_reason"] == SAYS_031  # the evidence keeps vLLM's words whole
    assert rec.results["consumed"] == [SEGMENTS[1]]
    # the same failure with every file still there is an ordinary failed restore, in the same words
    lane.shm_gone = set()
    with pytest.raises(StepFailed, match=r"^vllm snapshot restore exited 1: SnapshotRestoreError"):
        steps.restore(lane, rec := _rec(), "restore-after-stop")  # type: ignore[arg-type]
    assert "consumed" not in rec.results


def test_criu_s_words_come_from_restore_log_only_when_vllm_says_criu_restore_failed() -> None:
    log = lambda: CRIU_031  # noqa: E731
    assert vllm_words.criu_words("", SAYS_031, log)[0].endswith(
        "Can't open file dev/shm/psm_302eb8ff on restore: No such file or directory"
    )
    # a restore that failed before CRIU ran: the log is an earlier restore's (its harmless Error lines are not words)
    assert vllm_words.criu_words("", "SnapshotCompatibilityError: snapshot mismatch: environment", log) == []


def test_what_the_checks_record_is_the_evidence_model() -> None:
    """Each recorded judgement validates against its model type (closed types: no field the model lacks)."""
    import jsonschema

    within = checks.compare_canary(REF, CanaryOutput(REF.prompt, [12095], " Paris", -0.4205), 1e-3)
    digests = checks.compare_digests(_digests(a="1", b="2"), _digests(a="1", b="3", c="4"))
    recorded = [
        (model.CanaryCompare, within),
        (model.DigestCompare, digests),
        (model.KvJudgement, checks.kv_judgement(4096, 4096, 4100, 0.02, "metrics")),
        *((model.InspectCheck, c) for c in checks.inspect_checks(_manifest(), EXPECT)),
        (model.InspectChange, checks.manifest_changes({"a": 1}, {"a": 2})["a"]),
    ]
    for tp, value in recorded:
        jsonschema.validate(json.loads(json.dumps(value)), model.type_schema(tp))


def test_a_runner_the_cpu_build_lacks_is_not_applicable_only_in_cpu_smoke_mode() -> None:
    words = "ValueError: Model Runner V2 requires Triton"
    with pytest.raises(pytest.skip.Exception, match="^not applicable: vLLM's CPU build has no such runner: Value"):
        vllm_words.skip_if_limitation(words, cpu_smoke=True)
    # on a GPU image the same words are a limitation of that image: a skip that keeps the run from passing
    with pytest.raises(pytest.skip.Exception, match="^environment limitation: ValueError: Model Runner V2"):
        vllm_words.skip_if_limitation(words, cpu_smoke=False)
    vllm_words.skip_if_limitation("RuntimeError: CUDA out of memory", cpu_smoke=True)  # a defect: the step fails on


def test_a_feature_vllm_refuses_is_not_applicable_only_in_that_variants_lane() -> None:
    words = "ValueError: snapshot create does not support speculative decoding"
    spec = Variant("spec", ("--speculative-config", '{"method": "ngram"}'))
    expected = '^not applicable: vLLM refuses variant spec \\(--speculative-config \'{"method": "ngram"}\'\\): Value'
    with pytest.raises(pytest.skip.Exception, match=expected):
        vllm_words.skip_if_limitation(words, cpu_smoke=False, variant=spec)
    vllm_words.skip_if_limitation(words, cpu_smoke=False)  # the plain configuration refused: the step fails on
    vllm_words.skip_if_limitation("RuntimeError: CUDA out of memory", cpu_smoke=False, variant=spec)  # a defect: fails


def test_cpu_smoke_lanes_find_the_smoke_platform_after_the_probe(tmp_path: Path) -> None:
    parsed = options.parse_standalone(
        ["--vsnap-image=i:1", "--vsnap-model=m/m", "--vsnap-revision=" + "a" * 40, "--vsnap-gpus=none"], env={}
    )
    config = build_config(parsed, tmp_path)
    lane = config.lanes[0]
    assert lane_environment(config, lane)["PYTHONPATH"] == "/vsnap/probe"
    config = build_config({**parsed, "vsnap_cpu_smoke": True}, tmp_path)
    assert lane_environment(config, lane)["PYTHONPATH"] == "/vsnap/probe:/vsnap/smoke"


def test_a_dev_shm_file_the_stopped_tree_held_and_no_artifact_needs_is_a_leak_of_that_lane() -> None:
    lane = FakeLane(digests_after=_digests(a="1", b="2"))
    lane.state.outside_files = [SEGMENTS[0]]  # the artifact's: kept, not a leak
    handle = steps.ServerHandle(port=8002, root_pid=20, pids=[20, 21])
    handle.shm_held = [*SEGMENTS, "/dev/shm/sem.mp-qecoj5n7"]
    lane.shm_gone = {"/dev/shm/sem.mp-qecoj5n7"}  # removed by the tree's own cleanup
    audit = steps.strict_audit(lane, handle, [])  # type: ignore[arg-type]
    assert (audit["shm_kept"], audit["shm_left"], audit["ok"]) == ([SEGMENTS[0]], [SEGMENTS[1]], False)
    (finding,) = checks.audit_findings(audit, "after restore-2")
    assert not finding.ok and finding.detail.endswith(
        "/dev/shm files the stopped tree of lane v1-head held are still there, held by no artifact: "
        "/dev/shm/psm_302eb8ff"
    )
    lane.shm_gone |= {SEGMENTS[1]}
    assert steps.strict_audit(lane, handle, [])["ok"]  # type: ignore[arg-type]


def _junit(**cases: str) -> str:
    body = {
        "passed": "",
        "failed": "<failure message='boom'/>",
        "error": "<error message='setup'/>",
        "skipped": "<skipped/>",
    }
    return (
        "<testsuites><testsuite>"
        + "".join(
            f"<testcase classname='tests.t' name='{name}'>{body[kind]}</testcase>" for name, kind in cases.items()
        )
        + "</testsuite></testsuites>"
    )


def _unit_lane(arm: str, junit: str | None, base_image: str | None = "img:base") -> FakeLane:
    lane = FakeLane(digests_after=_digests(a="1", b="2"))
    lane.lane = Lane("v1", arm, f"img:{arm}", arm, arm == "head")  # type: ignore[arg-type]  # arm: a test's str
    lane.config.unit_command = "pytest tests -q --junitxml=$VSNAP_JUNIT"
    lane.config.base_image = base_image
    lane.junit = junit
    return lane


def test_the_unit_step_fails_only_on_failures_new_on_the_head_arm() -> None:
    head = _unit_lane("head", _junit(a="passed", b="failed", c="failed", d="error"))
    steps.unit_step(head, rec := _rec())  # type: ignore[arg-type]
    assert rec.results["unit"]["counts"] == {"passed": 1, "failed": 3, "skipped": 0}
    assert rec.results["unit"]["judged"].startswith("recorded (1 passed, 3 failed, 0 skipped)")
    base = _unit_lane("base", _junit(a="failed", b="failed", c="passed", d="skipped"))
    base.unit_peers = head.unit_peers
    with pytest.raises(StepFailed) as info:
        steps.unit_step(base, rec := _rec())  # type: ignore[arg-type]
    assert str(info.value) == (
        "2 unit test(s) fail on the head arm and not on the base arm: ['tests.t::c', 'tests.t::d'] "
        "(1 pre-existing failure(s), failing on the base arm too)"
    )
    unit_run = rec.results["unit"]
    assert (unit_run["new_on_head"], unit_run["pre_existing"], unit_run["fixed_on_head"]) == (
        ["tests.t::c", "tests.t::d"],
        ["tests.t::b"],
        ["tests.t::a"],
    )
    # the same head failures all on the base arm too: pre-existing, a pass
    same = _unit_lane("base", _junit(a="passed", b="failed", c="failed", d="failed"))
    same.unit_peers = head.unit_peers
    steps.unit_step(same, rec := _rec())  # type: ignore[arg-type]
    assert rec.results["unit"]["pre_existing"] == ["tests.t::b", "tests.t::c", "tests.t::d"]


def test_without_a_base_arm_every_unit_failure_counts_and_no_junit_is_a_failure() -> None:
    alone = _unit_lane("head", _junit(a="passed", b="failed"), base_image=None)
    with pytest.raises(StepFailed, match=r"1 unit test\(s\) failed \(1 passed, 1 failed, 0 skipped\)"):
        steps.unit_step(alone, _rec())  # type: ignore[arg-type]
    silent = _unit_lane("head", None)
    with pytest.raises(StepFailed, match=r"wrote no JUnit to \$VSNAP_JUNIT \(exit 1\)"):
        steps.unit_step(silent, _rec())  # type: ignore[arg-type]
    garbled = _unit_lane("head", "<testsuite><testcase")
    with pytest.raises(StepFailed, match="JUnit cannot be read"):
        steps.unit_step(garbled, _rec())  # type: ignore[arg-type]


def _shaped_lane(**change: Any) -> FakeLane:
    lane = FakeLane(digests_after=_digests(a="1", b="2"))
    lane.config.request_shapes = ("repeated", "seeded", "concurrent", "long")
    for key, value in change.items():
        setattr(lane, key, value)
    steps.ordinary_reference(lane, _rec())  # type: ignore[arg-type]
    steps.inspect(lane, _rec(), None)  # type: ignore[arg-type]
    return lane


def test_request_shapes_are_recorded_twice_on_the_ordinary_engine_and_compared_after_restore() -> None:
    lane = _shaped_lane()
    ordinary = lane.state.ordinary
    assert ordinary is not None and ordinary.shapes is not None
    answers = ordinary.shapes["answers"]
    assert sorted(answers) == ["concurrent", "long", "repeated", "seeded"]
    assert len(answers["seeded"]) == 2 and len(answers["concurrent"]) == 3 and len(answers["long"]) == 1
    assert answers["long"][0]["prompt"] == "<59 token ids>"  # max-model-len 64 less 4 answer tokens and one
    assert lane.shape_calls == [8000, 8000]  # asked twice on the ordinary engine
    assert ordinary.shapes["self_consistent"]["seeded"] is True
    rec = _rec()
    steps.restore(lane, rec, "restore-1")  # type: ignore[arg-type]
    judged = [c for c in rec.results["shape_compare"] if c["judged"]]
    assert {c["shape"] for c in judged} == {"repeated", "seeded", "long"} and all(c["compare"]["ok"] for c in judged)


def test_a_restored_engine_wrong_for_one_shape_fails_naming_the_shape_and_the_first_divergence() -> None:
    lane = _shaped_lane(wrong_shape="seeded")
    with pytest.raises(StepFailed, match=r"request shapes differ from the ordinary reference: seeded request 1"):
        steps.restore(lane, _rec(), "restore-1")  # type: ignore[arg-type]
    rec = _rec()
    with pytest.raises(StepFailed) as failure:
        steps.restore(_shaped_lane(wrong_shape="seeded"), rec, "restore-1")  # type: ignore[arg-type]
    assert "first diverging position 2" in str(failure.value)


def test_a_shape_the_ordinary_engine_answers_differently_twice_is_reported_not_judged() -> None:
    lane = _shaped_lane(unsteady_shape="seeded")
    ordinary = lane.state.ordinary
    assert ordinary is not None and ordinary.shapes is not None
    assert ordinary.shapes["self_consistent"]["seeded"] is False
    lane.wrong_shape = "seeded"  # would fail, were it judged
    rec = _rec()
    steps.restore(lane, rec, "restore-1")  # type: ignore[arg-type]
    seeded = [c for c in rec.results["shape_compare"] if c["shape"] == "seeded"]
    assert seeded and not any(c["judged"] for c in seeded)
    (finding,) = checks.shape_findings(rec.results["shape_compare"], [], ["seeded"])
    assert finding.ok and "not judged: seeded: the ordinary engine answered differently twice" in finding.detail


def test_a_repeated_soak_round_that_differs_fails_the_shapes() -> None:
    bad = checks.compare_canary(REF, CanaryOutput(REF.prompt, [11], " Lyon", -0.42), 1e-3)
    (finding,) = checks.shape_findings([], [bad], [])
    assert not finding.ok and "repeated request (a soak round)" in finding.detail and "Lyon" in finding.detail


def test_shape_options_parse_and_refuse() -> None:
    assert options.parse_shapes("seeded,long") == ("seeded", "long")
    assert options.parse_shapes("none") == ()
    with pytest.raises(Exception, match="unknown request shape"):
        options.parse_shapes("seeded,batched")


def test_vllms_command_error_is_quoted_with_the_argument_list_cut_to_the_program() -> None:
    said = (
        "vllm.snapshot.runtime.SnapshotRestoreError: Command '['env', 'PATH=/opt/x:/bin', '/opt/vsnap-criu/sbin/criu', "
        "'restore', '-L', '/opt/vsnap-criu/lib/criu', '--pidfile', '/a/restored.pid']' returned non-zero exit status 1."
    )
    assert vllm_words.short_command(said) == (
        "vllm.snapshot.runtime.SnapshotRestoreError: Command '[… criu restore …]' returned non-zero exit status 1."
    )
    other = "CalledProcessError: Command '['ls', '-l']' returned non-zero exit status 2."
    assert vllm_words.short_command(other) == other  # not a snapshot program: vLLM's words as they were


def test_criu_s_words_are_the_same_whether_vllm_logged_them_or_the_log_was_read() -> None:
    logged = (
        "(MainProcess pid=12247) ERROR 12-02 02:25:18 [runtime.py:546] CRIU restore.log (tail):\n"
        "(MainProcess pid=12247) ERROR 12-02 02:25:18 [runtime.py:546]   8269: Error (criu/files-reg.c:2353): Can't "
        "open file dev/shm/psm_ac8c0f76 on restore: No such file or directory\n"
    )
    read = "8269: Error (criu/files-reg.c:2353): Can't open file dev/shm/psm_ac8c0f76 on restore: No such file or "
    read += "directory"
    assert vllm_words.criu_reason(logged) == vllm_words.criu_reason(read) == [read]


def test_a_link_remap_is_the_leak_of_the_lane_whose_dump_made_it_whoever_looks_first(tmp_path) -> None:
    """CRIU names a link remap by its dump's file id (``link_remap.<id>``), not by a PID: the artifact whose images
    list it is the dump that made it. With a shared /dev/shm, lane v2-head's audit sees v1-head's remap first: it
    is v1-head's, made by its create, and v2-head's own new entry stays v2-head's."""
    from vsnap_qual import audit
    from vsnap_qual.box import ShmEntry

    made = ShmEntry("link_remap.5", "2049", "7", "600", 0)
    unmade = ShmEntry("link_remap.9", "2049", "8", "600", 0)
    box = SimpleNamespace(shm=lambda: [made, unmade])
    v1 = audit.AuditScope(lane="v1-head", grace=0.0, gpus=False, claims=tmp_path)
    v2 = audit.AuditScope(lane="v2-head", grace=0.0, gpus=False, claims=tmp_path)
    audit.claim_made_remaps(v1, ["/dev/shm/link_remap.5"], "create")
    listing = audit.link_remaps([made, unmade])
    seen_by_v2 = audit.attribute_link_remaps(box, v2, listing)  # type: ignore[arg-type]
    assert seen_by_v2["link_remaps_others"] == {"v1-head": [made.line]}
    assert seen_by_v2["link_remaps_ours"] == [unmade.line]  # no artifact names it: first seen, by v2-head
    assert seen_by_v2["link_remaps_made_by"] == {made.line: "v1-head create"}
    seen_by_v1 = audit.attribute_link_remaps(box, v1, listing)  # type: ignore[arg-type]
    assert seen_by_v1["link_remaps_ours"] == [made.line]
    assert seen_by_v1["link_remaps_others"] == {"v2-head": [unmade.line]}
    text = checks.audit_problems({**AUDIT_OK, "ok": False, "lane": "v1-head", "step": "restart", **seen_by_v1})
    assert text == (
        "link remap left in /dev/shm by lane v1-head (found after restart): "
        "/dev/shm/link_remap.5 (made by the dump of v1-head's create)"
    )


def test_how_a_process_that_is_not_ours_ended_comes_from_the_kernels_process_events() -> None:
    """A restored server is nobody's child here: its death signal or exit code comes from the process-event
    connector. Grandchildren (orphans, as a restored tree is) are seen as well as children."""
    from vsnap_qual.exits import ExitWatch, describe

    if os.geteuid() != 0:
        pytest.skip("the kernel's process events need CAP_NET_ADMIN (CI and dev machines are root)")
    killed = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!; wait"], stdout=subprocess.PIPE, text=True)
    assert killed.stdout is not None
    orphan = int(killed.stdout.readline())
    exiting = subprocess.Popen(["sh", "-c", "sleep 0.3; exit 3"])
    with ExitWatch([orphan, exiting.pid]) as watch:
        time.sleep(0.1)
        os.kill(orphan, signal.SIGKILL)
        exiting.wait()
        killed.wait()
        watch.wait_for([orphan, exiting.pid])
    assert watch.ended([orphan, exiting.pid]) == f"{orphan} killed by SIGKILL; {exiting.pid} exit code 3"
    assert describe(0x86) == "killed by SIGABRT, core dumped"
    assert ExitWatch([1], why_not="the box has a PID namespace of its own").ended([1]) == (
        "exit status not observed: the box has a PID namespace of its own"
    )
    # a watched PID whose exit the watch never read: said with what holds that PID now (here: the running test)
    with ExitWatch([os.getpid()]) as quiet:
        other = subprocess.Popen(["true"])
        other.wait()
        quiet.wait_for([other.pid], 0.5)
    said = quiet.ended([os.getpid()])
    assert said.startswith("exit status not observed (the watch read ") and "other exit events" in said, said
    own = Path("/proc/self/cmdline").read_bytes().rstrip(b"\0").replace(b"\0", b" ").decode().strip()[:120]
    assert f"{os.getpid()}: held by a process in state R started at tick" in said and said.endswith(own), said


def _lora_lane(shift: float = 0.25, **change: Any) -> FakeLane:
    lane = FakeLane(digests_after=_digests(a="1", b="2"))
    lane.engine_extra = ["--enable-lora", "--lora-modules", "tiny=/a/tiny", '{"name": "big", "path": "/a/big"}']
    lane.adapter_shift = {"tiny": shift, "big": 0.5}
    return lane


def test_each_lora_adapter_is_asked_the_canaries_on_the_ordinary_engine_and_after_every_restore() -> None:
    lane = _lora_lane()
    rec = _rec()
    steps.ordinary_reference(lane, rec)  # type: ignore[arg-type]
    assert list(rec.results["adapter_canary"]) == ["tiny", "big"]
    assert rec.results["adapters"]["big"]["path"] == "/a/big" and "keep adapter tiny" in lane.calls
    assert rec.results["adapter_canary"]["tiny"][0]["logprob"] == pytest.approx(REF.logprob + 0.25)
    steps.inspect(lane, _rec(), None)  # type: ignore[arg-type]
    rec = _rec()
    steps.restore(lane, rec, "restore-1")  # type: ignore[arg-type]
    assert all(c["ok"] for group in rec.results["adapter_compare"].values() for c in group)
    lane.adapters_dropped = True  # a wake that dropped the adapters: requests through them get the base model
    rec = _rec()
    with pytest.raises(StepFailed, match=r"adapter 'tiny': 1 of 1 canaries differ .* lost or changed"):
        steps.restore(lane, rec, "restore-2")  # type: ignore[arg-type]
    assert rec.results["adapter_compare"]["big"][0]["ok"] is False


def test_an_adapter_that_changes_no_canary_fails_the_ordinary_reference_as_an_ineffective_check() -> None:
    lane = _lora_lane(shift=0.0)
    with pytest.raises(StepFailed, match=r"adapter 'tiny' answers every one of the 1 canaries as the base"):
        steps.ordinary_reference(lane, _rec())  # type: ignore[arg-type]


def test_lora_names_read_every_form_of_lora_modules() -> None:
    argv = ["m", "--lora-modules", "a=/x", '{"name": "b", "path": "/y"}', "--max-loras", "2", "--lora-modules=c=/z"]
    assert adapters.lora_modules(argv) == {"a": "/x", "b": "/y", "c": "/z"}
    assert adapters.lora_modules(["m", "--enable-lora"]) == {}
    with pytest.raises(ValueError, match="a JSON adapter needs a 'name'"):
        adapters.lora_modules(["--lora-modules", '{"path": "/y"}'])


def test_a_create_that_leaves_an_unheld_name_in_dev_shm_fails_but_delivers_its_artifact() -> None:
    """The sem.mp-* every real-vLLM create leaves (tqdm's lock in the worker, docs/real-vllm-differences.md §7a): new,
    held by no process, named by no artifact: the create fails naming it and the lane removes it at teardown; the
    artifact was published with its tree gone, so inspect still runs after it (procedure.Step.delivered)."""
    lane = FakeLane(digests_after=_digests(a="1", b="2"))
    lane.shm_named = ["/dev/shm/psm_1"]
    lane.shm_listed = [{"other"}, {"other", "psm_1", "sem.mp-x1", "link_remap.7", "held-by-another-lane"}]
    lane.shm_held = {"held-by-another-lane"}
    rec = _rec()
    with pytest.raises(StepFailed, match=r"left in /dev/shm .*: /dev/shm/sem\.mp-x1 \(") as failed:
        steps.create(lane, rec)  # type: ignore[arg-type]
    assert "). sem.mp-*: a Python multiprocessing lock or semaphore" in str(failed.value)
    assert steps.shm_kinds(["/dev/shm/psm_1", "/dev/shm/x"]) == ""
    assert rec.results["shm_left"] == ["/dev/shm/sem.mp-x1"] and rec.delivered
    assert "/dev/shm/sem.mp-x1" in lane.state.shm_owned


def test_a_create_check_that_could_not_read_a_process_names_it_in_the_evidence_and_the_message() -> None:
    """On this project's CI machine root cannot read PID 1's fds (it holds a capability root lacks): the check says
    so instead of treating it silently as holding nothing."""
    lane = FakeLane(digests_after=_digests(a="1", b="2"))
    lane.shm_listed = [set(), {"sem.mp-x1"}]
    lane.shm_unread = ["1 process_api"]
    rec = _rec()
    with pytest.raises(StepFailed, match=r"could not read 1 \(1 process_api\): each has a capability"):
        steps.create(lane, rec)  # type: ignore[arg-type]
    assert rec.results["shm_unread"] == ["1 process_api"] and rec.results["shm_left"] == ["/dev/shm/sem.mp-x1"]
    many = [f"{pid} p{pid}" for pid in range(1, 8)]
    assert steps.unread_words(many).endswith(
        "could not read 7 (1 p1, 2 p2, 3 p3, 4 p4 and 3 more): each has a capability the box lacks, so none is "
        "this lane's engine"
    )


def test_a_create_whose_new_files_are_all_held_or_named_passes() -> None:
    lane = FakeLane(digests_after=_digests(a="1", b="2"))
    lane.shm_named = ["/dev/shm/psm_1"]
    lane.shm_listed = [set(), {"psm_1", "held"}]
    lane.shm_held = {"held"}
    lane.shm_unread = ["1 process_api"]  # named only where something was left
    rec = _rec()
    steps.create(lane, rec)  # type: ignore[arg-type]
    assert rec.results["shm_left"] == [] and rec.delivered and "shm_unread" not in rec.results


def test_where_the_box_cannot_see_every_holder_the_new_files_are_recorded_not_judged() -> None:
    lane = FakeLane(digests_after=_digests(a="1", b="2"))
    lane.shm_listed = [set(), {"sem.mp-x1"}]
    lane.sees_every_holder = False
    rec = _rec()
    steps.create(lane, rec)  # type: ignore[arg-type]
    said = rec.results["shm_left_not_judged"]
    assert said["files"] == ["/dev/shm/sem.mp-x1"] and "PID namespace of its own" in said["why"]
    assert "shm_left" not in rec.results


def test_the_fault_lanes_own_create_records_what_it_left_and_removes_it_without_judging() -> None:
    lane = FakeLane(digests_after=_digests(a="1", b="2"))
    lane.shm_listed = [{"sem.mp-x2", "held"}]
    lane.shm_held = {"held"}
    rec = _rec()
    assert steps.shm_left_by_create(lane, set(), rec, judged=False) == []  # type: ignore[arg-type]
    said = rec.results["shm_left_not_judged"]
    assert said["files"] == ["/dev/shm/sem.mp-x2"] and "fault lane" in said["why"]
    assert lane.state.shm_owned == {"/dev/shm/sem.mp-x2"} and "shm_left" not in rec.results
