"""Every judgement of a qualification step, as a pure function: observations in, findings out.

No function here touches Docker, the network or the file system; the steps gather observations through their
lane's tools and hand them here (so a second runtime changes nothing in this module, and every rule is unit-tested
with no engine reachable: ``tests/unit/test_checks.py``). A step fails with the details of its failed findings.

What a step records comes back as the evidence model's types (``model.CanaryCompare``, ``DigestCompare``,
``KvJudgement``, ``InspectCheck``), and the judgements read those types. Where a parameter also takes an
untyped dictionary, a caller still hands over what it gathered that way (the lane's audits, soak, digests and
overlay files, in ``steps.py``); the model type beside it is what that dictionary holds.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from vsnap_qual import model, overlay
from vsnap_qual.engine.client import CanaryOutput

#: The snapshot boundary ``vllm snapshot inspect`` must name (contract §6).
BOUNDARY = "post-engine-init-reloadable-state-released"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_SHOWN = 10
#: A process as a cleanup audit lists it (``model.LeftoverProcess``, or the lane's untyped record of it).
Process = TypeVar("Process", bound=Mapping[str, object])


@dataclass(frozen=True)
class Finding:
    """One judged fact: which check, whether it held, and (when it did not) what differs."""

    check: str
    ok: bool
    detail: str = ""


def failed(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if not f.ok]


def failure_message(findings: Iterable[Finding], prefix: str = "") -> str | None:
    """The step's failure message from its failed findings, or None when every finding held."""
    bad = failed(findings)
    if not bad:
        return None
    return prefix + " | ".join(f.detail or f.check for f in bad)


# ---- the two comparisons every restore (and the base arm) makes -------------------------------------------
def first_divergence(expected: Sequence[int], actual: Sequence[int]) -> int | None:
    """The first token position where two greedy outputs differ (a length difference counts), or None."""
    for position, (e, a) in enumerate(zip(expected, actual, strict=False)):
        if e != a:
            return position
    return None if len(expected) == len(actual) else min(len(expected), len(actual))


def compare_canary(expected: CanaryOutput, actual: CanaryOutput, tolerance: float) -> model.CanaryCompare:
    """vLLM's ``oracles_match`` rule (ids and text exact, |Δlogprob| ≤ tol), per position for a multi-token
    canary (every token id exact, every position's |Δlogprob| ≤ tol), plus whether it was bit-exact and the
    first position where the outputs diverge (token id, or logprob beyond the tolerance)."""
    ids_equal = expected.token_ids == actual.token_ids
    text_equal = expected.text == actual.text
    e_lp = expected.logprobs if expected.logprobs is not None else [expected.logprob]
    a_lp = actual.logprobs if actual.logprobs is not None else [actual.logprob]
    deltas = [a - e for e, a in zip(e_lp, a_lp, strict=False)]
    delta = actual.logprob - expected.logprob
    positions = [
        first_divergence(expected.token_ids, actual.token_ids),
        next((i for i, d in enumerate(deltas) if abs(d) > tolerance), None),
    ]
    diverges = min((p for p in positions if p is not None), default=None)
    worst = max((abs(d) for d in deltas), default=abs(delta))
    return model.CanaryCompare(
        prompt=expected.prompt,
        tokens=len(expected.token_ids),
        expected=expected.as_dict(),
        actual=actual.as_dict(),
        token_ids_equal=ids_equal,
        text_equal=text_equal,
        logprob_delta=delta,
        max_logprob_delta=worst,
        first_divergence=diverges,
        bit_exact=ids_equal and text_equal and all(d == 0.0 for d in deltas) and len(e_lp) == len(a_lp),
        ok=ids_equal and text_equal and len(e_lp) == len(a_lp) and worst <= tolerance,
    )


