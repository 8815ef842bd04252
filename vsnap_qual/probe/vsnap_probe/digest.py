"""Parameter and buffer digests through vLLM's worker-extension seam (``--worker-extension-cls``).

vLLM injects ``DigestExtension`` into the worker class's bases, so its methods become callable with ``POST
/collective_rpc {"method": "vsnap_param_digests"}`` (dev mode). Every name here starts with ``vsnap_`` or
``_vsnap_`` because vLLM refuses an extension attribute the worker class already has.

Digest rule (one record per ``model.named_parameters()`` entry, in that order):

- a parameter with elements: sha256 of its raw bytes in its own dtype (``source: "parameter"``);
- a parameter with zero elements whose owning layer carries a packed op (vLLM's CPU backend replaces linear
  weights by ``Parameter(empty(0))`` after packing them into oneDNN / sgl kernels and keeps the op as
  ``layer.cpu_linear``): the dense weight is reconstructed as ``cpu_linear(eye(K), weight, None).t()`` and its
  bytes are digested (``source: "reconstructed"``);
- otherwise ``source: "unobservable"`` with ``sha256: None``. The digest of empty bytes is never reported.

Then one record per ``model.named_buffers()`` entry (rotary caches, KV and quantization scales: state that a
level-2 sleep saves and a wake puts back), ``source: "buffer"``: sha256 of its raw bytes; a buffer with zero
elements has ``sha256: None`` and a ``detail``. Torch keeps parameter and buffer names apart in a module, so one
map holds both.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

SOURCE_PARAMETER = "parameter"
SOURCE_RECONSTRUCTED = "reconstructed"
SOURCE_UNOBSERVABLE = "unobservable"
SOURCE_BUFFER = "buffer"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()

# Integer dtypes of the same element size: reinterpreting a tensor through one of them gives its raw bytes for
# any dtype numpy lacks (bfloat16, float8 ...). Works on torch 1.13 and 2.x (same-size
# ``Tensor.view(dtype)``).
_SAME_SIZE_INT = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def dtype_name(dtype: Any) -> str:
    """``torch.float16`` -> ``"float16"``."""
    return str(dtype).rsplit(".", 1)[-1]


def tensor_bytes(tensor: Any) -> bytes:
    """The raw bytes of a tensor (any device, any dtype), C order."""
    import torch

    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    if t.numel() == 0:
        return b""
    size = t.element_size()
    int_name = _SAME_SIZE_INT.get(size)
    if int_name is not None and not t.is_complex():
        t = t.view(getattr(torch, int_name))
    return bytes(t.numpy().tobytes())


def tensor_sha256(tensor: Any) -> str:
    return hashlib.sha256(tensor_bytes(tensor)).hexdigest()


def _owning_module(model: Any, name: str) -> tuple[Any, str]:
    prefix, _, leaf = name.rpartition(".")
    if not prefix:
        return model, leaf
    module = model
    for part in prefix.split("."):
        module = getattr(module, part)
    return module, leaf


def reconstruct_packed_weight(layer: Any, empty: Any) -> Any | None:
    """Dense ``[N, K]`` weight of a layer whose weight vLLM packed away, or None when that is not possible.

    ``layer.cpu_linear(x, weight, bias)`` computes ``x @ W.T``; with ``x = eye(K)`` it returns ``W.T`` exactly
    (each output element is one product with 1.0), so ``.t()`` gives ``W``.
    """
    import torch

    op = getattr(layer, "cpu_linear", None)
    if op is None or not callable(op):
        return None
    k = getattr(layer, "input_size_per_partition", None)
    if k is None:
        k = getattr(layer, "input_size", None)
    if not isinstance(k, int) or k <= 0:
        return None
    with torch.no_grad():
        # eye() in float32 then cast: torch 1.13 has no bfloat16 eye.
        eye = torch.eye(k, dtype=torch.float32, device=empty.device).to(empty.dtype)
        out = op(eye, empty, None)
    if out is None or out.dim() != 2 or out.shape[0] != k:
        return None
    weight = out.t().contiguous()
    n = getattr(layer, "output_size_per_partition", None)
    if isinstance(n, int) and n > 0 and weight.shape[0] != n:
        return None
    return weight


def parameter_records(model: Any) -> Iterator[tuple[str, dict[str, object]]]:
    """``(name, record)`` for every entry of ``model.named_parameters()``."""
    for name, param in model.named_parameters():
        data = param.detach()
        if data.numel() > 0:
            yield (
                name,
                {
                    "sha256": tensor_sha256(data),
                    "shape": list(data.shape),
                    "dtype": dtype_name(data.dtype),
                    "source": SOURCE_PARAMETER,
                },
            )
            continue
        record: dict[str, object] = {
            "sha256": None,
            "shape": list(data.shape),
            "dtype": dtype_name(data.dtype),
            "source": SOURCE_UNOBSERVABLE,
        }
        try:
            layer, leaf = _owning_module(model, name)
            dense = reconstruct_packed_weight(layer, data) if leaf == "weight" else None
        except Exception as exc:  # a failing packed op makes the parameter unobservable, not the call fail
            record["detail"] = f"reconstruction failed: {type(exc).__name__}: {exc}"
            dense = None
        if dense is not None and dense.numel() > 0:
            record.update(
                sha256=tensor_sha256(dense),
                shape=list(dense.shape),
                dtype=dtype_name(dense.dtype),
                source=SOURCE_RECONSTRUCTED,
            )
        elif "detail" not in record:
            record["detail"] = "zero elements and no packed op to reconstruct from"
        yield name, record


def buffer_records(model: Any) -> Iterator[tuple[str, dict[str, object]]]:
    """``(name, record)`` for every entry of ``model.named_buffers()``."""
    for name, buffer in model.named_buffers():
        data = buffer.detach()
        record: dict[str, object] = {
            "sha256": tensor_sha256(data) if data.numel() > 0 else None,
            "shape": list(data.shape),
            "dtype": dtype_name(data.dtype),
            "source": SOURCE_BUFFER,
        }
        if data.numel() == 0:
            record["detail"] = "zero elements"
        yield name, record


def param_digests(model: Any) -> dict[str, dict[str, object]]:
    """All parameter records of a model (``named_parameters()`` order), then its buffers' (``named_buffers()``
    order), keyed by name."""
    return {**dict(parameter_records(model)), **dict(buffer_records(model))}


def worker_model(worker: Any) -> Any:
    """The model of a vLLM worker: ``worker.model_runner.model`` (V1 and V2 runners), else ``get_model()``."""
    runner = getattr(worker, "model_runner", None)
    model = getattr(runner, "model", None) if runner is not None else None
    if model is None and callable(getattr(worker, "get_model", None)):
        model = worker.get_model()
    if model is None:
        raise RuntimeError("vsnap_probe: the worker has no model (model_runner.model / get_model())")
    return model


class DigestExtension:
    """Worker extension (``--worker-extension-cls vsnap_probe.digest.DigestExtension``)."""

    def vsnap_param_digests(self) -> dict[str, dict[str, object]]:
        """``{name: {"sha256", "shape", "dtype", "source"}}`` over the worker model's ``named_parameters()`` and
        ``named_buffers()``."""
        return param_digests(worker_model(self))

    def vsnap_param_count(self) -> int:
        """Number of entries ``named_parameters()`` yields in this worker (what the digest map must cover)."""
        return sum(1 for _ in worker_model(self).named_parameters())
