"""The lifecycle's step sequences (``vsnap_qual.steps``) on the one fake lane of the tests
(``tests/support/fake_lane.py``: the in-memory box, services answering as each test scripts them), with no Docker
engine involved: what each step observes, records and judges, and how it fails.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.support.fake_lane import AUDIT_OK, REF, FakeLane, digests, lifecycle_lane, manifest
from vsnap_qual import checks, model, procedure, steps, vllm_words
from vsnap_qual.box import ExecResult
from vsnap_qual.config import Variant
from vsnap_qual.engine import shapes
from vsnap_qual.lane.audit import ServerHandle
from vsnap_qual.lane.protocols import RestoreRun
from vsnap_qual.lane.servers import ServeFailed
from vsnap_qual.lane.snapshot_cli import shm_kinds, shm_left_by_create, unread_words
from vsnap_qual.lane.state import LifecycleState
from vsnap_qual.model import CleanupAudit
from vsnap_qual.recorder import StepEvidence
from vsnap_qual.vllm_words import StepFailed


def _rec(step: str = procedure.ORDINARY) -> StepEvidence[Any]:
    """An open record of the table's step ``step`` (a restore's says which restore it is)."""
    return StepEvidence.of(step)


def test_the_lifecycle_runs_over_any_lane_toolset() -> None:
    lane = lifecycle_lane()
    for name in (
        procedure.ORDINARY,
        procedure.CREATE,
        procedure.INSPECT,
        procedure.RESTORE_1,
        procedure.RESTART,
        procedure.RESTORE_2,
        procedure.RESTORE_AFTER_STOP,
        procedure.FRESH_BOX,
    ):
        entry = procedure.step(name)
        body = getattr(steps, entry.run.partition(":")[2])  # the table's body, called as the suite does
        body(lane, rec := _rec(name))
        undeclared = set(rec.results) - set(model.fields_of(entry.results).types)
        assert rec.results and not undeclared, f"{name} records what its type does not declare: {undeclared}"
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
    lane = lifecycle_lane()
    lane.digests_after = digests(a="1", b="changed")
    steps.ordinary_reference(lane, _rec())
    rec = _rec("restore-1")
    with pytest.raises(StepFailed, match=r"parameter digests differ .* 1/2 unchanged; changed \['b'\]"):
        steps.restore(lane, rec)
    assert rec.results["digest_compare"]["ok"] is False and rec.results["ready_seconds"] == 0.5


def _restored_lane(**change: Any) -> FakeLane[LifecycleState]:
    lane = lifecycle_lane()
    steps.ordinary_reference(lane, _rec())
    steps.inspect(lane, _rec())
    for key, value in change.items():
        setattr(lane, key, value)
    return lane


def test_a_restore_that_decodes_slowly_fails_after_a_second_set_of_runs_and_a_passing_one_records_one() -> None:
    rec = _rec("restore-1")
    steps.restore(_restored_lane(), rec)
    assert rec.results["decode_judgement"]["ok"] is True and "decode_retry" not in rec.results
    assert rec.results["decode_speed"]["median_tps"] == 390.0
    slow = _restored_lane(decode_after=160.0)  # 2.5x slower than the ordinary 400 tokens/s
    rec = _rec("restore-1")
    with pytest.raises(StepFailed, match=r"decodes 2\.50× slower than the ordinary engine: 160\.0 vs 400\.0"):
        steps.restore(slow, rec)
    assert rec.results["decode_judgement"]["retried"] and rec.results["decode_retry"]["median_tps"] == 160.0


def test_a_restore_that_lost_prefix_caching_fails_with_every_answer_right() -> None:
    rec = _rec("restore-1")
    steps.restore(_restored_lane(), rec)
    assert rec.results["prefix_cache_judgement"]["ok"] is True
    assert rec.results["prefix_cache"]["asks"][1]["hit_tokens"] == 32.0
    rec = _rec("restore-1")
    with pytest.raises(StepFailed, match=r"prefix caching lost after the restore: the repeated \d+-token prompt"):
        steps.restore(_restored_lane(prefix_hits_after=False), rec)
    assert all(c["ok"] for c in rec.results["canary_compare"]) and rec.results["digest_compare"]["ok"]


def test_restored_kv_capacity_must_equal_the_create_time_capacity() -> None:
    assert steps.restore(_restored_lane(), _rec("restore-1")) is None  # type: ignore[func-returns-value]
    rec = _rec("restore-1")
    with pytest.raises(StepFailed, match=r"KV capacity after restore is 3,072 tokens, but the snapshot was "):
        steps.restore(_restored_lane(kv_restored=3072), rec)
    judged = rec.results["kv_judgement"]
    assert (judged["ok"], judged["restored"], judged["created"]) == (False, 3072, 4096)
    with pytest.raises(StepFailed, match="not observable"):
        steps.restore(_restored_lane(kv_restored=None), _rec("restore-1"))


def test_a_restored_server_that_dies_during_the_soak_fails_naming_when_with_its_log() -> None:
    lane = _restored_lane(probes_until_death=2)  # alive for the first look, dead at the next
    lane.configure(soak_s=60.0)
    rec = _rec("restore-1")
    with pytest.raises(StepFailed, match=r"restored server died [0-9.]+ s after vllm snapshot restore exited 0"):
        steps.restore(lane, rec)
    soak = rec.results["soak"]
    assert soak["alive"] is False and soak["log_tail"] == "EngineCore: killed" and soak["probes"] == 1
    assert "log tail:\nEngineCore: killed" in checks.soak_findings(soak, "soak")[0].detail


def test_the_observation_window_outlasts_the_soak_and_is_recorded() -> None:
    # the soak alone (0 s) would pass after one look; the window keeps watching and sees the death
    lane = _restored_lane(probes_until_death=4)
    lane.configure(observe_s=60.0)
    rec = _rec("restore-1")
    died = r"restored server died [0-9.]+ s after .*\(watched 60 s after restore-1\)"
    with pytest.raises(StepFailed, match=died):
        steps.restore(lane, rec)
    soak = rec.results["soak"]
    assert soak["alive"] is False and soak["probes"] == 2 and soak["window_s"] == 60.0
    # a server that lives through it: watched until the window closed, and said so
    lasting = _restored_lane()
    lasting.configure(observe_s=0.6)
    rec = _rec("restore-1")
    steps.restore(lasting, rec)
    soak = rec.results["soak"]
    assert soak["alive"] is True and soak["window_s"] == 0.6 and soak["observed_after_restore_s"] >= 0.6
    # the watch's pauses are the window's own time, recorded apart (the figures keep them out of the harness's)
    assert soak["idle_s"] == steps.PROBE_PAUSE * (soak["probes"] - 1) and soak["idle_s"] <= soak["seconds"]


def test_a_look_that_finds_the_processes_gone_while_they_live_is_looked_at_again_not_a_death() -> None:
    # the soak of 2026-12-07 (stress:2): one look said "processes gone" while the processes lived (their own
    # /proc said so, and the stop found them alive); the second look, by their own state, finds them there
    lane = _restored_lane(wrong_looks=1)
    lane.configure(observe_s=0.6)
    rec = _rec("restore-1")
    steps.restore(lane, rec)
    soak = rec.results["soak"]
    assert soak["alive"] is True and "died_after_s" not in soak and "exit" not in soak, soak
    assert soak["second_looks_count"] == 1 and soak["second_looks"][0]["first"] == "processes gone [20, 21]"
    assert soak["second_looks"][0]["deadline_s"] == steps.CONFIRM_HEADROOM * 2.0


def test_a_death_is_two_failed_looks_and_names_both_with_how_the_processes_ended() -> None:
    lane = _restored_lane(probes_until_death=2)  # alive for the first look, gone at the next
    lane.configure(soak_s=60.0)
    rec = _rec("restore-1")
    with pytest.raises(StepFailed, match=r"processes gone \[20, 21\]; looked at again: processes gone \[20, 21\]"):
        steps.restore(lane, rec)
    soak = rec.results["soak"]
    assert soak["alive"] is False and soak["exit"].startswith("exit status not observed: a fake lane"), soak
    assert "second_looks" not in soak


def test_a_pid_held_by_another_process_at_the_second_look_is_gone() -> None:
    lane = _restored_lane(wrong_looks=1)
    handle = ServerHandle(port=8004, root_pid=20, pids=[20, 21])
    lane.start_times = {21: "999"}  # 21 now names a process started after the watch recorded the tree
    look = steps.probe_liveness(lane, handle, 0.0, known={20: "100", 21: "100"})
    assert look["alive"] is False and look["reason"] == (
        "processes gone [20, 21]; looked at again: processes gone [21]"
    ), look


def test_a_health_answer_late_under_load_is_asked_again_with_a_deadline_sized_by_measurement() -> None:
    handle = ServerHandle(port=8004, root_pid=20, pids=[20, 21])
    # /health answers in 5 s: the 2 s ask fails, the second waits 4 x its bound (8 s) and is answered
    lane = _restored_lane(health_late_s=5.0)
    look = steps.probe_liveness(lane, handle, 0.0)
    assert look["alive"] is True and lane.health_asks == [2.0, 8.0], (look, lane.health_asks)
    assert look["second_looks"][0]["first"] == "/health did not answer 200 within 2 s"
    # in 15 s: past 4 x the bound, but within 4 x the slowest answer the watch measured (5 s)
    lane = _restored_lane(health_late_s=15.0)
    assert steps.probe_liveness(lane, handle, 0.0, slowest_s=5.0)["alive"] is True
    assert lane.health_asks == [2.0, 20.0]
    # never within the deadline: a server that stopped answering, its processes there
    lane = _restored_lane(health_late_s=15.0)
    look = steps.probe_liveness(lane, handle, 0.0)
    assert look["alive"] is False and look["reason"] == (
        "/health did not answer 200 within 2 s; looked at again: /health did not answer 200 within 8 s "
        "(4 × the slowest answer measured, 2.00 s), its processes there"
    ), look
    # the deadline is at most the http timeout
    lane = _restored_lane(health_late_s=15.0)
    lane.configure(timeouts={**lane.config.timeouts, "http": 3.0})
    assert steps.probe_liveness(lane, handle, 0.0, slowest_s=5.0)["alive"] is False
    assert lane.health_asks == [2.0, 3.0]


def test_a_server_that_stops_answering_in_the_soak_fails_not_as_an_exit() -> None:
    lane = _restored_lane(health_late_s=60.0)
    rec = _rec("restore-1")
    with pytest.raises(StepFailed, match=r"/health did not answer 200 within 8 s .*its processes there"):
        steps.restore(lane, rec)
    soak = rec.results["soak"]
    assert soak["exit"] == "not exited: its processes are there (20 started at tick 100, 21 started at tick 100)"


def test_a_process_that_outlives_the_grace_fails_the_stop_gpu_holders_first() -> None:
    lane = lifecycle_lane()
    lane.leftovers = [
        {"pid": 11, "start_time": "100", "cmdline": "vllm serve org/m", "gpu_holder": False},
        {"pid": 12, "start_time": "101", "cmdline": "python3 -m vllm.v1.engine.core", "gpu_holder": True},
    ]
    rec = _rec()
    with pytest.raises(StepFailed) as failure:
        steps.ordinary_reference(lane, rec)
    message = str(failure.value)
    assert "still alive 5 s after SIGTERM" in message
    assert message.index("GPU holder pid 12") < message.index("pid 11 (started 100)")
    assert rec.results["cleanup"]["ok"] is False


def test_canary_plan_keeps_the_one_token_vllm_canary_first() -> None:
    assert shapes.canary_plan(("The capital of France is", "a", "b"), 16) == [
        ("The capital of France is", 1),
        ("The capital of France is", 16),
        ("a", 16),
        ("b", 16),
    ]


def test_an_inspect_field_changed_by_a_restore_is_named_with_the_step() -> None:
    lane = _restored_lane()
    lane.inspected = manifest(artifact_bytes=999)
    with pytest.raises(StepFailed, match=r"inspect output changed after restore-1: fields artifact_bytes"):
        steps.restore(lane, _rec("restore-1"))


def test_a_restore_whose_cuda_holders_left_the_gpu_fails() -> None:
    lane = lifecycle_lane()
    steps.ordinary_reference(lane, _rec())
    steps.create(lane, _rec("create"))
    steps.inspect(lane, _rec())
    holders = lane.state.manifest["cuda_holders"]
    lane.gpu_listed = set(holders)
    rec = _rec("restore-1")
    steps.restore(lane, rec)
    assert rec.results["gpu_engaged"] == {"holders": holders, "gpu_apps": sorted(holders)}
    lane.gpu_listed = set()
    with pytest.raises(StepFailed, match="CUDA holders .* are not on the GPU"):
        steps.restore(lane, _rec("restore-1"))


def test_a_pid_reused_by_another_process_is_not_a_leftover() -> None:
    lane = lifecycle_lane()
    audit = CleanupAudit(**AUDIT_OK)
    audit["ok"], audit["pids_gone"], audit["pids_alive"], audit["ports_open"] = False, False, [7, 8], []
    lane.start_times = {7: "999"}  # PID 7 now belongs to a process started later; PID 8 is the same one
    steps.drop_reused(lane, audit, {7: "100", 8: "100"})
    assert audit["pids_alive"] == [8] and audit["pids_reused"] == [7] and audit["ok"] is False
    again = CleanupAudit(**audit)
    again["pids_alive"] = [7]
    steps.drop_reused(lane, again, {7: "100"})
    assert again["pids_gone"] and again["ok"]


def test_a_failed_restore_names_criu_s_own_reason_from_vllm_s_stdout() -> None:
    """vLLM logs CRIU's reason on stdout (``CRIU restore.log (tail):``); its stderr has only the exit status."""
    lane = _restored_lane()
    stdout = (
        "CRIU restore.log (tail):\n(00.01) 1: Error (criu/files-reg.c:2130): Can't open file dev/shm/psm_2196: "
        "No such file or directory\n(00.02) Error (criu/cr-restore.c:2447): Restoring FAILED.\n"
    )
    failed = ExecResult(["vllm"], 1, stdout, "subprocess.CalledProcessError: returned non-zero exit status 1.", 0, 1)
    lane.restore_answer = RestoreRun(failed, 8001, 1.0)
    rec = _rec("restore-1")
    with pytest.raises(StepFailed, match=r"exited 1: subprocess.Called.*; error.json=None; CRIU: .*psm_2196"):
        steps.restore(lane, rec)
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
    steps.create(lane, rec := _rec("create"))
    assert rec.results["outside_files"] == SEGMENTS == lane.state.outside_files
    lane.shm_gone = {SEGMENTS[1]}
    lane.files["images/restore.log"] = CRIU_031
    failed = ExecResult(["vllm"], 1, "", f"Traceback …\n{SAYS_031}", 0, 1)
    lane.restore_answer = RestoreRun(failed, 8003, 1.0)
    with pytest.raises(StepFailed) as info:
        steps.restore(lane, rec := _rec("restore-after-stop"))
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
        steps.restore(lane, rec := _rec("restore-after-stop"))
    assert "consumed" not in rec.results


