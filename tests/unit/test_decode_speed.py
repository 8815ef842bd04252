"""The decode-speed check (``vsnap_qual.decode_speed``, issue #28 item 3): the timing, vLLM's speculative-decoding
counters, and the judgement against the default tolerance."""

from __future__ import annotations

import argparse
import itertools

import pytest

from vsnap_qual import decode_speed
from vsnap_qual.model import DecodeSpeed
from vsnap_qual.options import parse_slowdown

DEFAULT = 1.75  # --vsnap-decode-tolerance's default (vsnap_qual/options.py)


def _speed(median: float, **spec: float) -> DecodeSpeed:
    speed = DecodeSpeed(tokens=64, runs_tps=[median] * 5, median_tps=median)
    speed.update(spec)  # type: ignore[typeddict-item]
    return speed


def test_each_run_is_timed_after_one_warm_up_and_the_median_kept() -> None:
    ticks = itertools.count()
    durations = iter([0.5, 0.25, 1.0])  # seconds of the three timed runs
    now = [0.0]
    calls = []

    def clock() -> float:
        next(ticks)
        return now[0]

    def generate() -> int:
        calls.append(1)
        # the warm-up takes 0.2 s (one generation a run is enough); each timed run advances the clock by its duration
        now[0] += 0.2 if len(calls) == 1 else next(durations)
        return 64

    speed = decode_speed.measure(generate, 3, clock=clock)
    assert len(calls) == 4  # one warm-up, three timed
    assert speed["runs_tps"] == [128.0, 256.0, 64.0] and speed["median_tps"] == 128.0 and speed["tokens"] == 64
    assert "spec_acceptance" not in speed and "generations_per_run" not in speed


def test_an_engine_faster_than_a_run_repeats_the_generation_so_each_run_lasts_long_enough() -> None:
    """A 2 ms generation (an in-process engine) timed alone is a scheduler slice's noise: each run repeats it."""
    now = [0.0]
    calls = []

    def generate() -> int:
        calls.append(1)
        now[0] += 0.002
        return 64

    speed = decode_speed.measure(generate, 5, clock=lambda: now[0])
    assert speed["generations_per_run"] == 50 and len(calls) == 1 + 5 * 50  # 50 x 2 ms = the 0.1 s a run lasts
    assert speed["tokens"] == 64 and speed["median_tps"] == pytest.approx(32000.0)
    instant = decode_speed.measure(lambda: 64, 2, clock=lambda: 0.0)  # no measurable warm-up: the most repeats
    assert instant["generations_per_run"] == decode_speed.MAX_PER_RUN


def test_speculative_counters_are_read_around_the_runs_summed_over_label_sets() -> None:
    texts = iter(
        [
            'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 100.0\n'
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 40.0\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 30.0\n',
            'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 300.0\n'
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 190.0\n',
        ]
    )
    speed = decode_speed.measure(lambda: 64, 2, metrics=lambda: next(texts))
    assert speed["spec_draft_tokens"] == 200.0 and speed["spec_accepted_tokens"] == 150.0
    assert speed["spec_acceptance"] == 0.75
    assert decode_speed.spec_counters("vllm:generation_tokens_total 3.0\n") == {}


def test_a_2x_slowdown_fails_at_the_default_tolerance_and_shared_cpu_noise_does_not() -> None:
    slow = decode_speed.judge(_speed(400.0), _speed(200.0), DEFAULT)
    assert slow["ok"] is False and slow["slowdown"] == 2.0
    assert "decodes 2.00× slower than the ordinary engine: 200.0 vs 400.0 tokens/s" in slow["problems"][0]
    assert decode_speed.needs_retry(slow)
    noisy = decode_speed.judge(_speed(400.0), _speed(300.0), DEFAULT)  # 1.33× slower
    assert noisy["ok"] is True and not decode_speed.needs_retry(noisy)
    faster = decode_speed.judge(_speed(400.0), _speed(500.0), DEFAULT)
    assert faster["ok"] is True and faster["slowdown"] == 0.8


def test_the_second_set_is_judged_when_faster_and_both_are_said() -> None:
    passed = decode_speed.judge(_speed(400.0), _speed(150.0), DEFAULT, retried=_speed(390.0))
    assert passed["ok"] is True and passed["restored_tps"] == 390.0 and passed["retried"]
    stays = decode_speed.judge(_speed(400.0), _speed(150.0), DEFAULT, retried=_speed(140.0))
    assert stays["ok"] is False and stays["restored_tps"] == 150.0 and "measured twice" in stays["problems"][0]


def test_speculative_acceptance_lost_after_restore_fails_even_at_full_speed() -> None:
    lost = decode_speed.judge(_speed(400.0, spec_acceptance=0.6), _speed(400.0, spec_acceptance=0.0), DEFAULT)
    assert lost["ok"] is False and "accepts 0.0 of its draft tokens" in lost["problems"][0]
    kept = decode_speed.judge(_speed(400.0, spec_acceptance=0.6), _speed(390.0, spec_acceptance=0.55), DEFAULT)
    assert kept["ok"] is True and kept["restored_acceptance"] == 0.55


def test_without_an_ordinary_figure_nothing_is_judged_and_no_finding_is_made() -> None:
    alone = decode_speed.judge(None, _speed(400.0), DEFAULT)
    assert alone["ok"] is None and decode_speed.findings(alone, "restore-1") == []
    failed = decode_speed.judge(_speed(400.0), _speed(100.0), DEFAULT)
    (finding,) = decode_speed.findings(failed, "restore-2")
    assert not finding.ok and finding.detail.startswith("restore-2: decodes 4.00× slower")


@pytest.mark.parametrize(("value", "said"), [("1", "must be a ratio > 1"), ("0.5", "for 50 % slower write 1.5")])
def test_a_tolerance_that_is_no_slowdown_is_refused_naming_the_fix(value: str, said: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=said):
        parse_slowdown(value)
    assert parse_slowdown("2") == 2.0
