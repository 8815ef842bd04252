"""The decode-speed check (``vsnap_qual.engine.decode_speed``, issue #28 item 3): the timing, vLLM's
speculative-decoding counters, and the judgement against the default tolerance."""

from __future__ import annotations

import argparse
import itertools

import pytest

from vsnap_qual.engine import decode_speed
from vsnap_qual.model import CpuSample, CpuShare, DecodeSpeed
from vsnap_qual.options import parse_slowdown
from vsnap_qual.runtimes.procfs import parse_cpu_sample

DEFAULT = 1.75  # --vsnap-decode-tolerance's default (vsnap_qual/options.py)


def _speed(median: float, cpu: CpuShare | None = None, **spec: float) -> DecodeSpeed:
    speed = DecodeSpeed(tokens=64, runs_tps=[median] * 5, median_tps=median)
    speed.update(spec)  # type: ignore[typeddict-item]
    if cpu is not None:
        speed["cpu"] = cpu
    return speed


def _cpu(stretch: float, others_load: float) -> CpuShare:
    return CpuShare(
        wall_s=1.0,
        engine_cpu_s=0.5,
        engine_wait_s=0.5 * (stretch - 1),
        stretch=stretch,
        others_load=others_load,
        cpus=2,
    )


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


def test_the_engines_cpu_and_wait_and_the_machines_other_work_come_from_two_samples() -> None:
    before = parse_cpu_sample(
        "stat 1000 0 500 9000 10 0 0 0 0 0\ncpus 2\nticks 100\ntask 7 1000000000 50000000 9\n"
        "task 8 200000000 0 3\ntask 99 5 5 1\n"
    )
    assert before == CpuSample(tasks={"7": [1000000000, 50000000], "8": [200000000, 0], "99": [5, 5]},
                               machine_busy_s=15.0, cpus=2)  # fmt: skip
    # one second later: tasks 7 and 8 ran 0.4 s and waited 0.2 s for a CPU; task 99 is gone, task 100 is new (the
    # sampling shell's own): neither counts; the machine was busy 1.5 CPU-seconds, 0.4 of them the engine's
    after = CpuSample(
        tasks={"7": [1300000000, 200000000], "8": [300000000, 50000000], "100": [9, 9]},
        machine_busy_s=16.5,
        cpus=2,
    )
    share = decode_speed.cpu_share(before, after, 1.0)
    assert share == CpuShare(wall_s=1.0, engine_cpu_s=0.4, engine_wait_s=0.2, stretch=1.5, others_load=1.1, cpus=2)
    assert decode_speed.cpu_share(before, None, 1.0) is None
    assert decode_speed.cpu_share(before, before, 1.0) is None  # no CPU used: nothing to stretch


def test_measure_samples_the_cpu_around_the_timed_runs_only() -> None:
    now = [0.0]
    events: list[str] = []

    def generate() -> int:
        events.append("generate")
        now[0] += 0.2
        return 64

    def sample() -> CpuSample:
        events.append("sample")
        busy = now[0]
        return CpuSample(tasks={"1": [int(now[0] * 1e9), 0]}, machine_busy_s=busy * 2, cpus=2)

    speed = decode_speed.measure(generate, 2, clock=lambda: now[0], sample=sample)
    assert events == ["generate", "sample", "generate", "generate", "sample"]  # the warm-up outside the window
    assert speed["cpu"]["wall_s"] == 0.4 and speed["cpu"]["engine_cpu_s"] == 0.4 and speed["cpu"]["others_load"] == 1.0
    assert "cpu" not in decode_speed.measure(generate, 1, clock=lambda: now[0], sample=lambda: None)


def test_a_restore_timed_while_other_work_held_the_cpus_is_judged_by_the_engines_own_slowdown() -> None:
    """The CI false alarm: the ordinary engine timed in a quiet moment (1153 tokens/s), the restored one while
    another qualification held the CPUs (657, both sets)."""
    quiet = _speed(1153.4, cpu=_cpu(1.02, 0.1))
    busy = _speed(656.8, cpu=_cpu(1.80, 1.3))
    judged = decode_speed.judge(quiet, busy, DEFAULT)
    assert judged["ok"] is True and judged["measured_slowdown"] == pytest.approx(1.756, abs=0.001)
    assert judged["machine_slowdown"] == pytest.approx(1.765, abs=0.001) and judged["slowdown"] < 1.0
    assert not decode_speed.needs_retry(judged)
    # the same machine, and a restore that really decodes 2x slower: still a failure, the busy machine named
    slow = decode_speed.judge(quiet, _speed(1153.4 / 2 / 1.765, cpu=_cpu(1.80, 1.3)), DEFAULT)
    assert slow["ok"] is False and slow["slowdown"] == pytest.approx(2.0, abs=0.01)
    assert "3.53× as measured on a machine 1.76× slower than around the ordinary engine's runs" in slow["problems"][0]
    assert "(its calibration not counted, its run queue 1.76×)" in slow["problems"][0]