def test_criu_s_words_come_from_restore_log_only_when_vllm_says_criu_restore_failed() -> None:
    log = lambda: CRIU_031  # noqa: E731
    assert vllm_words.criu_words("", SAYS_031, log)[0].endswith(
        "Can't open file dev/shm/psm_302eb8ff on restore: No such file or directory"
    )
    # a restore that failed before CRIU ran: the log is an earlier restore's (its harmless Error lines are not words)
    assert vllm_words.criu_words("", "SnapshotCompatibilityError: snapshot mismatch: environment", log) == []


def test_a_dev_shm_file_the_stopped_tree_held_and_no_artifact_needs_is_a_leak_of_that_lane() -> None:
    lane = lifecycle_lane()
    lane.state.outside_files = [SEGMENTS[0]]  # the artifact's: kept, not a leak
    handle = ServerHandle(port=8002, root_pid=20, pids=[20, 21])
    handle.shm_held = [*SEGMENTS, "/dev/shm/sem.mp-qecoj5n7"]
    lane.shm_gone = {"/dev/shm/sem.mp-qecoj5n7"}  # removed by the tree's own cleanup
    audit = steps.strict_audit(lane, handle, [])
    assert (audit["shm_kept"], audit["shm_left"], audit["ok"]) == ([SEGMENTS[0]], [SEGMENTS[1]], False)
    (finding,) = checks.audit_findings(audit, "after restore-2")
    assert not finding.ok and finding.detail.endswith(
        "/dev/shm files the stopped tree of lane v1-head held are still there, held by no artifact: "
        "/dev/shm/psm_302eb8ff"
    )
    lane.shm_gone |= {SEGMENTS[1]}
    assert steps.strict_audit(lane, handle, [])["ok"]


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


