"""The weights kind, the weight-tamper fault (issue #28): a weight shard changed between ``create`` and ``restore``.

A restore re-reads the weights from the model cache (``wake_up(["weights"])`` → ``reload_weights``), and vLLM's
manifest fingerprints generated caches, never the weights. So the harness makes a private copy of the model's cache
entry in the box (every file a link to the user's read-only cache but the largest shard, which is copied), creates an
artifact that loads from that copy (``HF_HOME``), flips the lowest bit of every byte in the first 4 KiB of one
tensor of the copied shard, and restores.

What a restore may do, and what the harness says (:func:`problems`):

- refuse, with a message: as expected;
- restore and serve the damaged weights: as expected too, *because the damage is named*: the digests name the
  changed parameters (the canaries, where they differ). The evidence says what the engine loaded;
- restore and answer exactly as the ordinary engine, every parameter's bytes unchanged: the tampered file was never
  read back, although every restore must reload the weights: stale weights, a finding against the engine (the shape
  of vLLM #32718, where ``reload_weights`` returned cached weights);
- restore with nothing changed where a parameter is unobservable or no ordinary reference was recorded in this run:
  the harness cannot tell which, and says so (a failure, never a pass).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, cast

from vsnap_qual import checks
from vsnap_qual.box import BoxCommands, ExecResult
from vsnap_qual.contract import WORK, restore_argv
from vsnap_qual.engine import client
from vsnap_qual.engine.client import CanaryOutput
from vsnap_qual.faults.injector import Attempt, Injector, Kind, Observation
from vsnap_qual.faults.lane import FaultLane
from vsnap_qual.lane import artifact_deps
from vsnap_qual.model import Canary, Digest, WeightsInjected, WeightTamper
from vsnap_qual.procedure import ANY, Expect, Fault

#: The private HF home of the tamper (its ``hub/`` holds the copy) and the artifact created from it.
PRIVATE_HOME = f"{WORK}/weights-hf"
PRIVATE_ARTIFACT = f"{WORK}/artifact-weights"
#: How many bytes of the tensor's data are changed (the lowest bit of each).
TAMPER_BYTES = 4096

#: Copy the model's cache entry (argv: model, revision, private home): every file of the revision's snapshot a
#: symlink to the cache's own, the largest ``*.safetensors`` shard a real copy; prints the shard's tensors.
COPY_SCRIPT = r"""
import hashlib, json, os, shutil, struct, sys
model, revision, home = sys.argv[1:4]
hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
    os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface"), "hub")
repo = "models--" + model.replace("/", "--")
snapshot = os.path.join(hub, repo, "snapshots", revision)
if not os.path.isdir(snapshot):
    print(json.dumps({"error": "no snapshot directory " + snapshot + " in the model cache"}))
    sys.exit(0)
files = []
for root, _dirs, names in os.walk(snapshot):
    files += [os.path.relpath(os.path.join(root, n), snapshot) for n in names]
shards = sorted((f for f in files if f.endswith(".safetensors")),
                key=lambda f: (-os.path.getsize(os.path.join(snapshot, f)), f))
if not shards:
    print(json.dumps({"error": "no .safetensors file in " + snapshot}))
    sys.exit(0)
shard = shards[0]
shutil.rmtree(home, ignore_errors=True)
private = os.path.join(home, "hub", repo, "snapshots", revision)
for name in files:
    source, target = os.path.join(snapshot, name), os.path.join(private, name)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if name == shard:
        shutil.copyfile(os.path.realpath(source), target)
    else:
        os.symlink(os.path.realpath(source), target)
refs = os.path.join(hub, repo, "refs")
if os.path.isdir(refs):
    shutil.copytree(refs, os.path.join(home, "hub", repo, "refs"))
path = os.path.join(private, shard)
with open(path, "rb") as f:
    size = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(size))
    f.seek(0)
    digest = hashlib.sha256(f.read()).hexdigest()
tensors = {k: {"dtype": v["dtype"], "shape": v["shape"], "start": 8 + size + v["data_offsets"][0],
               "end": 8 + size + v["data_offsets"][1]}
           for k, v in header.items() if k != "__metadata__"}
print(json.dumps({"cache": snapshot, "shard": path, "sha256": digest, "tensors": tensors}))
"""

#: Flip the lowest bit of each byte of ``path`` in ``[offset, offset + length)``; prints the file's new sha256.
TAMPER_SCRIPT = r"""
import hashlib, os, sys
path, offset, length = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "r+b") as f:
    f.seek(offset)
    data = f.read(length)
    f.seek(offset)
    f.write(bytes(b ^ 1 for b in data))
    f.flush()
    os.fsync(f.fileno())
with open(path, "rb") as f:
    print(hashlib.sha256(f.read()).hexdigest())
"""


class TensorSpan(TypedDict):
    """One tensor of the copied shard as the copy script reads its safetensors header: its dtype and shape, and
    where its data lies in the file (byte offsets, ``end`` exclusive)."""

    dtype: str
    shape: list[int]
    start: int
    end: int


@dataclass
class Copied:
    """The private copy: the shard copied for real, its sha256, its tensors (``{name: {dtype, shape, start,
    end}}``), the user's cache entry it links to."""

    cache: str
    shard: str
    sha256: str
    tensors: dict[str, TensorSpan]


