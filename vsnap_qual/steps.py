"""The qualification steps, each a short sequence over the services of a lane, in the order a maintainer runs
them by hand: observe through the services, keep what was seen in locals, hand the step's typed results to its
record in one place, judge with ``checks``.

Each step is the body of one table entry (``procedure.Step.run`` names it; ``procedure.Step.results`` is the type
of what it records) and is called the same way, with its lane and its open record (``recorder.StepEvidence``,
whose ``step`` is the entry's name: which restore it is). It takes its lane typed by the narrow protocol of what it
reads (``lane.protocols``: :class:`ServingLane` for a step that runs the engine, :class:`ReferenceLane` for one that
compares what was recorded, ...), and reaches a service by name (``lane.servers.serve(rec)``,
``lane.api.canaries(port)``, ``lane.cli.restore(rec, step)``): ``lane.LaneRun`` implements them over any runtime's
box; a test's fake lane implements the same members and nothing here changes. What a step had gathered when it
fails part-way stays in its record (a failed restore's reason, the stop after it). Step bookkeeping (one evidence
record per step, prerequisites) is ``recorder.StepRecorder``; the step order, titles and prerequisites are
``procedure``.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Mapping

import pytest

from vsnap_qual import checks, overlay, procedure, vllm_words
from vsnap_qual.contract import VLLM_CANARY_PROMPT
from vsnap_qual.engine import adapters, api_checks, boundaries, decode_speed, prefix_cache, serving_series, shapes
from vsnap_qual.engine.client import HEALTH_TIMEOUT, CanaryOutput
from vsnap_qual.lane import unit
from vsnap_qual.lane.audit import ServerHandle
from vsnap_qual.lane.exits import ExitWatch
from vsnap_qual.lane.protocols import FreshBoxLane, OverlayLane, ReferenceLane, ServingLane, UnitLane
from vsnap_qual.lane.servers import ServeFailed
from vsnap_qual.lane.snapshot_cli import shm_kinds, shm_left_by_create, unread_words
from vsnap_qual.lane.state import InspectChanged, OrdinaryReference
from vsnap_qual.model import (
    ApiRecord,
    BoundaryRequest,
    Canary,
    CanaryCompare,
    CleanupAudit,
    CreateResults,
    GpuEngaged,
    InspectChange,
    InspectResults,
    LeftoverProcess,
    OrdinaryResults,
    OverlayResults,
    RestartResults,
    RestoreResults,
    SecondLook,
    ServingSeries,
    ShapeRecord,
    Soak,
    UnitResults,
    UnitRun,
    VsHeadResults,
)
from vsnap_qual.recorder import StepEvidence
from vsnap_qual.vllm_words import StepFailed, check, skip_if_limitation, vllm_reason


def require_findings(findings: list[checks.Finding], prefix: str = "") -> None:
    """Fail the step with the details of every finding that did not hold."""
    message = checks.failure_message(findings, prefix)
    if message is not None:
        raise StepFailed(message)


# ---- the lifecycle steps (contract §3, qualification.md), each called by one suite test ------------------------
# Each is a short sequence over the lane's services: observe, record, judge (``checks``).
def ordinary_reference(lane: ServingLane, rec: StepEvidence[OrdinaryResults]) -> None:
    """Ordinary ``vllm serve``: canary prompts, parameter digests, KV capacity, stop, cleanup audit."""
    try:
        handle = lane.servers.serve(rec)
    except ServeFailed as failed:
        lane.state.server = failed.handle  # the server that never became ready is the lane's until it is stopped
        raise
    lane.state.server = handle
    modules = adapters.lora_modules(lane.config.engine_argv(lane.spec))
    if modules:
        rec.results["adapters"] = {name: lane.api.keep_adapter(name, path) for name, path in modules.items()}
    try:
        canary = lane.api.canaries(handle.port)
        adapter_canary = {name: lane.api.canaries(handle.port, name) for name in modules}
        digests = lane.api.digests(handle.port)
        kv, source = lane.api.kv(handle.port, lane.servers.server_log(rec))
        requests, record = shape_reference(lane, handle.port, [c.as_dict() for c in canary])
        api = api_reference(lane, handle.port)
        decode = lane.api.decode_speed(handle.port)
        prefix = lane.api.prefix_cache(handle.port, prefix_cache.canary_ids([c.as_dict() for c in canary]))
        # the last of its requests, as after every restore: the counters and the memory over the fixed series
        series = serving(lane, handle, prefix_cache.canary_ids([c.as_dict() for c in canary]))
    finally:
        leftovers = lane.servers.stop(handle)
        lane.state.server = None
    audit = strict_audit(lane, handle, leftovers)
    ordinary = OrdinaryReference(
        [c.as_dict() for c in canary], digests, kv, requests, record, decode,
        {name: [c.as_dict() for c in answers] for name, answers in adapter_canary.items()}, prefix, api, series,
    )  # fmt: skip
    lane.state.ordinary = ordinary
    lane.peers.hand_ordinary(lane.spec.name, ordinary)
    found = OrdinaryResults(
        canary=ordinary.canary, digests=digests, kv_tokens=kv, kv_source=source, pids=handle.pids, cleanup=audit
    )
    if record is not None:
        found["shapes"] = record
    if decode is not None:
        found["decode_speed"] = decode
    found["prefix_cache"] = prefix
    found["api"] = api
    found["serving_series"] = series
    if ordinary.adapters:
        found["adapter_canary"] = ordinary.adapters
    rec.results.update(found)
    require_findings(
        [
            *checks.ordinary_findings(digests, audit),
            *adapters.effect_findings(canary, adapter_canary, lane.config.logprob_tolerance),
        ]
    )


def shape_reference(
    lane: ServingLane, port: int, canary: list[Canary]
) -> tuple[list[shapes.Request], ShapeRecord | None]:
    """The request shapes on the ordinary engine, each asked twice: the answers every restore is compared with,
    and per shape whether the engine answered the same way both times (else it is not judged after a restore:
    the engine's own non-determinism, reported as such)."""
    cfg = lane.config
    if not cfg.request_shapes:
        return [], None
    long_ids = shapes.long_prompt(canary, cfg.max_model_len, cfg.canary_tokens)
    requests = shapes.plan(
        cfg.request_shapes,
        shapes.canary_plan(cfg.prompts, cfg.canary_tokens),
        cfg.prompts,
        cfg.canary_tokens,
        cfg.concurrent_requests,
        long_ids,
    )
    first = lane.api.shape_answers(port, requests)
    again = lane.api.shape_answers(port, requests)
    steady = shapes.self_consistency(first, again, canary, cfg.logprob_tolerance, checks.compare_canary)
    return requests, ShapeRecord(answers=first, self_consistent=steady)


def api_reference(lane: ServingLane, port: int) -> ApiRecord:
    """The API checks on the ordinary engine (``engine.api_checks``): the plan over the first canary prompt, the
    requests made from its own answers (a stop string, the EOS id), each asked twice: what every restore is
    compared with, and per request whether it answered the same way both times."""
    cfg = lane.config
    prompt = cfg.prompts[0] if cfg.prompts else VLLM_CANARY_PROMPT
    plan = api_checks.base_plan(lane.api.served_model, prompt, cfg.canary_tokens)
    return api_checks.record(plan, lambda asked: lane.api.api_answers(port, list(asked)), cfg.logprob_tolerance)


def serving(lane: ServingLane, handle: ServerHandle, canary_ids: list[int]) -> ServingSeries:
    """The fixed request series (``engine.serving_series``): vLLM's counters around it, the engine processes'
    resident memory and, where the lane has a GPU, their GPU memory after each request."""
    return lane.api.serving_series(handle.port, canary_ids, lambda: lane.servers.gpu_memory(handle.pids))


def recovery_request(lane: ServingLane) -> Callable[[int, float], BoundaryRequest]:
    """The request sent while the first restore's recovery is held (``engine.boundaries``): the canary plan's first
    request, its answer compared with the ordinary engine's where one came."""
    prompt, tokens = shapes.canary_plan(lane.config.prompts, lane.config.canary_tokens)[0]
    reference = lane.state.ordinary.canary[0]["token_ids"] if lane.state.ordinary else None

    def ask(port: int, began: float) -> BoundaryRequest:
        record, ids = lane.api.boundary_request(port, prompt, tokens, began)
        if ids is not None and reference is not None:
            record["answer_ok"] = ids == list(reference)
        return record

    return ask


def strict_audit(lane: ServingLane, handle: ServerHandle, leftovers: list[LeftoverProcess]) -> CleanupAudit:
    """The cleanup audit after a stop, with the processes that outlived the grace (by PID, start time and
    command line; GPU holders first): any leftover fails the audit, even though the harness then killed it."""
    audit = lane.servers.audit(handle.pids, [handle.port])
    drop_reused(lane, audit, {int(t["pid"]): str(t["start_time"]) for t in handle.tree})
    audit.update(
        {"leftovers": leftovers, "grace_s": lane.config.cleanup_grace, "stop": handle.stop, "tree": handle.tree}
    )
    if handle.shm_held:  # what the tree's own cleanup must have removed, but what an artifact of the lane needs
        there = [p for p in handle.shm_held if p not in set(lane.cli.absent_files(handle.shm_held))]
        audit["shm_held"] = list(handle.shm_held)
        audit["shm_kept"] = [p for p in there if p in lane.state.outside_files]
        audit["shm_left"] = [p for p in there if p not in lane.state.outside_files]
        if audit["shm_left"]:
            audit["ok"] = False
    if leftovers:
        audit["ok"] = False
    return audit


def drop_reused(lane: ServingLane, audit: CleanupAudit, recorded: dict[int, str]) -> None:
    """A PID the audit found alive is a leftover only if it is the same process (same start time) as the one
    recorded: with host PID namespaces (PIDs wrap at kernel.pid_max) another process may have it by now."""
    alive = list(audit.get("pids_alive") or [])
    if not alive or not recorded or audit.get("error"):
        return
    now = lane.servers.identify(alive)
    reused = [p for p in alive if p in recorded and now.get(p) != recorded[p]]
    if not reused:
        return
    kept = [p for p in alive if p not in reused]
    audit.update({"pids_alive": kept, "pids_gone": not kept, "pids_reused": reused})
    audit["ok"] = checks.audit_ok(
        kept, list(audit.get("ports_open") or []), audit.get("gpu_idle"), bool(audit.get("link_remaps_equal"))
    )


def create(lane: ServingLane, rec: StepEvidence[CreateResults]) -> None:
    """``vllm snapshot create`` (offline), then the captured tree must be gone, and the create must leave nothing
    in ``/dev/shm`` that no process holds and its artifact does not name (:func:`shm_left_by_create`). An artifact
    published with its tree gone is delivered to the steps after it, whatever that last check found."""
    shm_before = lane.cli.shm_names()
    result = lane.cli.create(rec)
    if result.exit_code != 0:
        reason = vllm_reason(result.stderr or result.stdout)
        rec.results["vllm_reason"] = reason
        skip_if_limitation(reason, cpu_smoke=lane.config.cpu_smoke, variant=lane.spec.variant)
        raise StepFailed(f"vllm snapshot create exited {result.exit_code}: {reason}\n{result.tail()}")
    lane.peers.measure(lane.spec.name, "create", result.seconds)  # the fault artifact's deadline is sized by it
    manifest_text = lane.cli.artifact_file("manifest.json")
    check(bool(manifest_text), "create exited 0 but published no manifest.json")
    manifest = json.loads(manifest_text)
    lane.state.outside_files = lane.cli.outside_files()
    lane.state.shm_owned.update(lane.state.outside_files)
    rec.results["outside_files"] = lane.state.outside_files
    made = lane.cli.claim_made_remaps(rec.step)
    if made:
        rec.results["link_remaps_made"] = made
    lane.state.kv_snapshot = lane.cli.snapshot_kv()
    lane.state.files_bytes = lane.cli.files_bytes()  # before any restore appends to child.log
    lane.cli.keep_child_log(rec)
    audit = lane.servers.audit(list(manifest.get("process_tree") or []), [])
    rec.results.update(
        CreateResults(
            kv_tokens=lane.state.kv_snapshot,
            artifact_bytes=manifest.get("artifact_bytes"),
            process_tree=manifest.get("process_tree"),
            cleanup=audit,
        )
    )
    require_findings(checks.audit_findings(audit, "after create"))
    rec.delivered = True
    left = shm_left_by_create(lane.cli, lane.state, shm_before, rec)
    if left is None:
        return  # not judged where the box cannot see every holder (recorded as shm_left_not_judged)
    rec.results["shm_left"] = left
    check(
        not left,
        "vllm snapshot create left in /dev/shm what no process holds and its artifact does not name: "
        + ", ".join(left)
        + " (removed with the lane; where lanes share the host's /dev/shm, another lane's create at the same time "
        "may have left one of them" + unread_words(rec.results.get("shm_unread") or []) + ")" + shm_kinds(left),
    )


def inspect_expectations(lane: ServingLane) -> checks.InspectExpectations:
    """What this lane's ``inspect`` must print: the configuration, its GPU (the one requested, else the only one it
    sees), and the ordinary engine's oracle output."""
    cfg = lane.config
    reference = lane.state.ordinary.canary if lane.state.ordinary else []
    oracle = next((c for c in reference if c["prompt"] == VLLM_CANARY_PROMPT), None)
    return checks.InspectExpectations(
        model=cfg.model,
        served_model=lane.api.served_model,
        revision=cfg.revision,
        tokenizer_revision=cfg.tokenizer_revision,
        logprob_tolerance=cfg.logprob_tolerance,
        gpu_uuid=lane.environment.gpu_uuid,
        reference_oracle=CanaryOutput.of(oracle) if oracle else None,
        files_bytes=lane.state.files_bytes,
    )


def inspect(lane: ServingLane, rec: StepEvidence[InspectResults]) -> None:
    """``vllm snapshot inspect``: the upstream e2e's field checks and the output's sha256."""
    result = lane.cli.inspect(rec)
    check(result.exit_code == 0, f"vllm snapshot inspect exited {result.exit_code}:\n{result.tail()}")
    try:
        manifest = json.loads(result.stdout)
    except json.JSONDecodeError as exc:
        raise StepFailed(f"inspect printed no JSON ({exc}): {result.stdout[:300]}") from None
    lane.state.manifest = manifest
    lane.state.inspect_sha256 = hashlib.sha256(result.stdout.encode()).hexdigest()
    lane.state.inspect_text = result.stdout
    found = checks.inspect_checks(manifest, inspect_expectations(lane))
    rec.results.update(InspectResults(sha256=lane.state.inspect_sha256, manifest=manifest, checks=found))
    require_findings(checks.inspect_findings(found))


def restore(lane: ServingLane, rec: StepEvidence[RestoreResults]) -> None:
    """``vllm snapshot restore``: exit 0, listener, canary and digests equal to the ordinary reference, KV
    capacity as created, ``inspect`` unchanged, and the server still alive and serving through the soak."""
    step = rec.step
    held = recovery_request(lane) if step == procedure.RESTORE_1 else None
    restored = lane.cli.restore(rec, step, held)
    boundary = [restored.held] if restored.held is not None else []
    if boundary:
        rec.results["boundary_requests"] = boundary
    result = restored.result
    collision = vllm_words.captured_id_collision(result.stdout, result.stderr) if result.exit_code else None
    if collision:  # another host process took a captured PID/TID for a moment: restore once more
        rec.results["retried_after"] = f"CRIU could not recreate a captured ID (another process took it): {collision}"
        restored = lane.cli.restore(rec, step)
        result = restored.result
    if result.exit_code != 0:
        error_json = lane.cli.artifact_file("error.json")
        rec.results["error_json"] = json.loads(error_json) if error_json.strip() else None
        rec.results["vllm_reason"] = vllm_reason(result.stderr or result.stdout)
        said_vllm = vllm_words.short_command(rec.results["vllm_reason"])
        # CRIU's words: vLLM logs them on stdout (0.32); else they are only in the artifact's restore.log (0.31)
        reason = vllm_words.criu_words(
            result.stdout, result.stderr, lambda: lane.cli.artifact_file("images/restore.log")
        )
        if reason:
            rec.results["criu_reason"] = reason
        said = f"; CRIU: {reason[0]}" if reason else ""
        consumed = lane.cli.absent_files(lane.state.outside_files)
        if consumed:
            rec.results["consumed"] = consumed
            raise StepFailed(
                f"{vllm_words.NOT_SELF_CONTAINED}: its restore needs {', '.join(consumed)}, which it does not carry "
                f"and which {'this box never had' if step == procedure.FRESH_BOX else 'are gone'}; "
                f"vllm snapshot restore exited {result.exit_code}: {said_vllm}{said}\n{result.tail()}"
            )
        raise StepFailed(
            f"vllm snapshot restore exited {result.exit_code}: {said_vllm}; "
            f"error.json={error_json.strip() or None}{said}\n{result.tail()}"
        )
    ready_seconds = round((restored.first_bound or result.ended) - result.started, 3)
    # recovery ran before the bind: the fault artifact's recovery deadline is sized by it (``faults.deadline``),
    # less the harness's own hold of it (issue 44 item 3)
    held_s = boundaries.HOLD_S if restored.held is not None and restored.held.get("held") else 0.0
    lane.peers.measure(lane.spec.name, "restore-ready", max(0.0, ready_seconds - held_s))
    handle = lane.servers.restored_server(restored.port)
    check(handle is not None, "restore exited 0 but restored.pid is missing")
    assert handle is not None
    lane.state.server = handle
    try:
        check(lane.servers.listening(handle.port), f"restore exited 0 but nothing listens on port {handle.port}")
        canary = lane.api.canaries(handle.port)
        reference = lane.state.ordinary
        adapter_canary = {
            name: lane.api.canaries(handle.port, name) for name in (reference.adapters if reference else {})
        }
        digests = lane.api.digests(handle.port)
        kv, kv_source = lane.api.kv(handle.port)
        shape_answers = (
            lane.api.shape_answers(handle.port, reference.shape_requests)
            if reference and reference.shape_requests
            else {}
        )
        # after the shapes, as on the ordinary engine (the prefix-cache probe below counts on the same history)
        api_answers = (
            lane.api.api_answers(handle.port, reference.api["requests"]) if reference and reference.api else {}
        )
        decode = lane.api.decode_speed(handle.port)
        decode_retry, decode_judgement = None, None
        if decode is not None:
            decode_judgement = decode_speed.judge(
                reference.decode if reference else None, decode, lane.config.decode_tolerance
            )
            if decode_speed.needs_retry(decode_judgement):  # a shared CPU's moment, or a slowdown that stays
                decode_retry = lane.api.decode_speed(handle.port)
                decode_judgement = decode_speed.judge(
                    reference.decode if reference else None, decode, lane.config.decode_tolerance, decode_retry
                )
        # after the decode speed, as on the ordinary engine: both have answered the same requests before it
        prefix = lane.api.prefix_cache(handle.port, prefix_cache.canary_ids(reference.canary if reference else []))
        series = serving(lane, handle, prefix_cache.canary_ids(reference.canary if reference else []))
    except Exception as exc:
        # A server that died after restore exited 0 is reported as what it is, with when and its log tail.
        soak = probe_liveness(lane, handle, result.ended, f"{type(exc).__name__}: {exc}")
        rec.results["soak"] = soak
        if not soak["alive"]:
            require_findings(checks.soak_findings(soak, f"during the {step} checks"))
        raise
    ordinary = lane.state.ordinary
    check(ordinary is not None, "no ordinary reference to compare the restored server with")
    assert ordinary is not None
    expected = [CanaryOutput.of(c) for c in ordinary.canary]
    tolerance = lane.config.logprob_tolerance
    compare = [checks.compare_canary(e, a, tolerance) for e, a in zip(expected, canary, strict=True)]
    digest_compare = checks.compare_digests(ordinary.digests, digests)
    adapter_compare = adapters.compare(ordinary.adapters, adapter_canary, tolerance)
    prefix_judgement = prefix_cache.judge(ordinary.prefix, prefix, tolerance)
    kv_judgement = checks.kv_judgement(
        kv, lane.state.kv_snapshot, ordinary.kv_tokens, lane.config.kv_tolerance, kv_source
    )
    holders = [int(p) for p in lane.state.manifest.get("cuda_holders") or []]
    apps = lane.servers.gpu_apps()
    gpu_engaged = checks.gpu_engaged_findings(holders, apps, step)
    changes = inspect_changes(lane, rec, f"inspect-after-{step}")
    if changes and lane.state.inspect_changed is None:  # for the later steps: the step after which it changed
        lane.state.inspect_changed = InspectChanged(step, changes)
    soak = soak_server(lane, handle, result.ended)
    shape_compare = (
        shapes.compare(ordinary.shapes, ordinary.canary, shape_answers, tolerance, checks.compare_canary)
        if ordinary.shapes is not None
        else []
    )
    steady = ordinary.shapes["self_consistent"] if ordinary.shapes is not None else {}
    not_judged = sorted(k for k, v in steady.items() if not v)
    api_compare = api_checks.judge(ordinary.api, api_answers, tolerance) if ordinary.api is not None else []
    series_judgement = serving_series.judge(ordinary.series, series)
    boundary_judged = [boundaries.judge_recovery(r) for r in boundary]
    found = RestoreResults(
        canary=[c.as_dict() for c in canary],
        canary_compare=compare,
        digests=digests,
        digest_compare=digest_compare,
        kv_tokens=kv,
        kv_source=kv_source,
        kv_ordinary=ordinary.kv_tokens,
        kv_create=lane.state.kv_snapshot,
        kv_judgement=kv_judgement,
        inspect_changes=changes,
        soak=soak,
        shape_answers=shape_answers,
        prefix_cache=prefix,
        prefix_cache_judgement=prefix_judgement,
        shape_compare=shape_compare,
        api_answers=api_answers,
        api_compare=api_compare,
        serving_series=series,
        serving_judgement=series_judgement,
        pids=handle.pids,
        root_pid=handle.root_pid,
        listener_first_bound=restored.first_bound,
        gpu_engaged=None if apps is None else GpuEngaged(holders=holders, gpu_apps=sorted(apps)),
        ready_seconds=ready_seconds,
    )
    if boundary:
        found["boundary_requests"], found["boundary_judgements"] = boundary, boundary_judged
    if adapter_compare:
        found["adapter_canary"] = {name: [c.as_dict() for c in got] for name, got in adapter_canary.items()}
        found["adapter_compare"] = adapter_compare
    if decode is not None and decode_judgement is not None:
        found["decode_speed"] = decode
        found["decode_judgement"] = decode_judgement
        if decode_retry is not None:
            found["decode_retry"] = decode_retry
    rec.results.update(found)
    require_findings(
        [
            *checks.soak_findings(soak, f"watched {lane.config.observe_s:g} s after {step}"),
            *checks.restore_findings(compare, digest_compare),
            *adapters.restore_findings(adapter_compare, step),
            *checks.shape_findings(shape_compare, soak.get("repeated_mismatch") or [], not_judged),
            *api_checks.findings(api_compare, step),
            *serving_series.findings(series_judgement, step),
            *boundaries.findings(boundary_judged, step),
            *checks.kv_findings(kv_judgement),
            *gpu_engaged,
            *checks.inspect_stable_findings(changes, step),
            *decode_speed.findings(decode_judgement, step),
            *prefix_cache.findings(prefix_judgement, step),
        ]
    )


def inspect_changes(lane: ServingLane, rec: StepEvidence[object], name: str) -> dict[str, InspectChange]:
    """``vllm snapshot inspect`` again: the fields that differ from what the inspect step printed."""
    result = lane.cli.inspect(rec, name=name)
    try:
        now = json.loads(result.stdout)
    except json.JSONDecodeError:
        return {"(output)": {"before": "JSON", "after": f"exit {result.exit_code}: {result.stdout[:200]!r}"}}
    return checks.manifest_changes(lane.state.manifest, now)


#: a liveness look that fails is looked at again before it is a death: the second ``/health`` ask waits this many
#: times the slowest answer measured from the server (the failed ask counted at its bound), at most the ``http``
#: timeout
CONFIRM_HEADROOM = 4.0


def probe_liveness(
    lane: ServingLane,
    handle: ServerHandle,
    since: float,
    reason: str = "",
    *,
    known: Mapping[int, str] | None = None,
    slowest_s: float = 0.0,
) -> Soak:
    """One look at a restored server: its processes, ``/health``. ``died_after_s`` counts from ``since`` (when
    ``vllm snapshot restore`` exited 0). A look that fails is not yet a death (:func:`_look`)."""
    return _look(lane, handle, since, reason, known, slowest_s)[0]


def _look(
    lane: ServingLane,
    handle: ServerHandle,
    since: float,
    reason: str,
    known: Mapping[int, str] | None,
    slowest_s: float,
) -> tuple[Soak, list[int], float | None]:
    """A liveness look, its confirmed gone processes and how long ``/health`` took to answer 200 (None: it did not).

    The first look asks the box which processes exist and ``/health`` within ``client.HEALTH_TIMEOUT``. When it
    fails, a second look decides: the processes by their own state (their start times, ``known`` where the watch
    recorded them: a PID held by another process is gone), then, where all are there, ``/health`` again with a
    deadline sized by measurement (:data:`CONFIRM_HEADROOM` × the slowest answer measured, ``slowest_s``, or the
    failed ask's own bound; at most the ``http`` timeout). A death is two failed looks; a failed look that the
    second finds alive is recorded as a ``second_look`` (under load a look's answer can come late or be lost)."""
    gone = sorted(set(handle.pids) - set(lane.servers.alive(handle.pids)))
    asked = time.monotonic()
    if not gone and lane.api.health(handle.port):
        return Soak(alive=True, probes=0, seconds=0.0), [], time.monotonic() - asked
    first = f"processes gone {gone}" if gone else f"/health did not answer 200 within {HEALTH_TIMEOUT:g} s"
    now = lane.servers.identify(handle.pids)
    gone = sorted(p for p in handle.pids if p not in now or (known or {}).get(p, now[p]) != now[p])
    deadline = round(min(lane.config.timeouts["http"], CONFIRM_HEADROOM * max(slowest_s, HEALTH_TIMEOUT)), 2)
    asked = time.monotonic()
    if not gone and lane.api.health(handle.port, deadline):
        answered = time.monotonic() - asked
        second = SecondLook(after_s=round(time.time() - since, 2), first=first, health_s=round(answered, 2),
                            deadline_s=deadline)  # fmt: skip
        return Soak(alive=True, probes=0, seconds=0.0, second_looks=[second]), [], answered
    again = (
        f"processes gone {gone}"
        if gone
        else f"/health did not answer 200 within {deadline:g} s ({CONFIRM_HEADROOM:g} × the slowest answer "
        f"measured, {max(slowest_s, HEALTH_TIMEOUT):.2f} s), its processes there"
    )
    out = Soak(
        alive=False,
        probes=0,
        seconds=0.0,
        died_after_s=round(time.time() - since, 2),
        reason=f"{first}; looked at again: {again}" + (f" ({reason})" if reason else ""),
        log_tail=lane.servers.restored_log_tail(),
    )
    return out, gone, None


#: the soak's pause between two looks at the restored server (its idle time is recorded: ``Soak.idle_s``)
PROBE_PAUSE = 0.25
#: the second looks a soak records in full (the rest are counted)
SECOND_LOOKS_KEPT = 5


def soak_server(lane: ServingLane, handle: ServerHandle, since: float) -> Soak:
    """The soak and the observation window after a restore: ``/health`` and the restored tree's processes every
    0.25 s, vLLM's canary among them, for ``--vsnap-soak`` seconds and at least until ``--vsnap-observe`` seconds
    after the restore exited (``since``; the step's checks ran inside that window); the first failure ends it
    with when, why and what the restored tree wrote."""
    window = lane.config.observe_s
    seconds = lane.config.soak_s
    started = time.time()
    ordinary = lane.state.ordinary
    repeat = "repeated" in lane.config.request_shapes
    reference = ordinary.canary if ordinary is not None and repeat else None
    with lane.servers.watch_exits(handle.pids) as exits:
        return _watch(lane, handle, since, exits, started, window, seconds, reference)


def _watch(
    lane: ServingLane,
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
    # the restored tree's processes as the watch begins (a PID later held by another process is not theirs)
    known = lane.servers.identify(handle.pids)
    slowest = 0.0  # the slowest /health answer measured: a second look's deadline is sized by it
    second_looks: list[SecondLook] = []
    seconds_looked = 0
    while True:
        look, gone, answered = _look(lane, handle, since, "", known, slowest)
        if look["alive"] and (probes % 4 == 3 or time.time() - started >= seconds):
            try:
                answers = lane.api.canaries(handle.port)
                canaries += 1
                if reference is not None:  # the repeated-request shape: every round's answers, not only the first
                    differ = [
                        c
                        for e, a in zip(reference, answers, strict=False)
                        if not (c := checks.compare_canary(CanaryOutput.of(e), a, lane.config.logprob_tolerance))["ok"]
                    ]
                    mismatch += differ[: max(0, 3 - len(mismatch))]
            except Exception as exc:
                look, gone, answered = _look(
                    lane, handle, since, f"canary request: {type(exc).__name__}: {exc}", known, slowest
                )
                if look["alive"]:
                    look.update(
                        {
                            "alive": False,
                            "died_after_s": round(time.time() - since, 2),
                            "reason": f"canary request failed: {exc}",
                            "log_tail": lane.servers.restored_log_tail(),
                        }
                    )
        for second in look.pop("second_looks", []):
            seconds_looked += 1
            if len(second_looks) < SECOND_LOOKS_KEPT:
                second_looks.append(second)
        if answered is not None:
            slowest = max(slowest, answered)
        died = not look["alive"]
        if not died:
            probes += 1
            last_ok = time.time()
        if died or (last_ok - started >= seconds and last_ok - since >= window):
            look.update(
                {"probes": probes, "canaries": canaries, "window_s": window, "idle_s": round(idle, 2),
                 "seconds": round((time.time() if died else last_ok) - started, 2),
                 "slowest_health_s": round(slowest, 3)}
            )  # fmt: skip
            if seconds_looked:
                look.update({"second_looks": second_looks, "second_looks_count": seconds_looked})
            if died:
                look["last_ok_after_s"] = round(last_ok - since, 2)
                if gone:  # two looks found them gone: how they ended
                    exits.wait_for(gone)
                    look["exit"] = exits.ended(gone)
                else:  # a server that stopped answering: its processes are there, and not an exit to explain
                    now = lane.servers.identify(handle.pids)
                    look["exit"] = (
                        "not exited: its processes are there ("
                        + ", ".join(f"{pid} started at tick {now[pid]}" for pid in handle.pids if pid in now)
                        + ")"
                    )
            else:
                look["observed_after_restore_s"] = round(last_ok - since, 2)
            if mismatch:
                look["repeated_mismatch"] = mismatch
            return look
        time.sleep(PROBE_PAUSE)
        idle += PROBE_PAUSE


def restart(lane: ServingLane, rec: StepEvidence[RestartResults]) -> None:
    """Stop and start the same lane environment; the restored server must be alive until then and gone after,
    inspect output unchanged (a changed field is named, with the step after which it first changed)."""
    before = lane.environment.id()
    handle = lane.state.server
    findings: list[checks.Finding] = []
    recorded = lane.servers.identify(handle.pids) if handle is not None else {}
    if handle is not None:
        look = probe_liveness(lane, handle, time.time())
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
    lane.environment.restart()
    after = lane.environment.id()
    audit = lane.servers.audit(handle.pids if handle else [], [handle.port] if handle else [])
    drop_reused(lane, audit, recorded)
    audit["step"] = "seen at the restart"
    lane.state.server = None
    result = lane.cli.inspect(rec, name="inspect-after-restart")
    sha_after = hashlib.sha256(result.stdout.encode()).hexdigest()
    try:
        changes = checks.manifest_changes(lane.state.manifest, json.loads(result.stdout))
    except json.JSONDecodeError:
        changes = {}
    rec.results.update(
        RestartResults(
            container_id_before=before,
            container_id_after=after,
            sha256_before=lane.state.inspect_sha256,
            sha256_after=sha_after,
            inspect_changes=changes,
            cleanup=audit,
        )
    )
    found = checks.restart_findings(before, after, audit, result.exit_code, lane.state.inspect_text, result.stdout)
    if changes:
        first = lane.state.inspect_changed
        when = f"{first.step} (and still after the container restart)" if first else "the container restart"
        found = [f for f in found if f.check != "inspect unchanged"]
        found += checks.inspect_stable_findings(changes, when)
    require_findings([*findings, *found])


def stop_restored(lane: ServingLane, rec: StepEvidence[RestoreResults], in_flight: bool = False) -> bool:
    """Stop the restored server (still alive and serving when it is stopped) and audit that nothing is left.
    Whether there was one to stop (it raises on what the stop or its audit found). With ``in_flight`` (``restore-2``
    after a restore that passed, issue 44 item 3) a request is in flight as it stops: one cut short fails the step,
    which still counts as stopped cleanly (``delivered``: the next restore runs after it)."""
    handle = lane.state.server
    if handle is None:
        return False
    look = probe_liveness(lane, handle, time.time())
    rec.results["alive_at_stop"] = look["alive"]
    if in_flight and look["alive"]:
        with InFlight(lane, handle.port) as flight:
            leftovers = lane.servers.stop(handle)
        judged = boundaries.judge_stop(flight.record, flight.tokens)
        rec.results["boundary_requests"] = [*rec.results.get("boundary_requests", []), flight.record]
        rec.results["boundary_judgements"] = [*rec.results.get("boundary_judgements", []), judged]
    else:
        leftovers, judged = lane.servers.stop(handle), None
    audit = strict_audit(lane, handle, leftovers)
    lane.state.server = None
    rec.results["cleanup"] = audit
    findings = checks.audit_findings(audit, "after restore")
    if not look["alive"]:
        findings.append(
            checks.Finding(
                "liveness", False, f"the restored server was no longer alive at the final stop: {look.get('reason')}"
            )
        )
    require_findings(findings)
    if judged is not None and judged["ok"] is False:
        rec.delivered = True  # stopped cleanly all the same
        require_findings(boundaries.findings([judged], rec.step))
    return True


class InFlight:
    """A request in flight while the restored server is stopped (``engine.boundaries``): sent in a thread as the
    block begins; the block (the stop) begins once the engine reports it running (a bounded number of looks at
    ``/metrics``; at once where the engine reports no such gauge); :attr:`record` says what came of it."""

    LOOKS = 200

    def __init__(self, lane: ServingLane, port: int) -> None:
        self.lane, self.port = lane, port
        ordinary = lane.state.ordinary
        measured = ordinary.decode if ordinary is not None else None
        self.tokens = boundaries.stop_tokens(measured["median_tps"] if measured else None, lane.config.max_model_len)
        self.started = time.time()
        self.record = BoundaryRequest(boundary="stop", outcome="not sent")
        self._thread = threading.Thread(target=self._send, daemon=True)

    def _send(self) -> None:
        prompt = self.lane.config.prompts[0] if self.lane.config.prompts else VLLM_CANARY_PROMPT
        record, _ = self.lane.api.boundary_request(self.port, prompt, self.tokens, self.started)
        self.record.update(record)

    def __enter__(self) -> InFlight:
        self._thread.start()
        running: bool | None = None
        for _ in range(self.LOOKS):
            running = self.lane.api.in_flight(self.port)
            if running is not False or not self._thread.is_alive():
                break
            time.sleep(0.01)
        self.record["in_flight"] = running if self._thread.is_alive() else (running or False)
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join(self.lane.config.timeouts["http"] + 5.0)
        if self._thread.is_alive():
            self.record.update({"outcome": "timed out", "detail": "no answer and no close after the stop"})


def restore_then_stop(lane: ServingLane, rec: StepEvidence[RestoreResults]) -> None:
    """A restore followed by the stop and audit of what it restored, whatever the restore did (``restore-2``; and
    ``restore-after-stop``: after the last restored server was stopped the way a scale-down stops it, SIGTERM and
    its own cleanup, the artifact restores again in the same box; one that depends on what the restored engine
    cleans up on its way out fails there, in its own words). When the restore failed, its failure is the step's
    (a cleanup failure after it is recorded beside it, never in its place). A restored server stopped cleanly
    marks the step ``delivered``, passed or failed on its checks (a later step that needs only a stopped restored
    instance runs after it: ``procedure.Step.delivered``)."""
    try:
        restore(lane, rec)
    except BaseException:
        try:
            rec.delivered = stop_restored(lane, rec)
        except Exception as cleanup:
            error = f"{type(cleanup).__name__}: {cleanup}"
            rec.results["cleanup_error"] = error
            audit = rec.results.setdefault("cleanup", CleanupAudit(ok=False))
            audit.setdefault("detail", f"after the failed restore, the stop or its audit failed too: {error}")
        raise
    rec.delivered = stop_restored(lane, rec, in_flight=rec.step == procedure.RESTORE_2)


def fresh_box_restore(lane: FreshBoxLane, rec: StepEvidence[RestoreResults]) -> None:
    """The artifact restores in a fresh box of the same image holding nothing else of this lane (its own IPC
    namespace, an empty ``/dev/shm``): the same checks as the first restore, then the stop and audit. An artifact
    that depends on state outside it (shared-memory segments, files of the box it was made in) fails here."""
    with lane.fresh_box() as fresh:
        rec.results["box"] = fresh.environment.id()
        restore_then_stop(fresh, rec)


def overlay_verification(lane: OverlayLane, rec: StepEvidence[OverlayResults]) -> None:
    """Every overlaid file is the one imported: in each engine process, and by a fresh interpreter."""
    files = lane.overlay.imports()
    for item in files:
        fresh = lane.overlay.fresh_import(item["module"])
        item["fresh_import"] = fresh
        item["fresh_ok"] = fresh["exit_code"] == 0 and fresh["sha256"] == item["host_sha256"]
        item["ok"] = checks.overlay_file_ok(item["host_sha256"], item["imported"], fresh["exit_code"], fresh["sha256"])
        item["verified_in"] = (
            "engine processes and a fresh interpreter"
            if item["imported"]
            else "a fresh interpreter only (no engine process imported it: code of the vllm CLI process)"
        )
        item["finding"], item["finding_detail"] = overlay.file_finding(item)
    rec.results.update(OverlayResults(files=files, summary=overlay.findings_line(files)[1]))
    rec.results["probe_loaded_pids"] = lane.overlay.probe_loaded_pids()  # a box that cannot say keeps the files
    require_findings(checks.overlay_findings(files))


def unit_step(lane: UnitLane, rec: StepEvidence[UnitResults]) -> None:
    """The user's unit command from the overlay checkout in this lane's box, per test id. With a base arm, the head
    arm records and the base arm judges: only failures new on the head arm fail (pre-existing ones are listed);
    without one, any failure fails."""
    result, junit_xml, kept = lane.overlay.run_unit_command(rec)
    record = UnitRun(
        command=lane.config.unit_command, exit_code=result.exit_code, seconds=round(result.seconds, 1), junit=kept
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
    lane.peers.hand_unit(lane.spec.name, found)
    shown = unit.counts(found)
    summary = f"{shown['passed']} passed, {shown['failed']} failed, {shown['skipped']} skipped"
    if lane.spec.arm == "head":
        if lane.config.base_image is not None:
            record["judged"] = f"recorded ({summary}); judged against the base arm by its unit step"
            return
        record["judged"] = "alone (no base arm): every failure counts"
        check(not record["failed"], f"{len(record['failed'])} unit test(s) failed ({summary}): {record['failed'][:10]}")
        return
    head, why = lane.peers.head_unit(lane.spec.peer("head"))
    if head is None:
        pytest.skip(f"{lane.spec.name}: the head arm's unit outcomes are not available to judge against ({why})")
    new, pre, fixed = unit.against_base(head, found)
    record["judged"] = "the head arm's failures against this (base) arm's"
    record["new_on_head"], record["pre_existing"], record["fixed_on_head"] = new, pre, fixed
    check(
        not new,
        f"{len(new)} unit test(s) fail on the head arm and not on the base arm: {new[:10]}"
        + (f" ({len(pre)} pre-existing failure(s), failing on the base arm too)" if pre else ""),
    )


def compare_arms(lane: ReferenceLane, rec: StepEvidence[VsHeadResults]) -> None:
    """The base arm's ordinary reference against the head arm's: same canary outputs, same parameter bytes."""
    head, why = lane.peers.head_ordinary(lane.spec.peer("head"))
    ordinary = lane.state.ordinary
    if not head or ordinary is None:
        why = why if not head else "this lane's own is missing"
        pytest.skip(f"{lane.spec.name}: the head arm's ordinary reference is not available to compare with ({why})")
    expected = [CanaryOutput.of(c) for c in head.canary]
    actual = [CanaryOutput.of(c) for c in ordinary.canary]
    tolerance = lane.config.logprob_tolerance
    compare = [checks.compare_canary(e, a, tolerance) for e, a in zip(expected, actual, strict=True)]
    digests = checks.compare_digests(head.digests, ordinary.digests)
    # each adapter's canaries through the base image's engine against the head's (the same variant lane's)
    answered = {name: [CanaryOutput.of(c) for c in answers] for name, answers in ordinary.adapters.items()}
    adapter_compare = adapters.compare(head.adapters, answered, tolerance)
    found = VsHeadResults(
        canary_compare=compare, digest_compare=digests, kv_head=head.kv_tokens, kv_base=ordinary.kv_tokens
    )
    if adapter_compare:
        found["adapter_compare"] = adapter_compare
    rec.results.update(found)
    require_findings([*checks.arms_findings(compare, digests), *adapters.arms_findings(adapter_compare)])