def _unit_lane(arm: str, junit: str | None, base_image: str | None = "img:base") -> FakeLane[LifecycleState]:
    lane = lifecycle_lane(arm=arm)
    lane.configure(unit_command="pytest tests -q --junitxml=$VSNAP_JUNIT", base_image=base_image)
    lane.junit = junit
    return lane


def test_the_unit_step_fails_only_on_failures_new_on_the_head_arm() -> None:
    head = _unit_lane("head", _junit(a="passed", b="failed", c="failed", d="error"))
    steps.unit_step(head, rec := _rec("unit"))
    assert rec.results["unit"]["counts"] == {"passed": 1, "failed": 3, "skipped": 0}
    assert rec.results["unit"]["judged"].startswith("recorded (1 passed, 3 failed, 0 skipped)")
    base = _unit_lane("base", _junit(a="failed", b="failed", c="passed", d="skipped"))
    base.peers = head.peers
    with pytest.raises(StepFailed) as info:
        steps.unit_step(base, rec := _rec("unit"))
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
    same.peers = head.peers
    steps.unit_step(same, rec := _rec("unit"))
    assert rec.results["unit"]["pre_existing"] == ["tests.t::b", "tests.t::c", "tests.t::d"]


def test_without_a_base_arm_every_unit_failure_counts_and_no_junit_is_a_failure() -> None:
    alone = _unit_lane("head", _junit(a="passed", b="failed"), base_image=None)
    with pytest.raises(StepFailed, match=r"1 unit test\(s\) failed \(1 passed, 1 failed, 0 skipped\)"):
        steps.unit_step(alone, _rec("unit"))
    silent = _unit_lane("head", None)
    with pytest.raises(StepFailed, match=r"wrote no JUnit to \$VSNAP_JUNIT \(exit 1\)"):
        steps.unit_step(silent, _rec("unit"))
    garbled = _unit_lane("head", "<testsuite><testcase")
    with pytest.raises(StepFailed, match="JUnit cannot be read"):
        steps.unit_step(garbled, _rec("unit"))


