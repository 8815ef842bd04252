"""Serving counters and memory over a request series (``vsnap_qual.engine.serving_series``, issue #44 item 2)."""

from __future__ import annotations

import pytest

from vsnap_qual.engine import serving_series

METRICS = """# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{{engine="0",model_name="m"}} {p}
vllm:generation_tokens_total{{engine="0",model_name="m"}} {g}
vllm:request_success_total{{engine="0",finished_reason="length",model_name="m"}} {r}
vllm:request_success_total{{engine="0",finished_reason="stop",model_name="m"}} 1.0
vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {q}
vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {h}
"""


def _text(p: float, g: float, r: float, q: float, h: float) -> str:
    return METRICS.format(p=p, g=g, r=r, q=q, h=h)


def test_the_series_reads_the_counters_around_it_and_the_memory_after_each_request() -> None:
    texts = iter([_text(10, 20, 2, 10, 0), _text(110, 340, 12, 110, 64)])
    asked: list[int] = []
    memory = iter([1000, None, 1024, 1030])
    moved, samples = serving_series.run_series(asked.append, 4, lambda: next(texts), lambda: next(memory))
    assert asked == [0, 1, 2, 3] and samples == [1000, 1024, 1030]  # the unread sample left out
    assert moved == {"prompt_tokens": 100, "generation_tokens": 320, "requests": 10, "prefix_cache_queries": 100,
                     "prefix_cache_hits": 64}  # fmt: skip


def test_a_counter_that_moves_otherwise_after_restore_is_named_with_both_figures() -> None:
    ordinary = {"prompt_tokens": 100.0, "generation_tokens": 320.0, "requests": 10.0, "prefix_cache_hits": 64.0}
    assert serving_series.compare_counters(ordinary, dict(ordinary)) == []
    twice = {**ordinary, "generation_tokens": 640.0}
    assert serving_series.compare_counters(ordinary, twice) == [
        "vllm:generation_tokens_total moved by 640 after restore, 320 on the ordinary engine for the same requests"
    ]
    lost = {key: value for key, value in ordinary.items() if key != "prefix_cache_hits"}
    assert serving_series.compare_counters(ordinary, lost) == [
        "vllm:prefix_cache_hits_total moved by 64 on the ordinary engine, not reported after restore"
    ]
    assert serving_series.compare_counters({}, twice) == []  # an engine without the counters: nothing to judge


def test_memory_growth_per_request_well_past_the_ordinary_engines_is_a_finding_in_mib_per_request() -> None:
    flat = [500_000 + (i % 2) * 200 for i in range(20)]  # noise, no growth
    assert serving_series.growth_per_request(flat) == pytest.approx(0.0, abs=0.01)
    leaking = [500_000 + 2048 * i for i in range(20)]  # 2 MiB per request
    assert serving_series.growth_per_request(leaking) == 2.0
    said = serving_series.judge_memory(flat, leaking)
    assert said is not None and said.startswith("resident memory grows 2.00 MiB per request after restore, 0.00")
    assert "same 20 requests" in said
    assert serving_series.judge_memory(flat, flat) is None
    # an ordinary engine that grows as much (a cache filling): the restore's same growth is no finding
    assert serving_series.judge_memory(leaking, leaking) is None
    # under the floor: 0.4 MiB per request over an ordinary 0 is noise, not a finding
    assert serving_series.judge_memory(flat, [500_000 + 410 * i for i in range(20)]) is None
    assert serving_series.judge_memory(flat, [1, 2]) is None  # too few samples to say
