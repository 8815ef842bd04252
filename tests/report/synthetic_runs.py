"""Synthetic evidence for the report tests (module ``synthetic_runs``; the fixtures are in conftest.py).

``write_evidence`` lays out a report directory (``evidence.jsonl`` + per-step log files) for runners × arms ×
every lifecycle step, with fault steps, parameter digests, canaries and KV figures. It is also loaded by
``bench/bench_report.py`` (by file path) so the benchmark renders the same shape of data at scale.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, cast

from vsnap_qual import checks, model, options, procedure
from vsnap_qual.engine.client import CanaryOutput
from vsnap_qual.faults import BUILTIN_FAULTS
from vsnap_qual.faults.kinds.hook import HookParams
from vsnap_qual.report import schema
from vsnap_qual.run.configure import build_config

SECRET = "secret-value-123"
RUN_ID = "20261129-120000-ab12"
PACKAGE_DIR = "/usr/local/lib/python3.12/dist-packages/vllm"
PROMPTS: tuple[str, ...] = (
    "The capital of France is",
    "1, 2, 3, 4,",
    "def fibonacci(n):",
    'Snapshots restore an engine <quickly> & "exactly"',
    "El gato",
)


def parameter_names(count: int) -> list[str]:
    """Qwen3-like parameter names, ``count`` of them, in model order."""
    per_layer = [
        "self_attn.q_proj.weight",
        "self_attn.k_proj.weight",
        "self_attn.v_proj.weight",
        "self_attn.o_proj.weight",
        "self_attn.q_norm.weight",
        "self_attn.k_norm.weight",
        "mlp.gate_up_proj.weight",
        "mlp.down_proj.weight",
        "input_layernorm.weight",
        "post_attention_layernorm.weight",
    ]
    names = ["model.embed_tokens.weight"]
    layer = 0
    while len(names) < count - 2:
        names.extend(f"model.layers.{layer}.{p}" for p in per_layer)
        layer += 1
    return [*names[: max(count - 2, 0)], "model.norm.weight", "lm_head.weight"][:count]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class RunSpec:
    """What the synthetic run looks like."""

    runners: Sequence[str] = ("v1", "v2")
    arms: Sequence[str] = ("head", "base")
    params: int = 30
    #: (runner, step, parameter) whose digest differs from ordinary on the head arm.
    changed_digests: Sequence[tuple[str, str, str]] = (("v2", "restore-2", "model.norm.weight"),)
    #: (runner, step, prompt index, Δ logprob) on the head arm.
    canary_deltas: Sequence[tuple[str, str, int, float]] = (("v1", "restore-1", 2, 0.0004),)
    #: (runner, step, prompt index) whose token differs on the head arm (a breaking change).
    canary_token_flips: Sequence[tuple[str, str, int]] = ()
    failed_steps: Sequence[tuple[str, str, str]] = ()
    complete: bool = True
    #: Stop writing after this many step records (a killed run); None writes them all.
    stop_after_steps: int | None = None
    secret_in_evidence: str | None = None
    #: ``--vsnap-secrets``: extra secret variable names the run records.
    secret_names: Sequence[str] = ()
    log_lines: int = 30
    tolerance: float = 0.001
    kv: dict[tuple[str, str], tuple[int, int]] = field(
        default_factory=lambda: {
            ("v1", "head"): (61_440, 61_296),
            ("v1", "base"): (61_440, 61_296),
            ("v2", "head"): (63_104, 63_088),
            ("v2", "base"): (63_104, 63_088),
        }
    )
    step_seconds_scale: float = 1.0
    #: Labels (``fnmatch`` patterns, e.g. ``*/fault*``) the user's selection left out, and how (``-m`` …).
    left_out: Sequence[str] = ()
    markexpr: str = ""
    #: Labels the run selected but skipped, with the skip message.
    skipped_steps: Sequence[tuple[str, str]] = ()
    #: Harness errors: (phase, nodeid, message).
    harness_errors: Sequence[tuple[str, str, str]] = ()
    #: Validate every record against vsnap_qual.model as it is written (off only for the render benchmark's
    #: third, synthetic arm, which no harness run produces).
    validate: bool = True
    #: ``--vsnap-cpu-smoke`` (with ``--vsnap-gpus=none``, as that mode requires).
    cpu_smoke: bool = False
    #: pytest's own counts, as the session_end records them (None: not recorded, as before they were)
    pytest_counts: dict[str, int] | None = None
    #: the session's ``invocation`` and ``harness_source`` (None: not recorded, as before they were)
    invocation: dict[str, Any] | None = None
    harness_source: dict[str, Any] | None = None
    #: ``--vsnap-variant`` (name, engine args): each adds a column per runner (``v1+lora``) after the plain ones
    variants: Sequence[tuple[str, str]] = ()

    @property
    def columns(self) -> list[str]:
        """The lanes' columns as the harness records them (``config.QualConfig.columns``)."""
        return [*self.runners, *(f"{r}+{name}" for name, _ in self.variants for r in self.runners)]