def _shaped_lane(**change: Any) -> FakeLane[LifecycleState]:
    lane = lifecycle_lane()
    lane.configure(request_shapes=("repeated", "seeded", "concurrent", "long"))
    for key, value in change.items():
        setattr(lane, key, value)
    steps.ordinary_reference(lane, _rec())
    steps.inspect(lane, _rec())
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
    rec = _rec("restore-1")
    steps.restore(lane, rec)
    judged = [c for c in rec.results["shape_compare"] if c["judged"]]
    assert {c["shape"] for c in judged} == {"repeated", "seeded", "long"} and all(c["compare"]["ok"] for c in judged)


def test_a_restored_engine_wrong_for_one_shape_fails_naming_the_shape_and_the_first_divergence() -> None:
    lane = _shaped_lane(wrong_shape="seeded")
    with pytest.raises(StepFailed, match=r"request shapes differ from the ordinary reference: seeded request 1"):
        steps.restore(lane, _rec("restore-1"))
    rec = _rec("restore-1")
    with pytest.raises(StepFailed) as failure:
        steps.restore(_shaped_lane(wrong_shape="seeded"), rec)
    assert "first diverging position 2" in str(failure.value)


def test_a_shape_the_ordinary_engine_answers_differently_twice_is_reported_not_judged() -> None:
    lane = _shaped_lane(unsteady_shape="seeded")
    ordinary = lane.state.ordinary
    assert ordinary is not None and ordinary.shapes is not None
    assert ordinary.shapes["self_consistent"]["seeded"] is False
    lane.wrong_shape = "seeded"  # would fail, were it judged
    rec = _rec("restore-1")
    steps.restore(lane, rec)
    seeded = [c for c in rec.results["shape_compare"] if c["shape"] == "seeded"]
    assert seeded and not any(c["judged"] for c in seeded)
    (finding,) = checks.shape_findings(rec.results["shape_compare"], [], ["seeded"])
    assert finding.ok and "not judged: seeded: the ordinary engine answered differently twice" in finding.detail


