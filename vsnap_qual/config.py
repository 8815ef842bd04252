"""The validated configuration of one qualification run (pure: no Docker, no network)."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict, cast

from vsnap_qual.contract import (
    RUNNERS,
    SECRET_ENV_NAMES,
    Arm,
    Runner,
    column,
)
from vsnap_qual.model import KnownFinding
from vsnap_qual.run.shards import ShardPlan

SECRET_OPTION = re.compile(r"^--(hf[-_]tok(en?)?|api[-_]k(ey?)?)$")  # vLLM accepts unambiguous abbreviations


@dataclass(frozen=True)
class Variant:
    """An engine-feature variant (``--vsnap-variant NAME=ARGS``): engine arguments added to every engine command
    of lanes of their own (LoRA, prefix caching off, a quantized KV cache), qualified like the plain lanes."""

    name: str
    args: tuple[str, ...]


class ParsedOptions(TypedDict, total=False):
    """Every ``--vsnap-*`` option as ``options.parse_values`` parses it (``options.OPTIONS``: the dest and what its
    parse function returns; an option with no default is None when unset), and ``vsnap_workers``, xdist's worker
    count as the plugin adds it. What ``run.configure.build_config`` turns into a :class:`QualConfig` and a runtime
    reads its engine options and doctor checks from. A test holds it to ``OPTIONS``."""

    vsnap_image: str | None
    vsnap_base_image: str | None
    vsnap_overlay: Path | None
    vsnap_overlay_ref: str
    vsnap_overlay_files: tuple[str, ...] | None
    vsnap_unit_command: str | None
    vsnap_model: str | None
    vsnap_revision: str | None
    vsnap_tokenizer_revision: str | None
    vsnap_dtype: str
    vsnap_max_model_len: int
    vsnap_gpu_memory_utilization: float
    vsnap_engine_args: tuple[str, ...] | None
    vsnap_env: dict[str, str] | None
    vsnap_variant: tuple[Variant, ...] | None
    vsnap_runners: tuple[str, ...]
    vsnap_prompts: tuple[str, ...] | None
    vsnap_logprob_tolerance: float
    vsnap_model_cache: Path | None
    vsnap_gpus: str
    vsnap_privileges: str
    vsnap_runtime: str
    vsnap_pull: str
    vsnap_python: Path | None
    vsnap_base_python: Path | None
    vsnap_host_root: Path | None
    vsnap_port_base: int
    vsnap_timeouts: dict[str, float] | None
    vsnap_report_dir: Path | None
    vsnap_expect: str
    vsnap_base_expect: str
    vsnap_fault_timeout: float
    vsnap_fault_runners: str
    vsnap_probe_dir: Path | None
    vsnap_secrets: tuple[str, ...] | None
    vsnap_doctor: bool
    vsnap_annotate: bool
    vsnap_cpu_smoke: bool
    vsnap_kv_tolerance: float
    vsnap_soak: float
    vsnap_decode_runs: int
    vsnap_decode_tolerance: float
    vsnap_observe: float
    vsnap_overlap: str
    vsnap_canary_prompts: int
    vsnap_request_shapes: tuple[str, ...]
    vsnap_concurrent_requests: int
    vsnap_canary_tokens: int
    vsnap_cleanup_grace: float
    vsnap_kill_seed: int | None
    vsnap_chaos: int
    vsnap_known_findings: tuple[KnownFinding, ...] | None
    vsnap_shard: tuple[int, int] | None
    vsnap_shard_count: int | None
    vsnap_shard_times: Path | None
    vsnap_plan_history: Path | None
    vsnap_workers: int


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
        """The lane's column in the evidence and every view (its records' ``runner``, ``contract.column``):
        ``v1``, ``v1+lora`` for a variant's lane, so that each variant is a column group of its own."""
        return column(self.runner, self.variant.name if self.variant else None)

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
    runtime: str  # a registered runtime (vsnap_qual.runtimes): docker, host, or one a conftest added
    host_root: Path  # the host runtime's lane directories
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
    pull: str = "auto"  # when preflight pulls an image (vsnap_qual.runtimes.pull)
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
    #: ``--vsnap-fault-runners``: ``once``, the kinds refused before any engine starts (``faults.once``) run on one
    #: runner per image and arm; ``every``, on every runner
    fault_runners: str = "once"
    workers: int = 0  # xdist workers (-n); 0: every lane in this process, one after another
    #: ``--vsnap-overlap`` (issue 45): ``lanes``, each lane a worker's scope (lanes holding no GPU run at once under
    #: ``-n``), or ``off``, each runner's lanes one worker's (``plugin.lane_scheduling.overlap_plan``)
    overlap: str = "lanes"
    #: ``--vsnap-variant``: each adds lanes per runner x arm, after the plain configuration's
    variants: tuple[Variant, ...] = ()
    #: ``--vsnap-known-findings``: failures already recorded upstream, shown as KNOWN (``report.known``); recorded
    #: with the run's options, so the verdict, judged at assembly, reads them there
    known_findings: tuple[KnownFinding, ...] = ()
    #: issue 46: this run's shard of the matrix (``--vsnap-shard``, or the scheduler's); None: the whole matrix
    shard: ShardPlan | None = None
    #: ``--vsnap-plan-history``: kept runs the plan line estimates from (``timing.plan``); None: no estimate
    plan_history: Path | None = None

    @property
    def concurrent_runners(self) -> int:
        """How many runner lanes run at once: xdist gives each runner's lanes to one worker (head then base)."""
        return max(1, min(self.workers, len(self.runners)))

    @property
    def lanes(self) -> tuple[LaneSpec, ...]:
        """The lanes this run qualifies: the matrix's (:attr:`matrix_lanes`), or this shard's share of them."""
        if self.shard is None:
            return self.matrix_lanes
        mine = set(self.shard.lanes)
        return tuple(lane for lane in self.matrix_lanes if lane.name in mine)

    @property
    def matrix_lanes(self) -> tuple[LaneSpec, ...]:
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
        offset = 10 * self.matrix_lanes.index(spec)  # ten ports a lane, in the matrix's order (every shard alike)
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
            elif key == "shard":  # recorded apart, whole (the session record's ``shard``)
                value = str(self.shard.shard) if self.shard else None
            elif isinstance(value, tuple):
                value = list(value)
            out[key] = value
        return out


def new_run_id(now: dt.datetime | None = None) -> str:
    stamp = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(3)}"


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
