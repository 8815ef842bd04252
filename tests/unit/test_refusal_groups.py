"""Refusals proved restorable once per group (``vsnap_qual/faults/group.py``, issue 45 item 5): which faults form a
group, and the bisection that names the fault that broke the group's restore. Pure."""

from __future__ import annotations

from collections.abc import Callable

from vsnap_qual.faults import BUILTIN_FAULTS, BUILTIN_INJECTORS, group
from vsnap_qual.procedure import Expect


def builtin_refusals(behaviour: str) -> list[str]:
    return [
        f.id for f in BUILTIN_FAULTS if group.refusal(f.expect(behaviour), BUILTIN_INJECTORS[f.kind].judges_artifact)
    ]


def test_the_refusals_are_the_faults_judged_to_leave_the_artifact_byte_identical() -> None:
    identity = [f.id for f in BUILTIN_FAULTS if f.kind == "identity"]
    assert len(identity) == 8
    # the port is refused only once CRIU restored the tree (vLLM's release), so it is no refusal here
    assert builtin_refusals("head") == [*identity, "pid-occupied", "manifest-field"]
    assert builtin_refusals("base") == builtin_refusals("head")
    assert not group.refusal(Expect(1, False, None, None), True), "the artifact is not judged unchanged"
    assert not group.refusal(Expect(1, False, None, True, followup_restore=False), True), "no follow-up judged"
    assert not group.refusal(Expect(1, False, None, True), False), "a kind that does not compare the artifact"
    assert not group.refusal(Expect(0, True, None, True), True), "a command that must succeed"


def test_a_group_is_a_run_of_two_or_more_refusals_in_the_lanes_order() -> None:
    order = [f.id for f in BUILTIN_FAULTS]
    refusals = set(builtin_refusals("head"))
    first = group.group_of("identity-host", order, refusals.__contains__)
    assert first == (*[f.id for f in BUILTIN_FAULTS if f.kind == "identity"], "pid-occupied")
    # port-in-use runs between pid-occupied and manifest-field: the bad manifest is a refusal alone
    assert group.group_of("manifest-field", order, refusals.__contains__) == ()
    assert group.group_of("port-in-use", order, refusals.__contains__) == ()
    # the run's selection makes the order: a manifest after the identity drifts joins their group
    chosen = ["wake-raise", "identity-drift", "identity-kernel", "manifest-field", "kill-create"]
    assert group.group_of("manifest-field", chosen, refusals.__contains__) == (
        "identity-drift", "identity-kernel", "manifest-field"
    )  # fmt: skip
    assert group.group_of("wake-raise", chosen, refusals.__contains__) == ()
    assert group.group_of("identity-drift", ["identity-drift"], refusals.__contains__) == (), "alone: no group"
    assert group.group_of("identity-drift", [], refusals.__contains__) == (), "not in the lane's order"


def test_refused_means_a_non_zero_exit_with_the_artifact_seen_unchanged() -> None:
    assert group.refused(1, True)
    assert not group.refused(0, True) and not group.refused(None, True)
    assert not group.refused(1, False) and not group.refused(1, None)


def restores_unless(
    broken: Callable[[tuple[str, ...]], bool],
) -> tuple[Callable[[tuple[str, ...]], bool], list[tuple[str, ...]]]:
    seen: list[tuple[str, ...]] = []

    def restores(subset: tuple[str, ...]) -> bool:
        seen.append(subset)
        return not broken(subset)

    return restores, seen


MEMBERS = ("a", "b", "c", "d", "e", "f", "g", "h", "i")


def test_the_bisection_names_the_one_fault_that_breaks_the_restore_wherever_it_is() -> None:
    for culprit in MEMBERS:

        def breaks(subset: tuple[str, ...], c: str = culprit) -> bool:
            return c in subset

        restores, seen = restores_unless(breaks)
        found = group.bisect(MEMBERS, restores)
        assert found.broke == culprit, (culprit, seen)
        assert found.words == f"{culprit} alone breaks the restore after it"
        assert seen[0] == (), "first with none of them: an artifact that restores at all"
        assert len(seen) <= 6, seen  # 1 + ceil(log2(9)) + 1 at most
        assert [p.restored for p in found.probes] == [culprit not in s for s in seen]


def test_an_artifact_that_does_not_restore_at_all_is_no_faults_doing() -> None:
    restores, seen = restores_unless(lambda subset: True)
    found = group.bisect(MEMBERS, restores)
    assert (found.broke, seen) == (None, [()])
    assert found.words == "the artifact does not restore even with none of them run first"


def test_faults_that_break_the_restore_only_together_are_said_as_such() -> None:
    restores, _ = restores_unless(lambda subset: "b" in subset and "h" in subset)
    found = group.bisect(MEMBERS, restores)
    assert found.broke is None
    assert found.words == f"no one of {', '.join(MEMBERS)} alone breaks the restore: they do together"


def test_a_deferred_refusal_is_judged_without_a_follow_up_of_its_own_and_no_other_fault_is() -> None:
    from vsnap_qual.faults import FAULTS_BY_ID, Observation, judge
    from vsnap_qual.model import CleanupAudit, FaultResults, GroupFollowup

    fault = FAULTS_BY_ID["identity-host"]
    obs = Observation(exit_code=1, fired=True, artifact_unchanged=True, stderr_tail=fault.head.message or "")
    injector = BUILTIN_INJECTORS[fault.kind]
    deferred = FaultResults(
        cleanup=CleanupAudit(ok=True, judged=True),
        group_followup=GroupFollowup(group=["identity-host", "pid-occupied"], deferred_to="fault:pid-occupied"),
    )
    alone = FaultResults(cleanup=CleanupAudit(ok=True, judged=True))
    said = [p for p in judge(fault, fault.head, obs, deferred, injector) if "restore" in p]
    assert said == [], said
    assert any("no longer restores" in p for p in judge(fault, fault.head, obs, alone, injector))
