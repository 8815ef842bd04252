"""One injector per fault kind, all run by the one sequence of ``faults.run_fault``: each kind's ``fired`` rule
from the harness's own evidence (pure), the table covering every kind of the catalogue, no branch on the kind in
the sequence, and the sequence itself on a fake lane (its box's named operations, restore and audit recorded; where
the rule rests on a real mechanism, such as the shell that records the restore's own environment, that mechanism
runs here)."""

from __future__ import annotations

import ast
import inspect
import json
import socket
import subprocess
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tests.support.fake_lane import FakeLane, fault_lane
from vsnap_qual import faults, model, procedure
from vsnap_qual.box import ExecResult
from vsnap_qual.contract import ARTIFACT, WORK
from vsnap_qual.engine import client
from vsnap_qual.faults import BUILTIN_FAULTS, FAULTS_BY_ID, Fault, FaultCatalogue, Observation
from vsnap_qual.faults import BUILTIN_INJECTORS as INJECTORS
from vsnap_qual.faults.injector import Attempt
from vsnap_qual.faults.kinds import identity as drifts
from vsnap_qual.faults.kinds.hook import HookParams
from vsnap_qual.lane.state import FaultState
from vsnap_qual.model import FiredRecord, IdentityInjected, KillInjected
from vsnap_qual.recorder import StepEvidence
from vsnap_qual.timing import run_figures

ROOT = Path(__file__).resolve().parents[2]
RECORD = FiredRecord(point="wake-raise", pid=7)


def _fired(kind: str, obs: Observation | None = None, /, **injected: object) -> bool:
    return INJECTORS[kind].fired(obs or Observation(), injected)


# ---- the table ---------------------------------------------------------------------------------------------
def test_every_kind_of_the_catalogue_has_its_own_injector_class() -> None:
    kinds = {f.kind for f in BUILTIN_FAULTS}
    assert kinds <= set(INJECTORS) and set(INJECTORS) == kinds
    assert {k: type(INJECTORS[k]).__name__ for k in sorted(kinds)} == {
        "create": "CreateInjector",
        "hook": "HookInjector",
        "identity": "IdentityInjector",
        "image": "ImageInjector",
        "kill": "KillInjector",
        "manifest": "ManifestInjector",
        "pid": "PidInjector",
        "port": "PortInjector",
        "signal": "SignalInjector",
        "weights": "WeightsInjector",
    }
    for kind in kinds:  # each decides firing itself: none falls back to the base class's "not implemented"
        assert type(INJECTORS[kind]).fired is not faults.Injector.fired, kind
        assert (
            FaultCatalogue.builtin().injector_for(next(f for f in BUILTIN_FAULTS if f.kind == kind)) is INJECTORS[kind]
        )


#: the built-in faults as the one table of the procedure listed them before each kind held its own (the order the
#: lanes run them, the coverage lists them and the report shows them)
TABLE = [
    ("wake-raise", "hook"), ("communicators-raise", "hook"), ("canary-perturb", "hook"),
    ("recovery-deadline", "hook"), ("cancel-sigint", "signal"), ("cancel-sigterm", "signal"),
    ("create-partial-sleep", "create"), ("identity-drift", "identity"), ("identity-env-removed", "identity"),
    ("identity-env-changed", "identity"), ("identity-host", "identity"), ("identity-kernel", "identity"),
    ("identity-vllm-version", "identity"), ("identity-gpu", "identity"), ("identity-criu", "identity"),
    ("pid-occupied", "pid"), ("port-in-use", "port"), ("manifest-field", "manifest"), ("image-truncated", "image"),
    ("weight-tampered", "weights"), ("kill-create", "kill"), ("term-create", "kill"), ("kill-restore", "kill"),
    ("term-restore", "kill"),
]  # fmt: skip


def test_the_kinds_modules_gather_into_the_table_they_were_in_its_order() -> None:
    assert [(f.id, f.kind) for f in BUILTIN_FAULTS] == TABLE
    assert FaultCatalogue.builtin().ids == [fault_id for fault_id, _ in TABLE]
    for fault in BUILTIN_FAULTS:  # each carries its kind's own parameters, or none where its kind takes none
        params = faults.BUILTIN_KINDS[fault.kind].params
        assert (fault.params is None) if params is None else isinstance(fault.params, params), fault.id


def test_a_fault_of_a_kind_with_parameters_is_refused_without_them() -> None:
    catalogue = FaultCatalogue.builtin()
    with pytest.raises(ValueError, match="needs its parameters as HookParams"):
        catalogue.add(Fault("x", "x", "hook", head=faults.Expect(1, False, None, None)))


