"""The validated configuration of one qualification run (pure: no Docker, no network)."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import secrets
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from vsnap_qual import procedure, runtimes
from vsnap_qual.contract import (
    DECODE_TOKENS,
    DEFAULT_PROMPTS,
    DEFAULT_TIMEOUTS,
    RUNNERS,
    SECRET_ENV_NAMES,
    VLLM_CANARY_PROMPT,
    Arm,
    Runner,
)
from vsnap_qual.runtimes import DEFAULT_HOST_ROOT, RuntimeSettings

SECRET_OPTION = re.compile(r"^--(hf[-_]tok(en?)?|api[-_]k(ey?)?)$")  # vLLM accepts unambiguous abbreviations


@dataclass(frozen=True)
class Variant:
    """An engine-feature variant (``--vsnap-variant NAME=ARGS``): engine arguments added to every engine command
    of lanes of their own (LoRA, prefix caching off, a quantized KV cache), qualified like the plain lanes."""

    name: str
    args: tuple[str, ...]


@dataclass(frozen=True)
class LaneSpec:
    """What a lane is made from: one container's worth of qualification, a model runner on one image arm, in the
    plain configuration or in one engine-feature variant (the lane itself, its box, services and state, is
    ``lane.LaneRun``, whose ``spec`` this is)."""

    runner: Runner
    arm: Arm  # "head" (image under test + overlay) | "base" (unmodified base image)
    image: str
    expect: str  # behaviour expected of this arm's image: "head" | "base"
    overlaid: bool
    variant: Variant | None = None

    @property
    def name(self) -> str:
        """``v1-head``; ``v1-head-lora`` for a variant's lane (the lane's test id, box and log names)."""
        return self.peer(self.arm)

    @property
    def column(self) -> str:
        """The lane's column in the evidence and every view (its records' ``runner``, ``procedure.column``):
        ``v1``, ``v1+lora`` for a variant's lane, so that each variant is a column group of its own."""
        return procedure.column(self.runner, self.variant.name if self.variant else None)

    @property
    def variant_args(self) -> tuple[str, ...]:
        return self.variant.args if self.variant else ()

    def peer(self, arm: Arm) -> str:
        """The name of this lane's twin on ``arm`` (same runner, same variant): the base arm compares with it."""
        return f"{self.runner}-{arm}" + (f"-{self.variant.name}" if self.variant else "")

    @property
    def v2_flag(self) -> str:
        return RUNNERS[self.runner]


PORT_NAMES: tuple[str, ...] = ("ordinary", "restore-1", "restore-2", "restore-after-stop", "fresh-box", "fault")


