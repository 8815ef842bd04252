"""Decode speed after restore (issue #28, item 3): a restore that answers right but slowly is a finding.

A fixed greedy generation (the first canary prompt, ``TOKENS`` tokens, ``min_tokens`` equal so every engine
generates them all) is timed ``--vsnap-decode-runs`` times after one unrecorded warm-up, on the ordinary engine and
on every restored one: tokens per second per run and their median. A restore is judged by its slowdown, the
ordinary median over the restored median, against ``--vsnap-decode-tolerance`` (default 1.75: a 2× slowdown fails).
A shared CPU slows a single set of runs now and then; a real slowdown stays: a set over the tolerance is measured
once more and the faster of the two medians judged (both recorded). A run lasts at least ``MIN_RUN_S``: an engine
that generates the tokens faster than that (the warm-up says how fast) repeats the generation within each run, so
that one scheduler slice of a shared CPU cannot double a run. An engine that does not decode at all (the seam
tests' in-memory engine answers from a formula) has no speed to time: its figure would be an HTTP round trip's,
which varied 2× between steps on a busy 2-core machine; such a run sets ``--vsnap-decode-runs=0``.

A busy machine slows an engine as a defect does: CI's two cores, shared with another qualification, once timed the
ordinary engine at 1153 tokens/s in a quiet moment and the restored one at 657 twice (the other arm's ordinary
engine, in the same busy minutes, at 674). So the runtime reads, around each set, every engine task's CPU time and
its run-queue wait (``/proc/<tid>/schedstat``: runnable, but no CPU free) and the machine's busy time
(``/proc/stat``): the engine's *stretch*, (CPU + wait) / CPU, says how much longer its work took for want of a CPU.
The judged slowdown is the measured one over the machine's: the ratio of the two sets' stretches, counted only
where the machine's other work (busy time not the engine's) explains it, at least ``OTHERS_MARGIN`` CPUs more in
the slower set. An engine that waits for a CPU because of itself (more threads after a restore than before) is not
excused, nor is one that sleeps or computes more: neither is a wait for a CPU that other work held. Where the
runtime cannot read these (a box without ``/proc``), the measured slowdown is judged as it is.

Where the engine decodes speculatively, vLLM's ``/metrics`` counters ``vllm:spec_decode_num_draft_tokens_total``
and ``vllm:spec_decode_num_accepted_tokens_total`` are read around the runs: the acceptance rate is recorded, and a
restored acceptance under half the ordinary one fails (vLLM #52479: a wake that does not reload the draft model's
weights, output correct, acceptance 0, decoding about 2× slower).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping

from vsnap_qual.checks import Finding
from vsnap_qual.contract import DECODE_TOKENS
from vsnap_qual.engine import client
from vsnap_qual.model import CpuSample, CpuShare, DecodeJudgement, DecodeSpeed

#: tokens of the fixed generation
TOKENS = DECODE_TOKENS
#: a restored acceptance rate below this fraction of the ordinary one fails
ACCEPTANCE_FLOOR = 0.5
#: the shortest timed run, and the most generations one run may repeat to last that long
MIN_RUN_S = 0.1
MAX_PER_RUN = 100
#: how many CPUs' worth more of other work the slower set must have met before its stretch excuses anything
OTHERS_MARGIN = 0.2

_SPEC = {
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
}


def spec_counters(metrics_text: str) -> dict[str, float]:
    """vLLM's speculative-decoding counters in a ``/metrics`` text, summed over their label sets (none: {})."""
    sums = client.metric_sums(metrics_text, _SPEC.values())
    return {key: sums[name] for key, name in _SPEC.items() if name in sums}


