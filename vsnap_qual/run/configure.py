"""The options become the run's configuration: cross-field validation and defaults turn the parsed options
(``options.parse_values``) into the typed :class:`vsnap_qual.config.QualConfig`, the chosen runtime saying what its
engine options mean (``Runtime.engines``). Refusals raise ``pytest.UsageError`` naming the option and the fix."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

import pytest

from vsnap_qual import runtimes
from vsnap_qual.config import ParsedOptions, QualConfig, kill_seed, new_run_id, prompt_words
from vsnap_qual.contract import DECODE_TOKENS, DEFAULT_PROMPTS, DEFAULT_TIMEOUTS, SECRET_ENV_NAMES, VLLM_CANARY_PROMPT
from vsnap_qual.run import shards

T = TypeVar("T")


def _given(value: T | None, default: T) -> T:
    """An option's value, or its default when the caller parsed without it (tests build configs by hand)."""
    return default if value is None else value


def _with_vllm_canary(prompts: tuple[str, ...]) -> tuple[str, ...]:
    """vLLM's own canary prompt always comes first: the manifest's oracle is its output."""
    return (VLLM_CANARY_PROMPT, *(p for p in prompts if p != VLLM_CANARY_PROMPT))


def build_config(
    parsed: ParsedOptions, rootdir: Path, run_id: str | None = None, environ: Mapping[str, str] | None = None
) -> QualConfig:
    """Cross-field validation and defaults: the parsed options (``options.parse_values``) become the validated
    ``QualConfig`` here. Raises ``pytest.UsageError`` naming the option and the fix. ``environ`` (default this
    process's) is where a scheduler says which shard this is (``run.shards``)."""
    runtime = parsed.get("vsnap_runtime") or runtimes.DEFAULT
    try:
        image, base_image = runtimes.create(runtime).engines(parsed, str(Path(sys.executable).absolute()))
    except runtimes.EngineOptionError as exc:
        raise pytest.UsageError(str(exc)) from None
    model, revision = parsed.get("vsnap_model") or "", parsed.get("vsnap_revision") or ""
    missing = [
        name
        for name, value in (("--vsnap-image", image), ("--vsnap-model", model), ("--vsnap-revision", revision))
        if not value
    ]
    if missing:
        raise pytest.UsageError(
            f"{', '.join(missing)} must be set (command line, VSNAP_* environment or the pytest ini file); "
            "e.g. --vsnap-image=vllm/vllm-openai:nightly --vsnap-model=Qwen/Qwen3-0.6B --vsnap-revision=<40 hex>"
        )
    if parsed.get("vsnap_overlay_files") and not parsed.get("vsnap_overlay"):
        raise pytest.UsageError("--vsnap-overlay-files needs --vsnap-overlay=<vLLM checkout> to find the files")
    prompts = _with_vllm_canary(parsed.get("vsnap_prompts") or DEFAULT_PROMPTS)
    count = _given(parsed.get("vsnap_canary_prompts"), 5)
    if count > len(prompts):
        raise pytest.UsageError(
            f"--vsnap-canary-prompts={count} but only {len(prompts)} prompts are available: lower it or give more "
            "prompts with --vsnap-prompts=<file>"
        )
    canary_tokens = _given(parsed.get("vsnap_canary_tokens"), 16)
    max_model_len = _given(parsed.get("vsnap_max_model_len"), 512)
    longest = max(prompts[:count], key=prompt_words)
    need = canary_tokens + prompt_words(longest) + 1
    if need > max_model_len:
        shown = longest if len(longest) <= 60 else longest[:59] + "…"
        raise pytest.UsageError(
            f"--vsnap-max-model-len={max_model_len} is too short for --vsnap-canary-tokens={canary_tokens}: the "
            f"longest canary prompt ({shown!r}, {prompt_words(longest)} words, at least as many tokens) and its "
            f"{canary_tokens} answer tokens need at least {need}; raise --vsnap-max-model-len, lower "
            "--vsnap-canary-tokens or shorten the prompt (--vsnap-prompts)"
        )
    decode_runs = _given(parsed.get("vsnap_decode_runs"), 5)
    first = prompts[0]
    decode_need = DECODE_TOKENS + prompt_words(first) + 1
    if decode_runs and decode_need > max_model_len:
        raise pytest.UsageError(
            f"--vsnap-max-model-len={max_model_len} is too short for the decode-speed generation: the first canary "
            f"prompt ({prompt_words(first)} words) and its {DECODE_TOKENS} tokens need at least {decode_need}; raise "
            "--vsnap-max-model-len or leave the decode speed out (--vsnap-decode-runs=0)"
        )
    cleanup_grace = _given(parsed.get("vsnap_cleanup_grace"), 5.0)
    fault_timeout = _given(parsed.get("vsnap_fault_timeout"), 300.0)
    if cleanup_grace * 2 > fault_timeout:
        raise pytest.UsageError(
            f"--vsnap-cleanup-grace={cleanup_grace:g} must be at most half of --vsnap-fault-timeout "
            f"({fault_timeout:g} s): a leftover must be found long before the engine's own deadline"
        )
    cpu_smoke = bool(parsed.get("vsnap_cpu_smoke"))
    if cpu_smoke and (parsed.get("vsnap_gpus") or "auto") not in ("auto", "none"):
        raise pytest.UsageError(
            f"--vsnap-cpu-smoke cannot run with --vsnap-gpus={parsed.get('vsnap_gpus')}: CPU smoke mode declares "
            "sleep mode on vLLM's CPU platform and is refused where a lane has a GPU; use --vsnap-gpus=none (or drop "
            "--vsnap-cpu-smoke to qualify on the GPU)"
        )
    unit_command = (parsed.get("vsnap_unit_command") or "").strip()
    if unit_command and not parsed.get("vsnap_overlay"):
        raise pytest.UsageError(
            "--vsnap-unit-command runs from the overlay checkout, and no --vsnap-overlay was given: add "
            "--vsnap-overlay=<your vLLM checkout> (the command's working directory, with its tests)"
        )
    variants = tuple(parsed.get("vsnap_variant") or ())
    port_base = parsed["vsnap_port_base"]
    lane_count = len(parsed["vsnap_runners"]) * (2 if base_image else 1) * (1 + len(variants))
    if port_base and port_base + 10 * lane_count > 65535:
        raise pytest.UsageError(
            f"--vsnap-port-base={port_base} leaves too few ports for {lane_count} lanes (ten each, up to "
            f"{port_base + 10 * lane_count - 1}): lower it to at most {65535 - 10 * lane_count + 1}, or 0 to pick "
            "free ports"
        )
    run_id = run_id or new_run_id()
    report_dir = parsed.get("vsnap_report_dir") or (rootdir / "reports" / run_id)
    if not report_dir.is_absolute():
        report_dir = (rootdir / report_dir).resolve()
    secret_names = tuple(dict.fromkeys((*SECRET_ENV_NAMES, *(parsed.get("vsnap_secrets") or ()))))
    qual = QualConfig(
        runtime=runtime,
        pull=_given(parsed.get("vsnap_pull"), "auto"),
        host_root=parsed.get("vsnap_host_root") or runtimes.DEFAULT_HOST_ROOT,
        image=image,
        base_image=base_image,
        model=model,
        revision=revision,
        tokenizer_revision=parsed.get("vsnap_tokenizer_revision") or revision,
        dtype=parsed["vsnap_dtype"],
        max_model_len=max_model_len,
        gpu_memory_utilization=parsed["vsnap_gpu_memory_utilization"],
        runners=parsed["vsnap_runners"],
        prompts=prompts[:count],
        logprob_tolerance=parsed["vsnap_logprob_tolerance"],
        gpus=parsed["vsnap_gpus"],
        privileges=parsed["vsnap_privileges"],
        port_base=port_base,
        timeouts=parsed.get("vsnap_timeouts") or dict(DEFAULT_TIMEOUTS),
        report_dir=report_dir,
        run_id=run_id,
        expect=parsed["vsnap_expect"],
        base_expect=parsed["vsnap_base_expect"],
        fault_timeout=parsed["vsnap_fault_timeout"],
        overlay=parsed.get("vsnap_overlay"),
        overlay_ref=parsed.get("vsnap_overlay_ref") or "HEAD",
        unit_command=unit_command,
        overlay_files=parsed.get("vsnap_overlay_files") or (),
        engine_args=parsed.get("vsnap_engine_args") or (),
        model_cache=parsed.get("vsnap_model_cache"),
        secret_names=secret_names,
        probe_dir=parsed.get("vsnap_probe_dir"),
        env=parsed.get("vsnap_env") or {},
        doctor=bool(parsed.get("vsnap_doctor")),
        annotate=bool(parsed.get("vsnap_annotate")),
        cpu_smoke=cpu_smoke,
        kv_tolerance=_given(parsed.get("vsnap_kv_tolerance"), 0.02),
        decode_runs=decode_runs,
        decode_tolerance=_given(parsed.get("vsnap_decode_tolerance"), 1.75),
        soak_s=_given(parsed.get("vsnap_soak"), 3.0),
        observe_s=_given(parsed.get("vsnap_observe"), 30.0),
        canary_tokens=canary_tokens,
        request_shapes=tuple(_given(parsed.get("vsnap_request_shapes"), ("repeated", "seeded", "concurrent", "long"))),
        concurrent_requests=_given(parsed.get("vsnap_concurrent_requests"), 8),
        cleanup_grace=cleanup_grace,
        kill_seed=kill_seed(parsed.get("vsnap_kill_seed"), run_id),
        chaos=_given(parsed.get("vsnap_chaos"), 1),
        fault_runners=_given(parsed.get("vsnap_fault_runners"), "once"),
        workers=int(parsed.get("vsnap_workers") or 0),
        overlap=parsed.get("vsnap_overlap") or "lanes",
        variants=variants,
        known_findings=parsed.get("vsnap_known_findings") or (),
        plan_history=parsed.get("vsnap_plan_history"),
    )
    return dataclasses.replace(qual, shard=shard_plan(parsed, qual, os.environ if environ is None else environ))