def compare_digests(
    reference: Mapping[str, model.Digest],
    actual: Mapping[str, model.Digest],
) -> model.DigestCompare:
    """Which parameters and buffers kept their bytes; unobservable ones are named, never counted as unchanged.
    Buffers (``source: "buffer"`` in the reference) are counted and their changes named apart."""
    changed, missing, unobservable = [], [], []
    unchanged = 0
    for name, ref in reference.items():
        got = actual.get(name)
        if got is None:
            missing.append(name)
        elif ref.get("sha256") is None or got.get("sha256") is None:
            unobservable.append(name)
        elif ref.get("sha256") == got.get("sha256"):
            unchanged += 1
        else:
            changed.append(name)
    extra = sorted(set(actual) - set(reference))
    buffers = {name for name, ref in reference.items() if ref.get("source") == "buffer"}
    return model.DigestCompare(
        total=len(reference),
        unchanged=unchanged,
        changed=changed,
        missing=missing,
        unobservable=unobservable,
        extra=extra,
        # nothing compared is never a pass
        ok=not changed and not missing and not extra and 0 < unchanged == len(reference) - len(unobservable),
        buffers=len(buffers),
        changed_buffers=[name for name in changed if name in buffers],
    )


def _canary_text(c: model.CanaryCompare, left: str, right: str) -> str:
    e, a = c["expected"], c["actual"]
    tokens = c.get("tokens") or len(e["token_ids"])
    where = c.get("first_divergence")
    if tokens > 1:
        head = f"{c['prompt']!r} ({tokens} tokens): first diverging position {where}"
        if where is not None and where < len(e["token_ids"]) and where < len(a["token_ids"]):
            e_lp, a_lp = e.get("logprobs") or [], a.get("logprobs") or []
            head += (
                f", {left} token {e['token_ids'][where]}"
                + (f" ({e_lp[where]:.6f})" if where < len(e_lp) else "")
                + f", {right} {a['token_ids'][where]}"
                + (f" ({a_lp[where]:.6f})" if where < len(a_lp) else "")
            )
        return head + f"; max |Δ logprob| {c.get('max_logprob_delta', 0.0):.3g}; {right} text {a['text']!r}"
    return (
        f"{c['prompt']!r}: {left} {e['token_ids']} {e['text']!r} {e['logprob']:.6f}, "
        f"{right} {a['token_ids']} {a['text']!r} {a['logprob']:.6f}"
    )


def canary_findings(compare: Sequence[model.CanaryCompare], against: str = "the ordinary reference") -> list[Finding]:
    """The one-token vLLM canary first, then the multi-token canaries (each names its first diverging position)."""
    one = [c for c in compare if (c.get("tokens") or 1) == 1]
    many = [c for c in compare if (c.get("tokens") or 1) > 1]
    findings = []
    for name, group in (("canary", one), ("multi-token canary", many)):
        if not group and name == "multi-token canary":
            continue
        bad = [c for c in group if not c["ok"]]
        detail = f"{name} differs from {against}: " + "; ".join(_canary_text(c, "expected", "got") for c in bad)
        findings.append(Finding(name, not bad and bool(group), detail if bad else f"no {name} compared"))
    return findings


def shape_findings(
    compare: Sequence[model.ShapeCompare], repeated: Sequence[model.CanaryCompare], not_judged: Sequence[str]
) -> list[Finding]:
    """Every judged request-shape answer equals the ordinary engine's answer to the same request (``repeated``: the
    soak rounds' canaries that differed); each failure names its shape, request and first divergence."""
    bad = [
        f"{c['shape']} request {c['index']}: {_canary_text(c['compare'], 'ordinary', 'restored')}"
        for c in compare
        if c["judged"] and not c["compare"]["ok"]
    ]
    bad += [f"repeated request (a soak round): {_canary_text(c, 'ordinary', 'restored')}" for c in repeated]
    judged = sorted({c["shape"] for c in compare if c["judged"]})
    if not compare and not repeated:
        return []
    if bad:
        return [
            Finding("request shapes", False, "request shapes differ from the ordinary reference: " + "; ".join(bad))
        ]
    note = (
        f" (not judged: {', '.join(not_judged)}: the ordinary engine answered differently twice)" if not_judged else ""
    )
    return [Finding("request shapes", True, f"shapes {', '.join(judged)} as the ordinary reference{note}")]