def cpu_share(before: CpuSample | None, after: CpuSample | None, wall_s: float) -> CpuShare | None:
    """The engine's CPU, its run-queue wait and the machine's other work between two samples (tasks in both);
    None where a sample is missing or the engine used no CPU."""
    if before is None or after is None or wall_s <= 0:
        return None
    cpu_ns = wait_ns = 0
    for tid, (ran, waited) in after["tasks"].items():
        if tid in before["tasks"]:
            cpu_ns += max(0, ran - before["tasks"][tid][0])
            wait_ns += max(0, waited - before["tasks"][tid][1])
    if cpu_ns <= 0:
        return None
    engine_cpu, engine_wait = cpu_ns / 1e9, wait_ns / 1e9
    others = max(0.0, after["machine_busy_s"] - before["machine_busy_s"] - engine_cpu)
    share = CpuShare(
        wall_s=round(wall_s, 4),
        engine_cpu_s=round(engine_cpu, 4),
        engine_wait_s=round(engine_wait, 4),
        stretch=round((engine_cpu + engine_wait) / engine_cpu, 4),
        others_load=round(others / wall_s, 3),
        cpus=after["cpus"],
    )
    if "rss_kb" in after and "anon_huge_kb" in after:
        share["rss_kb"], share["anon_huge_kb"] = after["rss_kb"], after["anon_huge_kb"]
    if "cpus_allowed" in after:
        share["cpus_allowed"] = after["cpus_allowed"]
    return share


def affinity(speed: DecodeSpeed) -> str | None:
    """Which CPUs the engine's tasks may run on, as words (``0-1 ×65, 0 ×4``; None: not read)."""
    cpu = speed.get("cpu")
    allowed = cpu.get("cpus_allowed") if cpu is not None else None
    if not allowed:
        return None
    return ", ".join(f"{cpus} ×{n}" for cpus, n in sorted(allowed.items(), key=lambda kv: (-kv[1], kv[0])))


def huge_pages(speed: DecodeSpeed) -> str | None:
    """The engine's anonymous memory in transparent huge pages over its resident memory, as words (None: not
    read)."""
    cpu = speed.get("cpu")
    if cpu is None or "anon_huge_kb" not in cpu or not cpu.get("rss_kb"):
        return None
    return f"{cpu['anon_huge_kb'] / 1024:.0f} of {cpu['rss_kb'] / 1024:.0f} MiB resident in huge pages"


def machine_slowdown(ordinary: DecodeSpeed, restored: DecodeSpeed) -> float:
    """How much more the restored set's engine work was stretched by waiting for a CPU than the ordinary set's
    (below 1: less), counted only where the machine's other work explains it: the more stretched set met at least
    ``OTHERS_MARGIN`` CPUs' worth more of it. 1 where either set has no CPU figures."""
    a, b = ordinary.get("cpu"), restored.get("cpu")
    if a is None or b is None:
        return 1.0
    ratio = b["stretch"] / a["stretch"]
    stretched, other = (b, a) if ratio > 1 else (a, b)
    return round(ratio, 3) if stretched["others_load"] >= other["others_load"] + OTHERS_MARGIN else 1.0


def measure(
    generate: Callable[[], int],
    runs: int,
    metrics: Callable[[], str] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    sample: Callable[[], CpuSample | None] | None = None,
) -> DecodeSpeed:
    """``runs`` timed runs after one timed warm-up (``generate`` returns the tokens it produced), each repeating
    the generation as often as it takes to last ``MIN_RUN_S`` at the warm-up's pace, with the speculative-decoding
    counters read around them when ``metrics`` gives the engine's ``/metrics`` text and the engine's CPU when
    ``sample`` reads it (:func:`cpu_share`)."""
    started = clock()
    generate()
    warm = clock() - started
    per_run = MAX_PER_RUN if warm <= 0 else max(1, min(MAX_PER_RUN, math.ceil(MIN_RUN_S / warm)))
    before = spec_counters(metrics()) if metrics is not None else {}
    cpu_before = sample() if sample is not None else None
    window = clock()
    rates: list[float] = []
    tokens = 0
    for _ in range(runs):
        started = clock()
        produced = sum(generate() for _ in range(per_run))
        elapsed = clock() - started
        tokens = produced // per_run
        rates.append(round(produced / elapsed, 3) if elapsed > 0 else float("inf"))
    window = clock() - window
    cpu_after = sample() if sample is not None else None
    speed = DecodeSpeed(tokens=tokens, runs_tps=rates, median_tps=round(statistics.median(rates), 3))
    if per_run > 1:
        speed["generations_per_run"] = per_run
    if (share := cpu_share(cpu_before, cpu_after, window)) is not None:
        speed["cpu"] = share
    after = spec_counters(metrics()) if metrics is not None else {}
    if before and after and "draft_tokens" in after:
        drafted = after["draft_tokens"] - before.get("draft_tokens", 0.0)
        accepted = after.get("accepted_tokens", 0.0) - before.get("accepted_tokens", 0.0)
        speed["spec_draft_tokens"] = drafted
        speed["spec_accepted_tokens"] = accepted
        if drafted > 0:
            speed["spec_acceptance"] = round(accepted / drafted, 4)
    return speed