def private_copy(box: BoxCommands, model: str, revision: str, timeout: float) -> Copied | str:
    """Make the private copy in the box; the reason when it cannot be made."""
    result = box.exec(["python3", "-c", COPY_SCRIPT, model, revision, PRIVATE_HOME], timeout)
    try:
        said = json.loads(result.stdout.strip().splitlines()[-1]) if result.stdout.strip() else {}
    except json.JSONDecodeError:
        said = {}
    if result.exit_code != 0 or not said or "error" in said:
        return str(said.get("error") or f"the copy script exited {result.exit_code}: {result.stderr.strip()[-300:]}")
    return Copied(str(said["cache"]), str(said["shard"]), str(said["sha256"]), dict(said["tensors"]))


def choose_tensor(tensors: Mapping[str, TensorSpan], observable: Sequence[str]) -> str:
    """The tensor to damage: the largest one named as a parameter whose digest the ordinary engine reported
    (then a loaded change must show in the digests), else the largest."""
    sizes = {name: int(t["end"]) - int(t["start"]) for name, t in tensors.items() if int(t["end"]) > int(t["start"])}
    named = [name for name in sizes if name in set(observable)]
    return max(named or sizes, key=lambda name: (sizes[name], name))


def flip(box: BoxCommands, copied: Copied, tensor: str, timeout: float) -> WeightTamper:
    """Change ``TAMPER_BYTES`` of ``tensor``'s data in the copied shard; the record says where and both sha256."""
    info = copied.tensors[tensor]
    start, end = int(info["start"]), int(info["end"])
    length = min(TAMPER_BYTES, end - start)
    result = box.exec(["python3", "-c", TAMPER_SCRIPT, copied.shard, str(start), str(length)], timeout)
    after = result.stdout.strip().splitlines()[-1] if result.exit_code == 0 and result.stdout.strip() else ""
    return WeightTamper(
        cache=copied.cache,
        shard=copied.shard,
        tensor=tensor,
        dtype=str(info["dtype"]),
        shape=[int(d) for d in info["shape"]],
        offset=start,
        length=length,
        sha256_before=copied.sha256,
        sha256_after=after,
    )


def compare(
    record: WeightTamper,
    reference_digests: Mapping[str, Digest] | None,
    reference_canaries: Sequence[Canary] | None,
    digests: Mapping[str, Digest] | None,
    canaries: Sequence[CanaryOutput] | None,
    tolerance: float,
) -> WeightTamper:
    """What the restored engine holds, against the ordinary engine's: the changed parameters and the canaries that
    differ (``None`` references: nothing recorded to compare with)."""
    out = WeightTamper(**record)
    out["outcome"] = "restored"
    if reference_digests is None or digests is None:
        out["compared"] = False
        return out
    found = checks.compare_digests(reference_digests, digests)
    out["compared"] = True
    out["changed"] = list(found["changed"])
    out["unobservable"] = list(found["unobservable"])
    out["missing"] = list(found["missing"])
    differing = []
    if reference_canaries is not None and canaries is not None:
        for want, got in zip(reference_canaries, canaries, strict=False):
            compared = checks.compare_canary(CanaryOutput.of(want), got, tolerance)
            if not compared["ok"]:
                differing.append(compared["prompt"])
    out["canaries_differ"] = differing
    return out


def problems(record: Mapping[str, Any] | None, exit_code: int | None, message_lines: Sequence[str]) -> list[str]:
    """What is wrong with the tamper's outcome (:mod:`module docs <vsnap_qual.faults.kinds.weights>`), in words."""
    if not record:
        return []
    where = f"{record.get('length')} bytes of {record.get('tensor')} in {record.get('shard')}"
    if exit_code != 0:
        if not any(line.strip() for line in message_lines):
            return [f"the restore refused the tampered weights ({where}) without a message"]
        return []
    if record.get("outcome") == "unasked":
        return [f"the restore exited 0 but its server could not be asked: {record.get('error')}"]
    if not record.get("compared"):
        return [
            f"the restore loaded from the tampered copy ({where}) and exited 0, but no ordinary reference was "
            "recorded in this run to compare it with: run the lifecycle with the faults"
        ]
    if record.get("changed") or record.get("missing") or record.get("canaries_differ"):
        return []  # the damage is named: the engine served what it loaded (the evidence says what)
    if record.get("unobservable"):
        return [
            f"the restore exited 0 and nothing observable changed after {where} was damaged, but "
            f"{len(record['unobservable'])} parameter(s) are unobservable: the harness cannot tell whether the "
            "weights were reloaded"
        ]
    return [
        f"finding against the engine: vllm snapshot restore exited 0 with every parameter's bytes and every canary "
        f"as the ordinary engine's although {where} was damaged after create: the restore did not reload the "
        "weights it says it reloads (stale weights, as vLLM #32718)"
    ]


