"""The qualification steps, each a short sequence over a lane's toolset (:class:`LaneTools`), in the order a
maintainer runs them by hand: observe through the tools, record the results, judge with ``checks``.

The toolset is a ``Protocol``: ``lane.LaneRun`` implements it over any runtime's box; a test implements the same
methods and nothing here changes. Step bookkeeping (one evidence record per step, prerequisites) is
``recorder.StepRecorder``; the step order, titles and prerequisites are ``procedure``.
"""

from __future__ import annotations

import hashlib
import json
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import pytest

from vsnap_qual import checks, overlay, unit, vllm_words
from vsnap_qual.artifact_deps import SHM
from vsnap_qual.artifact_files import ArtifactFiles
from vsnap_qual.audit import LINK_REMAP, ServerHandle
from vsnap_qual.box import ExecResult, ShmHolders
from vsnap_qual.config import Lane, QualConfig
from vsnap_qual.contract import VLLM_CANARY_PROMPT
from vsnap_qual.engine import adapters, decode_speed, prefix_cache, shapes
from vsnap_qual.engine.client import CanaryOutput
from vsnap_qual.exits import ExitWatch
from vsnap_qual.model import (
    Behaviour,
    Canary,
    CanaryCompare,
    CleanupAudit,
    DecodeSpeed,
    Digest,
    FreshImport,
    InspectChange,
    KeptAdapter,
    LeftoverProcess,
    OverlayFileResult,
    PrefixCacheProbe,
    ShapeRecord,
    Soak,
    UnitOutcome,
    UnitRun,
)
from vsnap_qual.recorder import StepEvidence
from vsnap_qual.vllm_words import StepFailed, check, skip_if_limitation, vllm_reason

__all__ = ["ServerHandle", "StepEvidence"]


@dataclass(frozen=True)
class RestoreRun:
    """One ``vllm snapshot restore`` and when its listener first accepted a connection."""

    result: ExecResult
    port: int
    first_bound: float | None


@dataclass
class OrdinaryReference:
    """What the ordinary ``vllm serve`` answered: every restore (and the base arm) is compared with it."""

    canary: list[Canary]
    digests: dict[str, Digest]
    kv_tokens: int | None
    #: the request shapes' requests and the ordinary engine's answers (None: no shapes asked for)
    shape_requests: list[shapes.Request] = field(default_factory=list)
    shapes: ShapeRecord | None = None
    #: the fixed generation's speed (None: not measured, ``--vsnap-decode-runs=0``)
    decode: DecodeSpeed | None = None
    #: the canaries asked through each LoRA adapter the lane serves (``--lora-modules`` of a variant)
    adapters: dict[str, list[Canary]] = field(default_factory=dict)
    #: the prefix-cache prompt asked twice (``vsnap_qual.engine.prefix_cache``)
    prefix: PrefixCacheProbe | None = None


@dataclass
class InspectChanged:
    """The first step after which ``vllm snapshot inspect`` printed something else, and what changed."""

    step: str
    changes: dict[str, InspectChange]


@dataclass
class LaneState:
    """What a lane's steps hand on to each other."""

    ordinary: OrdinaryReference | None = None
    #: ``vllm snapshot inspect``'s output: vLLM's manifest, any JSON it prints
    manifest: dict[str, Any] = field(default_factory=dict)
    inspect_sha256: str | None = None
    #: its exact output (a later change is said by field, or as order or spacing only, with the diff)
    inspect_text: str | None = None
    inspect_changed: InspectChanged | None = None
    server: ServerHandle | None = None
    kv_snapshot: int | None = None
    #: the fault lane: every thread the fault artifact captured (its ``images/core-*.img``)
    captured_tids: set[int] = field(default_factory=set)
    #: the fault lane: the behaviour its faults are judged by, and why (probed once)
    expectation: tuple[Behaviour, str] | None = None
    #: the /dev/shm files the lane's (latest) artifact needs from outside it (``artifact_deps.outside_files``)
    outside_files: list[str] = field(default_factory=list)
    #: every such file of every artifact the lane made: removed when the lane's box goes (with host IPC they
    #: would stay in the host's /dev/shm, hundreds of MB each, until reboot)
    shm_owned: set[str] = field(default_factory=set)
    #: the fault lane: the fault whose restore consumed the fault artifact (its outside files gone), if one did
    consumed_by: str | None = None
    #: the fault artifact's files and its pristine copy's (``artifact_files``), read once when it is made: every
    #: reset puts that copy back, so the digest before a fault that does not change the artifact itself is the
    #: copy's; the digest and the reset then read and copy only what changed
    artifact_files: ArtifactFiles | None = None
    #: the fault lane: the shortest seconds an unfaulted ``create`` and ``restore`` of the fault artifact took
    #: (what a random kill's offset is drawn over: ``faults.kinds.kill.draw``)
    timings: dict[str, float] = field(default_factory=dict)

    def timed(self, command: str, seconds: float) -> None:
        """An unfaulted ``command`` took ``seconds``: the shortest seen is kept."""
        seconds = round(seconds, 3)
        self.timings[command] = min(self.timings.get(command, seconds), seconds)