def test_run_fault_has_no_branch_on_the_kind() -> None:
    """The sequence reads the kind once, through the table; what differs per kind is the injector's."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(faults.run_fault)))
    kinds = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in ("kind", "id", "hook_point")]
    assert kinds == [], [ast.unparse(n) for n in kinds]
    compared = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Compare) and "kind" in ast.unparse(n)]
    assert compared == []
    assert "injector.fired(" in ast.unparse(tree)
    assert not hasattr(faults, "_fired"), "one decision of firing: the injector's"


def test_the_judge_reads_the_kind_only_through_its_injector() -> None:
    tree = ast.parse(textwrap.dedent(inspect.getsource(faults.judge)))
    compared = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Compare) and "kind" in ast.unparse(n)]
    assert compared == []


def test_what_each_kind_changes_in_the_common_sequence() -> None:
    flags = {
        kind: (
            inj.watches_port,
            inj.judges_artifact,
            inj.undo_before_followup,
            inj.through_hook,
            inj.audits_after_sweep,
        )
        for kind, inj in INJECTORS.items()
    }
    assert [k for k, f in flags.items() if not f[0]] == ["port"]  # the injection holds the port itself
    # a create does not touch the artifact; a killed command may leave anything (a restore judges what it left);
    # the weight tamper restores an artifact of its own
    assert sorted(k for k, f in flags.items() if not f[1]) == ["create", "kill", "weights"]
    assert [k for k, f in flags.items() if f[4]] == ["kill"]  # what no engine could clean after a SIGKILL
    assert sorted(k for k, f in flags.items() if f[2]) == ["image", "manifest"]  # the harness's own corruption
    assert sorted(k for k, f in flags.items() if f[3]) == ["create", "hook", "signal"]


# ---- each kind's rule: fired from the harness's own evidence ----------------------------------------------
def test_hook_and_create_fire_on_the_probes_record_only() -> None:
    for kind in ("hook", "create"):
        assert _fired(kind, Observation(fired_records=[RECORD]))
        # an engine that failed exactly as the hook would make it, without the hook's record, did not fire
        assert not _fired(kind, Observation(exit_code=1, stderr_tail="RuntimeError: vsnap fault wake-raise"))


def test_signal_fires_when_the_hook_fired_and_the_signal_was_sent() -> None:
    records = Observation(fired_records=[RECORD])
    assert _fired("signal", records, signal=["SIGTERM to [41]"])
    assert not _fired("signal", records, signal=[])  # recovery ran, but no restore was found to signal
    assert not _fired("signal", Observation(), signal=["SIGTERM to [41]"])


def test_identity_fires_when_the_restore_saw_another_value_than_the_manifest() -> None:
    stderr = Observation(exit_code=1, stderr_tail="snapshot mismatch: environment")
    assert not _fired("identity", stderr, presented="VLLM_VSNAP_QUAL_DRIFT=1")  # the engine's words prove nothing
    assert _fired("identity", Observation(exit_code=0), held=True)  # even when the engine ignored it
    assert not _fired("identity", Observation(exit_code=1), held=False)


def test_pid_fires_only_when_held_at_restore_start_and_after() -> None:
    held = {"occupied": True, "held_at_restore": True, "held_after_restore": True}
    assert _fired("pid", **held)
    for key in held:
        assert not _fired("pid", **{**held, key: False}), key
        assert not _fired("pid", **{k: v for k, v in held.items() if k != key}), key


def test_port_fires_when_bound_as_the_restore_started() -> None:
    assert _fired("port", port=8000, bound_at_restore=True)
    assert not _fired("port", Observation(exit_code=1, stderr_tail="already in use"), port=8000, bound_at_restore=False)


def test_manifest_and_image_fire_on_the_change_they_made() -> None:
    assert _fired("manifest", manifest="schema_version=2") and not _fired("manifest")
    assert _fired("image", truncated="/vsnap/work/artifact/images/core-41.img") and not _fired("image", truncated="")


def test_a_command_that_died_before_a_hook_point_is_said_so_only_for_hooked_kinds() -> None:
    obs = Observation(exit_code=1, stderr_tail="Fatal Python error: Aborted")
    results: model.FaultResults = {"injected": {"occupied": False}}
    expect = faults.Expect(1, False, None, True)
    (hooked,) = faults.judge(FAULTS_BY_ID["wake-raise"], expect, obs, results, INJECTORS["hook"])
    (pid,) = faults.judge(FAULTS_BY_ID["pid-occupied"], expect, obs, results, INJECTORS["pid"])
    assert "before the hook point was reached: Fatal Python error: Aborted" in hooked
    assert pid == (
        "ineffective injection: fault pid-occupied never fired (the hook or condition did not take effect: "
        "occupied=False), so nothing was tested"
    )


def test_only_a_create_is_judged_on_its_target_directory() -> None:
    obs = Observation(exit_code=1, fired=True, stderr_tail="snapshot child exited before ready")
    ok: model.FaultResults = {"cleanup": {"ok": True}, "followup_restore": {"exit_code": 0, "canary_ok": True}}
    create = FAULTS_BY_ID["create-partial-sleep"]
    created = INJECTORS["create"]
    left = faults.judge(create, create.head, obs, {**ok, "injected": {"target_removed": False}}, created)
    assert left == ["the failed create left its target directory behind"]
    assert faults.judge(create, create.head, obs, {**ok, "injected": {"target_removed": True}}, created) == []
    wake = FAULTS_BY_ID["wake-raise"]
    head = faults.Expect(1, False, None, None)
    assert faults.judge(wake, head, obs, {**ok, "injected": {}}, INJECTORS["hook"]) == []


# ---- the sequence on a fake lane ---------------------------------------------------------------------------
@pytest.fixture
def lane(tmp_path: Path) -> Iterator[FakeLane[FaultState]]:
    """A fault lane (``tests/support/fake_lane.py``): its box the in-memory one, its faulted command's result chosen
    by the test (``on_restore``), its control directory a real one of this test's."""
    fake = fault_lane(tmp_path / "control")
    yield fake
    fake.box.remove()