def shard_plan(parsed: ParsedOptions, qual: QualConfig, environ: Mapping[str, str]) -> shards.ShardPlan | None:
    """This run's shard of the matrix (issue 46): ``--vsnap-shard``, or the scheduler's environment; balanced by
    ``--vsnap-shard-times`` (a previous run's step seconds per lane) when given, else by lane counts."""
    times = parsed.get("vsnap_shard_times")
    try:
        shard = shards.resolve_shard(parsed.get("vsnap_shard"), parsed.get("vsnap_shard_count"), environ)
    except shards.ShardError as exc:
        raise pytest.UsageError(f"sharding: {exc}") from None
    if shard is None:
        if times is not None:
            raise pytest.UsageError(
                f"--vsnap-shard-times={times} balances shards, and this run is none: give --vsnap-shard=K/N (or run "
                "it as a scheduler's array task), or drop --vsnap-shard-times"
            )
        return None
    seconds = None
    if times is not None:
        try:
            steps = json.loads(times.read_text(encoding="utf-8")).get("steps")
        except (OSError, ValueError, AttributeError) as exc:
            raise pytest.UsageError(f"--vsnap-shard-times={times}: not a readable results.json ({exc})") from None
        if not isinstance(steps, list) or not steps:
            raise pytest.UsageError(
                f"--vsnap-shard-times={times}: the run it records has no step times; give a finished run's "
                "results.json, or drop --vsnap-shard-times (shards are then balanced by lane counts)"
            )
        seconds = shards.lane_seconds([s for s in steps if isinstance(s, dict)])
    lanes = [(lane.name, lane.column) for lane in qual.matrix_lanes]
    return shards.plan(shard, lanes, seconds, str(times))