class LaneTools(Protocol):
    """What a lifecycle step may do in its lane: the toolset the steps are written against (``lane.LaneRun`` over
    any runtime's box; a test's fake lane)."""

    lane: Lane
    config: QualConfig
    state: LaneState
    #: the ordinary references of the lanes this process ran, by lane name (the base arm compares with the head's)
    peers: dict[str, OrdinaryReference]
    #: the unit step's outcomes of the lanes this process ran, by lane name (the base arm judges the head's)
    unit_peers: dict[str, dict[str, UnitOutcome]]

    @property
    def served_model(self) -> str: ...

    # servers
    def serve(self, rec: StepEvidence) -> ServerHandle: ...
    def stop(self, handle: ServerHandle) -> list[LeftoverProcess]: ...
    def health(self, port: int) -> bool: ...
    def gpu_apps(self) -> set[int] | None: ...
    def alive(self, pids: list[int]) -> list[int]: ...
    def identify(self, pids: list[int]) -> dict[int, str]: ...
    def restored_log_tail(self, lines: int = 40) -> str: ...
    def server_log(self, rec: StepEvidence) -> str: ...
    def restored_server(self, port: int) -> ServerHandle | None: ...
    def listening(self, port: int) -> bool: ...

    # observations through the engine's API
    def canaries(self, port: int, model: str | None = None) -> list[CanaryOutput]: ...
    def keep_adapter(self, name: str, path: str) -> KeptAdapter: ...

    def shape_answers(self, port: int, requests: list[shapes.Request]) -> dict[str, list[Canary]]: ...
    def digests(self, port: int) -> dict[str, Digest]: ...
    def decode_speed(self, port: int) -> DecodeSpeed | None: ...
    def prefix_cache(self, port: int, canary_ids: list[int]) -> PrefixCacheProbe: ...
    def kv(self, port: int, log_text: str | None = None) -> tuple[int | None, str]: ...
    def snapshot_kv(self) -> int | None: ...

    # snapshot commands and the artifact
    def snapshot_create(self, rec: StepEvidence) -> ExecResult: ...
    def snapshot_inspect(self, rec: StepEvidence, name: str = "inspect") -> ExecResult: ...
    def snapshot_restore(self, rec: StepEvidence, step: str) -> RestoreRun: ...
    def outside_files(self) -> list[str]: ...
    def shm_names(self) -> set[str]: ...
    def shm_unheld(self, names: list[str]) -> ShmHolders | None: ...
    def watch_exits(self, pids: list[int]) -> ExitWatch: ...
    def claim_made_remaps(self, step: str) -> list[str]: ...
    def run_unit_command(self, rec: StepEvidence) -> tuple[ExecResult, str | None, str | None]: ...
    def absent_files(self, paths: list[str]) -> list[str]: ...
    def artifact_file(self, name: str) -> str: ...
    def keep_child_log(self, rec: StepEvidence) -> None: ...

    # the lane's environment
    def environment_id(self) -> str: ...
    def restart(self) -> None: ...
    def audit(self, pids: list[int], ports: list[int]) -> CleanupAudit: ...
    def overlay_imports(self) -> list[OverlayFileResult]: ...
    def fresh_import(self, module: str) -> FreshImport: ...
    def probe_loaded_pids(self) -> list[int]: ...
    def fresh_box(self) -> AbstractContextManager[LaneTools]: ...


def canary_plan(config: QualConfig) -> list[tuple[str, int]]:
    """The canary requests, in order: vLLM's own one-token canary first (the manifest's oracle is its output),
    then every canary prompt for ``--vsnap-canary-tokens`` greedy tokens."""
    plan = [(VLLM_CANARY_PROMPT, 1)]
    if config.canary_tokens > 1:
        plan += [(p, config.canary_tokens) for p in config.prompts]
    else:
        plan += [(p, 1) for p in config.prompts if p != VLLM_CANARY_PROMPT]
    return plan


def require_findings(findings: list[checks.Finding], prefix: str = "") -> None:
    """Fail the step with the details of every finding that did not hold."""
    message = checks.failure_message(findings, prefix)
    if message is not None:
        raise StepFailed(message)


# ---- the lifecycle steps (contract §3, qualification.md), each called by one suite test ------------------------
# Each is a short sequence over the lane's toolset (``LaneTools``): observe, record, judge (``checks``).
def ordinary_reference(run: LaneTools, rec: StepEvidence) -> None:
    """Ordinary ``vllm serve``: canary prompts, parameter digests, KV capacity, stop, cleanup audit."""
    handle = run.serve(rec)
    modules = adapters.lora_modules(run.config.engine_argv(run.lane))
    if modules:
        rec.results["adapters"] = {name: run.keep_adapter(name, path) for name, path in modules.items()}
    try:
        canary = run.canaries(handle.port)
        adapter_canary = {name: run.canaries(handle.port, name) for name in modules}
        digests = run.digests(handle.port)
        kv, source = run.kv(handle.port, run.server_log(rec))
        requests, record = shape_reference(run, handle.port, [c.as_dict() for c in canary])
        decode = run.decode_speed(handle.port)
        prefix = run.prefix_cache(handle.port, prefix_cache.canary_ids([c.as_dict() for c in canary]))
    finally:
        leftovers = run.stop(handle)
        run.state.server = None
    audit = strict_audit(run, handle, leftovers)
    ordinary = OrdinaryReference(
        [c.as_dict() for c in canary], digests, kv, requests, record, decode,
        {name: [c.as_dict() for c in answers] for name, answers in adapter_canary.items()}, prefix,
    )  # fmt: skip
    run.state.ordinary = run.peers[run.lane.name] = ordinary
    rec.results.update(
        {
            "canary": ordinary.canary,
            "digests": digests,
            "kv_tokens": kv,
            "kv_source": source,
            "pids": handle.pids,
            "cleanup": audit,
        }
    )
    if record is not None:
        rec.results["shapes"] = record
    if decode is not None:
        rec.results["decode_speed"] = decode
    rec.results["prefix_cache"] = prefix
    if ordinary.adapters:
        rec.results["adapter_canary"] = ordinary.adapters
    require_findings(
        [
            *checks.ordinary_findings(digests, audit),
            *adapters.effect_findings(canary, adapter_canary, run.config.logprob_tolerance),
        ]
    )


