"""Serving counters and memory over a fixed series of requests (issue #44 item 2): the pure rules.

The same fixed series of requests is sent to the ordinary engine and after a restore. Around it vLLM's serving
counters are read from ``/metrics`` (:data:`COUNTERS`: prompt and generation tokens, finished requests, prefix-cache
queries and hits, each summed over its label sets): each counter must move after the restore by what it moved on
the ordinary engine for the same requests (a restore that stops counting, counts twice, or loses its prefix cache
shows here). After each request the engine processes' resident memory is read: the growth per request over the
series (a least-squares slope, MiB per request) after the restore is judged against the ordinary engine's over the
same series, a growth well past it (more than ``GROWTH_FACTOR`` times the ordinary's and ``GROWTH_FLOOR_MIB`` above
it) a finding named in MiB per request (the shape of vLLM's memory that grows after a wake, #47654, #32714).
Ratios and differences of the two engines' own figures only: nothing is compared with an absolute memory size.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from vsnap_qual.checks import Finding
from vsnap_qual.engine import client
from vsnap_qual.model import ServingJudgement, ServingSeries

#: vLLM's counters the series moves, by the name the evidence gives them
COUNTERS = {
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
    "requests": "vllm:request_success_total",
    "prefix_cache_queries": "vllm:prefix_cache_queries_total",
    "prefix_cache_hits": "vllm:prefix_cache_hits_total",
}
#: a restored engine's growth per request past both of these (against the ordinary engine's) is a finding
GROWTH_FACTOR = 2.0
GROWTH_FLOOR_MIB = 0.5
#: the series: this many asks of one token-id prompt (the first computes it, the others may read it from the prefix
#: cache), each greedy for exactly ``ASK_TOKENS`` tokens (``min_tokens`` equal: no EOS ends one early)
REQUESTS = 6
ASK_TOKENS = 4
#: the prompt's length where the engine reports no block size
FALLBACK_PROMPT_TOKENS = 40


def counters(metrics_text: str) -> dict[str, float]:
    """:data:`COUNTERS` in a ``/metrics`` text (a counter the engine does not report is absent)."""
    sums = client.metric_sums(metrics_text, COUNTERS.values())
    return {key: sums[name] for key, name in COUNTERS.items() if name in sums}


def moved(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """How much each counter read both times moved."""
    return {key: round(after[key] - before[key], 6) for key in after if key in before}


def compare_counters(ordinary: Mapping[str, float], restored: Mapping[str, float]) -> list[str]:
    """The counters that moved after the restore otherwise than on the ordinary engine for the same requests, in
    words (none: every counter the ordinary engine reported moved the same; a counter neither reports is not
    judged)."""
    problems = []
    for key, expected in ordinary.items():
        if key not in restored:
            problems.append(f"{COUNTERS[key]} moved by {expected:g} on the ordinary engine, not reported after restore")
        elif restored[key] != expected:
            problems.append(
                f"{COUNTERS[key]} moved by {restored[key]:g} after restore, {expected:g} on the ordinary engine "
                "for the same requests"
            )
    return problems


def growth_per_request(rss_kb: list[int]) -> float | None:
    """The least-squares slope of resident memory over the series, MiB per request (None: under 3 samples)."""
    n = len(rss_kb)
    if n < 3:
        return None
    mean_x, mean_y = (n - 1) / 2, sum(rss_kb) / n
    numerator = sum((x - mean_x) * (y - mean_y) for x, y in enumerate(rss_kb))
    denominator = sum((x - mean_x) ** 2 for x in range(n))
    return round(numerator / denominator / 1024, 4)


def judge_memory(ordinary_rss_kb: list[int], restored_rss_kb: list[int]) -> str | None:
    """A growth per request after the restore well past the ordinary engine's over the same series, in words
    (None: within it, or not measured on both)."""
    ordinary, restored = growth_per_request(ordinary_rss_kb), growth_per_request(restored_rss_kb)
    if ordinary is None or restored is None:
        return None
    bound = max(GROWTH_FACTOR * max(ordinary, 0.0), max(ordinary, 0.0) + GROWTH_FLOOR_MIB)
    if restored <= bound:
        return None
    return (
        f"resident memory grows {restored:.2f} MiB per request after restore, {ordinary:.2f} on the ordinary engine "
        f"over the same {len(restored_rss_kb)} requests (bound {bound:.2f}): memory that grows after the restore"
    )


def run_series(
    ask: Callable[[int], object],
    requests: int,
    metrics: Callable[[], str],
    rss_kb: Callable[[], int | None],
    gpu_mib: Callable[[], int | None] | None = None,
) -> tuple[dict[str, float], list[int], list[int]]:
    """The fixed series: ``ask(i)`` for each request, the engine's resident memory (and its GPU memory, where
    ``gpu_mib`` is given) read after each (a sample the box cannot read is left out), the counters read around the
    whole series: (counters moved, memory samples, GPU memory samples)."""
    before = counters(metrics())
    samples: list[int] = []
    gpu: list[int] = []
    for i in range(requests):
        ask(i)
        if (rss := rss_kb()) is not None:
            samples.append(rss)
        if gpu_mib is not None and (used := gpu_mib()) is not None:
            gpu.append(used)
    return moved(before, counters(metrics())), samples, gpu


def prompt_ids(canary_ids: Sequence[int], block_size: int | None, max_model_len: int) -> list[int]:
    """The series' prompt: two blocks and a half of the ordinary engine's canary answer ids, cycled from the
    second (a prompt neither engine was asked before the series), within ``max_model_len`` less the answer;
    ``FALLBACK_PROMPT_TOKENS`` long where the engine reports no block size; empty where the canaries gave no ids."""
    ids = list(canary_ids[1:]) + list(canary_ids[:1])
    wanted = 2 * block_size + block_size // 2 if block_size else FALLBACK_PROMPT_TOKENS
    length = min(wanted, max_model_len - ASK_TOKENS - 1)
    if not ids or length <= 0:
        return []
    return [ids[i % len(ids)] for i in range(length)]


def measure(
    metrics_status: Callable[[], tuple[int | None, str]],
    ask: Callable[[list[int]], object],
    canary_ids: Sequence[int],
    max_model_len: int,
    rss_kb: Callable[[], int | None],
    gpu_mib: Callable[[], int | None] | None,
) -> ServingSeries:
    """The series on one engine: not applicable, in the engine's words, where ``GET /metrics`` is not served
    (``metrics_status()``: its HTTP status, None where nothing answered, and its text)."""
    status, text = metrics_status()
    if status != 200:
        said = f"HTTP {status}: {text.strip()[:160]}" if status is not None else text.strip()[:160]
        return ServingSeries(requests=0, counters={}, rss_kb=[], not_applicable=f"GET /metrics: {said}")
    size = client.cache_config_labels(text).get("block_size", "")
    ids = prompt_ids(canary_ids, int(size) if size.isdigit() else None, max_model_len)
    if not ids:
        return ServingSeries(requests=0, counters={}, rss_kb=[], not_applicable="no canary ids to make its prompt of")
    started = time.monotonic()
    moved_by, rss, gpu = run_series(lambda _i: ask(ids), REQUESTS, lambda: metrics_status()[1], rss_kb, gpu_mib)
    series = ServingSeries(
        requests=REQUESTS, prompt_tokens=len(ids), max_tokens=ASK_TOKENS, counters=moved_by, rss_kb=rss,
        seconds=round(time.monotonic() - started, 3),
    )  # fmt: skip
    if gpu:
        series["gpu_mib"] = gpu
    return series


def judge(ordinary: ServingSeries | None, restored: ServingSeries) -> ServingJudgement:
    """A restore's series against the ordinary engine's: the counters (:func:`compare_counters`) and the memory's
    growth per request (:func:`judge_memory`, resident and, where both have it, GPU memory)."""
    if ordinary is None:
        return ServingJudgement(status="not judged", ok=None, problems=[], detail="no ordinary series recorded")
    for series, whose in ((restored, "after restore"), (ordinary, "on the ordinary engine")):
        if "not_applicable" in series:
            why = f"{series['not_applicable']} ({whose})"
            return ServingJudgement(status="not applicable", ok=None, problems=[], detail=why)
    problems = compare_counters(ordinary.get("counters") or {}, restored.get("counters") or {})
    judgement = ServingJudgement(counters_ok=not problems if ordinary.get("counters") else None)
    rss_o, rss_r = ordinary.get("rss_kb") or [], restored.get("rss_kb") or []
    judgement["rss_growth_ordinary_mib"] = growth_per_request(rss_o)
    judgement["rss_growth_mib"] = growth_per_request(rss_r)
    if (said := judge_memory(rss_o, rss_r)) is not None:
        problems.append(said)
    gpu_o, gpu_r = ordinary.get("gpu_mib"), restored.get("gpu_mib")
    if gpu_o is not None and gpu_r is not None:
        as_kb = ([m * 1024 for m in gpu_o], [m * 1024 for m in gpu_r])
        judgement["gpu_growth_ordinary_mib"] = growth_per_request(as_kb[0])
        judgement["gpu_growth_mib"] = growth_per_request(as_kb[1])
        if (said := judge_memory(*as_kb)) is not None:
            problems.append("GPU " + said.replace("resident memory", "memory", 1))
    judged = judgement["counters_ok"] is not None or judgement["rss_growth_mib"] is not None
    judgement["problems"] = problems
    judgement["ok"] = False if problems else (True if judged else None)
    judgement["status"] = "differs" if problems else ("as ordinary" if judged else "not judged")
    judgement["detail"] = "; ".join(problems) if problems else _summary(judgement, ordinary)
    return judgement


def _summary(judgement: ServingJudgement, ordinary: ServingSeries) -> str:
    parts = []
    if judgement.get("counters_ok"):
        parts.append(f"{len(ordinary.get('counters') or {})} counters moved as on the ordinary engine")
    growth, base = judgement.get("rss_growth_mib"), judgement.get("rss_growth_ordinary_mib")
    if growth is not None and base is not None:
        parts.append(f"resident memory {growth:+.2f} MiB per request (ordinary {base:+.2f})")
    return "; ".join(parts) or "neither the counters nor the memory could be read on both engines"


def findings(judgement: ServingJudgement | None, step: str) -> list[Finding]:
    """The series' problems after ``step``, one finding each (``serving series``)."""
    if judgement is None or judgement.get("ok") is not False:
        return []
    return [Finding("serving series", False, f"{step}: {p}") for p in judgement.get("problems") or []]
