"""The reference image's lifecycle, as the harness and vLLM's e2e drive it: ordinary serve, create, inspect,
restore, container restart, restore again; identical outputs and parameter bytes throughout."""

from __future__ import annotations

import hashlib
import json
import re
import socket

import pytest

from tests.reference.refsupport import (
    ARTIFACT,
    CANARY_PROMPTS,
    ENGINE_ARGS,
    MODEL,
    REVISION,
    Lane,
    LaneFactory,
    completion,
    create_artifact,
    digests,
    free_port,
    http_json,
    restore,
    wait_health,
)

KV_LOG = re.compile(
    r"\((EngineCore)[^)]*pid=(\d+)\) INFO \d\d-\d\d \d\d:\d\d:\d\d \[kv_cache_utils\.py:\d+\] "
    r"(GPU|CPU) KV cache size: ([0-9,]+) tokens"
)
KV_PATTERN = re.compile(r"(GPU|CPU) KV cache size: ([0-9,]+) tokens")  # the harness's pattern


def kv_from_log(text: str) -> int:
    matches = KV_PATTERN.findall(text)
    assert len(matches) == 1, text
    assert KV_LOG.search(text), "the capacity line must come from the engine-core process in vLLM's format"
    return int(matches[0][1].replace(",", ""))


def kv_from_metrics(port: int) -> int:
    text = http_json(port, "/metrics")
    line = next(line for line in text.splitlines() if line.startswith("vllm:cache_config_info{"))
    labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
    assert int(labels["kv_cache_size_tokens"]) == int(labels["num_gpu_blocks"]) * int(labels["block_size"])
    assert line.endswith(" 1.0")
    return int(labels["kv_cache_size_tokens"])


LOG_LINE = re.compile(r"^(DEBUG|INFO|WARNING|ERROR) \d\d-\d\d \d\d:\d\d:\d\d \[[\w.]+:\d+\] ")


def only_log_lines(stdout: str) -> bool:
    """create/restore print no result; only the vLLM logger may write."""
    return all(LOG_LINE.match(line) for line in stdout.splitlines())