@dataclass(frozen=True)
class QualConfig:
    """Everything the run needs, validated before any container starts."""

    image: str
    model: str
    revision: str
    tokenizer_revision: str
    dtype: str
    max_model_len: int
    gpu_memory_utilization: float
    runners: tuple[str, ...]
    prompts: tuple[str, ...]
    logprob_tolerance: float
    gpus: str
    privileges: str
    port_base: int
    timeouts: dict[str, float]
    report_dir: Path
    run_id: str
    expect: str
    base_expect: str
    fault_timeout: float
    base_image: str | None = None
    overlay: Path | None = None
    overlay_ref: str = "HEAD"
    #: ``--vsnap-unit-command``: run with ``sh -c`` from the overlay checkout (bound read-only at
    #: ``contract.CHECKOUT``) in each lane's box, JUnit to ``$VSNAP_JUNIT``; empty: no unit step
    unit_command: str = ""
    overlay_files: tuple[str, ...] = ()
    engine_args: tuple[str, ...] = ()
    model_cache: Path | None = None
    secret_names: tuple[str, ...] = SECRET_ENV_NAMES
    probe_dir: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    doctor: bool = False
    annotate: bool = False
    #: CPU smoke mode: vsnap-qual's platform plugin (vsnap_qual/smoke) declares sleep mode on vLLM's CPU platform in
    #: every lane, so real vLLM's CPU build can create and restore snapshots; no GPU, never a GPU qualification
    cpu_smoke: bool = False
    pull: str = "auto"  # when preflight pulls an image (vsnap_qual.pull)
    runtime: str = "docker"  # a registered runtime (vsnap_qual.runtimes): docker, host, or one a conftest added
    host_root: Path = field(default_factory=lambda: DEFAULT_HOST_ROOT)
    kv_tolerance: float = 0.02  # |snapshot - ordinary| / ordinary KV capacity allowed
    #: the fixed generation timed on the ordinary engine and after each restore (``vsnap_qual.engine.decode_speed``):
    #: runs per set (0: not measured) and the slowdown allowed (ordinary median / restored median)
    decode_runs: int = 5
    decode_tolerance: float = 1.75
    soak_s: float = 3.0  # liveness soak after each restore
    #: the observation window: each restored server of the lifecycle is watched (processes, /health, canaries)
    #: until at least this many seconds after its restore exited
    observe_s: float = 30.0
    canary_tokens: int = 16  # greedy tokens per multi-token canary
    #: request shapes recorded on the ordinary reference and compared after every restore (vsnap_qual.engine.shapes)
    request_shapes: tuple[str, ...] = ("repeated", "seeded", "concurrent", "long")
    concurrent_requests: int = 8
    cleanup_grace: float = 5.0  # seconds a stopped or failed tree has to be gone
    #: the random kills' seed (``--vsnap-kill-seed``; from the run's id unless given) and how many times each kill
    #: fault runs per lane (``--vsnap-chaos``)
    kill_seed: int = 0
    chaos: int = 1
    workers: int = 0  # xdist workers (-n); 0: every lane in this process, one after another
    #: ``--vsnap-variant``: each adds lanes per runner x arm, after the plain configuration's
    variants: tuple[Variant, ...] = ()

    @property
    def concurrent_runners(self) -> int:
        """How many runner lanes run at once: xdist gives each runner's lanes to one worker (head then base)."""
        return max(1, min(self.workers, len(self.runners)))

    @property
    def lanes(self) -> tuple[LaneSpec, ...]:
        """The plain configuration's lanes (every runner's head arm, then its base arm), then each variant's in the
        same order: a base arm always after the head arm it compares with."""
        runners = [cast(Runner, r) for r in self.runners]  # parse_runners admits only the contract's names
        lanes: list[LaneSpec] = []
        for variant in (None, *self.variants):
            lanes += [LaneSpec(r, "head", self.image, self.expect, self.overlay is not None, variant) for r in runners]
            if self.base_image:
                lanes += [LaneSpec(r, "base", self.base_image, self.base_expect, False, variant) for r in runners]
        return tuple(lanes)

    @property
    def columns(self) -> tuple[str, ...]:
        """The lanes' columns in the views' order: the runners, then each variant's (``v1``, ``v2``, ``v1+lora``)."""
        return tuple(dict.fromkeys(lane.column for lane in self.lanes))

    def runtime_settings(self, say: Callable[[str], None] | None = None) -> RuntimeSettings:
        return RuntimeSettings(
            host_root=self.host_root, pull_timeout=self.timeouts["serve"], probe_timeout=self.timeouts["exec"], say=say
        )

    def engine_argv(self, spec: LaneSpec | None = None) -> list[str]:
        """The engine arguments shared by ``vllm serve`` and ``vllm snapshot create``; a variant's lane adds the
        variant's after the user's ``--vsnap-engine-args``."""
        return [
            self.model,
            "--revision",
            self.revision,
            "--tokenizer-revision",
            self.tokenizer_revision,
            "--dtype",
            self.dtype,
            "--max-model-len",
            str(self.max_model_len),
            "--gpu-memory-utilization",
            str(self.gpu_memory_utilization),
            "--worker-extension-cls",
            "vsnap_probe.digest.DigestExtension",
            *self.engine_args,
            *(spec.variant_args if spec else ()),
        ]

    def fixed_ports(self, spec: LaneSpec) -> dict[str, int] | None:
        """The lane's ports when ``--vsnap-port-base`` is set; None means pick free ports."""
        if not self.port_base:
            return None
        offset = 10 * self.lanes.index(spec)  # ten ports a lane, in the lanes' order
        return {name: self.port_base + offset + i for i, name in enumerate(PORT_NAMES)}

    def secret_values(self) -> list[str]:
        """Values that must never reach an artefact: secret variables of this process's environment or of
        ``--vsnap-env``, and the values of secret engine options (``--hf-token``, ``--api-key``, any spelling)."""
        values = [os.environ.get(n, "") for n in self.secret_names]
        values += [v for n, v in self.env.items() if n in self.secret_names]
        args = [*self.engine_args, *(arg for variant in self.variants for arg in variant.args)]
        for i, arg in enumerate(args):
            name, sep, inline = arg.partition("=")
            if SECRET_OPTION.match(name):
                values.append(inline if sep else (args[i + 1] if i + 1 < len(args) else ""))
        return [v for v in values if len(v) >= 4]

    def public_options(self) -> dict[str, object]:
        """Options as recorded in the evidence (paths and tuples made JSON-friendly)."""
        out: dict[str, object] = {}
        for key, value in self.__dict__.items():
            if isinstance(value, Path):
                value = str(value)
            elif key == "variants":
                value = {variant.name: list(variant.args) for variant in self.variants}
            elif isinstance(value, tuple):
                value = list(value)
            out[key] = value
        return out


def new_run_id(now: dt.datetime | None = None) -> str:
    stamp = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(3)}"


def _get(parsed: dict[str, Any], key: str, default: Any) -> Any:
    """An option value, or its default when the caller parsed without it (tests build configs by hand)."""
    value = parsed.get(key)
    return default if value is None else value