def digest_findings(compare: model.DigestCompare, against: str = "the ordinary reference") -> list[Finding]:
    """The digest check: a changed buffer (a rotary cache, a KV or quantization scale) is named as a buffer."""
    buffers = compare.get("changed_buffers") or []
    params = [name for name in compare["changed"] if name not in buffers]
    what = "buffer" if buffers and not params and not compare["missing"] and not compare["extra"] else "parameter"
    detail = (
        f"{what} digests differ from {against}: {compare['unchanged']}/{compare['total']} unchanged; "
        f"changed {params[:_SHOWN]} missing {compare['missing'][:_SHOWN]} "
        f"unobservable {compare['unobservable'][:_SHOWN]}"
    )
    if buffers:
        detail += f"; buffers changed {buffers[:_SHOWN]} (of {compare.get('buffers', 0)} buffers)"
    return [Finding("digests", bool(compare["ok"]), detail)]


# ---- cleanup audits ---------------------------------------------------------------------------------------------
#: A strict stop's tree still alive at the grace but still exiting may be looked at until this many graces after
#: SIGTERM in all (the bound of the extension; a tree that never exits is named there at the latest).
STOP_CAP_GRACES = 3.0
#: A survivor still works when the tree's CPU time moves at least this fast between two looks: ticks of
#: ``/proc/PID/stat`` (USER_HZ, 100 a second) per second of wall time, i.e. 5% of one core. An idle tree that
#: ignores SIGTERM (asleep in a poll or a wait) spends well under 1% of a core; an exiting one on a loaded machine
#: gets its share of a core (at load 12 on 2 cores about 16%).
PROGRESS_TICKS_PER_S = 5.0


@dataclass(frozen=True)
class StopLook:
    """One look at a stopping tree: seconds after SIGTERM, and the CPU ticks so far of each of its processes still
    alive (zombies count as gone)."""

    at_s: float
    ticks: Mapping[int, int]


def stop_progress(before: StopLook, after: StopLook) -> str | None:
    """What moved between two looks at a tree stopping after SIGTERM: a process that left, or CPU time spent (at
    least :data:`PROGRESS_TICKS_PER_S`); None when nothing did: the tree is stalled, not slow."""
    left = sorted(set(before.ticks) - set(after.ticks))
    if left:
        return f"at {after.at_s:.1f} s: pid {', '.join(map(str, left))} exited"
    wall = after.at_s - before.at_s
    spent = {p: t - before.ticks[p] for p, t in after.ticks.items() if p in before.ticks and t > before.ticks[p]}
    if wall > 0 and sum(spent.values()) / wall >= PROGRESS_TICKS_PER_S:
        each = ", ".join(f"pid {p} {n}" for p, n in sorted(spent.items()))
        return f"at {after.at_s:.1f} s: CPU ticks spent in {wall:.2f} s: {each}"
    return None


def stop_stalled(before: StopLook, after: StopLook) -> str:
    """Why an extension ends with the tree not gone: what the last two looks saw."""
    wall = after.at_s - before.at_s
    spent = sum(max(0, t - before.ticks.get(p, t)) for p, t in after.ticks.items())
    return (
        f"stopped progressing at {after.at_s:.1f} s: no process left and {spent} CPU ticks in {wall:.2f} s "
        f"(under {PROGRESS_TICKS_PER_S:g} a second)"
    )


def stop_cap(grace: float) -> float:
    """The latest a strict stop is judged, in seconds after SIGTERM, however long its tree keeps progressing."""
    return grace * STOP_CAP_GRACES


def stop_text(stop: Mapping[str, Any], grace: float) -> str:
    """``still alive N s after SIGTERM``'s N and how it was reached: the grace, or the extension and why it ended."""
    deadline = float(stop.get("deadline_s") or grace)
    extension = list(stop.get("extension") or [])
    if not extension:
        return f"still alive {deadline:g} s after SIGTERM"
    return (
        f"still alive {deadline:.1f} s after SIGTERM (the {grace:g} s grace extended while the tree progressed: "
        f"{'; '.join(extension)}; then {stop.get('stalled') or 'reached the cap'})"
    )


def audit_ok(pids_alive: Sequence[int], ports_open: Sequence[int], gpu_idle: bool | None, remaps_equal: bool) -> bool:
    """Nothing of the stopped engine left: PIDs gone, ports closed, GPU not busy (None: not checked), link
    remaps at their baseline."""
    return not pids_alive and not ports_open and gpu_idle is not False and remaps_equal