def _lora_lane(shift: float = 0.25, **change: Any) -> FakeLane[LifecycleState]:
    lane = lifecycle_lane()
    modules = ("--enable-lora", "--lora-modules", "tiny=/a/tiny", '{"name": "big", "path": "/a/big"}')
    lane.spec = dataclasses.replace(lane.spec, variant=Variant("lora", modules))
    lane.adapter_shift = {"tiny": shift, "big": 0.5}
    return lane


def test_each_lora_adapter_is_asked_the_canaries_on_the_ordinary_engine_and_after_every_restore() -> None:
    lane = _lora_lane()
    rec = _rec()
    steps.ordinary_reference(lane, rec)
    assert list(rec.results["adapter_canary"]) == ["tiny", "big"]
    assert rec.results["adapters"]["big"]["path"] == "/a/big" and "keep adapter tiny" in lane.calls
    assert rec.results["adapter_canary"]["tiny"][0]["logprob"] == pytest.approx(REF.logprob + 0.25)
    steps.inspect(lane, _rec())
    rec = _rec("restore-1")
    steps.restore(lane, rec)
    assert all(c["ok"] for group in rec.results["adapter_compare"].values() for c in group)
    lane.adapters_dropped = True  # a wake that dropped the adapters: requests through them get the base model
    rec = _rec("restore-2")
    with pytest.raises(StepFailed, match=r"adapter 'tiny': 1 of 1 canaries differ .* lost or changed"):
        steps.restore(lane, rec)
    assert rec.results["adapter_compare"]["big"][0]["ok"] is False