def shape_reference(run: LaneTools, port: int, canary: list[Canary]) -> tuple[list[shapes.Request], ShapeRecord | None]:
    """The request shapes on the ordinary engine, each asked twice: the answers every restore is compared with,
    and per shape whether the engine answered the same way both times (else it is not judged after a restore:
    the engine's own non-determinism, reported as such)."""
    cfg = run.config
    if not cfg.request_shapes:
        return [], None
    long_ids = shapes.long_prompt(canary, cfg.max_model_len, cfg.canary_tokens)
    requests = shapes.plan(
        cfg.request_shapes, canary_plan(cfg), cfg.prompts, cfg.canary_tokens, cfg.concurrent_requests, long_ids
    )
    first = run.shape_answers(port, requests)
    again = run.shape_answers(port, requests)
    steady = shapes.self_consistency(first, again, canary, cfg.logprob_tolerance, checks.compare_canary)
    return requests, ShapeRecord(answers=first, self_consistent=steady)


def strict_audit(run: LaneTools, handle: ServerHandle, leftovers: list[LeftoverProcess]) -> CleanupAudit:
    """The cleanup audit after a stop, with the processes that outlived the grace (by PID, start time and
    command line; GPU holders first): any leftover fails the audit, even though the harness then killed it."""
    audit = run.audit(handle.pids, [handle.port])
    drop_reused(run, audit, {int(t["pid"]): str(t["start_time"]) for t in handle.tree})
    audit.update({"leftovers": leftovers, "grace_s": run.config.cleanup_grace, "tree": handle.tree})
    if handle.shm_held:  # what the tree's own cleanup must have removed, but what an artifact of the lane needs
        there = [p for p in handle.shm_held if p not in set(run.absent_files(handle.shm_held))]
        audit["shm_held"] = list(handle.shm_held)
        audit["shm_kept"] = [p for p in there if p in run.state.outside_files]
        audit["shm_left"] = [p for p in there if p not in run.state.outside_files]
        if audit["shm_left"]:
            audit["ok"] = False
    if leftovers:
        audit["ok"] = False
    return audit


def drop_reused(run: LaneTools, audit: CleanupAudit, recorded: dict[int, str]) -> None:
    """A PID the audit found alive is a leftover only if it is the same process (same start time) as the one
    recorded: with host PID namespaces (PIDs wrap at kernel.pid_max) another process may have it by now."""
    alive = list(audit.get("pids_alive") or [])
    if not alive or not recorded or audit.get("error"):
        return
    now = run.identify(alive)
    reused = [p for p in alive if p in recorded and now.get(p) != recorded[p]]
    if not reused:
        return
    kept = [p for p in alive if p not in reused]
    audit.update({"pids_alive": kept, "pids_gone": not kept, "pids_reused": reused})
    audit["ok"] = checks.audit_ok(
        kept, list(audit.get("ports_open") or []), audit.get("gpu_idle"), bool(audit.get("link_remaps_equal"))
    )


def create(run: LaneTools, rec: StepEvidence) -> None:
    """``vllm snapshot create`` (offline), then the captured tree must be gone, and the create must leave nothing
    in ``/dev/shm`` that no process holds and its artifact does not name (:func:`shm_left_by_create`). An artifact
    published with its tree gone is delivered to the steps after it, whatever that last check found."""
    shm_before = run.shm_names()
    result = run.snapshot_create(rec)
    if result.exit_code != 0:
        reason = vllm_reason(result.stderr or result.stdout)
        rec.results["vllm_reason"] = reason
        skip_if_limitation(reason, cpu_smoke=run.config.cpu_smoke, variant=run.lane.variant)
        raise StepFailed(f"vllm snapshot create exited {result.exit_code}: {reason}\n{result.tail()}")
    manifest_text = run.artifact_file("manifest.json")
    check(bool(manifest_text), "create exited 0 but published no manifest.json")
    manifest = json.loads(manifest_text)
    run.state.outside_files = run.outside_files()
    run.state.shm_owned.update(run.state.outside_files)
    rec.results["outside_files"] = run.state.outside_files
    made = run.claim_made_remaps("create")
    if made:
        rec.results["link_remaps_made"] = made
    run.state.kv_snapshot = run.snapshot_kv()
    run.keep_child_log(rec)
    audit = run.audit(list(manifest.get("process_tree") or []), [])
    rec.results.update(
        {
            "kv_tokens": run.state.kv_snapshot,
            "artifact_bytes": manifest.get("artifact_bytes"),
            "process_tree": manifest.get("process_tree"),
            "cleanup": audit,
        }
    )
    require_findings(checks.audit_findings(audit, "after create"))
    rec.delivered = True
    left = shm_left_by_create(run, shm_before, rec)
    check(
        not left,
        "vllm snapshot create left in /dev/shm what no process holds and its artifact does not name: "
        + ", ".join(left)
        + " (removed with the lane; where lanes share the host's /dev/shm, another lane's create at the same time "
        "may have left one of them" + unread_words(rec.results.get("shm_unread") or []) + ")" + shm_kinds(left),
    )