def audit_problems(audit: model.CleanupAudit) -> str:
    if audit.get("error"):
        return f"the audit itself failed ({audit.get('error')})"
    problems = []
    if audit.get("leftovers"):
        problems.append(
            stop_text(audit.get("stop") or {}, float(audit.get("grace_s", 0)))
            + " (killed by the harness): "
            + "; ".join(leftover_text(p) for p in order_leftovers(audit.get("leftovers", [])))
        )
    if not audit.get("pids_gone"):
        problems.append(f"PIDs alive {audit.get('pids_alive')}")
    if not audit.get("ports_closed"):
        problems.append(f"ports open {audit.get('ports_open')}")
    if audit.get("gpu_idle") is False:
        problems.append("GPU busy")
    if audit.get("link_remaps_ours"):
        ours = audit.get("link_remaps_ours", [])
        made = audit.get("link_remaps_made_by") or {}
        problems.append(remap_text(ours, str(audit.get("lane")), str(audit.get("step") or ""), made))
    elif not audit.get("link_remaps_equal"):
        problems.append("/dev/shm/link_remap.* differs from its baseline")
    if audit.get("shm_left"):
        problems.append(
            f"/dev/shm files the stopped tree of lane {audit.get('lane')} held are still there, held by no artifact: "
            + ", ".join(audit.get("shm_left", []))
        )
    return ", ".join(problems) or "ok"


def audit_findings(audit: model.CleanupAudit, when: str) -> list[Finding]:
    return [Finding("cleanup", bool(audit.get("ok")), f"cleanup {when} incomplete: {audit_problems(audit)}")]


# ---- per step --------------------------------------------------------------------------------------------------
def ordinary_findings(
    digests: Mapping[str, model.Digest],
    audit: model.CleanupAudit,
) -> list[Finding]:
    """The ordinary reference is usable: no parameter hashed as empty bytes, at least one observable, and the
    server left nothing behind when stopped."""
    empty = [n for n, d in digests.items() if d.get("sha256") == EMPTY_SHA256]
    observable = [n for n, d in digests.items() if d.get("sha256")]
    return [
        Finding(
            "digests not empty",
            not empty,
            f"parameters digested as empty bytes (packed away, not reconstructed): {empty[:5]}",
        ),
        Finding(
            "digests observable",
            bool(observable),
            f"no parameter digest could be observed ({len(digests)} parameters, all unobservable)",
        ),
        *audit_findings(audit, "after ordinary serve"),
    ]


@dataclass(frozen=True)
class InspectExpectations:
    """What ``vllm snapshot inspect`` must print for this lane (from the configuration and the reference)."""

    model: str
    served_model: str
    revision: str
    tokenizer_revision: str
    logprob_tolerance: float
    gpu_uuid: str | None = None
    reference_oracle: CanaryOutput | None = None  # the ordinary run's output for vLLM's canary prompt
    #: the artifact's regular files but manifest.json, their sizes summed just after create (None: not read)
    files_bytes: int | None = None