def _rec() -> StepEvidence[Any]:
    """An open record of a fault step (its results a ``model.FaultResults``)."""
    return StepEvidence.of(procedure.FAULT_PREFIX + "a-fault")


def _run(
    lane: FakeLane[FaultState],
    fault: Fault,
    rec: StepEvidence[Any],
    catalogue: FaultCatalogue | None = None,
    judged: bool = True,
) -> Observation:
    catalogue = catalogue or FaultCatalogue.builtin()
    return faults.run_fault(lane, fault, rec, catalogue.injector_for(fault), judged)


class Recording(faults.Injector):
    """A new kind whose every hook is recorded in the lane's log; ``fired`` answers what the test says."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer

    def inject(self, lane, injected, env):  # type: ignore[no-untyped-def]
        lane.log.append("inject")
        injected["made"] = "yes"
        env["VSNAP_TEST_INJECTED"] = "1"

    def fired(self, obs, injected):  # type: ignore[no-untyped-def]
        assert obs.exit_code == 1 and injected == {"made": "yes"}  # decided after the action, from the evidence
        return self.answer

    def release(self, lane, injected):  # type: ignore[no-untyped-def]
        lane.log.append("release")


@pytest.mark.parametrize("answer", [True, False])
def test_an_added_kind_runs_the_same_sequence_and_its_fired_decides(lane: FakeLane[FaultState], answer: bool) -> None:
    fault = Fault("recorded", "a recorded injection", "recorded", head=faults.Expect(1, False, None, True))
    catalogue = FaultCatalogue.builtin()
    catalogue.add(fault, injector=Recording(answer))
    rec = _rec()
    obs = _run(lane, fault, rec, catalogue)
    assert obs.fired is answer and obs.exit_code == 1 and obs.artifact_unchanged is True
    steps = [e if isinstance(e, str) else e[0] for e in lane.log]
    reset = next(i for i, e in enumerate(lane.log) if e[0] == "copy" and e[3])  # the reset: the pristine copy back
    order = [reset, steps.index("inject"), steps.index("digest"), steps.index("command"), steps.index("release")]
    assert order == sorted(order), lane.log
    assert steps.index("release") < steps.index("audit") < steps.index("exec")  # released, audited, follow-up
    assert lane.log[steps.index("command")][2] == {"VSNAP_TEST_INJECTED": "1"}  # inject's env reached the action
    assert ("audit", [lane.ports["fault"]]) in lane.log
    assert rec.results["injected"] == {"made": "yes"}
    problems = faults.judge(fault, fault.expect("head"), obs, rec.results, catalogue.injector_for(fault))
    assert problems[0].startswith("ineffective injection") is not answer


def test_adding_an_injector_over_a_built_in_kind_is_refused() -> None:
    catalogue = FaultCatalogue.builtin()
    expect = faults.Expect(1, False, None, None)
    with pytest.raises(ValueError, match="kind 'hook' already has an injector"):
        catalogue.add(Fault("x", "x", "hook", head=expect, params=HookParams("wake-raise")), injector=Recording(True))
    with pytest.raises(ValueError, match="needs an injector"):
        catalogue.add(Fault("y", "y", "unknown", head=expect))
    catalogue.add(Fault("z", "z", "hook", head=expect, params=HookParams("wake-raise")))  # a built-in kind
    assert catalogue.injector_for(catalogue.faults[-1]) is INJECTORS["hook"]
    with pytest.raises(ValueError, match="no injector for kind 'other'.*pytest_vsnap_add_faults"):
        catalogue.injector_for(Fault("w", "w", "other", head=expect))


def _doc_example() -> str:
    text = (ROOT / "docs" / "adding-a-fault.md").read_text()
    return text.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.parametrize("touch_fails", [False, True])
def test_the_documented_conftest_example_works(lane: FakeLane[FaultState], touch_fails: bool) -> None:
    """``docs/adding-a-fault.md``'s example, executed as a conftest would and its hook called as the plugin calls
    it: its fault is in the catalogue, its injector runs in the one sequence, its own evidence decides whether it
    fired, and it is released."""
    conftest: dict[str, Any] = {"__name__": "conftest"}
    exec(compile(_doc_example(), "adding-a-fault.md", "exec"), conftest)
    catalogue = FaultCatalogue.builtin()
    conftest["pytest_vsnap_add_faults"](catalogue=catalogue)
    fault = next(f for f in catalogue.faults if f.id == "lock-held")
    assert "v1/head/fault:lock-held" in procedure.required([("v1", "head", False)], catalogue.ids)
    lock = "/vsnap/work/artifact/restore.lock"
    lane.box.fail_writes = touch_fails
    lane.on_restore = lambda lane: lane.log.append(("lock at restore", lane.box.exists(lock)))
    rec = _rec()
    obs = _run(lane, fault, rec, catalogue)
    assert obs.fired is not touch_fails and rec.results["injected"] == {"lock": not touch_fails}
    assert ("lock at restore", not touch_fails) in lane.log
    assert not lane.box.exists(lock), "released after the action"
    problems = faults.judge(fault, fault.expect("base"), obs, rec.results, catalogue.injector_for(fault))
    if touch_fails:
        assert problems == [
            "ineffective injection: fault lock-held never fired (the hook or condition did not take effect: "
            "lock=False), so nothing was tested"
        ]
    else:
        # judged as any fault: here only the fake lane's follow-up restore (never run: exit 1) is wrong
        assert problems == ["the artifact no longer restores after the failure: follow-up restore exit 1"]


def test_a_hook_fault_is_armed_at_its_point_during_the_restore_and_disarmed_after(lane: FakeLane[FaultState]) -> None:
    def hook_fires(lane: FakeLane[FaultState]) -> None:
        (lane.control_host / "faults" / "fired-wake-stall-7.json").write_text(json.dumps(RECORD))

    lane.on_restore = hook_fires
    obs = _run(lane, FAULTS_BY_ID["recovery-deadline"], _rec())
    assert lane.armed_at_restore == {"point": "wake-stall", "stall_s": 12.0}  # past the 2 s frozen deadline
    assert not (lane.control_host / "faults" / "armed.json").exists()
    assert obs.fired and obs.fired_records == [RECORD]
    lane.on_restore = None  # the next fault starts from no record of this one
    assert not _run(lane, FAULTS_BY_ID["wake-raise"], _rec()).fired
    assert lane.armed_at_restore == {"point": "wake-raise", "stall_s": None}


def test_a_port_fault_holds_the_port_at_restore_and_is_not_judged_on_http(lane: FakeLane[FaultState]) -> None:
    rec = _rec()
    obs = _run(lane, FAULTS_BY_ID["port-in-use"], rec)
    assert rec.results["injected"] == {"port": lane.ports["fault"], "bound_at_restore": True}
    assert obs.fired
    # the host connect poll saw our own listener: not an HTTP bind of the engine, and the port is not audited
    assert obs.http_bound is False and obs.http_bound_by == [] and ("audit", []) in lane.log


def test_the_env_drift_is_seen_in_the_restores_own_environment(
    lane: FakeLane[FaultState], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = lane.box.sh

    def prepare(script: str, timeout: float = 60.0) -> ExecResult:  # the drift's kit, made here for real
        if drifts.KIT not in script:
            return fake(script, timeout)
        lane.log.append(("sh", script))
        local = script.replace(WORK, str(lane.work))
        done = subprocess.run(["sh", "-c", local], capture_output=True, text=True, timeout=30)
        return ExecResult(["sh", "-c", script], done.returncode, done.stdout, done.stderr, 0.0, 0.0)

    monkeypatch.setattr(lane.box, "sh", prepare)
    rec = _rec()
    obs = _run(lane, FAULTS_BY_ID["identity-drift"], rec)
    injected = cast(IdentityInjected, rec.results["injected"])
    assert injected["seen_by_restore"] == "VLLM_VSNAP_QUAL_DRIFT=1" and injected["held"] is True, injected
    assert injected["field"] == "environment" and injected["manifest_value"] == "VLLM_VSNAP_QUAL_DRIFT unset"
    assert obs.fired and obs.exit_code == 1 and "snapshot mismatch" in obs.stderr_tail
    # a restore path that drops the drift (the variable never reached the process) did not fire, whatever the
    # engine printed
    real = lane.cli.command
    monkeypatch.setattr(lane.cli, "command", lambda rec, argv, key, env, name: real(rec, argv[2:], key, env, name))
    rec = _rec()
    obs = _run(lane, FAULTS_BY_ID["identity-drift"], rec)
    assert cast(IdentityInjected, rec.results["injected"])["held"] is False and not obs.fired
    assert "snapshot mismatch" in obs.stderr_tail


def test_a_drift_asked_about_is_prepared_once_for_its_first_attempt(
    lane: FakeLane[FaultState], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step asks whether the box can present the drift (preparing its kit); the first attempt uses that
    answer, a retry prepares again."""
    fake = lane.box.sh
    prepared: list[str] = []

    def prepare(script: str, timeout: float = 60.0) -> ExecResult:
        if drifts.KIT not in script:
            return fake(script, timeout)
        prepared.append(script)
        local = script.replace(WORK, str(lane.work))
        done = subprocess.run(["sh", "-c", local], capture_output=True, text=True, timeout=30)
        return ExecResult(["sh", "-c", script], done.returncode, done.stdout, done.stderr, 0.0, 0.0)

    monkeypatch.setattr(lane.box, "sh", prepare)
    fault = FAULTS_BY_ID["identity-drift"]
    injector = FaultCatalogue.builtin().injector_for(fault)
    assert injector.not_applicable(lane, fault) is None
    _run(lane, fault, _rec())
    assert len(prepared) == 1, prepared
    _run(lane, fault, _rec())  # another attempt: nothing was asked for it, so it prepares its own
    assert len(prepared) == 2, prepared


