"""Digest checks on fake vLLM workers built from real torch tensors: plain functions, no pytest.

Run by ``test_digest.py`` on the host (when torch is importable) and, as a script, inside the images whose
torch the probe must support (Debian's torch 1.13 in ``vsnap-debian:bookworm``, torch 2.13 in
``vsnap-vllm-cpu:0.32.0``): ``PYTHONPATH=<probe root> python3 torch_checks.py`` prints one line per check and
exits non-zero on the first failure.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from typing import Any, cast

import torch
from vsnap_probe import digest


class PackedLinear(torch.nn.Module):
    """What vLLM's CPU backend leaves behind: an empty weight and the packed op as ``cpu_linear``."""

    def __init__(self, dense: Any, *, with_op: bool = True, broken: bool = False) -> None:
        super().__init__()
        n, k = dense.shape
        self.input_size_per_partition = k
        self.output_size_per_partition = n
        self.weight = torch.nn.Parameter(torch.empty(0, dtype=dense.dtype), requires_grad=False)
        packed = dense.t().contiguous().clone()  # stands in for the oneDNN handle
        if broken:

            def op(x: Any, weight: Any, bias: Any) -> Any:
                raise RuntimeError("onednn handle gone")

            self.cpu_linear = op
        elif with_op:
            self.cpu_linear = lambda x, weight, bias: x @ packed


class TinyModel(torch.nn.Module):
    def __init__(self, dtype: Any = torch.float32, *, with_op: bool = True, broken: bool = False) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.embed_tokens = torch.nn.Embedding(16, 8).to(dtype)
        self.dense_qkv = torch.randn(12, 8, generator=g).to(dtype)
        self.qkv_proj = PackedLinear(self.dense_qkv, with_op=with_op, broken=broken)
        self.norm = torch.nn.Module()
        self.norm.weight = torch.nn.Parameter(torch.ones(8, dtype=dtype))
        # buffers as vLLM keeps them: a rotary cache (non-persistent), a KV scale, an empty one
        self.register_buffer("cos_sin_cache", torch.randn(4, 8, generator=g).to(dtype), persistent=False)
        self.qkv_proj.register_buffer("k_scale", torch.tensor(1.0, dtype=torch.float32))
        self.register_buffer("empty_buffer", torch.empty(0))


class Runner:
    def __init__(self, model: Any) -> None:
        self.model = model


# the probe is Any to the type check: it is in-engine code, checked as vsnap_qual.probe (see pyproject.toml)
class FakeWorker(digest.DigestExtension):  # type: ignore[misc]
    def __init__(self, model: Any) -> None:
        self.model_runner = Runner(model)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_every_named_parameter_and_buffer_has_a_record_in_order() -> None:
    model = TinyModel()
    records = FakeWorker(model).vsnap_param_digests()
    params = [name for name, _ in model.named_parameters()]
    buffers = [name for name, _ in model.named_buffers()]
    assert list(records) == params + buffers, list(records)
    assert buffers == ["cos_sin_cache", "empty_buffer", "qkv_proj.k_scale"], buffers
    assert FakeWorker(model).vsnap_param_count() == len(params) == 3
    assert {records[n]["source"] for n in buffers} == {"buffer"}


def check_buffer_digest_is_sha256_of_its_bytes_and_a_changed_scale_changes_it() -> None:
    model = TinyModel()
    rec = digest.param_digests(model)["qkv_proj.k_scale"]
    # k_scale is a registered buffer, a Tensor; nn.Module's __getattr__ is typed "Tensor or Module"
    assert rec == {
        "sha256": sha(cast(torch.Tensor, model.qkv_proj.k_scale).numpy().tobytes()),
        "shape": [],
        "dtype": "float32",
        "source": "buffer",
    }, rec
    cast(torch.Tensor, model.qkv_proj.k_scale).zero_()
    assert digest.param_digests(model)["qkv_proj.k_scale"]["sha256"] != rec["sha256"]


def check_empty_buffer_is_unobservable_never_empty_digest() -> None:
    rec = digest.param_digests(TinyModel())["empty_buffer"]
    assert rec["sha256"] is None and rec["source"] == "buffer" and rec["detail"] == "zero elements", rec


def check_plain_parameter_digest_is_sha256_of_its_bytes() -> None:
    model = TinyModel()
    rec = digest.param_digests(model)["embed_tokens.weight"]
    assert rec == {
        "sha256": sha(model.embed_tokens.weight.detach().numpy().tobytes()),
        "shape": [16, 8],
        "dtype": "float32",
        "source": "parameter",
    }


def check_packed_weight_is_reconstructed_bit_exact() -> None:
    model = TinyModel()
    rec = digest.param_digests(model)["qkv_proj.weight"]
    assert rec["source"] == "reconstructed"
    assert rec["shape"] == [12, 8]
    assert rec["sha256"] == sha(model.dense_qkv.numpy().tobytes())
    assert rec["sha256"] != digest.EMPTY_SHA256


def check_empty_parameter_without_packed_op_is_unobservable_never_empty_digest() -> None:
    rec = digest.param_digests(TinyModel(with_op=False))["qkv_proj.weight"]
    assert rec["source"] == "unobservable"
    assert rec["sha256"] is None
    assert "detail" in rec


def check_failing_packed_op_is_unobservable() -> None:
    rec = digest.param_digests(TinyModel(broken=True))["qkv_proj.weight"]
    assert rec["source"] == "unobservable"
    assert rec["sha256"] is None
    assert "onednn handle gone" in rec["detail"]


def check_no_record_ever_carries_the_empty_digest() -> None:
    for variant in (TinyModel(), TinyModel(with_op=False), TinyModel(broken=True)):
        assert all(r["sha256"] != digest.EMPTY_SHA256 for r in digest.param_digests(variant).values())


def check_bfloat16_bytes_are_raw_two_byte_words() -> None:
    t = torch.tensor([1.0, -2.0, 0.5], dtype=torch.bfloat16)
    raw = digest.tensor_bytes(t)
    assert len(raw) == 6
    assert raw == t.view(torch.int16).numpy().tobytes()


def check_bfloat16_model_reconstruction_matches() -> None:
    model = TinyModel(torch.bfloat16)
    rec = digest.param_digests(model)["qkv_proj.weight"]
    assert rec["dtype"] == "bfloat16"
    assert rec["sha256"] == sha(model.dense_qkv.view(torch.int16).numpy().tobytes())


def check_reconstruction_rejects_wrong_output_size() -> None:
    layer = PackedLinear(torch.randn(4, 3))
    layer.output_size_per_partition = 5
    assert digest.reconstruct_packed_weight(layer, layer.weight) is None


def check_worker_model_falls_back_to_get_model() -> None:
    model = TinyModel()

    class GpuLikeWorker:
        model_runner = None

        def get_model(self) -> Any:
            return model

    assert digest.worker_model(GpuLikeWorker()) is model
    try:
        digest.worker_model(object())
    except RuntimeError as exc:
        assert "no model" in str(exc)
    else:
        raise AssertionError("worker_model(object()) did not raise")


def check_dtype_name() -> None:
    assert digest.dtype_name(torch.float16) == "float16"


def checks() -> list[Callable[[], None]]:
    return [f for name, f in sorted(globals().items()) if name.startswith("check_") and callable(f)]


def main() -> int:
    print(f"torch {torch.__version__}, python {sys.version.split()[0]}")
    for check in checks():
        check()
        print(f"ok {check.__name__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