#: what a /dev/shm name says of its maker (the name's prefix), for the create check's message: Python's words
SHM_KINDS = {
    "sem.mp-": "a Python multiprocessing lock or semaphore made outside a fork context, whose name CPython unlinks "
    '"when the object is garbage collected or the process shuts down" (multiprocessing/synchronize.py), or its '
    "resource tracker does; a dump's SIGKILL stops both",
}


def shm_kinds(files: list[str]) -> str:
    """``. sem.mp-*: …`` for each kind of name in ``files`` that :data:`SHM_KINDS` knows ("" for none)."""
    names = [path.rsplit("/", 1)[-1] for path in files]
    return "".join(
        f". {prefix}*: {words}" for prefix, words in SHM_KINDS.items() if any(n.startswith(prefix) for n in names)
    )


def unread_words(unread: list[str], shown: int = 4) -> str:
    """The processes the holder look could not read, as the create check's message names them ("" for none;
    the first ``shown`` by name, the rest counted: all are in ``results.shm_unread``)."""
    if not unread:
        return ""
    named = ", ".join(unread[:shown]) + (f" and {len(unread) - shown} more" if len(unread) > shown else "")
    return (
        f"; no process it could read holds them, and it could not read {len(unread)} ({named}): each has a "
        "capability the box lacks, so none is this lane's engine"
    )


class ShmLooks(Protocol):
    """What :func:`shm_left_by_create` needs of a lane (the lifecycle's and the fault lane's)."""

    state: LaneState

    def shm_names(self) -> set[str]: ...
    def shm_unheld(self, names: list[str]) -> ShmHolders | None: ...


def shm_left_by_create(run: ShmLooks, before: set[str], rec: StepEvidence, judged: bool = True) -> list[str]:
    """The ``/dev/shm`` files new since just before the create that no process holds and the artifact does not
    name (``artifact_deps.outside_files``; CRIU's ``link_remap.*`` have their own audit): a leak of the create,
    since its dumped tree is gone and no restore looks for them. Judged (returned) only where the box sees every
    process that could hold one (the host's PID namespace: a box of its own cannot see another lane's holders)
    and the caller judges (``judged``: the fault lane's own artifact is not, one finding being one); recorded in
    ``results.shm_left`` or, not judged, ``results.shm_left_not_judged``. A process the box cannot read is taken
    to hold none of them (:class:`ShmHolders`: it has a capability the box lacks, so it is none of this lane's
    engine); where one was met, ``results.shm_unread`` names it. What no process holds is removed with the lane
    (``LaneState.shm_owned``)."""
    outside = {path.rsplit("/", 1)[-1] for path in run.state.outside_files}
    new = sorted(name for name in run.shm_names() - before if name not in outside and not name.startswith(LINK_REMAP))
    holders = run.shm_unheld(new)
    files = [SHM + name for name in (new if holders is None else holders.unheld)]
    if holders is not None:
        run.state.shm_owned.update(files)
        if files and holders.unread:
            rec.results["shm_unread"] = holders.unread
        if judged:
            rec.results["shm_left"] = files
            return files
    if files:
        why = (
            "the box has a PID namespace of its own: it cannot see every process that may hold them"
            if holders is None
            else "the fault lane's own artifact: a create's leak is judged once, at the lifecycle's create"
        )
        rec.results["shm_left_not_judged"] = {"files": files, "why": why}
    return []


def inspect_expectations(run: LaneTools, gpu_uuid: str | None) -> checks.InspectExpectations:
    """What this lane's ``inspect`` must print: the configuration, and the ordinary run's oracle output."""
    cfg = run.config
    reference = run.state.ordinary.canary if run.state.ordinary else []
    oracle = next((c for c in reference if c["prompt"] == VLLM_CANARY_PROMPT), None)
    return checks.InspectExpectations(
        model=cfg.model,
        served_model=run.served_model,
        revision=cfg.revision,
        tokenizer_revision=cfg.tokenizer_revision,
        logprob_tolerance=cfg.logprob_tolerance,
        gpu_uuid=gpu_uuid,
        reference_oracle=CanaryOutput.of(oracle) if oracle else None,
    )


def inspect(run: LaneTools, rec: StepEvidence, gpu_uuid: str | None) -> None:
    """``vllm snapshot inspect``: the upstream e2e's field checks and the output's sha256."""
    result = run.snapshot_inspect(rec)
    check(result.exit_code == 0, f"vllm snapshot inspect exited {result.exit_code}:\n{result.tail()}")
    try:
        manifest = json.loads(result.stdout)
    except json.JSONDecodeError as exc:
        raise StepFailed(f"inspect printed no JSON ({exc}): {result.stdout[:300]}") from None
    run.state.manifest = manifest
    run.state.inspect_sha256 = hashlib.sha256(result.stdout.encode()).hexdigest()
    run.state.inspect_text = result.stdout
    found = checks.inspect_checks(manifest, inspect_expectations(run, gpu_uuid))
    rec.results.update({"sha256": run.state.inspect_sha256, "manifest": manifest, "checks": found})
    require_findings(checks.inspect_findings(found))