def test_an_adapter_that_changes_no_canary_fails_the_ordinary_reference_as_an_ineffective_check() -> None:
    lane = _lora_lane(shift=0.0)
    with pytest.raises(StepFailed, match=r"adapter 'tiny' answers every one of the 1 canaries as the base"):
        steps.ordinary_reference(lane, _rec())


def test_a_create_that_leaves_an_unheld_name_in_dev_shm_fails_but_delivers_its_artifact() -> None:
    """The sem.mp-* every real-vLLM create leaves (tqdm's lock in the worker, docs/real-vllm-differences.md §7a): new,
    held by no process, named by no artifact: the create fails naming it and the lane removes it at teardown; the
    artifact was published with its tree gone, so inspect still runs after it (procedure.Step.delivered)."""
    lane = lifecycle_lane()
    lane.shm_named = ["/dev/shm/psm_1"]
    lane.shm_listed = [{"other"}, {"other", "psm_1", "sem.mp-x1", "link_remap.7", "held-by-another-lane"}]
    lane.shm_held = {"held-by-another-lane"}
    rec = _rec("create")
    with pytest.raises(StepFailed, match=r"left in /dev/shm .*: /dev/shm/sem\.mp-x1 \(") as failed:
        steps.create(lane, rec)
    assert "). sem.mp-*: a Python multiprocessing lock or semaphore" in str(failed.value)
    assert shm_kinds(["/dev/shm/psm_1", "/dev/shm/x"]) == ""
    assert rec.results["shm_left"] == ["/dev/shm/sem.mp-x1"] and rec.delivered
    assert "/dev/shm/sem.mp-x1" in lane.state.shm_owned


