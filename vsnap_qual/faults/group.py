"""Refusals proved restorable once per group (issue 45 item 5), pure: which faults of a lane form a group, and the
bisection that names the fault that broke restorability when the group's follow-up restore fails.

A **refusal** is a fault whose expectation on the lane says the command is refused before it touches anything: it
must exit non-zero and leave the artifact byte-identical (``Expect.artifact_unchanged``, checked by the harness's
digest before and after: the identity drifts, the occupied PID and the bad manifest of the built-in kinds), and its
follow-up restore is judged. A **group** is a run of two or more refusals one after another in the lane's own order
of fault steps (what the run selected): each runs and is audited as before, but where it was in fact refused with
the artifact left byte-identical (:func:`refused`), its follow-up restore is deferred. The next fault step that does
not defer (the group's last, or one that was not refused after all, or any fault after them) restores once for
all of them: one follow-up proves that the artifact and the box still restore after every deferred fault. Where it
does not, :func:`bisect` runs subsets of them again, each from a reset artifact and followed by a restore, until
one fault alone breaks it; the finding names it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from vsnap_qual.procedure import ANY, Expect


def refusal(expect: Expect, judges_artifact: bool) -> bool:
    """Whether a fault judged by ``expect`` is a refusal that leaves the artifact byte-identical, by its expectation
    (``judges_artifact``: its kind compares the artifact's digest before and after its action)."""
    return (
        expect.artifact_unchanged is True
        and expect.followup_restore
        and judges_artifact
        and expect.exit_code not in (0, ANY)
    )


def refused(exit_code: int | None, artifact_unchanged: bool | None) -> bool:
    """Whether the faulted command was in fact refused with the artifact left byte-identical (what lets its
    follow-up restore be deferred to its group's)."""
    return exit_code not in (None, 0) and artifact_unchanged is True


def group_of(fault_id: str, order: Sequence[str], is_refusal: Callable[[str], bool]) -> tuple[str, ...]:
    """The group ``fault_id`` belongs to in the lane's ``order`` of fault ids: the run of refusals around it, one
    after another; empty where it is no refusal, or a refusal alone (it restores after itself, as before)."""
    if fault_id not in order or not is_refusal(fault_id):
        return ()
    at = order.index(fault_id)
    start = at
    while start > 0 and is_refusal(order[start - 1]):
        start -= 1
    end = at
    while end + 1 < len(order) and is_refusal(order[end + 1]):
        end += 1
    group = tuple(order[start : end + 1])
    return group if len(group) > 1 else ()


@dataclass(frozen=True)
class Probe:
    """One step of a bisection: these faults run again from a reset artifact, then a restore; did it restore."""

    faults: tuple[str, ...]
    restored: bool


@dataclass(frozen=True)
class Bisection:
    """Which fault alone breaks restorability (None: none alone), the probes that said so, and in words."""

    broke: str | None
    probes: tuple[Probe, ...]
    words: str


def bisect(faults: Sequence[str], restores: Callable[[tuple[str, ...]], bool]) -> Bisection:
    """The one fault of ``faults`` whose run breaks the next restore, found by halving: ``restores(subset)`` runs
    the subset's faults again (in their order, from a reset artifact) and says whether the restore after them
    succeeded. First with none of them (an artifact that no longer restores at all is no fault's doing), then the
    first half of the candidates: where it fails the culprit is in it, else in the rest; the last candidate is run
    alone to confirm it (where it restores, no single fault breaks it: they do together)."""
    probes: list[Probe] = []

    def probe(subset: Sequence[str]) -> bool:
        ok = restores(tuple(subset))
        probes.append(Probe(tuple(subset), ok))
        return ok

    if not probe(()):
        return Bisection(None, tuple(probes), "the artifact does not restore even with none of them run first")
    candidates, failing = list(faults), False
    while len(candidates) > 1:
        half = candidates[: len(candidates) // 2]
        failing = not probe(half)
        candidates = half if failing else candidates[len(half) :]
    if candidates and not failing:  # reached by elimination: run alone to confirm
        failing = not probe(candidates)
    if not failing:
        return Bisection(
            None, tuple(probes), f"no one of {', '.join(faults)} alone breaks the restore: they do together"
        )
    return Bisection(candidates[0], tuple(probes), f"{candidates[0]} alone breaks the restore after it")