def test_only_a_wait_that_the_machines_other_work_explains_is_excused() -> None:
    quiet = _speed(400.0, cpu=_cpu(1.0, 0.1))
    # an engine that contends with itself after the restore (a spinning thread of its own): stretched, but no
    # other work on the machine; not excused
    self_made = decode_speed.judge(quiet, _speed(200.0, cpu=_cpu(2.0, 0.1)), DEFAULT)
    assert self_made["ok"] is False and self_made["machine_slowdown"] == 1.0 and self_made["slowdown"] == 2.0
    # other work, but not the margin more
    assert decode_speed.machine_slowdown(quiet, _speed(200.0, cpu=_cpu(2.0, 0.25))) == 1.0
    # the ordinary engine was the one timed on a busy machine: a restore that looks as fast is judged slower
    busy_ordinary = _speed(200.0, cpu=_cpu(2.0, 1.2))
    hidden = decode_speed.judge(busy_ordinary, _speed(200.0, cpu=_cpu(1.0, 0.1)), DEFAULT)
    assert hidden["machine_slowdown"] == 0.5 and hidden["slowdown"] == 2.0 and hidden["ok"] is False
    # no CPU figures on either side: the measured slowdown, as it is
    assert decode_speed.machine_slowdown(quiet, _speed(200.0)) == 1.0


def test_of_two_sets_the_one_with_the_smaller_judged_slowdown_is_kept() -> None:
    quiet = _speed(400.0, cpu=_cpu(1.0, 0.1))
    first = _speed(250.0, cpu=_cpu(1.0, 0.1))  # 1.6x, nothing to excuse it
    second = _speed(210.0, cpu=_cpu(1.8, 1.3))  # slower as measured, but on a machine 1.8x busier: 1.06x
    judged = decode_speed.judge(quiet, first, DEFAULT, retried=second)
    assert judged["restored_tps"] == 210.0 and judged["slowdown"] == pytest.approx(1.058, abs=0.001)


def test_the_engines_memory_and_its_huge_pages_come_with_the_sample_and_name_themselves_in_a_slow_restore() -> None:
    """CRIU restores memory without transparent huge pages (checkpoint-restore/criu#2081): each sample sums the
    engine processes' ``Rss`` and ``AnonHugePages``, the set's share keeps them, and a slow restore's message sets
    the two engines' side by side (a lead, not a judgement)."""
    text = "stat 1000 0 500 9000\ncpus 2\ntask 7 1000 0\nmem 7 2048000 1024000\nmem 8 4096 0\nmem 9 x 0\n"
    sample = parse_cpu_sample(text)
    assert (sample["rss_kb"], sample["anon_huge_kb"]) == (2052096, 1024000)
    assert "rss_kb" not in parse_cpu_sample("cpus 2\ntask 7 1000 0\n")  # not read: absent, never 0
    later = CpuSample(tasks={"7": [2000000000, 0]}, machine_busy_s=20.0, cpus=2, rss_kb=2052096, anon_huge_kb=0)
    share = decode_speed.cpu_share(sample, later, 1.0)
    assert share is not None and (share["rss_kb"], share["anon_huge_kb"]) == (2052096, 0)

    def speed(tps: float, huge_kb: int) -> DecodeSpeed:
        cpu = CpuShare(wall_s=1.0, engine_cpu_s=1.0, engine_wait_s=0.0, stretch=1.0, others_load=0.0, cpus=2)
        cpu.update({"rss_kb": 2048000, "anon_huge_kb": huge_kb})
        return DecodeSpeed(tokens=64, runs_tps=[tps] * 3, median_tps=tps, cpu=cpu)

    judged = decode_speed.judge(speed(400.0, 1024000), speed(160.0, 0), 1.75)
    assert judged["ok"] is False
    assert (
        "the restored engine 0 of 2000 MiB resident in huge pages, the ordinary 1000 of 2000 MiB"
        in (judged["problems"][0])
    )
    assert decode_speed.huge_pages(DecodeSpeed(tokens=64, runs_tps=[1.0], median_tps=1.0)) is None