def port_closed(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def session_tree(lane: Lane, root: int) -> list[int]:
    """The live processes of the session led by ``root``, parents before children (ps's PID order breaks
    ties; a two-process tree has one order)."""
    rows = lane.sh(f"ps -eo pid=,ppid=,sid= | awk '$3=={root}'").stdout.split()
    triples = [tuple(map(int, rows[index : index + 3])) for index in range(0, len(rows), 3)]
    ordered = [root]
    for pid, parent, _sid in sorted(triples):
        if pid != root:
            assert parent in ordered, triples
            ordered.append(pid)
    return ordered


def exec_fingerprints(lane: Lane, pids: list[int] | list[str]) -> dict[str, str]:
    """sha256 of each process's /proc/PID/auxv (the ELF auxiliary vector of its exec, pointers included)."""
    out = lane.sh(" ; ".join(f"sha256sum /proc/{pid}/auxv" for pid in pids)).stdout.split()
    return {out[index + 1]: out[index] for index in range(0, len(out), 2)}


def served(lane: Lane, port: int) -> tuple[list[dict[str, object]], dict[str, str], int]:
    return [completion(port, prompt) for prompt in CANARY_PROMPTS], digests(port), kv_from_metrics(port)


@pytest.mark.docker
@pytest.mark.parametrize("flavour", ["head", "base"])
def test_serve_create_inspect_restore_restart_restore(lane_factory: LaneFactory, flavour: str) -> None:
    lane: Lane = lane_factory(flavour)

    # Ordinary serve: the reference outputs.
    port0 = free_port()
    lane.background(
        f"echo $$ > /tmp/serve.pid; exec vllm serve {' '.join(ENGINE_ARGS)} --host 127.0.0.1 --port {port0} "
        "> /tmp/serve.log 2>&1"
    )
    wait_health(port0)
    ordinary, ordinary_digests, ordinary_kv_metrics = served(lane, port0)
    assert http_json(port0, "/version")["version"] == lane.exec(["vllm", "--version"]).stdout.strip()
    assert http_json(port0, "/v1/models")["data"][0]["id"] == MODEL
    assert lane.sh("kill -TERM $(cat /tmp/serve.pid)").code == 0
    serve_log = lane.read("/tmp/serve.log")
    ordinary_kv = kv_from_log(serve_log)
    assert ordinary_kv == ordinary_kv_metrics
    assert "Maximum concurrency for 512 tokens per request" in serve_log
    assert len(ordinary_digests) == 24 and all(len(value) == 64 for value in ordinary_digests.values())
    assert any(name.endswith("self_attn.q_proj.weight") for name in ordinary_digests)

    # Create: no output, exit 0, a published private artifact.
    created = create_artifact(lane)
    assert (created.code, created.stdout) == (0, ""), created.stderr
    assert lane.sh(f"stat -c '%a %U' {ARTIFACT} {ARTIFACT}/manifest.json").stdout.split() == [
        "700",
        "root",
        "600",
        "root",
    ]

    inspected = lane.exec(["vllm", "snapshot", "inspect", ARTIFACT])
    assert inspected.code == 0, inspected.stderr
    manifest = json.loads(inspected.stdout)
    assert inspected.stdout.strip() == json.dumps(manifest, indent=2)
    assert manifest["schema_version"] == 1
    assert manifest["boundary"] == "post-engine-init-reloadable-state-released"
    assert (manifest["model"], manifest["served_model_name"]) == (MODEL, MODEL)
    assert (manifest["model_revision"], manifest["tokenizer_revision"]) == (REVISION, REVISION)
    assert manifest["engine_argv"] == [*ENGINE_ARGS, "--enable-sleep-mode"]
    assert len(manifest["process_tree"]) == 2 and manifest["cuda_holders"] == manifest["process_tree"][1:]
    # Identity from real facts: Debian sid's CRIU from the kit, Debian trixie's torch, the simulated GPU.
    assert manifest["criu_version"] == "Version: 4.2.1"
    assert manifest["torch_version"].startswith("2.6.") and manifest["cuda_runtime"] == ""
    assert manifest["gpu_name"] == "vsnap reference simulated GPU"
    assert (manifest["oracle_token_ids"], manifest["oracle_text"]) == (
        ordinary[0]["token_ids"],
        ordinary[0]["text"],
    )
    assert abs(manifest["oracle_sampled_token_logprob"] - ordinary[0]["logprob"]) <= 1e-3
    for pid in manifest["process_tree"]:
        assert lane.exec(["kill", "-0", str(pid)]).code != 0, f"captured process {pid} survived create"

    size = int(lane.read(f"{ARTIFACT}/child.log.snapshot-size"))
    snapshot_kv = kv_from_log(lane.read(f"{ARTIFACT}/child.log")[:size])
    assert 0 < ordinary_kv - snapshot_kv < ordinary_kv // 20, (ordinary_kv, snapshot_kv)

    # Restore 1: exit 0, nothing printed, the server keeps running detached.
    port1 = free_port()
    first = restore(lane, port1)
    assert first.code == 0 and only_log_lines(first.stdout), first.stderr
    root = int(lane.read(f"{ARTIFACT}/restored.pid"))
    # Real CRIU: the captured PIDs come back, and the processes resume from their frozen memory.
    assert root == manifest["process_tree"][0]
    assert session_tree(lane, root) == manifest["process_tree"]
    fingerprint1 = exec_fingerprints(lane, manifest["process_tree"])
    restored1, digests1, kv1 = served(lane, port1)
    assert restored1 == ordinary
    assert digests1 == ordinary_digests
    assert kv1 == snapshot_kv
    lane.stop_session(root)
    assert port_closed(port1)

    # Container restart: the artifact survives, inspect is byte-identical.
    lane.restart()
    again = lane.exec(["vllm", "snapshot", "inspect", ARTIFACT])
    assert hashlib.sha256(again.stdout.encode()).hexdigest() == hashlib.sha256(inspected.stdout.encode()).hexdigest()

    port2 = free_port()
    second = restore(lane, port2)
    assert second.code == 0, second.stderr
    assert int(lane.read(f"{ARTIFACT}/restored.pid")) == manifest["process_tree"][0]
    assert session_tree(lane, manifest["process_tree"][0]) == manifest["process_tree"]
    # No re-execution: a fresh exec gets new auxv pointers (ASLR); a CRIU restore brings back the saved ones,
    # so two restores of one image in two container lifetimes hold byte-identical auxv vectors.
    assert exec_fingerprints(lane, manifest["process_tree"]) == fingerprint1
    fresh = lane.sh("sha256sum /proc/self/auxv; sha256sum /proc/self/auxv").stdout.split()[::2]
    assert fresh[0] != fresh[1], "ASLR is off: auxv cannot tell a restore from a re-exec on this host"
    # Nor did the restored tree run its start-up again: after the capture point child.log holds only what the
    # engine core logged while serving (no model load, no KV profiling, no API-server banner).
    tail = lane.read(f"{ARTIFACT}/child.log")[size:]
    for startup in ("Starting to load model", "KV cache size", "vLLM API server version"):
        assert startup not in tail, tail
    restored2, digests2, kv2 = served(lane, port2)
    assert restored2 == ordinary
    assert digests2 == ordinary_digests
    assert kv2 == snapshot_kv
    lane.stop_session(int(lane.read(f"{ARTIFACT}/restored.pid")))


@pytest.mark.docker
def test_runners_size_the_kv_cache_differently(lane_factory: LaneFactory) -> None:
    """V1 and V2 model runners take different memory paths; neither capacity is a constant."""
    capacities = {}
    for runner in ("0", "1"):
        lane: Lane = lane_factory("head", environment={"VLLM_USE_V2_MODEL_RUNNER": runner})
        for utilization in ("0.5", "0.9"):
            port = free_port()
            args = [*ENGINE_ARGS]
            args[args.index("--gpu-memory-utilization") + 1] = utilization
            lane.background(
                f"echo $$ > /tmp/serve-{port}.pid; exec vllm serve {' '.join(args)} --host 127.0.0.1 "
                f"--port {port} > /tmp/serve-{port}.log 2>&1"
            )
            wait_health(port)
            capacities[(runner, utilization)] = kv_from_metrics(port)
            lane.sh(f"kill -TERM $(cat /tmp/serve-{port}.pid)")
    assert capacities[("0", "0.5")] != capacities[("1", "0.5")]
    assert capacities[("0", "0.9")] > capacities[("0", "0.5")]
    assert capacities[("1", "0.9")] > capacities[("1", "0.5")]
