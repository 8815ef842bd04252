"""The expectation table decides pass or fail from observations; these are pure-logic checks of it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pytest

from vsnap_qual import faults, model, procedure
from vsnap_qual.faults import BUILTIN_FAULTS, BUILTIN_INJECTORS, FAULTS_BY_ID, Fault, FaultCatalogue, Observation
from vsnap_qual.faults.lane import FaultLane

if TYPE_CHECKING:
    from typing_extensions import Unpack

GOOD_FOLLOWUP: model.FollowupRestore = {"exit_code": 0, "canary_ok": True}
CLEAN: model.CleanupAudit = {"ok": True}


def _results(**extra: Unpack[model.FaultResults]) -> model.FaultResults:
    return {"cleanup": CLEAN, "followup_restore": GOOD_FOLLOWUP, **extra}  # extra replaces what it names


def _judge(fault: Fault, expect: procedure.Expect, obs: Observation, results: model.FaultResults) -> list[str]:
    """The judge with the fault's kind's injector (its kind's rules), as ``fault_step`` calls it."""
    return faults.judge(fault, expect, obs, results, BUILTIN_INJECTORS[fault.kind])


def test_every_fault_has_an_expectation_for_both_behaviours() -> None:
    for fault in BUILTIN_FAULTS:
        assert isinstance(fault.expect("head"), faults.Expect) and isinstance(fault.expect("base"), faults.Expect)
    assert len(FAULTS_BY_ID) >= 10


def test_head_recovery_failure_passes_when_observed_as_the_contract_says() -> None:
    fault = FAULTS_BY_ID["wake-raise"]
    obs = Observation(
        exit_code=1, error_json={"phase": "recovery: restore memory"}, phase="recovery: restore memory", fired=True
    )
    assert _judge(fault, FAULTS_BY_ID["wake-raise"].expect("head"), obs, _results()) == []


def test_a_fault_that_never_fired_is_an_ineffective_injection() -> None:
    fault = FAULTS_BY_ID["canary-perturb"]
    obs = Observation(exit_code=0, fired=False)
    problems = _judge(fault, FAULTS_BY_ID["canary-perturb"].expect("head"), obs, _results())
    assert len(problems) == 1 and "ineffective injection" in problems[0]  # and nothing else is claimed


def test_firing_is_decided_from_the_harness_evidence_at_the_action() -> None:
    def fired(fault_id: str, obs: Observation, injected: Mapping[str, Any]) -> bool:
        return FaultCatalogue.builtin().injector_for(FAULTS_BY_ID[fault_id]).fired(obs, injected)

    stderr = Observation(exit_code=1, stderr_tail="snapshot mismatch: environment")
    assert not fired("identity-drift", stderr, {"presented": "VLLM_VSNAP_QUAL_DRIFT=1"})  # stderr proves nothing
    assert fired("identity-drift", Observation(exit_code=0), {"held": True})  # even if the engine ignored it
    held = {"occupied": True, "held_at_restore": True, "held_after_restore": True}
    assert fired("pid-occupied", Observation(), held)
    assert not fired("pid-occupied", Observation(), {**held, "held_at_restore": False})
    assert not fired("port-in-use", Observation(), {"bound_at_restore": False})


def test_an_engine_that_accepts_the_drift_is_an_engine_failure_not_an_ineffective_injection() -> None:
    fault = FAULTS_BY_ID["identity-drift"]
    obs = Observation(exit_code=0, fired=True, artifact_unchanged=True)
    text = " | ".join(_judge(fault, FAULTS_BY_ID["identity-drift"].expect("head"), obs, _results()))
    assert "ineffective" not in text and "snapshot mismatch" in text
    assert "the restore succeeded (exit 0) although this fault must make it fail (exit 1)" in text


@pytest.mark.parametrize(
    ("said", "problem"),
    [
        ("snapshot mismatch: host_id", None),
        ("SnapshotCompatibilityError: snapshot mismatch: host_id", None),
        ("snapshot mismatch: environment", "names environment, not the drifted host_id"),
        ("snapshot mismatch: driver_version, host_id", "names driver_version besides the drifted host_id"),
        ("snapshot mismatch:", "names no field, not the drifted host_id"),
    ],
)
def test_an_identity_refusal_must_name_the_drifted_field_and_only_it(said: str, problem: str | None) -> None:
    fault = FAULTS_BY_ID["identity-host"]
    obs = Observation(exit_code=1, fired=True, artifact_unchanged=True, stderr_tail=f"Traceback\n{said}\n")
    results: model.FaultResults = {**_results(), "injected": {"field": "host_id", "held": True}}
    problems = _judge(fault, fault.expect("head"), obs, results)
    assert problems == ([] if problem is None else [next(p for p in problems if problem in p)]), problems


def test_a_restore_that_unexpectedly_succeeded_says_nothing_about_a_failed_restore() -> None:
    fault = FAULTS_BY_ID["canary-perturb"]
    obs = Observation(exit_code=0, fired=True, http_bound=True, http_bound_by=["host connect poll"])
    results: model.FaultResults = {
        "cleanup": {"ok": False, "leftover_processes": ["42 python3"]},
        "followup_restore": {"exit_code": 1, "canary_ok": False},
    }
    text = " | ".join(_judge(fault, fault.expect("head"), obs, results))
    assert "the restore succeeded (exit 0) although this fault must make it fail" in text
    assert "fail" not in text.replace("must make it fail", "")  # no clause about "the failure" or "the failed restore"
    assert "error.json missing" not in text
    assert "cleanup incomplete after the restore was stopped" in text
    assert "no longer restores after the fault" in text


def test_http_bound_before_the_check_fails_head_and_says_so() -> None:
    fault = FAULTS_BY_ID["canary-perturb"]
    obs = Observation(
        exit_code=1,
        http_bound=True,
        http_bound_by=["host connect poll"],
        fired=True,
        stderr_tail="snapshot oracle mismatch",
    )
    head = _judge(fault, FAULTS_BY_ID["canary-perturb"].expect("head"), obs, _results())
    assert any("HTTP was bound" in p for p in head)
    assert any("error.json missing" in p for p in head)
    assert _judge(fault, FAULTS_BY_ID["canary-perturb"].expect("base"), obs, _results()) == []


def test_mutation_leftovers_and_broken_followup_are_named() -> None:
    fault = FAULTS_BY_ID["identity-drift"]
    obs = Observation(exit_code=1, fired=True, artifact_unchanged=False, stderr_tail="snapshot mismatch: environment")
    results: model.FaultResults = {
        "cleanup": {"ok": False, "leftover_processes": ["42 python3"]},
        "followup_restore": {"exit_code": 1, "canary_ok": False},
    }
    problems = _judge(fault, FAULTS_BY_ID["identity-drift"].expect("head"), obs, results)
    text = " | ".join(problems)
    assert "mutated" in text and "cleanup incomplete" in text and "no longer restores" in text


def test_expectations_are_written_once_with_the_base_only_where_it_differs() -> None:
    same = [f for f in BUILTIN_FAULTS if f.base is None]
    assert same and all(f.expect("base") is f.head for f in same)
    differ = [f for f in BUILTIN_FAULTS if f.base is not None]
    assert differ and all(f.expect("base") == f.base != f.head for f in differ)


def test_a_conftest_can_add_a_fault_point_with_its_own_injector() -> None:
    class HoldLock(faults.Injector):
        def inject(self, lane: FaultLane, injected: dict[str, object], env: dict[str, str]) -> None:
            injected["lock"] = "held"

        def fired(self, obs: Observation, injected: Mapping[str, Any]) -> bool:
            return injected.get("lock") == "held"

    catalogue = FaultCatalogue.builtin()
    fault = Fault("lock-held", "a lock file is held at restore", "lock", head=faults.Expect(1, False, None, True))
    with pytest.raises(ValueError, match="needs an injector"):
        catalogue.add(fault)
    catalogue.add(fault, injector=HoldLock())
    assert catalogue.faults[-1] is fault and procedure.step("fault:lock-held").requires == (procedure.FAULT_ARTIFACT,)
    assert "v1/head/fault:lock-held" in procedure.required([("v1", "head", False)], catalogue.ids)
    assert fault.expect("base") == fault.expect("head")
    injector = catalogue.injector_for(fault)
    assert isinstance(injector, HoldLock)  # the added kind's own injector, in the session's catalogue
    assert injector.fired(Observation(), {"lock": "held"}) and not injector.fired(Observation(), {})
    assert "lock-held" not in FaultCatalogue.builtin().ids, "the built-in table is not changed by an addition"


def test_a_create_that_died_before_the_hook_point_says_why_not_only_that_nothing_fired() -> None:
    """Seen on the H200: the faulted create's engine core died at start, so the hook never ran; the finding quotes
    the library's own fatal line (the hook is not blamed, the engine is not judged)."""
    fault = FAULTS_BY_ID["create-partial-sleep"]
    mkl = "Intel oneMKL FATAL ERROR: Cannot load /opt/torch/lib/libtorch_cpu.so."
    obs = Observation(
        exit_code=1,
        fired=False,
        stderr_tail=f"(APIServer pid=1) INFO non-default args\n{mkl}\nTraceback (most recent call last):\n",
        error_lines=["RuntimeError: Engine core initialization failed."],
    )
    problems = _judge(fault, fault.expect("base"), obs, _results(injected={"target_removed": True}))
    assert problems == [
        f"ineffective injection: fault create-partial-sleep never fired (exit 1 before the hook point was reached: "
        f"{mkl}), so nothing was tested"
    ]
    obs.stderr_tail = "Traceback (most recent call last):\n"  # no fatal line: the last exception line
    (problem,) = _judge(fault, fault.expect("base"), obs, _results())
    assert "before the hook point was reached: RuntimeError: Engine core initialization failed." in problem


def test_a_follow_up_that_does_not_restore_is_told_in_words_with_the_reason() -> None:
    fault = FAULTS_BY_ID["wake-raise"]
    obs = Observation(
        exit_code=1, error_json={"phase": "recovery: restore memory"}, phase="recovery: restore memory", fired=True
    )
    follow: model.FollowupRestore = {
        "exit_code": 1,
        "canary_ok": False,
        "stderr_tail": "Traceback\nvllm.snapshot.runtime.SnapshotRestoreError: captured PID is already occupied: 5",
        "criu_reason": ["(00.1) Error (criu/cr-restore.c:1) Can't fork for 5: File exists", "Restoring FAILED."],
    }
    (problem,) = _judge(fault, FAULTS_BY_ID["wake-raise"].expect("head"), obs, _results(followup_restore=follow))
    assert problem == (
        "the artifact no longer restores after the failure: follow-up restore exit 1; "
        "(00.1) Error (criu/cr-restore.c:1) Can't fork for 5: File exists"
    )
    del follow["criu_reason"]
    (problem,) = _judge(fault, FAULTS_BY_ID["wake-raise"].expect("head"), obs, _results(followup_restore=follow))
    assert problem.endswith("exit 1; vllm.snapshot.runtime.SnapshotRestoreError: captured PID is already occupied: 5")
    wrong: model.FollowupRestore = {"exit_code": 0, "canary_ok": False}
    (problem,) = _judge(fault, FAULTS_BY_ID["wake-raise"].expect("head"), obs, _results(followup_restore=wrong))
    assert problem.endswith("follow-up restore exit 0; canary differs from the oracle") and "{" not in problem


def test_a_follow_up_that_met_a_consumed_artifact_is_left_to_the_one_finding() -> None:
    """The artifact's outside files were gone before the follow-up (the faulted restore's own exit unlinked
    them): not this fault's failure; the rest of the fault is judged as ever."""
    fault = FAULTS_BY_ID["wake-raise"]
    obs = Observation(exit_code=1, fired=True)
    follow: model.FollowupRestore = {
        "exit_code": 1,
        "canary_ok": False,
        "consumed": ["/dev/shm/psm_302eb8ff"],
        "criu_reason": ["x"],
    }
    assert _judge(fault, fault.expect("base"), obs, _results(followup_restore=follow)) == []
    del follow["consumed"]
    (problem,) = _judge(fault, fault.expect("base"), obs, _results(followup_restore=follow))
    assert problem.startswith("the artifact no longer restores after the failure")
    obs.exit_code = 0  # a mismatch of the fault's own is still found
    assert _judge(fault, fault.expect("base"), obs, _results(followup_restore={**follow, "consumed": ["p"]}))