def restore(run: LaneTools, rec: StepEvidence, step: str) -> None:
    """``vllm snapshot restore``: exit 0, listener, canary and digests equal to the ordinary reference, KV
    capacity as created, ``inspect`` unchanged, and the server still alive and serving through the soak."""
    restored = run.snapshot_restore(rec, step)
    result = restored.result
    collision = vllm_words.captured_id_collision(result.stdout, result.stderr) if result.exit_code else None
    if collision:  # another host process took a captured PID/TID for a moment: restore once more
        rec.results["retried_after"] = f"CRIU could not recreate a captured ID (another process took it): {collision}"
        restored = run.snapshot_restore(rec, step)
        result = restored.result
    if result.exit_code != 0:
        error_json = run.artifact_file("error.json")
        rec.results["error_json"] = json.loads(error_json) if error_json.strip() else None
        rec.results["vllm_reason"] = vllm_reason(result.stderr or result.stdout)
        said_vllm = vllm_words.short_command(rec.results["vllm_reason"])
        # CRIU's words: vLLM logs them on stdout (0.32); else they are only in the artifact's restore.log (0.31)
        reason = vllm_words.criu_words(result.stdout, result.stderr, lambda: run.artifact_file("images/restore.log"))
        if reason:
            rec.results["criu_reason"] = reason
        said = f"; CRIU: {reason[0]}" if reason else ""
        consumed = run.absent_files(run.state.outside_files)
        if consumed:
            rec.results["consumed"] = consumed
            raise StepFailed(
                f"{vllm_words.NOT_SELF_CONTAINED}: its restore needs {', '.join(consumed)}, which it does not carry "
                f"and which {'this box never had' if step == 'fresh-box' else 'are gone'}; vllm snapshot restore "
                f"exited {result.exit_code}: {said_vllm}{said}\n{result.tail()}"
            )
        raise StepFailed(
            f"vllm snapshot restore exited {result.exit_code}: {said_vllm}; "
            f"error.json={error_json.strip() or None}{said}\n{result.tail()}"
        )
    handle = run.restored_server(restored.port)
    check(handle is not None, "restore exited 0 but restored.pid is missing")
    assert handle is not None
    run.state.server = handle
    try:
        check(run.listening(handle.port), f"restore exited 0 but nothing listens on port {handle.port}")
        canary = run.canaries(handle.port)
        reference = run.state.ordinary
        adapter_canary = {name: run.canaries(handle.port, name) for name in (reference.adapters if reference else {})}
        digests = run.digests(handle.port)
        kv, kv_source = run.kv(handle.port)
        shape_answers = (
            run.shape_answers(handle.port, reference.shape_requests) if reference and reference.shape_requests else {}
        )
        decode = run.decode_speed(handle.port)
        decode_retry, decode_judgement = None, None
        if decode is not None:
            decode_judgement = decode_speed.judge(
                reference.decode if reference else None, decode, run.config.decode_tolerance
            )
            if decode_speed.needs_retry(decode_judgement):  # a shared CPU's moment, or a slowdown that stays
                decode_retry = run.decode_speed(handle.port)
                decode_judgement = decode_speed.judge(
                    reference.decode if reference else None, decode, run.config.decode_tolerance, decode_retry
                )
        # after the decode speed, as on the ordinary engine: both have answered the same requests before it
        prefix = run.prefix_cache(handle.port, prefix_cache.canary_ids(reference.canary if reference else []))
    except Exception as exc:
        # A server that died after restore exited 0 is reported as what it is, with when and its log tail.
        soak = probe_liveness(run, handle, result.ended, f"{type(exc).__name__}: {exc}")
        rec.results["soak"] = soak
        if not soak["alive"]:
            require_findings(checks.soak_findings(soak, f"during the {step} checks"))
        raise
    ordinary = run.state.ordinary
    check(ordinary is not None, "no ordinary reference to compare the restored server with")
    assert ordinary is not None
    expected = [CanaryOutput.of(c) for c in ordinary.canary]
    tolerance = run.config.logprob_tolerance
    compare = [checks.compare_canary(e, a, tolerance) for e, a in zip(expected, canary, strict=True)]
    digest_compare = checks.compare_digests(ordinary.digests, digests)
    adapter_compare = adapters.compare(ordinary.adapters, adapter_canary, tolerance)
    prefix_judgement = prefix_cache.judge(ordinary.prefix, prefix, tolerance)
    kv_judgement = checks.kv_judgement(
        kv, run.state.kv_snapshot, ordinary.kv_tokens, run.config.kv_tolerance, kv_source
    )
    holders = [int(p) for p in run.state.manifest.get("cuda_holders") or []]
    apps = run.gpu_apps()
    gpu_engaged = checks.gpu_engaged_findings(holders, apps, step)
    changes = inspect_changes(run, rec, f"inspect-after-{step}")
    if changes and run.state.inspect_changed is None:  # for the later steps: the step after which it changed
        run.state.inspect_changed = InspectChanged(step, changes)
    soak = soak_server(run, handle, result.ended)
    shape_compare = (
        shapes.compare(ordinary.shapes, ordinary.canary, shape_answers, tolerance, checks.compare_canary)
        if ordinary.shapes is not None
        else []
    )
    steady = ordinary.shapes["self_consistent"] if ordinary.shapes is not None else {}
    not_judged = sorted(k for k, v in steady.items() if not v)
    rec.results.update(
        {
            "canary": [c.as_dict() for c in canary],
            "canary_compare": compare,
            "digests": digests,
            "digest_compare": digest_compare,
            "kv_tokens": kv,
            "kv_source": kv_source,
            "kv_ordinary": ordinary.kv_tokens,
            "kv_create": run.state.kv_snapshot,
            "kv_judgement": kv_judgement,
            "inspect_changes": changes,
            "soak": soak,
            "shape_answers": shape_answers,
            "prefix_cache": prefix,
            "prefix_cache_judgement": prefix_judgement,
            "shape_compare": shape_compare,
            "pids": handle.pids,
            "root_pid": handle.root_pid,
            "listener_first_bound": restored.first_bound,
            "gpu_engaged": None if apps is None else {"holders": holders, "gpu_apps": sorted(apps)},
            "ready_seconds": round((restored.first_bound or result.ended) - result.started, 3),
        }
    )
    if adapter_compare:
        rec.results["adapter_canary"] = {name: [c.as_dict() for c in got] for name, got in adapter_canary.items()}
        rec.results["adapter_compare"] = adapter_compare
    if decode is not None and decode_judgement is not None:
        rec.results["decode_speed"] = decode
        rec.results["decode_judgement"] = decode_judgement
        if decode_retry is not None:
            rec.results["decode_retry"] = decode_retry
    require_findings(
        [
            *checks.soak_findings(soak, f"watched {run.config.observe_s:g} s after {step}"),
            *checks.restore_findings(compare, digest_compare),
            *adapters.restore_findings(adapter_compare, step),
            *checks.shape_findings(shape_compare, soak.get("repeated_mismatch") or [], not_judged),
            *checks.kv_findings(kv_judgement),
            *gpu_engaged,
            *checks.inspect_stable_findings(changes, step),
            *decode_speed.findings(decode_judgement, step),
            *prefix_cache.findings(prefix_judgement, step),
        ]
    )