def test_the_engines_tasks_allowed_cpus_come_with_the_sample_and_name_themselves_in_a_slow_restore() -> None:
    """vLLM's CPU backend binds its OpenMP threads (OMP_PLACES, OMP_PROC_BIND) and CRIU does not restore a thread's
    affinity: each sample counts the engine's tasks per ``Cpus_allowed_list``, the share keeps it, and a slow
    restore's message sets the two engines' side by side (a lead, not a judgement)."""
    text = "cpus 2\ntask 7 1000 0\naff 7 0\ntask 8 1000 0\naff 8 0-1\naff 9 0-1\naff 10\n"
    sample = parse_cpu_sample(text)
    assert sample["cpus_allowed"] == {"0": 1, "0-1": 2}
    assert "cpus_allowed" not in parse_cpu_sample("cpus 2\ntask 7 1000 0\n")  # not read: absent
    later = CpuSample(tasks={"7": [2000000000, 0]}, machine_busy_s=20.0, cpus=2, cpus_allowed={"0-1": 3})
    share = decode_speed.cpu_share(sample, later, 1.0)
    assert share is not None and share["cpus_allowed"] == {"0-1": 3}

    def speed(tps: float, allowed: dict[str, int]) -> DecodeSpeed:
        cpu = CpuShare(wall_s=1.0, engine_cpu_s=1.0, engine_wait_s=0.0, stretch=1.0, others_load=0.0, cpus=2)
        cpu["cpus_allowed"] = allowed
        return DecodeSpeed(tokens=64, runs_tps=[tps] * 3, median_tps=tps, cpu=cpu)

    judged = decode_speed.judge(speed(400.0, {"0": 4, "0-1": 60}), speed(160.0, {"0-1": 64}), 1.75)
    assert "its tasks' allowed CPUs 0-1 ×64, the ordinary engine's 0-1 ×60, 0 ×4" in judged["problems"][0]
    assert decode_speed.affinity(DecodeSpeed(tokens=64, runs_tps=[1.0], median_tps=1.0)) is None


def _calibrated(median: float, seconds: float, cpu: CpuShare) -> DecodeSpeed:
    speed = _speed(median, cpu=cpu)
    speed["calibration"] = decode_speed.calibration([(seconds, seconds, 0.0)] * 6) or {}  # type: ignore[typeddict-item]
    return speed


def test_the_calibration_took_its_wall_time_else_its_run_plus_wait_and_a_set_without_all_of_them_has_none() -> None:
    # the wall time where the box said one: here 0.05 s neither run nor waited (a hypervisor's steal)
    assert decode_speed.parse_calibration("noise\ncalibration 200000000 120000000 30000000\n") == (0.2, 0.12, 0.03)
    # no nanoseconds from the box's date: run plus wait
    assert decode_speed.parse_calibration("calibration 0 120000000 30000000") == (0.15, 0.12, 0.03)
    assert decode_speed.parse_calibration("calibration 0 0 5") is None  # it never ran: nothing timed
    assert decode_speed.parse_calibration("sh: /proc/self/schedstat: No such file") is None
    one = decode_speed.calibration([(0.1, 0.1, 0.0), (0.3, 0.1, 0.2), (0.12, 0.11, 0.01)])
    assert one == {"runs_s": [0.1, 0.3, 0.12], "ran_s": [0.1, 0.1, 0.11], "wait_s": [0.0, 0.2, 0.01], "median_s": 0.12}
    assert decode_speed.calibration([(0.1, 0.1, 0.0), None]) is None and decode_speed.calibration([]) is None


def test_measure_times_the_calibration_before_the_first_run_and_after_each_outside_the_runs_time() -> None:
    now = [0.0]
    events: list[str] = []

    def generate() -> int:
        events.append("generate")
        now[0] += 0.2
        return 64

    def calibrate() -> tuple[float, float, float]:
        events.append("calibrate")
        now[0] += 5.0  # however long it takes, it is no run's time
        return (0.1 * len(events), 0.1, 0.0)

    speed = decode_speed.measure(generate, 2, clock=lambda: now[0], calibrate=calibrate)
    assert events == ["generate", "calibrate", "generate", "calibrate", "generate", "calibrate"]
    assert speed["runs_tps"] == [320.0, 320.0] and speed["calibration"]["median_s"] == 0.4
    assert "calibration" not in decode_speed.measure(generate, 1, clock=lambda: now[0], calibrate=lambda: None)


