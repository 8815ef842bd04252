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

A run-queue wait is not all a co-tenant costs, nor is it always counted (issue #44 item 6: a restore judged 2.08×
slower, the machine's share read as 1.0, while a ``docker build`` installed packages on the host). On a machine whose
CPUs other work already keeps busy, more other work cannot add the margin's 0.2 CPUs of busy time: what grows is how
many compete for them, so the engine's longer wait is not counted (``bench/decode_under_load.py`` measured it: a
container compressing to its disk beside an engine on a 2-core machine already 1.8 CPUs busy with other work, the
engine's wait per token 2.6× as long, its stretch 1.94× the quiet set's, other work 1.80 then 1.89 CPUs: measured
2.17×, the queue's estimate 1.00). And a CPU whose SMT sibling, cache or memory bus is busy, or whose hypervisor
steals time, does less in each second the engine runs, which no wait shows. So the same fixed work
(:data:`CALIBRATION`, a shell loop, about 0.1 s of one CPU) is timed in the engine's box before the first run and
after each, while the engine is idle, by the wall clock in the box (how long the work took to get done, whatever
slowed it; where the box's ``date`` gives no nanoseconds, the time it ran plus the time it waited, which misses a
hypervisor's steal), with its own ``/proc/self/schedstat`` beside it: the time it ran (fixed work that runs longer is
a CPU doing less per second) and the time it waited (the run queue). The ratio of the two sets' medians is the
machine's slowdown as the calibration saw it, counted only where the restored engine spent at most ``OWN_CPU_MARGIN``
times the ordinary engine's CPU per generated token (beyond what the calibration's own run time grew by): an engine
with a thread of its own spinning beside it slows the calibration too, and spends its box's CPU on it (measured: 3.9×
the CPU per token, the calibration 3.05× slower). Of the two estimates the larger is taken where either says the
restored set met a slower machine (each sees what the other can miss: the queue, the engine's own threads competing
with other work while it decodes, which an idle engine's calibration does not meet; the calibration, the rest), else
the smaller (the restore measured on a quieter machine than the ordinary engine). Ratios only: nothing is compared
with an absolute time.

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
from vsnap_qual.model import Calibration, CpuSample, CpuShare, DecodeJudgement, DecodeSpeed

#: tokens of the fixed generation
TOKENS = DECODE_TOKENS
#: a restored acceptance rate below this fraction of the ordinary one fails
ACCEPTANCE_FLOOR = 0.5
#: the shortest timed run, and the most generations one run may repeat to last that long
MIN_RUN_S = 0.1
MAX_PER_RUN = 100
#: how many CPUs' worth more of other work the slower set must have met before its stretch excuses anything
OTHERS_MARGIN = 0.2
#: how many times the ordinary engine's CPU per token (beyond its calibration's own growth) the restored engine may
#: spend before its calibration's stretch is taken for its own work, not the machine's
OWN_CPU_MARGIN = 1.5

#: the calibration: a fixed amount of work for one CPU, timed by the wall clock where ``date`` gives nanoseconds
#: (else 0) and by the shell's own schedstat (ns run, ns waited for a CPU); it prints
#: ``calibration <wall_ns> <run_ns> <wait_ns>`` (exit 3: no schedstat to read)
CALIBRATION_LOOPS = 100_000
CALIBRATION = (
    "t0=$(date +%s%N 2>/dev/null); read -r r0 w0 _ < /proc/self/schedstat || exit 3; "
    f"i=0; while [ $i -lt {CALIBRATION_LOOPS} ]; do i=$((i+1)); done; "
    "read -r r1 w1 _ < /proc/self/schedstat; t1=$(date +%s%N 2>/dev/null); "
    'case "$t0$t1" in *[!0-9]*|"") wall=0 ;; *) wall=$((t1-t0)) ;; esac; '
    'echo "calibration $wall $((r1-r0)) $((w1-w0))"'
)

_SPEC = {
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
}


def spec_counters(metrics_text: str) -> dict[str, float]:
    """vLLM's speculative-decoding counters in a ``/metrics`` text, summed over their label sets (none: {})."""
    sums = client.metric_sums(metrics_text, _SPEC.values())
    return {key: sums[name] for key, name in _SPEC.items() if name in sums}


def parse_calibration(text: str) -> tuple[float, float, float] | None:
    """(seconds the calibration took, of them seconds it ran, seconds it waited for a CPU) from
    :data:`CALIBRATION`'s output: it took its wall time where the box's ``date`` gave one, else the time it ran plus
    the time it waited (which misses time a hypervisor stole); None where it said nothing usable."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 4 and fields[0] == "calibration" and all(f.isdigit() for f in fields[1:]):
            wall, ran, waited = (int(f) / 1e9 for f in fields[1:])
            if ran <= 0:
                return None
            return (wall if wall >= ran else ran + waited), ran, waited
    return None


def calibration(timings: list[tuple[float, float, float] | None]) -> Calibration | None:
    """The calibrations of one set (None where any is missing: a box that cannot time them)."""
    done = [t for t in timings if t is not None]
    if not done or len(done) != len(timings):
        return None
    return Calibration(
        runs_s=[round(t, 6) for t, _, _ in done],
        ran_s=[round(r, 6) for _, r, _ in done],
        wait_s=[round(w, 6) for _, _, w in done],
        median_s=round(statistics.median(t for t, _, _ in done), 6),
    )


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


def queued_slowdown(ordinary: DecodeSpeed, restored: DecodeSpeed) -> float:
    """How much more the restored set's engine work was stretched by waiting for a CPU than the ordinary set's
    (below 1: less), counted only where the machine's other work explains it: the more stretched set met at least
    ``OTHERS_MARGIN`` CPUs' worth more of it. 1 where either set has no CPU figures."""
    a, b = ordinary.get("cpu"), restored.get("cpu")
    if a is None or b is None:
        return 1.0
    ratio = b["stretch"] / a["stretch"]
    stretched, other = (b, a) if ratio > 1 else (a, b)
    return round(ratio, 3) if stretched["others_load"] >= other["others_load"] + OTHERS_MARGIN else 1.0


def cpu_per_token(speed: DecodeSpeed) -> float | None:
    """The engine's CPU seconds per token it generated over the set's runs (its box's tasks: a thread of its own
    spinning beside it counts); None without CPU figures."""
    cpu = speed.get("cpu")
    tokens = len(speed["runs_tps"]) * speed.get("generations_per_run", 1) * speed["tokens"]
    return cpu["engine_cpu_s"] / tokens if cpu is not None and tokens > 0 else None


def calibrated_slowdown(ordinary: DecodeSpeed, restored: DecodeSpeed) -> float | None:
    """How much longer the calibration took around the restored set than around the ordinary one (the ratio of
    their medians); None where either set has no calibration or CPU figures, or where the restored engine spent
    more than ``OWN_CPU_MARGIN`` times the ordinary one's CPU per token, beyond what its calibration's own run time
    grew by (its own work, not the machine's: a thread spinning beside it slows the calibration too)."""
    a, b = ordinary.get("calibration"), restored.get("calibration")
    per_a, per_b = cpu_per_token(ordinary), cpu_per_token(restored)
    if a is None or b is None or per_a is None or per_b is None or a["median_s"] <= 0 or per_a <= 0:
        return None
    ran = statistics.median(b["ran_s"]) / statistics.median(a["ran_s"]) if a["ran_s"] and b["ran_s"] else 1.0
    if per_b > OWN_CPU_MARGIN * per_a * max(1.0, ran):
        return None
    return round(b["median_s"] / a["median_s"], 3)


def machine_slowdown(ordinary: DecodeSpeed, restored: DecodeSpeed) -> float:
    """The machine's slowdown between the ordinary set and the restored one: of the run-queue estimate
    (:func:`queued_slowdown`) and the calibration's (:func:`calibrated_slowdown`, where counted), the larger where
    either is above 1, else the smaller."""
    queued, calibrated = queued_slowdown(ordinary, restored), calibrated_slowdown(ordinary, restored)
    if calibrated is None:
        return queued
    return max(queued, calibrated) if max(queued, calibrated) > 1 else min(queued, calibrated)


def measure(
    generate: Callable[[], int],
    runs: int,
    metrics: Callable[[], str] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    sample: Callable[[], CpuSample | None] | None = None,
    calibrate: Callable[[], tuple[float, float, float] | None] | None = None,
) -> DecodeSpeed:
    """``runs`` timed runs after one timed warm-up (``generate`` returns the tokens it produced), each repeating
    the generation as often as it takes to last ``MIN_RUN_S`` at the warm-up's pace, with the speculative-decoding
    counters read around them when ``metrics`` gives the engine's ``/metrics`` text and the engine's CPU when
    ``sample`` reads it (:func:`cpu_share`), and the fixed calibration timed before the first run and after each
    when ``calibrate`` times it (:func:`parse_calibration` of :data:`CALIBRATION` run in the engine's box)."""
    started = clock()
    generate()
    warm = clock() - started
    per_run = MAX_PER_RUN if warm <= 0 else max(1, min(MAX_PER_RUN, math.ceil(MIN_RUN_S / warm)))
    before = spec_counters(metrics()) if metrics is not None else {}
    cpu_before = sample() if sample is not None else None
    window = clock()
    rates: list[float] = []
    timings = [calibrate()] if calibrate is not None else []
    tokens = 0
    for _ in range(runs):
        started = clock()
        produced = sum(generate() for _ in range(per_run))
        elapsed = clock() - started
        tokens = produced // per_run
        rates.append(round(produced / elapsed, 3) if elapsed > 0 else float("inf"))
        if calibrate is not None:
            timings.append(calibrate())
    window = clock() - window
    cpu_after = sample() if sample is not None else None
    speed = DecodeSpeed(tokens=tokens, runs_tps=rates, median_tps=round(statistics.median(rates), 3))
    if per_run > 1:
        speed["generations_per_run"] = per_run
    if (share := cpu_share(cpu_before, cpu_after, window)) is not None:
        speed["cpu"] = share
    if (calibrated := calibration(timings)) is not None:
        speed["calibration"] = calibrated
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
    return measured, machine, measured / machine if machine > 0 else measured


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
    if "cpu" in ordinary and "cpu" in best:
        judgement["queued_slowdown"] = queued_slowdown(ordinary, best)
    if (calibrated := calibrated_slowdown(ordinary, best)) is not None:
        judgement["calibrated_slowdown"] = calibrated
    problems: list[str] = []
    if slowdown > tolerance:
        busy = (
            f", {measured:.2f}× as measured on a machine {machine:.2f}× slower than around the ordinary engine's"
            f" runs (its calibration {_said(judgement.get('calibrated_slowdown'))}, its run queue "
            f"{_said(judgement.get('queued_slowdown'))})"
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


def _said(figure: float | None) -> str:
    return f"{figure:.2f}×" if figure is not None else "not counted"


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