def inspect_changes(run: LaneTools, rec: StepEvidence, name: str) -> dict[str, InspectChange]:
    """``vllm snapshot inspect`` again: the fields that differ from what the inspect step printed."""
    result = run.snapshot_inspect(rec, name=name)
    try:
        now = json.loads(result.stdout)
    except json.JSONDecodeError:
        return {"(output)": {"before": "JSON", "after": f"exit {result.exit_code}: {result.stdout[:200]!r}"}}
    return checks.manifest_changes(run.state.manifest, now)


def probe_liveness(run: LaneTools, handle: ServerHandle, since: float, reason: str = "") -> Soak:
    """One look at a restored server: its processes, ``/health``. ``died_after_s`` counts from ``since`` (when
    ``vllm snapshot restore`` exited 0)."""
    gone = sorted(set(handle.pids) - set(run.alive(handle.pids)))
    healthy = run.health(handle.port)
    alive = not gone and healthy
    out = Soak(alive=alive, probes=0, seconds=0.0)
    if not alive:
        out.update(
            {
                "died_after_s": round(time.time() - since, 2),
                "reason": (f"processes gone {gone}" if gone else "/health did not answer 200")
                + (f" ({reason})" if reason else ""),
                "log_tail": run.restored_log_tail(),
            }
        )
    return out


#: the soak's pause between two looks at the restored server (its idle time is recorded: ``Soak.idle_s``)
PROBE_PAUSE = 0.25


def soak_server(run: LaneTools, handle: ServerHandle, since: float) -> Soak:
    """The soak and the observation window after a restore: ``/health`` and the restored tree's processes every
    0.25 s, vLLM's canary among them, for ``--vsnap-soak`` seconds and at least until ``--vsnap-observe`` seconds
    after the restore exited (``since``; the step's checks ran inside that window); the first failure ends it
    with when, why and what the restored tree wrote."""
    window = run.config.observe_s
    seconds = run.config.soak_s
    started = time.time()
    ordinary = run.state.ordinary
    repeat = "repeated" in run.config.request_shapes
    reference = ordinary.canary if ordinary is not None and repeat else None
    with run.watch_exits(handle.pids) as exits:
        return _watch(run, handle, since, exits, started, window, seconds, reference)


