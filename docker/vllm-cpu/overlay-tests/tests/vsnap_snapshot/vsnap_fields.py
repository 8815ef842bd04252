"""The manifest fields the tests build on: a valid 0.31/0.32 manifest of the tiny model on the simulated GPU."""

from __future__ import annotations

from typing import Any

from vllm.snapshot.manifest import SnapshotManifest, SnapshotRuntimeIdentity

FIELDS: dict[str, Any] = {
    "schema_version": 1,
    "boundary": "post-engine-init-reloadable-state-released",
    "created_at": "2026-12-01T00:00:00+00:00",
    "artifact_bytes": 8,
    "vllm_version": "0.32.0+cpu",
    "python_version": "3.11.2",
    "torch_version": "2.13.0+cpu",
    "cuda_runtime": "",
    "driver_version": "0.0.0-simulated",
    "criu_version": "Version: 4.2.1",
    "cuda_checkpoint_sha256": "a" * 64,
    "kernel_release": "6.18.0",
    "host_id": "76736e61702d766c6c6d2d6370750000",
    "gpu_name": "vsnap simulated GPU (CPU host; no device)",
    "gpu_uuid": "GPU-73696d75-6c61-7465-6400-000000000000",
    "model": "vsnap/tiny-qwen3",
    "served_model_name": "vsnap/tiny-qwen3",
    "model_revision": "b04193068dc9e2d037b36de7fec6ef00cdea53c5",
    "tokenizer_revision": "b04193068dc9e2d037b36de7fec6ef00cdea53c5",
    "engine_argv": ("vsnap/tiny-qwen3", "--enable-sleep-mode"),
    "environment": (("VLLM_WORKER_MULTIPROC_METHOD", "b" * 64),),
    "process_tree": (100, 101, 102),
    "cuda_holders": (102,),
    "oracle_token_ids": (265,),
    "oracle_text": " is",
    "oracle_sampled_token_logprob": -6.1460676193237305,
}


def manifest(**changes: Any) -> SnapshotManifest:
    return SnapshotManifest.model_validate({**FIELDS, **changes}, strict=True)


def identity(**changes: Any) -> SnapshotRuntimeIdentity:
    payload = manifest().model_dump(mode="python", include=set(SnapshotRuntimeIdentity.model_fields))
    return SnapshotRuntimeIdentity.model_validate({**payload, **changes}, strict=True)