def inspect_checks(manifest: Mapping[str, Any], expect: InspectExpectations) -> list[model.InspectCheck]:
    """The upstream e2e's field-by-field inspect validation (contract §6 step 11), plus the ordinary oracle.
    ``manifest`` is what ``vllm snapshot inspect`` printed (JSON vLLM defines, read field by field here)."""
    checks: list[model.InspectCheck] = []

    def add(name: str, ok: bool, detail: object) -> None:
        checks.append(model.InspectCheck(name=name, ok=bool(ok), detail=detail))

    version = manifest.get("schema_version")
    add("schema_version", version == 1 and type(version) is int, version)
    add("boundary", manifest.get("boundary") == BOUNDARY, manifest.get("boundary"))
    add("model", manifest.get("model") == expect.model, manifest.get("model"))
    add(
        "served_model_name", manifest.get("served_model_name") == expect.served_model, manifest.get("served_model_name")
    )
    add("model_revision", manifest.get("model_revision") == expect.revision, manifest.get("model_revision"))
    add(
        "tokenizer_revision",
        manifest.get("tokenizer_revision") == expect.tokenizer_revision,
        manifest.get("tokenizer_revision"),
    )
    if expect.gpu_uuid:
        add("gpu_uuid", manifest.get("gpu_uuid") == expect.gpu_uuid, manifest.get("gpu_uuid"))
    logprob = manifest.get("oracle_sampled_token_logprob")
    add("oracle_logprob_finite_float", isinstance(logprob, float) and math.isfinite(logprob), logprob)
    size = manifest.get("artifact_bytes")
    add("artifact_bytes_positive_int", isinstance(size, int) and not isinstance(size, bool) and size > 0, size)
    if expect.files_bytes is not None:
        # the contract: the sum of the sizes of every regular file under the artifact at manifest time (every one
        # but manifest.json, published after it); read just after create, before a restore could change one
        add(
            "artifact_bytes_equals_files_on_disk",
            size == expect.files_bytes,
            {"manifest": size, "files on disk but manifest.json": expect.files_bytes},
        )
    tree = manifest.get("process_tree") or []
    add(
        "process_tree",
        bool(tree) and len(set(tree)) == len(tree) and all(isinstance(p, int) and p > 0 for p in tree),
        tree,
    )
    holders = manifest.get("cuda_holders") or []
    add("cuda_holders_subset", bool(holders) and set(holders) <= set(tree), holders)
    first = expect.reference_oracle
    if first is not None:
        add(
            "oracle_equals_ordinary_token_ids",
            manifest.get("oracle_token_ids") == first.token_ids,
            {"manifest": manifest.get("oracle_token_ids"), "ordinary": first.token_ids},
        )
        add(
            "oracle_equals_ordinary_text",
            manifest.get("oracle_text") == first.text,
            {"manifest": manifest.get("oracle_text"), "ordinary": first.text},
        )
        if isinstance(logprob, float):
            add(
                "oracle_logprob_within_tolerance",
                abs(logprob - first.logprob) <= expect.logprob_tolerance,
                {"manifest": logprob, "ordinary": first.logprob},
            )
    return checks


def inspect_findings(checks: Sequence[model.InspectCheck]) -> list[Finding]:
    bad = [c for c in checks if not c["ok"]]
    detail = "inspect checks failed: " + "; ".join(f"{c['name']}={c['detail']!r}" for c in bad)
    return [Finding("inspect", not bad, detail)]


def restore_findings(
    canary_compare: Sequence[model.CanaryCompare], digest_compare: model.DigestCompare
) -> list[Finding]:
    """A restored engine answers like the ordinary one: every canary equal, every parameter's bytes unchanged."""
    return [*canary_findings(canary_compare), *digest_findings(digest_compare)]


def inspect_output_change(inspect_exit: int | None, before: str | None, after: str) -> str:
    """How ``inspect``'s output differs from the inspect step's, in words: its exit; the fields whose values
    changed; or, when every field and value is the same, that only the bytes (order, spacing) differ, with the diff."""
    if inspect_exit != 0:
        return f"vllm snapshot inspect exited {inspect_exit}: {after.strip()[-300:]!r}"
    if before is None:
        return "no inspect output was recorded before to compare with"
    try:
        old, new = json.loads(before), json.loads(after)
    except json.JSONDecodeError:
        return "inspect printed no JSON: " + repr(after[:200])
    if isinstance(old, dict) and isinstance(new, dict) and (changes := manifest_changes(old, new)):
        shown = "; ".join(f"{k}: {v['before']!r} -> {v['after']!r}" for k, v in list(changes.items())[:_SHOWN])
        return f"fields {', '.join(changes)} ({shown})"
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), "before", "after", lineterm="", n=0)
    lines = [line for line in diff if not line.startswith(("---", "+++"))][:12]
    if old == new:
        return "same fields and values, different order or spacing: " + " | ".join(lines)
    return "the output changed: " + " | ".join(lines)


