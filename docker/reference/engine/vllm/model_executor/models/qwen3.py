"""A small Qwen3 decoder in plain torch, with Qwen3's parameter names.

Parameters are held in the serving dtype (float16/bfloat16/float32) on the engine's device (CUDA or CPU);
the forward pass computes in float32 on either.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size, dtype=dtype), requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(variance + self.eps) * self.weight.float()


class Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(out_features, in_features, dtype=dtype), requires_grad=False)
        self.input_size = in_features
        #: the active LoRA adapter's (A, B, scale) for this projection while a request through it runs
        self.lora: tuple[torch.Tensor, torch.Tensor, float] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x, self.weight.float())
        if self.lora is not None:
            lora_a, lora_b, scale = self.lora
            out = out + F.linear(F.linear(x, lora_a), lora_b) * scale
        return out


class RotaryEmbedding(nn.Module):
    """NeoX-style rotary embedding with a precomputed cos/sin cache buffer (as vLLM keeps it)."""

    def __init__(self, head_dim: int, max_position: int, base: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        freqs = torch.outer(torch.arange(max_position, dtype=torch.float32), inv_freq)
        self.register_buffer("cos_sin_cache", torch.cat([freqs.cos(), freqs.sin()], dim=-1), persistent=False)

    def forward(self, positions: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        cos, sin = self.cos_sin_cache[positions].chunk(2, dim=-1)
        cos = cos.unsqueeze(-2)
        sin = sin.unsqueeze(-2)
        first, second = x.chunk(2, dim=-1)
        return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)


class Qwen3Attention(nn.Module):
    def __init__(self, config: dict[str, Any], dtype: torch.dtype, rotary: RotaryEmbedding) -> None:
        super().__init__()
        hidden = config["hidden_size"]
        self.num_heads = config["num_attention_heads"]
        self.num_kv_heads = config["num_key_value_heads"]
        self.head_dim = config["head_dim"]
        eps = config["rms_norm_eps"]
        self.q_proj = Linear(hidden, self.num_heads * self.head_dim, dtype)
        self.k_proj = Linear(hidden, self.num_kv_heads * self.head_dim, dtype)
        self.v_proj = Linear(hidden, self.num_kv_heads * self.head_dim, dtype)
        self.o_proj = Linear(self.num_heads * self.head_dim, hidden, dtype)
        self.q_norm = RMSNorm(self.head_dim, eps, dtype)
        self.k_norm = RMSNorm(self.head_dim, eps, dtype)
        self.rotary_emb = rotary
        # The per-layer KV scales vLLM keeps as buffers for a quantized KV cache (``k_scale``/``v_scale``): K and V
        # are held scaled by them. 1.0, the identity (bit-exact), as for an unquantized checkpoint.
        self.register_buffer("k_scale", torch.tensor(1.0, dtype=torch.float32))
        self.register_buffer("v_scale", torch.tensor(1.0, dtype=torch.float32))

    def forward(
        self,
        positions: torch.Tensor,
        hidden: torch.Tensor,
        kv_cache: torch.Tensor | None,
        slots: torch.Tensor,
        hit: int | None = None,
    ) -> torch.Tensor:
        tokens = hidden.shape[0]
        q = self.q_norm(self.q_proj(hidden).view(tokens, self.num_heads, self.head_dim))
        k = self.k_norm(self.k_proj(hidden).view(tokens, self.num_kv_heads, self.head_dim))
        v = self.v_proj(hidden).view(tokens, self.num_kv_heads, self.head_dim) * self.v_scale
        q = self.rotary_emb(positions, q)
        k = self.rotary_emb(positions, k) * self.k_scale
        if kv_cache is not None and kv_cache.numel():
            # Paged layout [2, num_blocks * block_size, kv_heads, head_dim]: this step's K/V go to its slots.
            if hit is None:
                kv_cache[0].index_copy_(0, slots, k.to(kv_cache.dtype))
                kv_cache[1].index_copy_(0, slots, v.to(kv_cache.dtype))
            else:  # a block table (prefix caching): the computed positions written, every one read back
                kv_cache[0].index_copy_(0, slots[hit:], k[hit:].to(kv_cache.dtype))
                kv_cache[1].index_copy_(0, slots[hit:], v[hit:].to(kv_cache.dtype))
                k, v = kv_cache[0][slots].float(), kv_cache[1][slots].float()
        group = self.num_heads // self.num_kv_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / (self.head_dim**0.5)
        mask = torch.ones(tokens, tokens, dtype=torch.bool, device=scores.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        attended = torch.einsum("hqk,khd->qhd", scores.softmax(dim=-1), v)
        return self.o_proj(attended.reshape(tokens, self.num_heads * self.head_dim))


class Qwen3MLP(nn.Module):
    def __init__(self, config: dict[str, Any], dtype: torch.dtype) -> None:
        super().__init__()
        hidden, intermediate = config["hidden_size"], config["intermediate_size"]
        self.gate_proj = Linear(hidden, intermediate, dtype)
        self.up_proj = Linear(hidden, intermediate, dtype)
        self.down_proj = Linear(intermediate, hidden, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Qwen3DecoderLayer(nn.Module):
    def __init__(self, config: dict[str, Any], dtype: torch.dtype, rotary: RotaryEmbedding) -> None:
        super().__init__()
        eps = config["rms_norm_eps"]
        self.self_attn = Qwen3Attention(config, dtype, rotary)
        self.mlp = Qwen3MLP(config, dtype)
        self.input_layernorm = RMSNorm(config["hidden_size"], eps, dtype)
        self.post_attention_layernorm = RMSNorm(config["hidden_size"], eps, dtype)

    def forward(
        self,
        positions: torch.Tensor,
        x: torch.Tensor,
        kv_cache: torch.Tensor | None,
        slots: torch.Tensor,
        hit: int | None = None,
    ) -> torch.Tensor:
        x = x + self.self_attn(positions, self.input_layernorm(x), kv_cache, slots, hit)
        return x + self.mlp(self.post_attention_layernorm(x))


class Embedding(nn.Module):
    def __init__(self, vocab: int, hidden: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(vocab, hidden, dtype=dtype), requires_grad=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.weight[ids].float()


def rope_theta(config: dict[str, Any]) -> float:
    """`rope_theta`, or `rope_parameters.rope_theta` as transformers 5 writes it."""
    if "rope_theta" in config:
        return float(config["rope_theta"])
    return float((config.get("rope_parameters") or {}).get("rope_theta", 10000.0))


class Qwen3Model(nn.Module):
    def __init__(self, config: dict[str, Any], dtype: torch.dtype) -> None:
        super().__init__()
        rotary = RotaryEmbedding(config["head_dim"], config["max_position_embeddings"], rope_theta(config))
        self.embed_tokens = Embedding(config["vocab_size"], config["hidden_size"], dtype)
        self.layers = nn.ModuleList(
            [Qwen3DecoderLayer(config, dtype, rotary) for _ in range(config["num_hidden_layers"])]
        )
        self.norm = RMSNorm(config["hidden_size"], config["rms_norm_eps"], dtype)

    def forward(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[torch.Tensor],
        slots: torch.Tensor,
        hit: int | None = None,
    ) -> torch.Tensor:
        x = self.embed_tokens(ids)
        for index, layer in enumerate(self.layers):
            x = layer(positions, x, kv_caches[index] if kv_caches else None, slots, hit)
        return self.norm(x)


class Qwen3ForCausalLM(nn.Module):
    def __init__(self, config: dict[str, Any], dtype: torch.dtype) -> None:
        super().__init__()
        self.config = config
        self.model = Qwen3Model(config, dtype)
        self.tie_word_embeddings = bool(config.get("tie_word_embeddings", False))
        if self.tie_word_embeddings:
            self.lm_head = self.model.embed_tokens
        else:
            self.lm_head = Embedding(config["vocab_size"], config["hidden_size"], dtype)

    @torch.no_grad()
    def forward(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[torch.Tensor],
        slots: torch.Tensor,
        hit: int | None = None,
    ) -> torch.Tensor:
        """Logits (float32) of the last position (``hit``: prefix caching's first ``hit`` positions read from
        ``kv_caches``, see ``Qwen3Attention``)."""
        hidden = self.model(ids, positions, kv_caches, slots, hit)
        return F.linear(hidden[-1:], self.lm_head.weight.float())[0]

    @torch.no_grad()
    def load_weights(self, weights: dict[str, torch.Tensor]) -> set[str]:
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        for name, tensor in weights.items():
            if name == "lm_head.weight" and self.tie_word_embeddings:
                continue
            if name not in params:
                raise KeyError(f"unexpected weight in checkpoint: {name}")
            param = params[name]
            if tuple(param.shape) != tuple(tensor.shape):
                raise ValueError(f"shape mismatch for {name}: {tuple(tensor.shape)} vs {tuple(param.shape)}")
            param.data.copy_(tensor.to(param.dtype))
            loaded.add(name)
        missing = set(params) - loaded
        if missing:
            raise ValueError(f"weights missing from checkpoint: {sorted(missing)}")
        return loaded
