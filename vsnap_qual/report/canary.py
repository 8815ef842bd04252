"""The canaries of one run as the views show them, read straight from the records: each canary a step recorded
(``results.canary``: the ordinary reference and each restore, the steps whose results type declares it) beside the
judgement that step recorded of it (``results.canary_compare``: ``checks.compare_canary``, made once, as the step
ran). The report renders that judgement and never makes its own; these are plain typed rows, no table library.
"""

from __future__ import annotations

import math
from typing import Literal, TypedDict

from vsnap_qual import model, procedure
from vsnap_qual.report.recorded import Canaried, CanaryCompared, latest_steps, reference_arm

CanaryStatus = Literal["reference", "bit-exact", "within tolerance", "mismatch", "not judged"]


class CanaryRow(TypedDict):
    """One canary a step recorded, beside the runner's ordinary reference and the step's own judgement of it."""

    runner: str
    arm: str
    step: str
    index: int
    prompt: str
    token_ids: str
    text: str
    logprob: float | None
    reference_logprob: float | None
    delta: float | None
    status: CanaryStatus
    ok: bool | None
    tokens: int
    first_divergence: int | None


class CanarySummaryRow(TypedDict):
    """A compared step's canaries (runner, arm, step): how many, equal, bit-exact, the largest |Δ logprob|, ok."""

    runner: str
    arm: str
    step: str
    prompts: int
    equal: int
    bit_exact: int
    max_abs_delta: float | None
    ok: bool


def canary_rows(run: model.RunEvidence) -> list[CanaryRow]:
    """Prompt × (runner, arm, step): token ids, text, logprob, Δ vs the runner's ordinary reference, status.

    ``status`` is ``reference``, ``bit-exact``, ``within tolerance``, ``mismatch`` (the step's own recorded
    ``canary_compare``), or ``not judged`` (``ok`` None) when the step recorded no comparison of it.
    """
    latest = latest_steps(run)
    ref_arm = reference_arm(run)
    found: list[CanaryRow] = []
    for runner in run["runners"]:
        for arm in run["arms"]:
            reference_step = latest.get((runner, arm, procedure.ORDINARY)) or latest.get(
                (runner, ref_arm, procedure.ORDINARY)
            )
            reference = {_canary_key(c): c for c in _canaries(reference_step)}
            for step_name in procedure.CANARY_STEPS:
                step = latest.get((runner, arm, step_name))
                canaries = _canaries(step)
                if step is None or not canaries:
                    continue
                judged = procedure.results_as(step, CanaryCompared) or CanaryCompared()
                compares = {_compare_key(c): c for c in judged.get("canary_compare", [])}
                is_reference = step is reference_step
                for index, canary in enumerate(canaries):
                    key = _canary_key(canary)
                    found.append(
                        _canary_row(
                            (runner, arm, step_name), index, canary, reference.get(key), compares.get(key), is_reference
                        )
                    )
    return found


def canary_summary(rows: list[CanaryRow]) -> list[CanarySummaryRow]:
    """A row per compared (runner, arm, step) of ``rows``: prompts, equal, bit-exact, max |Δ logprob|, ok."""
    groups: dict[tuple[str, str, str], list[CanaryRow]] = {}
    for row in rows:
        if row["status"] != "reference":
            groups.setdefault((row["runner"], row["arm"], row["step"]), []).append(row)
    return [
        CanarySummaryRow(
            runner=runner,
            arm=arm,
            step=step,
            prompts=len(group),
            equal=sum(1 for r in group if r["ok"]),
            bit_exact=sum(1 for r in group if r["status"] == "bit-exact"),
            max_abs_delta=largest_delta(group),
            ok=all(r["ok"] is True for r in group),
        )
        for (runner, arm, step), group in groups.items()
    ]


def largest_delta(rows: list[CanaryRow]) -> float | None:
    """The largest |Δ logprob| of ``rows`` (None: none has one)."""
    deltas = [abs(r["delta"]) for r in rows if r["delta"] is not None]
    return max(deltas) if deltas else None


def _canaries(step: model.Step | None) -> list[model.Canary]:
    found = procedure.results_as(step, Canaried)
    return [] if found is None else found.get("canary", [])


def _canary_tokens(canary: model.Canary) -> int:
    """How many tokens a canary generated: vLLM's one-token canary, or a multi-token one."""
    return len(canary["token_ids"]) or 1


def _canary_key(canary: model.Canary) -> tuple[str, int]:
    """A canary is its prompt and its length (the same prompt runs as the one-token canary and a long one)."""
    return (canary["prompt"], _canary_tokens(canary))


def _compare_key(compare: model.CanaryCompare) -> tuple[str, int]:
    tokens = compare["tokens"] if "tokens" in compare else _canary_tokens(compare["expected"])
    return (compare["prompt"], tokens)


def _float(value: float | None) -> float | None:
    """A recorded figure as the rows hold it (NaN, which JSON can carry, is no figure)."""
    return None if value is None or math.isnan(value) else float(value)


def _canary_row(
    where: tuple[str, str, str],
    index: int,
    canary: model.Canary,
    reference: model.Canary | None,
    compare: model.CanaryCompare | None,
    is_reference: bool,
) -> CanaryRow:
    logprob = _float(canary["logprob"])
    ref_logprob = _float(reference["logprob"]) if reference else None
    delta = None if logprob is None or ref_logprob is None else logprob - ref_logprob
    divergence = None
    status: CanaryStatus
    ok: bool | None
    if is_reference:
        status, ok = "reference", True
    elif compare is not None:
        delta = _float(compare["logprob_delta"])
        if compare.get("max_logprob_delta") is not None:
            delta = _float(compare["max_logprob_delta"])
        divergence = compare.get("first_divergence")
        ok = compare["ok"]
        if not ok:
            status = "mismatch"
        elif compare["bit_exact"]:
            status = "bit-exact"
        else:
            status = "within tolerance"
    else:
        status, ok = "not judged", None
    runner, arm, step = where
    return CanaryRow(
        runner=runner,
        arm=arm,
        step=step,
        index=index,
        prompt=canary["prompt"],
        token_ids=" ".join(str(t) for t in canary["token_ids"]),
        text=canary["text"],
        logprob=logprob,
        reference_logprob=ref_logprob,
        delta=delta,
        status=status,
        ok=ok,
        tokens=_canary_tokens(canary),
        first_divergence=divergence,
    )