def restart_findings(
    container_before: str,
    container_after: str,
    audit: model.CleanupAudit,
    inspect_exit: int | None,
    inspect_before: str | None,
    inspect_after: str,
) -> list[Finding]:
    """Across a container stop/start: the same container, the restored server gone, ``inspect`` unchanged (its
    output's bytes; a change is named by field, or said to be order or spacing only, with the diff)."""
    same = inspect_exit == 0 and inspect_before == inspect_after
    return [
        Finding(
            "same container",
            container_before == container_after,
            f"container ID changed across restart: {container_before} -> {container_after}",
        ),
        Finding(
            "cleanup",
            bool(audit.get("ok")),
            f"restored server not cleaned up by the container stop: {audit_problems(audit)}",
        ),
        Finding(
            "inspect unchanged",
            same,
            ""
            if same
            else "public inspect output changed across stop/start: "
            + inspect_output_change(inspect_exit, inspect_before, inspect_after),
        ),
    ]


def overlay_file_ok(
    host_sha256: str, imported: Sequence[model.ImportedModule], fresh_exit: int | None, fresh_sha: str | None
) -> bool:
    """An overlaid file is in effect: a fresh interpreter imports exactly these bytes, and every engine process
    that imported the module imported exactly these bytes. A module no engine process imports (the ``vllm
    snapshot`` command's own controller, runtime and manifest code: that process loads no plugins, so the probe
    cannot report from it) is verified by the fresh interpreter alone, and the step says so."""
    return fresh_exit == 0 and fresh_sha == host_sha256 and all(i.get("sha256") == host_sha256 for i in imported)


def overlay_findings(
    files: Sequence[model.OverlayFileResult],
) -> list[Finding]:
    """The overlay is in effect, in plain words (``overlay.findings_line``): a file the engine imported from
    elsewhere fails; one no engine process imported passes as "overlaid, not imported by the engine"."""
    ok, line = overlay.findings_line(files)
    return [Finding("overlay", ok, line)]


def arms_findings(canary_compare: Sequence[model.CanaryCompare], digest_compare: model.DigestCompare) -> list[Finding]:
    """The base image's ordinary outputs and parameter bytes equal the image under test's."""
    bad = [c for c in canary_compare if not c["ok"]]
    canary = Finding(
        "canary",
        not bad,
        "the image under test and the base image disagree: " + "; ".join(_canary_text(c, "image", "base") for c in bad),
    )
    digests = Finding(
        "digests",
        bool(digest_compare["ok"]),
        f"the image under test and the base image disagree: {digest_compare['unchanged']}/"
        f"{digest_compare['total']} digests equal; differ: {digest_compare['changed'][:_SHOWN]} "
        f"missing: {digest_compare['missing'][:_SHOWN]}",
    )
    return [canary, digests]


# ---- KV capacity after a restore (issue 13) ---------------------------------------------------------------------
def kv_judgement(
    restored: int | None, created: int | None, ordinary: int | None, tolerance: float, source: str
) -> model.KvJudgement:
    """A restored engine serves with exactly the KV capacity its snapshot was created with (the pool is sized
    once, at create), and that capacity is within ``tolerance`` (a fraction) of ordinary serving. A figure that
    could not be observed is "not observable", never a pass."""
    judgement = model.KvJudgement(
        restored=restored, created=created, ordinary=ordinary, tolerance=tolerance, restored_source=source
    )
    problems = []
    if restored is None:
        problems.append(f"KV capacity of the restored server not observable (source: {source})")
    if created is None:
        problems.append("KV capacity at create not observable (no `KV cache size` line in the child log)")
    if restored is not None and created is not None and restored != created:
        problems.append(
            f"KV capacity after restore is {restored:,} tokens, but the snapshot was created with {created:,} "
            f"({restored - created:+,}, {100.0 * (restored - created) / created:+.1f} %; it is fixed at create)"
        )
    if created is not None and ordinary:
        fraction = abs(created - ordinary) / ordinary
        judgement["snapshot_vs_ordinary"] = round(fraction, 6)
        if fraction > tolerance:
            problems.append(
                f"KV capacity of the snapshot ({created:,} tokens) differs from ordinary serving ({ordinary:,}) by "
                f"{100.0 * fraction:.2f} % (> --vsnap-kv-tolerance {100.0 * tolerance:g} %)"
            )
    elif not ordinary:
        problems.append("KV capacity of ordinary serving not observable")
    judgement["observable"] = restored is not None and created is not None and bool(ordinary)
    judgement["problems"] = problems
    judgement["ok"] = not problems
    return judgement