def _with_vllm_canary(prompts: tuple[str, ...]) -> tuple[str, ...]:
    """vLLM's own canary prompt always comes first: the manifest's oracle is its output."""
    return (VLLM_CANARY_PROMPT, *(p for p in prompts if p != VLLM_CANARY_PROMPT))


def prompt_words(prompt: str) -> int:
    """A lower bound of a prompt's tokens without its tokenizer: its whitespace-separated words (the pre-tokenizers
    of the models vLLM serves split on whitespace, so no token spans two words), at least 1."""
    return max(1, len(prompt.split()))


def kill_seed(given: int | None, run_id: str) -> int:
    """The random kills' seed: the one given, else one derived from the run's id (the same in every worker of
    the run, and recorded with each kill, so any kill replays with ``--vsnap-kill-seed``)."""
    if given is not None:
        return given
    return int(hashlib.sha256(run_id.encode()).hexdigest()[:8], 16)


def build_config(parsed: dict[str, Any], rootdir: Path, run_id: str | None = None) -> QualConfig:
    """Cross-field validation and defaults: the parsed options (``options.parse_values``, untyped) become the typed
    ``QualConfig`` here. Raises ``pytest.UsageError`` naming the option and the fix."""
    runtime = parsed.get("vsnap_runtime") or "docker"
    try:
        image, base_image = runtimes.factory(runtime)(RuntimeSettings()).engines(
            parsed, str(Path(sys.executable).absolute())
        )
    except runtimes.EngineOptionError as exc:
        raise pytest.UsageError(str(exc)) from None
    missing = [
        name
        for name, value in (("--vsnap-image", image), ("--vsnap-model", parsed.get("vsnap_model")),
                            ("--vsnap-revision", parsed.get("vsnap_revision")))
        if not value
    ]  # fmt: skip
    if missing:
        raise pytest.UsageError(
            f"{', '.join(missing)} must be set (command line, VSNAP_* environment or the pytest ini file); "
            "e.g. --vsnap-image=vllm/vllm-openai:nightly --vsnap-model=Qwen/Qwen3-0.6B --vsnap-revision=<40 hex>"
        )
    if parsed.get("vsnap_overlay_files") and not parsed.get("vsnap_overlay"):
        raise pytest.UsageError("--vsnap-overlay-files needs --vsnap-overlay=<vLLM checkout> to find the files")
    prompts = _with_vllm_canary(parsed.get("vsnap_prompts") or DEFAULT_PROMPTS)
    count = _get(parsed, "vsnap_canary_prompts", 5)
    if count > len(prompts):
        raise pytest.UsageError(
            f"--vsnap-canary-prompts={count} but only {len(prompts)} prompts are available: lower it or give more "
            "prompts with --vsnap-prompts=<file>"
        )
    canary_tokens = _get(parsed, "vsnap_canary_tokens", 16)
    max_model_len = _get(parsed, "vsnap_max_model_len", 512)
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
    decode_runs = _get(parsed, "vsnap_decode_runs", 5)
    first = prompts[0]
    decode_need = DECODE_TOKENS + prompt_words(first) + 1
    if decode_runs and decode_need > max_model_len:
        raise pytest.UsageError(
            f"--vsnap-max-model-len={max_model_len} is too short for the decode-speed generation: the first canary "
            f"prompt ({prompt_words(first)} words) and its {DECODE_TOKENS} tokens need at least {decode_need}; raise "
            "--vsnap-max-model-len or leave the decode speed out (--vsnap-decode-runs=0)"
        )
    cleanup_grace = _get(parsed, "vsnap_cleanup_grace", 5.0)
    fault_timeout = _get(parsed, "vsnap_fault_timeout", 300.0)
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
    return QualConfig(
        runtime=runtime,
        pull=_get(parsed, "vsnap_pull", "auto"),
        host_root=parsed.get("vsnap_host_root") or DEFAULT_HOST_ROOT,
        image=image,
        base_image=base_image,
        model=parsed["vsnap_model"],
        revision=parsed["vsnap_revision"],
        tokenizer_revision=parsed.get("vsnap_tokenizer_revision") or parsed["vsnap_revision"],
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
        kv_tolerance=_get(parsed, "vsnap_kv_tolerance", 0.02),
        decode_runs=decode_runs,
        decode_tolerance=_get(parsed, "vsnap_decode_tolerance", 1.75),
        soak_s=_get(parsed, "vsnap_soak", 3.0),
        observe_s=_get(parsed, "vsnap_observe", 30.0),
        canary_tokens=canary_tokens,
        request_shapes=tuple(_get(parsed, "vsnap_request_shapes", ("repeated", "seeded", "concurrent", "long"))),
        concurrent_requests=_get(parsed, "vsnap_concurrent_requests", 8),
        cleanup_grace=cleanup_grace,
        kill_seed=kill_seed(parsed.get("vsnap_kill_seed"), run_id),
        chaos=_get(parsed, "vsnap_chaos", 1),
        workers=int(parsed.get("vsnap_workers") or 0),
        variants=variants,
    )