def outcome_words(record: Mapping[str, Any], exit_code: int | None) -> str:
    """One line for the evidence: what the restore made of the tampered weights."""
    if exit_code != 0:
        return "refused"
    changed, differ = list(record.get("changed") or []), list(record.get("canaries_differ") or [])
    if changed or differ:
        named = [f"the digests name {', '.join(changed[:4])}"] if changed else []
        named += [f"{len(differ)} canary(ies) differ ({', '.join(repr(p) for p in differ[:2])})"] if differ else []
        return "loaded the damage, served it: " + "; ".join(named)
    return "nothing changed"


class WeightsInjector(Injector):
    """``weights`` (issue 28): a weight shard of a private copy of the model's cache entry changed between the
    private artifact's ``create`` and its ``restore`` (this module); the restored engine, when there is one, is
    asked its digests and canaries before it is stopped. Not applicable on a box that runs no scripts (the copy
    and the flip are Python run in the box)."""

    #: the lane's artifact is not this kind's: its own artifact is made, restored and removed by the attempt
    judges_artifact = False

    def not_applicable(self, lane: FaultLane, fault: Fault) -> str | None:
        if not lane.box.has_shell:
            return "the box runs no scripts: the private copy of the model and the flipped bytes are Python in the box"
        return None

    def begin(self, at: Attempt) -> None:
        lane, injected = at.lane, cast(WeightsInjected, at.injected)
        timeout = lane.config.timeouts["http"]
        reference = lane.peers.ordinary.get(lane.spec.name)
        observable = [n for n, d in (reference.digests if reference else {}).items() if d.get("sha256")]
        copied = private_copy(lane.box, lane.config.model, lane.config.revision, timeout)
        if isinstance(copied, str):
            injected["error"] = f"no private copy of the model: {copied}"
            return
        home = {"HF_HOME": PRIVATE_HOME, "HF_HUB_CACHE": f"{PRIVATE_HOME}/hub"}
        lane.box.remove_path(PRIVATE_ARTIFACT)
        created = lane.cli.snapshot(
            at.rec,
            "create",
            *lane.cli.create_argv(PRIVATE_ARTIFACT),
            timeout_key="create",
            env=home,
            name="create-tampered",
        )
        if created.exit_code != 0:
            injected["error"] = f"create from the private copy exited {created.exit_code}: {created.stderr[-300:]}"
            return
        lane.state.shm_owned.update(artifact_deps.outside_files(lane.box, PRIVATE_ARTIFACT))
        record = flip(lane.box, copied, choose_tensor(copied.tensors, observable), timeout)
        at.rec.results["weight_tamper"] = record
        if record.get("sha256_after") and record["sha256_after"] != record["sha256_before"]:
            injected["tampered"] = f"{record['length']} bytes of {record['tensor']} in {record['shard']}"
        at.env.update(home)

    def restore(self, at: Attempt) -> ExecResult:
        """The restore of the private artifact, with the private model cache's environment."""
        argv = restore_argv(at.port, PRIVATE_ARTIFACT)
        return at.lane.cli.command(at.rec, argv, "restore", at.env, "restore-faulted")

    def act(self, at: Attempt) -> ExecResult:
        result = super().act(at)
        record = at.rec.results.get("weight_tamper")
        if record is None or not cast(WeightsInjected, at.injected).get("tampered"):
            return result
        if result.exit_code != 0:
            record["outcome"] = record["said"] = "refused"
            return result
        lane = at.lane
        reference = lane.peers.ordinary.get(lane.spec.name)
        try:
            digests, canaries = lane.api.digests(at.port), lane.api.canaries(at.port)
        except (client.EngineError, OSError) as exc:
            record["outcome"] = record["said"] = "unasked"
            record["error"] = f"{type(exc).__name__}: {exc}"
            return result
        compared = compare(
            record,
            reference.digests if reference else None,
            reference.canary if reference else None,
            digests,
            canaries,
            lane.config.logprob_tolerance,
        )
        compared["said"] = outcome_words(compared, result.exit_code)
        at.rec.results["weight_tamper"] = compared
        return result

    def end(self, at: Attempt) -> None:
        at.lane.box.remove_path(PRIVATE_ARTIFACT)
        at.lane.box.remove_path(PRIVATE_HOME)

    def fired(self, obs: Observation, injected: Mapping[str, Any]) -> bool:
        return bool(injected.get("tampered"))

    def problems(self, obs: Observation, results: Mapping[str, Any]) -> list[str]:
        return problems(results.get("weight_tamper"), obs.exit_code, [obs.stderr_tail, *obs.error_lines])


KIND = Kind(
    "weights",
    WeightsInjector(),
    injected=WeightsInjected,
    faults=(
        # issue 28: a weight shard changed between create and restore, on a private copy of the model's cache entry
        # and a private artifact: a refusal, or the damage named by the digests and canaries; the weights unchanged
        # after the restore is stale weights, a finding against the engine (the kind judges it)
        Fault(
            "weight-tampered",
            "a weight shard changed between create and restore (a private copy of the model)",
            "weights",
            head=Expect(ANY, None, None, None, followup_restore=False),
        ),
    ),
)
KINDS = (KIND,)