def _judged(ordinary: DecodeSpeed, restored: DecodeSpeed) -> tuple[float, float, float]:
    """(measured slowdown, machine slowdown, judged slowdown) of a restored set against the ordinary one."""
    measured = ordinary["median_tps"] / restored["median_tps"] if restored["median_tps"] > 0 else float("inf")
    machine = machine_slowdown(ordinary, restored)
    return measured, machine, measured / machine


def judge(
    ordinary: DecodeSpeed | None, restored: DecodeSpeed, tolerance: float, retried: DecodeSpeed | None = None
) -> DecodeJudgement:
    """The restore's slowdown against the ordinary engine's median, over the machine's own slowdown
    (:func:`machine_slowdown`; the better of ``restored`` and ``retried``), and its speculative acceptance against
    the ordinary one's where both decoded speculatively."""
    if ordinary is None or not ordinary.get("median_tps"):
        return DecodeJudgement(
            restored_tps=restored["median_tps"],
            tolerance=tolerance,
            retried=retried is not None,
            ok=None,
            problems=["no ordinary decode speed recorded to compare with"],
        )
    sets = [restored] if retried is None else [restored, retried]
    best = min(sets, key=lambda one: _judged(ordinary, one)[2])
    measured, machine, slowdown = _judged(ordinary, best)
    judgement = DecodeJudgement(
        ordinary_tps=ordinary["median_tps"],
        restored_tps=best["median_tps"],
        measured_slowdown=round(measured, 3),
        machine_slowdown=machine,
        slowdown=round(slowdown, 3),
        tolerance=tolerance,
        retried=retried is not None,
    )
    problems: list[str] = []
    if slowdown > tolerance:
        busy = (
            f", {measured:.2f}× as measured on a machine whose other work slowed the engine {machine:.2f}×"
            if machine != 1.0
            else ""
        )
        pages = (huge_pages(best), huge_pages(ordinary))
        beside = f"; the restored engine {pages[0]}, the ordinary {pages[1]}" if None not in pages else ""
        bound = (affinity(best), affinity(ordinary))
        if None not in bound:
            beside += f"; its tasks' allowed CPUs {bound[0]}, the ordinary engine's {bound[1]}"
        problems.append(
            f"decodes {slowdown:.2f}× slower than the ordinary engine: {best['median_tps']:.1f} vs "
            f"{ordinary['median_tps']:.1f} tokens/s (median of {len(best['runs_tps'])} runs of {best['tokens']} "
            f"tokens{', measured twice' if retried is not None else ''}{busy}{beside}; tolerance {tolerance:g}×): "
            "a restore that answers right but slowly"
        )
    ordinary_rate, restored_rate = ordinary.get("spec_acceptance"), best.get("spec_acceptance")
    if ordinary_rate is not None:
        judgement["ordinary_acceptance"] = ordinary_rate
        judgement["restored_acceptance"] = restored_rate
        if restored_rate is None or restored_rate < ACCEPTANCE_FLOOR * ordinary_rate:
            problems.append(
                f"speculative decoding accepts {restored_rate if restored_rate is not None else 'nothing'} of its "
                f"draft tokens after the restore, {ordinary_rate:.2f} on the ordinary engine (the draft model's "
                "weights not reloaded? vLLM #52479)"
            )
    judgement["ok"] = not problems
    judgement["problems"] = problems
    return judgement


def needs_retry(judgement: Mapping[str, object]) -> bool:
    """Whether a set of runs is measured once more before it is judged: only a slowdown over the tolerance."""
    slowdown = judgement.get("slowdown")
    tolerance = judgement.get("tolerance")
    return isinstance(slowdown, float) and isinstance(tolerance, float) and slowdown > tolerance


def findings(judgement: DecodeJudgement | None, step: str) -> list[Finding]:
    """The decode-speed check of a restore (none where no speed was measured)."""
    if judgement is None or judgement.get("ok") is None:
        return []
    detail = f"{step}: " + "; ".join(judgement.get("problems") or [])
    return [Finding("decode speed", bool(judgement["ok"]), detail)]