class _Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc)

    def tick(self, seconds: float) -> str:
        self.now += timedelta(seconds=seconds)
        return self.iso()

    def iso(self) -> str:
        return self.now.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _digests(names: list[str], changed: set[str], lane_seed: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, name in enumerate(names):
        sha = _sha(name + ("|changed|" + lane_seed if name in changed else ""))
        out[name] = {
            "sha256": sha,
            "shape": [1024, 64 * (i % 4 + 1)],
            "dtype": "float16",
            "source": "parameter",
        }
    return out


def _canaries(runner: str, deltas: dict[int, float], flips: set[int]) -> list[dict[str, Any]]:
    rows = []
    for i, prompt in enumerate(PROMPTS):
        token = 1000 + 17 * i + (1 if runner == "v2" else 0)
        if i in flips:
            token += 5
        logprob = -0.25 * (i + 1) - (0.01 if runner == "v2" else 0.0) + deltas.get(i, 0.0)
        rows.append({"prompt": prompt, "token_ids": [token], "text": f" tok{token}", "logprob": logprob})
    return rows


def canary_compare(expected: list[dict[str, Any]], actual: list[dict[str, Any]], tolerance: float) -> list[Any]:
    """What a restore step records: the harness's own comparison (``checks.compare_canary``)."""
    return [
        checks.compare_canary(CanaryOutput(**e), CanaryOutput(**a), tolerance)
        for e, a in zip(expected, actual, strict=True)
    ]


def _restore_failure(changed: set[str], compare: list[dict[str, Any]]) -> str:
    problems = []
    if changed:
        problems.append(f"parameter digests changed: {', '.join(sorted(changed))}")
    bad = [c["prompt"] for c in compare if not c["ok"]]
    if bad:
        problems.append(f"canary differs from the ordinary reference for {len(bad)} prompt(s)")
    return "; ".join(problems)


def fault_evidence(
    fault: procedure.Fault, behaviour: str, cleanup: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A fault step's ``expected``, ``observed`` and ``cleanup`` as a run that met the real expectation table
    (``vsnap_qual.faults.BUILTIN_FAULTS``' expectations) records them: many expected values are "no" (HTTP never bound,
    the base arm's missing hook never fired, the truncated image not unchanged, base SIGTERM's cleanup recorded, not
    judged)."""
    want = fault.expect(behaviour)
    phase = want.error_phase if want.error_phase not in (None, "absent") else None
    exit_code = want.exit_code if isinstance(want.exit_code, int) else 1
    observed = {
        "exit_code": exit_code,
        "http_bound": bool(want.http_bound),
        "error_json": {"error": f"vsnap fault: {fault.id}", "error_type": "RuntimeError", "phase": phase}
        if phase
        else None,
        "phase": phase,
        "fired": want.fires,
        "artifact_unchanged": want.artifact_unchanged if want.artifact_unchanged is not None else fault.kind != "image",
        "stderr_tail": f"RuntimeError: vsnap fault: {fault.id}" + (f" ({want.message})" if want.message else ""),
    }
    judged = {**cleanup, "judged": want.cleanup}
    if not want.cleanup:  # recorded, not judged: what the released controller leaves behind
        judged.update(ok=False, pids_gone=False, detail="the released child lived on (recorded, not judged)")
    if fault.kind == "kill":  # the kill kind's audit after the harness's sweep: judged by the kind, always
        judged["after_sweep"] = {**cleanup, "swept": [4242] if not want.cleanup else []}
    return asdict(want), observed, judged


def open_results(step: model.Step) -> dict[str, Any]:
    """A step's results as the open JSON object they are in the evidence: a test reads or edits any field of them
    (the report reads them by their step's results type, ``procedure.results_as``)."""
    return cast(dict[str, Any], step["results"])


@functools.cache
def record_validator(kind: str) -> Any:
    """A JSON Schema validator of one evidence record kind, generated from ``vsnap_qual.model``."""
    import jsonschema

    return jsonschema.Draft202012Validator(schema.record_schema(kind))


def recorded_options(spec: RunSpec, report_dir: Path) -> dict[str, Any]:
    """The session's options exactly as the harness records them: a real ``QualConfig.public_options()``."""
    argv = [
        "--vsnap-image=vllm/vllm-openai:nightly-593df82f",
        "--vsnap-model=Qwen/Qwen3-0.6B",
        "--vsnap-revision=c1899de289a04d12100db370d81485cdf75e47ca",
        f"--vsnap-runners={','.join(spec.runners)}",
        f"--vsnap-logprob-tolerance={spec.tolerance}",
        f"--vsnap-report-dir={report_dir}",
    ]
    if "base" in spec.arms:
        argv.append("--vsnap-base-image=vllm/vllm-openai:v0.33.0")
    if spec.secret_names:
        argv.append(f"--vsnap-secrets={','.join(spec.secret_names)}")
    if spec.secret_in_evidence:
        argv.append(f"--vsnap-engine-args=--hf-token {spec.secret_in_evidence}")
    if spec.cpu_smoke:
        argv += ["--vsnap-cpu-smoke", "--vsnap-gpus=none"]
    argv += [f"--vsnap-variant={name}={args}" for name, args in spec.variants]
    parsed = options.parse_standalone(argv, {})
    return build_config(parsed, report_dir, run_id=RUN_ID).public_options()


def required_coverage(spec: RunSpec) -> dict[str, Any]:
    """The session's ``coverage`` record, computed as the plugin computes it (``procedure.required``)."""
    lanes = [(runner, arm, arm == "head") for runner in spec.columns for arm in spec.arms]
    return {
        "runners": spec.columns,
        "arms": list(spec.arms),
        "overlay": "head" in spec.arms,
        "faults": [f.id for f in BUILTIN_FAULTS],
        "observe_s": 30.0,
        "request_shapes": ["repeated", "seeded", "concurrent", "long"],
        "required": procedure.required(lanes, [f.id for f in BUILTIN_FAULTS]),
    }


def write_evidence(report_dir: Path, spec: RunSpec | None = None) -> Path:
    """Write a synthetic run (``evidence.jsonl`` + log files) into ``report_dir``; returns the JSONL path."""
    spec = spec or RunSpec()
    report_dir.mkdir(parents=True, exist_ok=True)
    clock = _Clock()
    names = parameter_names(spec.params)
    lines: list[str] = []
    secret = spec.secret_in_evidence or ""

    def emit(kind: str, **fields: Any) -> None:
        record = {"kind": kind, "time": clock.iso(), **fields}
        # the synthetic run is the model's evidence: a record the harness could not write fails here
        problem = (
            next(record_validator(kind).iter_errors(json.loads(json.dumps(record))), None) if spec.validate else None
        )
        if problem is not None:
            raise AssertionError(f"synthetic {kind} record breaks vsnap_qual.model: {problem.message}")
        lines.append(json.dumps(record))

    emit(
        "session",
        run_id=RUN_ID,
        harness_version="0.1.0",
        started=clock.iso(),
        options=recorded_options(spec, report_dir),
        coverage=required_coverage(spec),
        probe={"source": "/opt/vsnap-qual/vsnap_qual/probe", "path": "probe", "sha256": "ab" * 32, "files": 7},
        host={
            "kernel": "6.8.0-45-generic",
            "hostname": "gpu-runner-7",
            "docker_version": "27.3.1",
            "python": "3.11.7",
        },
        **({"invocation": spec.invocation} if spec.invocation is not None else {}),
        **({"harness_source": spec.harness_source} if spec.harness_source is not None else {}),
    )
    required = required_coverage(spec)["required"]
    selected = [label for label in required if not any(fnmatch.fnmatch(label, p) for p in spec.left_out)]
    emit(
        "plan",
        worker="main",
        selected=selected,
        deselected=[label for label in required if label not in selected],
        selection={"args": ["suites/"], "keyword": "", "markexpr": spec.markexpr, "deselect": []},
    )
    skipped = dict(spec.skipped_steps)
    for phase, nodeid, message in spec.harness_errors:
        emit("harness_error", phase=phase, nodeid=nodeid, message=message)
    for runner in spec.columns:
        for arm in spec.arms:
            emit(
                "environment",
                runner=runner,
                arm=arm,
                **({"variant": runner.partition("+")[2]} if "+" in runner else {}),
                image={
                    "ref": "vllm/vllm-openai:nightly-593df82f" if arm == "head" else "vllm/vllm-openai:v0.33.0",
                    "id": "sha256:" + _sha(arm)[:64],
                    "repo_digests": ["vllm/vllm-openai@sha256:" + _sha(arm + "d")],
                    "labels": {
                        "org.opencontainers.image.revision": "593df82f" + "0" * 32,
                        "ai.vllm.build.commit": "593df82f" + "0" * 32,
                    },
                    "platform": "linux/amd64",
                },
                container_id=_sha(runner + arm)[:12],
                versions={
                    "vllm": "0.33.1.dev42+g593df82f",
                    "torch": "2.15.0.dev20260928+cu130",
                    "python": "3.12.11",
                    "cuda": "13.0",
                    "driver": "595.71.05",
                    "criu": "4.2.1",
                },
                gpu={"name": "NVIDIA H200", "uuid": "GPU-" + _sha("gpu")[:8], "memory_mib": 143771},
                package_dir=PACKAGE_DIR,
            )

    steps_written = 0
    stopped = False
    any_failed = False

    def step(
        runner: str,
        arm: str,
        name: str,
        seconds: float,
        results: dict[str, Any],
        argv: list[str],
        exit_code: int | None = 0,
        message: str = "",
        fail_message: str = "",
    ) -> None:
        nonlocal steps_written, stopped, any_failed
        if stopped or procedure.label(runner, arm, name) not in selected:
            return
        skip = skipped.get(procedure.label(runner, arm, name))
        if spec.stop_after_steps is not None and steps_written >= spec.stop_after_steps:
            stopped = True
            return
        failed = (runner, arm, name) in set(spec.failed_steps) or bool(fail_message)
        any_failed = any_failed or failed
        started = clock.iso()
        ended = clock.tick(seconds * spec.step_seconds_scale)
        test_name = name.replace("-", "_").replace(":", "_")
        log_rel = f"logs/{runner}-{arm}/{name.replace(':', '-')}.log"
        log_path = report_dir / log_rel
        log_path.parent.mkdir(parents=True, exist_ok=True)
        body = [f"INFO {i:03d} {name} {runner}/{arm}: engine line <{i}> & more" for i in range(spec.log_lines)]
        if secret:
            body.append(f"DEBUG env HF_TOKEN={secret}")
        if failed:
            body.append("Traceback (most recent call last):\nRuntimeError: snapshot restore failed")
        log_path.write_text("\n".join(body) + "\n")
        emit(
            "step",
            runner=runner,
            arm=arm,
            **({"variant": runner.partition("+")[2]} if "+" in runner else {}),
            step=name,
            nodeid=f"suites/test_lifecycle.py::test_{test_name}[{runner}-{arm}]",
            outcome="skipped" if skip is not None else "failed" if failed else "passed",
            message=skip
            if skip is not None
            else fail_message or ("restore exited 1: snapshot restore failed" if failed else message),
            argv=argv,
            exit_code=1 if failed and not fail_message else exit_code,
            started=started,
            ended=ended,
            seconds=seconds * spec.step_seconds_scale,
            logs=[log_rel],
            results=results,
        )
        steps_written += 1

    base_args = [
        "--revision",
        "c1899de289a04d12100db370d81485cdf75e47ca",
        "--dtype",
        "float16",
        "--max-model-len",
        "512",
    ]
    for runner in spec.columns:
        head_reference: tuple[list[dict[str, Any]], dict[str, Any]] | None = None
        for arm in spec.arms:
            cleanup = {
                "pids_gone": True,
                "ports_closed": True,
                "gpu_idle": True,
                "link_remaps_equal": True,
                "ok": True,
                "detail": "",
            }
            ordinary_kv, snapshot_kv = spec.kv.get((runner, arm), (50_000, 49_900))
            ordinary_canary = _canaries(runner, {}, set())
            ordinary_digests = _digests(names, set(), "")
            if arm == "head":
                step(
                    runner,
                    arm,
                    "overlay",
                    0.4,
                    {
                        "files": [
                            {
                                "host_path": f"/src/vllm/vllm/snapshot/{mod}.py",
                                "module": f"vllm.snapshot.{mod}",
                                "image_path": f"{PACKAGE_DIR}/snapshot/{mod}.py",
                                "host_sha256": _sha(mod),
                                "imported": [
                                    {
                                        "pid": 100 + j,
                                        "role": role,
                                        "path": f"/usr/.../vllm/snapshot/{mod}.py",
                                        "sha256": _sha(mod),
                                    }
                                    for j, role in enumerate(("api_server", "engine_core", "worker"))
                                ],
                                "ok": True,
                            }
                            for mod in ("engine", "server", "controller")
                        ]
                    },
                    [],
                )
            step(
                runner,
                arm,
                "ordinary",
                48.0 + (3 if runner == "v2" else 0),
                {
                    "canary": ordinary_canary,
                    "digests": ordinary_digests,
                    "kv_tokens": ordinary_kv,
                    "kv_source": "metrics",
                    "ready_seconds": 41.5 + (3 if runner == "v2" else 0),
                    "notice_latency_s": 0.21,
                    "cleanup": cleanup,
                },
                ["vllm", "serve", "Qwen/Qwen3-0.6B", *base_args, "--port", "8000"],
            )
            if arm == "head":
                head_reference = (ordinary_canary, ordinary_digests)
            elif head_reference is not None:
                step(
                    runner,
                    arm,
                    procedure.VS_HEAD,
                    0.1,
                    {
                        "canary_compare": canary_compare(head_reference[0], ordinary_canary, spec.tolerance),
                        "digest_compare": checks.compare_digests(head_reference[1], ordinary_digests),
                    },
                    [],
                )
            step(
                runner,
                arm,
                "create",
                95.0,
                {"kv_tokens": snapshot_kv, "artifact_bytes": 3_452_000_000, "child_log": "logs/child.log"},
                [
                    "vllm",
                    "snapshot",
                    "create",
                    "Qwen/Qwen3-0.6B",
                    *base_args,
                    "--snapshot-dir",
                    "/vsnap/work/artifact",
                ],
            )
            inspect_results = {
                "sha256": _sha("manifest" + runner + arm),
                "manifest": {"complete": True},
                "checks": [
                    {"name": "complete", "ok": True, "detail": ""},
                    {"name": "vllm_version", "ok": True, "detail": "0.33.1.dev42"},
                ],
            }
            step(
                runner,
                arm,
                "inspect",
                1.2,
                inspect_results,
                ["vllm", "snapshot", "inspect", "/vsnap/work/artifact"],
            )
            for restore in procedure.RESTORES:
                if restore == "restore-2":
                    step(
                        runner,
                        arm,
                        "restart",
                        6.5,
                        {
                            **inspect_results,
                            "sha256_before": inspect_results["sha256"],
                            "sha256_after": inspect_results["sha256"],
                            "container_id_before": _sha(runner + arm)[:12],
                            "container_id_after": _sha(runner + arm)[:12],
                        },
                        ["docker", "restart"],
                    )
                head = arm == "head"
                changed = {p for r, s, p in spec.changed_digests if head and r == runner and s == restore}
                deltas = {i: d for r, s, i, d in spec.canary_deltas if head and r == runner and s == restore}
                flips = {i for r, s, i in spec.canary_token_flips if head and r == runner and s == restore}
                canary = _canaries(runner, deltas, flips)
                digests = _digests(names, changed, runner + restore)
                compare = canary_compare(ordinary_canary, canary, spec.tolerance)
                step(
                    runner,
                    arm,
                    restore,
                    9.0 + (1 if restore == "restore-2" else 0),
                    {
                        "canary": canary,
                        "digests": digests,
                        "kv_tokens": snapshot_kv,
                        "kv_source": "child-log",
                        "ready_seconds": 7.8 + (0.6 if restore == "restore-2" else 0),
                        "notice_latency_s": 0.18,
                        "canary_compare": compare,
                        "digest_compare": checks.compare_digests(ordinary_digests, digests),
                        "kv_ordinary": ordinary_kv,
                        "cleanup": cleanup,
                    },
                    [
                        "vllm",
                        "snapshot",
                        "restore",
                        "/vsnap/work/artifact",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        "8000",
                    ],
                    fail_message=_restore_failure(changed, compare),
                )
            step(runner, arm, procedure.FAULT_ARTIFACT, 20.0, {"artifact_bytes": 3_452_000_000}, [])
            expect = "head" if arm == "head" else "base"
            for fault in BUILTIN_FAULTS:
                stall = isinstance(fault.params, HookParams) and fault.params.point == "wake-stall"
                expected, observed, fault_cleanup = fault_evidence(fault, expect, cleanup)
                step(
                    runner,
                    arm,
                    fault.step,
                    12.0 if not stall else 40.0,
                    {
                        "fault": fault.id,
                        "title": fault.title,
                        "kind": fault.kind,
                        "expect": expect,
                        "expect_reason": f"--vsnap-{expect}-expectations",
                        "expected": expected,
                        "observed": observed,
                        "cleanup": fault_cleanup,
                        "followup_restore": {"exit_code": 0, "canary_ok": True},
                        "mismatches": [],
                    },
                    ["vllm", "snapshot", "restore", "/vsnap/work/artifact"],
                    exit_code=observed["exit_code"],
                )
    if spec.complete and not stopped:
        counts = {"pytest_counts": dict(spec.pytest_counts)} if spec.pytest_counts is not None else {}
        emit("session_end", ended=clock.tick(1), exitstatus=1 if any_failed else 0, complete=True, **counts)
    path = report_dir / "evidence.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


#: ``make_run(name, spec=None)`` → the report directory it wrote.
MakeRun = Callable[..., Path]