def _watch(
    run: LaneTools,
    handle: ServerHandle,
    since: float,
    exits: ExitWatch,
    started: float,
    window: float,
    seconds: float,
    reference: list[Canary] | None,
) -> Soak:
    mismatch: list[CanaryCompare] = []
    probes = canaries = 0
    idle = 0.0
    last_ok = since
    while True:
        look = probe_liveness(run, handle, since)
        if look["alive"] and (probes % 4 == 3 or time.time() - started >= seconds):
            try:
                answers = run.canaries(handle.port)
                canaries += 1
                if reference is not None:  # the repeated-request shape: every round's answers, not only the first
                    differ = [
                        c
                        for e, a in zip(reference, answers, strict=False)
                        if not (c := checks.compare_canary(CanaryOutput.of(e), a, run.config.logprob_tolerance))["ok"]
                    ]
                    mismatch += differ[: max(0, 3 - len(mismatch))]
            except Exception as exc:
                look = probe_liveness(run, handle, since, f"canary request: {type(exc).__name__}: {exc}")
                if look["alive"]:
                    look.update(
                        {
                            "alive": False,
                            "died_after_s": round(time.time() - since, 2),
                            "reason": f"canary request failed: {exc}",
                            "log_tail": run.restored_log_tail(),
                        }
                    )
        died = not look["alive"]
        if not died:
            probes += 1
            last_ok = time.time()
        if died or (last_ok - started >= seconds and last_ok - since >= window):
            look.update(
                {"probes": probes, "canaries": canaries, "window_s": window, "idle_s": round(idle, 2),
                 "seconds": round((time.time() if died else last_ok) - started, 2)}
            )  # fmt: skip
            if died:
                gone = sorted(set(handle.pids) - set(run.alive(handle.pids)))
                exits.wait_for(gone)
                look.update({"exit": exits.ended(gone or handle.pids), "last_ok_after_s": round(last_ok - since, 2)})
            else:
                look["observed_after_restore_s"] = round(last_ok - since, 2)
            if mismatch:
                look["repeated_mismatch"] = mismatch
            return look
        time.sleep(PROBE_PAUSE)
        idle += PROBE_PAUSE


def restart(run: LaneTools, rec: StepEvidence) -> None:
    """Stop and start the same lane environment; the restored server must be alive until then and gone after,
    inspect output unchanged (a changed field is named, with the step after which it first changed)."""
    before = run.environment_id()
    handle = run.state.server
    findings: list[checks.Finding] = []
    recorded = run.identify(handle.pids) if handle is not None else {}
    if handle is not None:
        look = probe_liveness(run, handle, time.time())
        rec.results["alive_before_restart"] = look["alive"]
        if not look["alive"]:
            findings.append(
                checks.Finding(
                    "liveness",
                    False,
                    f"the restored server was no longer alive at the restart: {look.get('reason')}\n"
                    f"log tail:\n{look.get('log_tail') or '(empty)'}",
                )
            )
    run.restart()
    after = run.environment_id()
    audit = run.audit(handle.pids if handle else [], [handle.port] if handle else [])
    drop_reused(run, audit, recorded)
    audit["step"] = "seen at the restart"
    run.state.server = None
    result = run.snapshot_inspect(rec, name="inspect-after-restart")
    sha_after = hashlib.sha256(result.stdout.encode()).hexdigest()
    try:
        changes = checks.manifest_changes(run.state.manifest, json.loads(result.stdout))
    except json.JSONDecodeError:
        changes = {}
    rec.results.update(
        {
            "container_id_before": before,
            "container_id_after": after,
            "sha256_before": run.state.inspect_sha256,
            "sha256_after": sha_after,
            "inspect_changes": changes,
            "cleanup": audit,
        }
    )
    found = checks.restart_findings(before, after, audit, result.exit_code, run.state.inspect_text, result.stdout)
    if changes:
        first = run.state.inspect_changed
        when = f"{first.step} (and still after the container restart)" if first else "the container restart"
        found = [f for f in found if f.check != "inspect unchanged"]
        found += checks.inspect_stable_findings(changes, when)
    require_findings([*findings, *found])


def stop_restored(run: LaneTools, rec: StepEvidence) -> bool:
    """Stop the restored server (still alive and serving when it is stopped) and audit that nothing is left.
    Whether there was one to stop (it raises on what the stop or its audit found)."""
    handle = run.state.server
    if handle is None:
        return False
    look = probe_liveness(run, handle, time.time())
    rec.results["alive_at_stop"] = look["alive"]
    leftovers = run.stop(handle)
    audit = strict_audit(run, handle, leftovers)
    run.state.server = None
    rec.results["cleanup"] = audit
    findings = checks.audit_findings(audit, "after restore")
    if not look["alive"]:
        findings.append(
            checks.Finding(
                "liveness", False, f"the restored server was no longer alive at the final stop: {look.get('reason')}"
            )
        )
    require_findings(findings)
    return True


def restore_then_stop(run: LaneTools, rec: StepEvidence, step: str) -> None:
    """A restore followed by the stop and audit of what it restored, whatever the restore did. When the restore
    failed, its failure is the step's (a cleanup failure after it is recorded beside it, never in its place).
    A restored server stopped cleanly marks the step ``delivered``, passed or failed on its checks (a later step
    that needs only a stopped restored instance runs after it: ``procedure.Step.delivered``)."""
    try:
        restore(run, rec, step)
    except BaseException:
        try:
            rec.delivered = stop_restored(run, rec)
        except Exception as cleanup:
            error = f"{type(cleanup).__name__}: {cleanup}"
            rec.results["cleanup_error"] = error
            audit = rec.results.setdefault("cleanup", CleanupAudit(ok=False))
            audit.setdefault("detail", f"after the failed restore, the stop or its audit failed too: {error}")
        raise
    rec.delivered = stop_restored(run, rec)


def restore_after_stop(run: LaneTools, rec: StepEvidence) -> None:
    """The artifact restores again in the same box after the last restored server was stopped the way a scale-down
    stops it (SIGTERM, and its own cleanup): the same checks, then the same stop and audit. An artifact that
    depends on what the restored engine cleans up on its way out fails here, in its own words."""
    restore_then_stop(run, rec, "restore-after-stop")