def test_a_co_tenant_that_shows_in_no_run_queue_is_the_machines_slowdown_by_the_calibration() -> None:
    """Issue 44 item 6: a ``docker build`` beside the run, the restore 2.08x slower as measured, the machine's
    share read as 1.0: the engine's tasks were not queued more, they did less per second they ran. The
    calibration, timed in the engine's box while it was idle, took 2.0x as long: the machine's slowdown."""
    quiet = _calibrated(400.0, 0.10, _cpu(1.02, 0.1))
    loaded = _calibrated(400.0 / 2.08, 0.20, _cpu(1.05, 0.15))
    judged = decode_speed.judge(quiet, loaded, DEFAULT)
    assert judged["queued_slowdown"] == 1.0 and judged["calibrated_slowdown"] == 2.0
    assert judged["machine_slowdown"] == 2.0 and judged["slowdown"] == pytest.approx(1.04) and judged["ok"] is True
    # the broken engine (tests/broken's decodes-slowly-after-wake, 3x) on the same loaded machine: still caught
    slow = decode_speed.judge(quiet, _calibrated(400.0 / 3 / 2.0, 0.20, _cpu(1.05, 0.15)), DEFAULT)
    assert slow["ok"] is False and slow["slowdown"] == pytest.approx(3.0)
    assert (
        "on a machine 2.00× slower than around the ordinary engine's runs (its calibration 2.00×"
        in (slow["problems"][0])
    )
    # and on a quiet one
    assert decode_speed.judge(quiet, _calibrated(400.0 / 3, 0.10, _cpu(1.02, 0.1)), DEFAULT)["slowdown"] == 3.0


def test_of_the_two_estimates_the_larger_counts_where_either_says_slower_else_the_smaller() -> None:
    quiet = _calibrated(400.0, 0.10, _cpu(1.0, 0.1))
    # busy host processes: the engine queued 1.8x more (its threads and the hogs on 2 CPUs), the idle engine's
    # calibration only 1.3x: the queue says more
    queued = _calibrated(200.0, 0.13, _cpu(1.8, 1.3))
    assert decode_speed.machine_slowdown(quiet, queued) == 1.8
    # the restore timed on a quieter machine than the ordinary engine: both below 1, the smaller (the stricter)
    busy_ordinary = _calibrated(200.0, 0.25, _cpu(1.6, 1.2))
    hidden = decode_speed.judge(busy_ordinary, _calibrated(200.0, 0.10, _cpu(1.0, 0.1)), DEFAULT)
    assert hidden["calibrated_slowdown"] == 0.4 and hidden["queued_slowdown"] == 0.625
    assert hidden["machine_slowdown"] == 0.4 and hidden["ok"] is False  # as fast as a slowed ordinary: 2.5x slower
    # no calibration on one side: the queue alone, as before
    assert decode_speed.machine_slowdown(_speed(400.0, cpu=_cpu(1.0, 0.1)), queued) == 1.8


def test_a_calibration_slowed_by_the_engines_own_spinning_is_not_the_machines() -> None:
    """An engine with a thread of its own spinning beside it after the restore slows the calibration in its box
    (waiting, not running longer) and spends its box's CPU on it: more than ``OWN_CPU_MARGIN`` times the ordinary
    engine's CPU per token says the stretch is its own (bench/decode_under_load.py: 3.9x the CPU per token, the
    calibration 3.05x slower, its run time 0.95x)."""
    quiet = _calibrated(400.0, 0.10, _cpu(1.0, 0.1))  # 0.5 CPU s over 5 runs of 64 tokens
    spinning = _speed(200.0, cpu=CpuShare(wall_s=1.0, engine_cpu_s=1.4, engine_wait_s=0.4, stretch=1.29,
                                          others_load=0.1, cpus=2))  # fmt: skip
    spinning["calibration"] = decode_speed.calibration([(0.3, 0.095, 0.205)] * 6) or {}  # type: ignore[typeddict-item]
    quiet_per_token = decode_speed.cpu_per_token(quiet)
    assert quiet_per_token is not None
    assert decode_speed.cpu_per_token(spinning) == pytest.approx(2.8 * quiet_per_token)
    judged = decode_speed.judge(quiet, spinning, DEFAULT)
    assert "calibrated_slowdown" not in judged and judged["machine_slowdown"] == 1.0 and judged["ok"] is False
    assert "its calibration" not in judged["problems"][0]  # no machine slowdown to explain
    # just under the margin: the calibration counts
    near = {**spinning, "cpu": {**spinning["cpu"], "engine_cpu_s": 0.74}}
    assert decode_speed.calibrated_slowdown(quiet, near) == 3.0  # type: ignore[arg-type]
    # a CPU that does less per second (the calibration's own run time 2x): as much more CPU per token is the machine's
    slower_cpu = {**spinning, "calibration": decode_speed.calibration([(0.3, 0.2, 0.1)] * 6)}
    assert decode_speed.calibrated_slowdown(quiet, slower_cpu) == 3.0  # type: ignore[arg-type]
    # no CPU figures: the calibration cannot be told from the engine's own work, and does not count
    assert decode_speed.calibrated_slowdown(quiet, {**_speed(200.0), "calibration": spinning["calibration"]}) is None
