"""Serving counters and memory over a request series (``vsnap_qual.engine.serving_series``, issue #44 item 2)."""

from __future__ import annotations

import pytest

from vsnap_qual.engine import serving_series
from vsnap_qual.model import ServingSeries

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
    moved, samples, gpu = serving_series.run_series(asked.append, 4, lambda: next(texts), lambda: next(memory))
    assert gpu == []  # no GPU memory asked
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


def test_an_engine_that_serves_no_metrics_is_not_applicable_in_its_words() -> None:
    asked: list[list[int]] = []
    series = serving_series.measure(
        lambda: (404, "Not Found\n"), asked.append, [1, 2, 3], 256, lambda: 1000, None
    )  # fmt: skip
    assert series["not_applicable"] == "GET /metrics: HTTP 404: Not Found" and asked == []
    served = serving_series.measure(lambda: (200, _text(1, 1, 1, 1, 1)), asked.append, [1, 2, 3], 256, lambda: 1, None)
    judged = serving_series.judge(served, series)
    assert judged["status"] == "not applicable" and judged["ok"] is None
    assert judged["detail"] == "GET /metrics: HTTP 404: Not Found (after restore)"


def test_the_series_asks_one_prompt_of_two_blocks_and_a_half_from_the_second_canary_id() -> None:
    text = 'vllm:cache_config_info{block_size="16",engine="0"} 1.0\n' + _text(0, 0, 0, 0, 0)
    asked: list[list[int]] = []
    gpu = iter(range(100, 200))
    series = serving_series.measure(
        lambda: (200, text), asked.append, [7, 8, 9], 256, lambda: 5000, lambda: next(gpu)
    )  # fmt: skip
    assert len(asked) == serving_series.REQUESTS and all(a == asked[0] for a in asked)
    assert asked[0][:4] == [8, 9, 7, 8] and len(asked[0]) == 40 == series["prompt_tokens"]
    assert series["rss_kb"] == [5000] * 6 and series["gpu_mib"] == [100, 101, 102, 103, 104, 105]
    assert series["counters"] == dict.fromkeys(serving_series.COUNTERS, 0.0)


def _series(counters: dict[str, float], rss: list[int], gpu: list[int] | None = None) -> ServingSeries:
    found = ServingSeries(requests=6, counters=counters, rss_kb=rss)
    if gpu is not None:
        found["gpu_mib"] = gpu
    return found


def test_a_restore_judged_names_frozen_counters_and_memory_growth_in_mib_per_request() -> None:
    moved = {"prompt_tokens": 240.0, "requests": 6.0}
    flat = [900_000] * 6
    ordinary = _series(moved, flat, [500] * 6)
    same = serving_series.judge(ordinary, _series(dict(moved), flat, [500] * 6))
    assert same["status"] == "as ordinary" and same["ok"] is True and same["problems"] == []
    assert (
        same["detail"]
        == "2 counters moved as on the ordinary engine; resident memory +0.00 MiB per request (ordinary +0.00)"
    )
    frozen = serving_series.judge(ordinary, _series({"prompt_tokens": 0.0, "requests": 0.0}, flat))
    assert frozen["ok"] is False and frozen["counters_ok"] is False
    assert frozen["problems"][0] == (
        "vllm:prompt_tokens_total moved by 0 after restore, 240 on the ordinary engine for the same requests"
    )
    leaking = serving_series.judge(ordinary, _series(dict(moved), [900_000 + 8192 * i for i in range(6)], [500] * 6))
    assert leaking["counters_ok"] is True and leaking["rss_growth_mib"] == 8.0
    assert leaking["problems"] == [
        "resident memory grows 8.00 MiB per request after restore, 0.00 on the ordinary engine over the same 6 "
        "requests (bound 0.50): memory that grows after the restore"
    ]
    gpu = serving_series.judge(ordinary, _series(dict(moved), flat, [500 + 4 * i for i in range(6)]))
    assert gpu["gpu_growth_mib"] == 4.0 and gpu["problems"][0].startswith("GPU memory grows 4.00 MiB per request")
    (finding,) = serving_series.findings(frozen, "restore-1")[:1]
    assert finding.check == "serving series" and finding.detail.startswith("restore-1: vllm:prompt_tokens_total")
    assert serving_series.findings(same, "restore-1") == []