def fresh_box_restore(run: LaneTools, rec: StepEvidence) -> None:
    """The artifact restores in a fresh box of the same image holding nothing else of this lane (its own IPC
    namespace, an empty ``/dev/shm``): the same checks as the first restore, then the stop and audit. An artifact
    that depends on state outside it (shared-memory segments, files of the box it was made in) fails here."""
    with run.fresh_box() as fresh:
        rec.results["box"] = fresh.environment_id()
        restore_then_stop(fresh, rec, "fresh-box")


def overlay_verification(run: LaneTools, rec: StepEvidence) -> None:
    """Every overlaid file is the one imported: in each engine process, and by a fresh interpreter."""
    files = run.overlay_imports()
    for item in files:
        fresh = run.fresh_import(item["module"])
        item["fresh_import"] = fresh
        item["fresh_ok"] = fresh["exit_code"] == 0 and fresh["sha256"] == item["host_sha256"]
        item["ok"] = checks.overlay_file_ok(item["host_sha256"], item["imported"], fresh["exit_code"], fresh["sha256"])
        item["verified_in"] = (
            "engine processes and a fresh interpreter"
            if item["imported"]
            else "a fresh interpreter only (no engine process imported it: code of the vllm CLI process)"
        )
        item["finding"], item["finding_detail"] = overlay.file_finding(item)
    rec.results["files"] = files
    rec.results["summary"] = overlay.findings_line(files)[1]
    rec.results["probe_loaded_pids"] = run.probe_loaded_pids()
    require_findings(checks.overlay_findings(files))


def unit_step(run: LaneTools, rec: StepEvidence) -> None:
    """The user's unit command from the overlay checkout in this lane's box, per test id. With a base arm, the head
    arm records and the base arm judges: only failures new on the head arm fail (pre-existing ones are listed);
    without one, any failure fails."""
    result, junit_xml, kept = run.run_unit_command(rec)
    record = UnitRun(
        command=run.config.unit_command, exit_code=result.exit_code, seconds=round(result.seconds, 1), junit=kept
    )
    rec.results["unit"] = record
    if junit_xml is None:
        raise StepFailed(
            f"the unit command wrote no JUnit to $VSNAP_JUNIT (exit {result.exit_code}): add "
            f'--junitxml="$VSNAP_JUNIT" to it\n{result.tail()}'
        )
    try:
        found = unit.outcomes(junit_xml)
    except ValueError as exc:
        raise StepFailed(f"the unit command's JUnit cannot be read: {exc}") from None
    record["counts"], record["failed"] = unit.counts(found), unit.failed(found)
    check(bool(found), f"the unit command ran no test (exit {result.exit_code}): {result.tail()}")
    run.unit_peers[run.lane.name] = found
    shown = unit.counts(found)
    summary = f"{shown['passed']} passed, {shown['failed']} failed, {shown['skipped']} skipped"
    if run.lane.arm == "head":
        if run.config.base_image is not None:
            record["judged"] = f"recorded ({summary}); judged against the base arm by its unit step"
            return
        record["judged"] = "alone (no base arm): every failure counts"
        check(not record["failed"], f"{len(record['failed'])} unit test(s) failed ({summary}): {record['failed'][:10]}")
        return
    head = run.unit_peers.get(run.lane.peer("head"))
    if head is None:
        pytest.skip(f"{run.lane.name}: the head arm's unit outcomes are not available to judge against")
    new, pre, fixed = unit.against_base(head, found)
    record["judged"] = "the head arm's failures against this (base) arm's"
    record["new_on_head"], record["pre_existing"], record["fixed_on_head"] = new, pre, fixed
    check(
        not new,
        f"{len(new)} unit test(s) fail on the head arm and not on the base arm: {new[:10]}"
        + (f" ({len(pre)} pre-existing failure(s), failing on the base arm too)" if pre else ""),
    )


def compare_arms(run: LaneTools, rec: StepEvidence) -> None:
    """The base arm's ordinary reference against the head arm's: same canary outputs, same parameter bytes."""
    head = run.peers.get(run.lane.peer("head"))
    ordinary = run.state.ordinary
    if not head or ordinary is None:
        pytest.skip(f"{run.lane.name}: the head arm's ordinary reference is not available to compare with")
    expected = [CanaryOutput.of(c) for c in head.canary]
    actual = [CanaryOutput.of(c) for c in ordinary.canary]
    tolerance = run.config.logprob_tolerance
    compare = [checks.compare_canary(e, a, tolerance) for e, a in zip(expected, actual, strict=True)]
    digests = checks.compare_digests(head.digests, ordinary.digests)
    # each adapter's canaries through the base image's engine against the head's (the same variant lane's)
    answered = {name: [CanaryOutput.of(c) for c in answers] for name, answers in ordinary.adapters.items()}
    adapter_compare = adapters.compare(head.adapters, answered, tolerance)
    rec.results.update(
        {"canary_compare": compare, "digest_compare": digests, "kv_head": head.kv_tokens, "kv_base": ordinary.kv_tokens}
    )
    if adapter_compare:
        rec.results["adapter_compare"] = adapter_compare
    require_findings([*checks.arms_findings(compare, digests), *adapters.arms_findings(adapter_compare)])
