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

from collections.abc import Callable, Mapping

from vsnap_qual.engine import client

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
    ask: Callable[[int], object], requests: int, metrics: Callable[[], str], rss_kb: Callable[[], int | None]
) -> tuple[dict[str, float], list[int]]:
    """The fixed series: ``ask(i)`` for each request, the engine's resident memory read after each (a sample the
    box cannot read is left out), the counters read around the whole series: (counters moved, memory samples)."""
    before = counters(metrics())
    samples: list[int] = []
    for i in range(requests):
        ask(i)
        if (rss := rss_kb()) is not None:
            samples.append(rss)
    return moved(before, counters(metrics())), samples