def kv_findings(judgement: model.KvJudgement) -> list[Finding]:
    return [Finding("KV capacity", bool(judgement.get("ok")), "; ".join(judgement.get("problems", [])))]


# ---- the GPU after a restore ------------------------------------------------------------------------------------
def gpu_engaged_findings(holders: Sequence[int], apps: Iterable[int] | None, step: str) -> list[Finding]:
    """After a restore, the CUDA holders the manifest names hold the GPU again (``nvidia-smi`` lists them as
    compute apps); nothing to judge when the lane has no GPU (``apps`` None)."""
    if apps is None:
        return []
    listed = set(apps)
    missing = sorted(set(holders) - listed)
    ok = bool(holders) and not missing
    detail = (
        f"after {step} the CUDA holders {sorted(missing or holders)} are not on the GPU "
        f"(nvidia-smi lists {sorted(listed) or 'no compute app'})"
    )
    return [Finding("GPU engaged", ok, "" if ok else detail)]


# ---- liveness after a restore -----------------------------------------------------------------------------------
def soak_findings(soak: model.Soak, when: str) -> list[Finding]:
    """The restored server stayed alive and serving through the soak (``soak`` as ``steps.soak`` records it)."""
    if soak.get("alive"):
        return [Finding("liveness", True)]
    died = soak.get("died_after_s")
    window = f"{died:.1f} s" if isinstance(died, (int, float)) else "at an unknown time"
    detail = (
        f"restored server died {window} after vllm snapshot restore exited 0 ({when}): {soak.get('reason')}; "
        + (f"{soak['exit']}; " if soak.get("exit") else "")
        + f"{soak.get('probes', 0)} probes passed before\nlog tail:\n{soak.get('log_tail') or '(empty)'}"
    )
    return [Finding("liveness", False, detail)]


# ---- strict cleanup ---------------------------------------------------------------------------------------------
def leftover_text(proc: Mapping[str, object]) -> str:
    """One process an audit found (``model.LeftoverProcess``) in words."""
    role = "GPU holder " if proc.get("gpu_holder") else ""
    return f"{role}pid {proc.get('pid')} (started {proc.get('start_time')}) `{str(proc.get('cmdline'))[:160]}`"


def order_leftovers(procs: Iterable[Process]) -> list[Process]:
    """Leftover processes, GPU holders first (they are what keeps the next engine from starting)."""
    return sorted(procs, key=lambda p: (not p.get("gpu_holder"), _pid(p)))


def _pid(proc: Mapping[str, object]) -> int:
    pid = proc.get("pid")
    return pid if isinstance(pid, int) else 0


def remap_text(entries: Sequence[str], lane: str, step: str, made: Mapping[str, str] | None = None) -> str:
    """A leaked link remap, named with the lane and, where its artifact names it, the dump that made it (CRIU
    makes link remaps while it dumps): found after ``step``, not necessarily made by it."""
    made = made or {}
    names = ", ".join(
        e.split("|", 1)[0] + (f" (made by the dump of {made[e].replace(' ', chr(39) + 's ', 1)})" if e in made else "")
        for e in entries
    )
    return f"link remap left in /dev/shm by lane {lane}" + (f" (found after {step})" if step else "") + f": {names}"


# ---- inspect output across the lifecycle ------------------------------------------------------------------------
def manifest_changes(before: Mapping[str, object], after: Mapping[str, object]) -> dict[str, model.InspectChange]:
    """The fields of ``inspect``'s output (JSON vLLM defines) that differ: {field: {"before", "after"}}, each a
    ``model.InspectChange`` (typed as the untyped map ``steps.inspect_changes`` still declares it returns)."""
    return {
        name: {"before": before.get(name), "after": after.get(name)}
        for name in sorted(set(before) | set(after))
        if before.get(name) != after.get(name)
    }


def inspect_stable_findings(
    changes: Mapping[str, model.InspectChange],
    after_step: str,
) -> list[Finding]:
    shown = "; ".join(f"{k}: {v['before']!r} -> {v['after']!r}" for k, v in list(changes.items())[:_SHOWN])
    return [
        Finding(
            "inspect unchanged",
            not changes,
            f"inspect output changed after {after_step}: fields {', '.join(changes)} ({shown})",
        )
    ]