def test_a_create_fault_runs_a_create_and_leaves_the_artifact_unjudged(lane: FakeLane[FaultState]) -> None:
    def hook_fires(lane: FakeLane[FaultState]) -> None:
        (lane.control_host / "faults" / "fired-sleep-raise-7.json").write_text("{}")

    lane.on_restore = hook_fires
    rec = _rec()
    obs = _run(lane, FAULTS_BY_ID["create-partial-sleep"], rec)
    assert ("command", ["vllm", "snapshot", "create"], {}) in lane.log
    assert lane.armed_at_restore == {"point": "sleep-raise", "stall_s": None}
    assert rec.results["injected"] == {"target_removed": True} and obs.fired
    assert obs.artifact_unchanged is None and "watch_polls" not in rec.results


def test_the_injection_is_verified_as_the_restore_starts_before_the_watchers(
    lane: FakeLane[FaultState], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blocker that never accepts stops answering once the host connect poll filled its backlog: the port's
    (and the PID's) check in place comes before the watchers start, just before the command."""
    port = INJECTORS["port"]
    real_start, real_enter = port.at_restore_start, client.ListenerWatch.__enter__

    def at_restore_start(at: Attempt) -> None:
        lane.log.append("verified")
        real_start(at)

    def enter(watch: client.ListenerWatch) -> client.ListenerWatch:
        lane.log.append("watching")
        return real_enter(watch)

    monkeypatch.setattr(port, "at_restore_start", at_restore_start)
    monkeypatch.setattr(client.ListenerWatch, "__enter__", enter)
    _run(lane, FAULTS_BY_ID["port-in-use"], _rec())
    steps = [e if isinstance(e, str) else e[0] for e in lane.log]
    assert steps.index("verified") < steps.index("watching") < steps.index("command")


@pytest.mark.parametrize(("fault_id", "signame"), [("cancel-sigint", "INT"), ("cancel-sigterm", "TERM")])
def test_a_signal_fault_signals_this_lanes_restore_once_recovery_runs(
    lane: FakeLane[FaultState], monkeypatch: pytest.MonkeyPatch, fault_id: str, signame: str
) -> None:
    """The signaller thread runs while the restore command runs: once the hook's record is there, it signals the
    restore command (the child of its ``timeout`` wrapper, looked up in this lane only); the sent signal is the
    evidence, with the record."""
    wrapper = {"pid": 4241, "ppid": 1, "args": f"timeout 30 vllm snapshot restore {ARTIFACT} --port 1"}
    restore = {"pid": 4242, "ppid": 4241, "args": f"vllm snapshot restore {ARTIFACT} --port 1"}
    listing: list[dict[str, Any]] = []
    monkeypatch.setattr(lane.box, "processes", lambda: list(listing))
    signalled = threading.Event()
    real_signal = lane.box.signal

    def signal(pids: list[int], signame: str, *, strict: bool = False) -> bool:
        if 4242 in pids:
            assert strict, "the signal fault says it was sent only once every target got it"
            signalled.set()
        return real_signal(pids, signame, strict=strict)

    monkeypatch.setattr(lane.box, "signal", signal)

    def restore_until_signalled(lane: FakeLane[FaultState]) -> None:
        listing[:] = [wrapper, restore]
        (lane.control_host / "faults" / "fired-wake-stall-7.json").write_text(json.dumps(RECORD))
        assert signalled.wait(10), "the restore was never signalled"
        listing.clear()  # the restore died of it

    lane.on_restore = restore_until_signalled
    rec = _rec()
    obs = _run(lane, FAULTS_BY_ID[fault_id], rec)
    assert ("signal", [4242], signame) in lane.log
    assert rec.results["injected"] == {"signal": [f"SIG{signame} to [4242]"]} and obs.fired
    assert lane.armed_at_restore == {"point": "wake-stall", "stall_s": 12.0}


def test_after_a_port_fault_the_blocker_is_gone_before_the_follow_up_and_not_called_the_engines(
    lane: FakeLane[FaultState], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our own blocker is killed after the audit and the port is free again before the follow-up restore binds
    it (seen in .ci/run: "address already in use" on a follow-up); ``killed_by_harness`` names the engine's
    leftovers only, never the harness's own helpers."""
    box = lane.box
    closing: list[socket.socket] = []
    real_signal = box.signal

    def signal(pids: list[int], signame: str, *, strict: bool = False) -> bool:
        held = [pid for pid in pids if pid in box.blockers]
        if signame == "KILL" and held:
            for pid in held:  # gone from the process listing at once; its socket closes later
                box.rows.pop(pid, None)
                closing.append(box.blockers[pid])

                def close(pid: int = pid, sock: socket.socket = box.blockers[pid]) -> None:
                    with box.lock:
                        box.blockers.pop(pid, None)
                        sock.close()

                threading.Timer(0.5, close).start()
            pids = [pid for pid in pids if pid not in held]
        return real_signal(pids, signame, strict=strict)

    monkeypatch.setattr(box, "signal", signal)
    real_exec = box.exec
    free_at_followup: list[bool] = []

    def exec_(argv: list[str], timeout: float, **kw: Any) -> ExecResult:
        free_at_followup.append(all(sock.fileno() == -1 for sock in closing))
        return real_exec(argv, timeout, **kw)

    monkeypatch.setattr(box, "exec", exec_)
    lane.configure(cleanup_grace=2.0)
    rec = _rec()
    _run(lane, FAULTS_BY_ID["port-in-use"], rec)
    assert free_at_followup and all(free_at_followup), "the follow-up restore met the blocker's port"
    assert "killed_by_harness" not in rec.results["cleanup"], rec.results["cleanup"]


@pytest.mark.parametrize("judged", [True, False])
def test_a_leftover_is_waited_for_through_the_grace_only_where_the_cleanup_is_judged(
    lane: FakeLane[FaultState], monkeypatch: pytest.MonkeyPatch, judged: bool
) -> None:
    """Issue 27: where this arm's expectation records vLLM's cleanup without judging it (the released
    ``cancel-sigterm``), no outcome of the grace could change the verdict: the leftover is looked at once, as the
    command exits, and swept. Where it is judged, the grace is given in full to a process that stays."""
    lingering = 2**22 + 9
    killed: list[str] = []
    started: list[bool] = []  # the faulted command leaves it behind
    lane.on_restore = lambda lane: started.append(True)
    row = {"pid": lingering, "args": "python3 x"}
    monkeypatch.setattr(lane.box, "processes", lambda: [row] if started and not killed else [])
    real_signal = lane.box.signal

    def signal(pids: list[int], signame: str, *, strict: bool = False) -> bool:
        if signame == "KILL" and lingering in pids:
            killed.append(f"kill -{signame} {pids}")
        return real_signal(pids, signame, strict=strict)

    monkeypatch.setattr(lane.box, "signal", signal)
    lane.configure(cleanup_grace=1.0)
    rec = _rec()
    _run(lane, FAULTS_BY_ID["wake-raise"], rec, judged=judged)
    audit = rec.results["cleanup"]
    assert audit["leftover_processes"] == [f"{lingering} python3 x"] and killed, audit  # recorded, then swept
    assert audit["grace_s"] == (1.0 if judged else 0.0)
    spent = rec.results["phases"]["audit"]
    assert (spent >= 1.0) if judged else (spent < 0.5), spent


def test_the_sequence_records_where_its_time_went_phase_by_phase(lane: FakeLane[FaultState]) -> None:
    """``results.phases``: the harness's own time is read from the run's evidence (``bench/run_figures.py``)."""
    slow = 0.2

    def slow_restore(lane: FakeLane[FaultState]) -> None:
        time.sleep(slow)

    lane.on_restore = slow_restore
    rec = _rec()
    _run(lane, FAULTS_BY_ID["wake-raise"], rec)
    phases = rec.results["phases"]
    assert list(phases) == [
        "captured-id wait before", "reset", "inject", "command", "observe", "release", "audit",
        "captured-id wait after", "after sweep", "follow-up restore",
    ]  # fmt: skip
    assert all(v >= 0 for v in phases.values()) and phases["command"] >= slow
    assert max(phases, key=phases.__getitem__) == "command"


def _series(series: run_figures.Series | None) -> run_figures.Series:
    assert series is not None, "a series the run has steps for"
    return series


def test_the_bench_reads_the_harness_time_per_step_and_phase_from_the_results() -> None:
    figures = run_figures
    step = {
        "outcome": "passed",
        "results": {"phases": {"command": 1.0, "audit": 0.5}, "phases_engine": {"command": 0.75}},
    }
    results = {  # the fields the bench reads of a results.json
        "verdict": {"status": "pass"},
        "run": {"started": "2026-12-02T00:00:00+00:00", "ended": "2026-12-02T00:00:20+00:00"},
        "steps": [
            {**step, "step": "fault:wake-raise", "seconds": 4.0, "engine_seconds": 1.0},
            {**step, "step": "fault:wake-raise", "seconds": 6.0, "engine_seconds": 1.0},
            {
                "step": "ordinary",
                "outcome": "passed",
                "seconds": 5.0,
                "engine_seconds": 4.5,
                "results": {"ready_seconds": 4.0},
            },
            {
                "step": "restore-1",
                "outcome": "passed",
                "seconds": 3.0,
                "engine_seconds": 1.0,
                "results": {"ready_seconds": 0.5, "soak": {"idle_s": 1.5}},
            },
        ],
    }
    found = figures.figures(cast(model.Results, results))
    assert found["harness_by_step"]["fault:wake-raise"] == {
        "n": 2, "engine_s": 2.0, "steps_s": 10.0, "harness_median_s": 4.0, "idle_s": 0.0,
    }  # fmt: skip
    assert _series(found["fault_harness_s"])["median"] == 4.0
    # a phase's harness time is its time less the engine's share of it
    phases = found["fault_phases"]
    assert _series(phases["command"])["total"] == 0.5 and _series(phases["audit"])["total"] == 1.0
    assert (found["engine_s"], found["steps_s"], found["wall_s"]) == (7.5, 18.0, 20.0)
    assert found["idle_s"] == 1.5 and found["harness_by_step"]["restore-1"]["idle_s"] == 1.5


def _kept(lane: FakeLane[FaultState], pristine: str) -> Any:
    """The lane's kept artifact files (``artifact_files.ArtifactFiles``) as far as the sequence reads them: the
    pristine copy's digest, and a digest of the artifact now ("same"), recorded in the lane's log."""

    def digest(box: object) -> str:
        lane.log.append("digest")
        return "same"

    return SimpleNamespace(
        artifact=ARTIFACT, pristine_digest=pristine, digest=digest, reset=lambda box: None,
        last_reset="0 entries put back or removed",
    )  # fmt: skip


def test_the_digest_before_the_action_is_the_pristine_copys_unless_the_injection_changes_the_artifact(
    lane: FakeLane[FaultState],
) -> None:
    """Hashing the artifact is the costliest probe on real vLLM (2.4 GB): the reset puts the pristine copy back, so
    its digest, taken once, stands for the artifact before a fault whose injection leaves it alone."""
    lane.state.artifact_files = _kept(lane, "same")
    _run(lane, FAULTS_BY_ID["wake-raise"], _rec())
    steps = [e if isinstance(e, str) else e[0] for e in lane.log]
    assert steps.count("digest") == 1 and steps.index("command") < steps.index("digest"), steps
    lane.log.clear()
    # the pristine copy's digest differs from the artifact's now: judged
    lane.state.artifact_files = _kept(lane, "other")
    obs = _run(lane, FAULTS_BY_ID["wake-raise"], _rec())
    assert obs.artifact_unchanged is False


def test_a_kind_that_changes_the_artifact_digests_it_after_its_injection(
    lane: FakeLane[FaultState], monkeypatch: pytest.MonkeyPatch
) -> None:
    lane.state.artifact_files = _kept(lane, "same")
    monkeypatch.setattr(INJECTORS["image"], "begin", lambda at: at.lane.log.append("corrupted"))
    _run(lane, FAULTS_BY_ID["image-truncated"], _rec())
    steps = [e if isinstance(e, str) else e[0] for e in lane.log]
    assert steps.index("corrupted") < steps.index("digest") < steps.index("command"), steps


def test_each_phase_records_its_time_and_the_engines_share_of_it() -> None:
    """A phase's harness time is its time less what it spent waiting on the engine (summed over a retry)."""
    engine = {"t": 0.0}
    wall: dict[str, float] = {}
    spent: dict[str, float] = {}
    phase = faults.Phases(wall, spent, lambda: engine["t"])
    for _ in range(2):
        with phase("command"):
            engine["t"] += 1.5  # the engine's command, as the recorder accounts it
            time.sleep(0.02)
    with phase("audit"):
        time.sleep(0.01)
    assert spent == {"command": 3.0, "audit": 0.0}
    assert wall["command"] >= 0.04 and wall["audit"] >= 0.01


def test_the_captured_ids_are_looked_at_once_between_the_fault_and_its_follow_up(
    lane: FakeLane[FaultState], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait after the fault found every captured ID free and nothing started since: the follow-up restore does
    not wait again; where IDs were still held, it does."""
    looks: list[set[int]] = []
    held: list[str] = []

    def tasks_held(ids: set[int]) -> list[str]:
        looks.append(set(ids))
        return list(held)

    monkeypatch.setattr(lane.box, "tasks_held", tasks_held)
    lane.state.manifest["process_tree"] = [4242]
    _run(lane, FAULTS_BY_ID["wake-raise"], _rec())
    assert len(looks) == 2, looks  # before the fault, after it; none of its own in the follow-up
    held.append("4242 python R 4242 1")
    lane.config.timeouts["stop"] = 0.05
    rec = _rec()
    _run(lane, FAULTS_BY_ID["wake-raise"], rec)
    assert rec.results["followup_restore"]["captured_ids_wait"]["still_held"] == held  # it looked again


def test_a_kill_drawn_before_the_command_is_listed_goes_the_moment_it_is_and_never_to_the_wrapper(
    lane: FakeLane[FaultState], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29: an offset drawn near 0 comes before the exec has spawned the command; the kill then goes as
    soon as it is listed (a chaos run once called such a command gone and judged an ineffective injection). The
    signal goes to the command's tree, never to the harness's ``timeout`` wrapper; the seed, the draw and the
    phase reached are the evidence; the cleanup is audited once more after the harness's sweep."""
    wrapper = {"pid": 4241, "ppid": 1, "sid": 4241, "args": f"timeout 30 vllm snapshot restore {ARTIFACT} --x"}
    restore = {"pid": 4242, "ppid": 4241, "sid": 4241, "args": f"python vllm snapshot restore {ARTIFACT} --x"}
    listing: list[dict[str, Any]] = []
    monkeypatch.setattr(lane.box, "processes", lambda: list(listing))
    signalled: list[str] = []
    real_signal = lane.box.signal

    def signal(pids: list[int], signame: str, *, strict: bool = False) -> bool:
        signalled.append(f"kill -{signame} {' '.join(map(str, pids))}")
        return real_signal(pids, signame, strict=strict)

    monkeypatch.setattr(lane.box, "signal", signal)

    def restore_listed_late(lane: FakeLane[FaultState]) -> None:
        time.sleep(0.3)  # the draw (at most 0.05 s) is long past
        listing[:] = [wrapper, restore]
        deadline = time.monotonic() + 5
        while not signalled and time.monotonic() < deadline:
            time.sleep(0.01)
        listing.clear()

    lane.on_restore = restore_listed_late
    lane.state.timings["restore"] = 0.05
    lane.configure(kill_seed=5)
    rec = _rec()
    obs = _run(lane, FAULTS_BY_ID["kill-restore"], rec)
    injected = cast(KillInjected, rec.results["injected"])
    assert signalled[0] == "kill -KILL 4242" and not any("4241" in s for s in signalled), signalled
    assert obs.fired and injected["sent"] and "missed" not in injected, injected
    assert injected["seed"] == 5 and injected["offset_s"] <= 0.05 and injected["sent_after_s"] >= 0.3
    assert injected["phase"] == "before criu restore"
    assert "after_sweep" in rec.results["cleanup"]


def test_what_a_killed_command_left_is_measured_through_the_grace_even_where_vllms_cleanup_is_not_judged(
    lane: FakeLane[FaultState], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29: the chaos figures count what vLLM left after a kill; a tree still dying as the command ended is
    not a leftover, so the grace (a maximum) is given even where vLLM's own cleanup is not judged (SIGKILL)."""
    lingering = 2**22 + 11
    started: list[bool] = []
    lane.on_restore = lambda lane: started.append(True)
    monkeypatch.setattr(
        lane.box,
        "processes",
        lambda: [{"pid": lingering, "ppid": 1, "sid": lingering, "args": "python3 dying"}] if started else [],
    )
    lane.configure(cleanup_grace=0.5)
    lane.configure(kill_seed=1)
    lane.state.timings["restore"] = 0.01
    rec = _rec()
    _run(lane, FAULTS_BY_ID["kill-restore"], rec, judged=False)
    audit = rec.results["cleanup"]
    assert audit["grace_s"] == 0.5 and audit["judged"] is False, audit


def test_a_kills_draw_is_the_steps_attempt_so_the_same_fault_replays_the_same_moment(
    lane: FakeLane[FaultState],
) -> None:
    """Issue 29: the draw is seeded by the seed, lane, fault and the step's attempt (the retry after an
    ineffective first is attempt 2), never by how often the injector has run before: a fault run again replays."""
    lane.state.timings["restore"] = 0.05
    lane.configure(kill_seed=9)
    injector = FaultCatalogue.builtin().injector_for(FAULTS_BY_ID["kill-restore"])
    drawn = []
    for attempt in (1, 1, 2):
        rec = _rec()
        faults.run_fault(lane, FAULTS_BY_ID["kill-restore"], rec, injector, attempt=attempt)
        injected = cast(KillInjected, rec.results["injected"])
        drawn.append((injected["attempt"], injected["offset_s"]))
    assert drawn[0] == drawn[1] and drawn[2][0] == 2 and drawn[2][1] != drawn[0][1], drawn


def test_what_a_faults_commands_leave_in_dev_shm_is_named_in_its_audit_and_removed_with_the_lane(
    lane: FakeLane[FaultState],
) -> None:
    """Issue 44: a fault's commands (here the faulted restore and its follow-up) leave a segment and a semaphore no
    process holds: named in the fault's cleanup audit and the lane's to remove; one still held, one the lane owns
    already (an artifact of it names it) and CRIU's link remaps are not."""
    lane.state.shm_owned.add("/dev/shm/psm_needed")
    lane.shm_listed = [{"old"}, {"old", "psm_needed", "psm_left", "sem.mp-1", "held", "link_remap.7"}]
    lane.shm_held = {"held"}
    fault = Fault("recorded", "a recorded injection", "recorded", head=faults.Expect(1, False, None, True))
    catalogue = FaultCatalogue.builtin()
    catalogue.add(fault, injector=Recording(True))
    rec = _rec()
    _run(lane, fault, rec, catalogue)
    assert rec.results["cleanup"]["shm_left_by_fault"] == ["/dev/shm/psm_left", "/dev/shm/sem.mp-1"]
    assert {"/dev/shm/psm_left", "/dev/shm/sem.mp-1"} <= lane.state.shm_owned  # removed with the lane
    # a box that cannot see every holder names them as not judged and leaves them be
    lane.shm_listed, lane.sees_every_holder = [set(), {"psm_other"}], False
    _run(lane, fault, rec := _rec(), catalogue)
    assert rec.results["cleanup"]["shm_left_not_judged"] == ["/dev/shm/psm_other"]
    assert "/dev/shm/psm_other" not in lane.state.shm_owned