def test_a_create_check_that_could_not_read_a_process_names_it_in_the_evidence_and_the_message() -> None:
    """On this project's CI machine root cannot read PID 1's fds (it holds a capability root lacks): the check says
    so instead of treating it silently as holding nothing."""
    lane = lifecycle_lane()
    lane.shm_listed = [set(), {"sem.mp-x1"}]
    lane.shm_unread = ["1 process_api"]
    rec = _rec("create")
    with pytest.raises(StepFailed, match=r"could not read 1 \(1 process_api\): each has a capability"):
        steps.create(lane, rec)
    assert rec.results["shm_unread"] == ["1 process_api"] and rec.results["shm_left"] == ["/dev/shm/sem.mp-x1"]
    many = [f"{pid} p{pid}" for pid in range(1, 8)]
    assert unread_words(many).endswith(
        "could not read 7 (1 p1, 2 p2, 3 p3, 4 p4 and 3 more): each has a capability the box lacks, so none is "
        "this lane's engine"
    )


def test_a_create_whose_new_files_are_all_held_or_named_passes() -> None:
    lane = lifecycle_lane()
    lane.shm_named = ["/dev/shm/psm_1"]
    lane.shm_listed = [set(), {"psm_1", "held"}]
    lane.shm_held = {"held"}
    lane.shm_unread = ["1 process_api"]  # named only where something was left
    rec = _rec("create")
    steps.create(lane, rec)
    assert rec.results["shm_left"] == [] and rec.delivered and "shm_unread" not in rec.results


def test_where_the_box_cannot_see_every_holder_the_new_files_are_recorded_not_judged() -> None:
    lane = lifecycle_lane()
    lane.shm_listed = [set(), {"sem.mp-x1"}]
    lane.sees_every_holder = False
    rec = _rec("create")
    steps.create(lane, rec)
    said = rec.results["shm_left_not_judged"]
    assert said["files"] == ["/dev/shm/sem.mp-x1"] and "PID namespace of its own" in said["why"]
    assert "shm_left" not in rec.results


def test_the_fault_lanes_own_create_records_what_it_left_and_removes_it_without_judging() -> None:
    lane = lifecycle_lane()
    lane.shm_listed = [{"sem.mp-x2", "held"}]
    lane.shm_held = {"held"}
    rec = _rec("create")
    assert shm_left_by_create(lane.cli, lane.state, set(), rec, judged=False) is None  # nothing judged
    said = rec.results["shm_left_not_judged"]
    assert said["files"] == ["/dev/shm/sem.mp-x2"] and "fault lane" in said["why"]
    assert lane.state.shm_owned == {"/dev/shm/sem.mp-x2"} and "shm_left" not in rec.results


def test_an_ordinary_server_that_never_became_ready_stays_the_lanes_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """``vllm serve`` that never answered ``/health`` fails the step; its server (started, perhaps still running) is
    the lane's server for the steps after it, as a restored one is, until one stops it."""
    lane = lifecycle_lane()
    handle = ServerHandle(port=8000, root_pid=10)

    def never_ready(rec: StepEvidence[model.ServeRecord]) -> ServerHandle:
        raise ServeFailed("vllm serve did not answer /health within 1 s", handle)

    monkeypatch.setattr(lane.servers, "serve", never_ready)
    with pytest.raises(StepFailed, match="did not answer /health"):
        steps.ordinary_reference(lane, _rec())
    assert lane.state.server is handle
