"""Write a small LoRA adapter in PEFT's layout (``adapter_config.json``, ``adapter_model.safetensors``) for a
Qwen3-style model, from the model's ``config.json``: the attention's q and v projections of every layer, rank 8,
float32 weights drawn from a seeded generator, so the same files every time. Python's standard library only (the
safetensors file is written by hand), so it runs in any image or on the host; nothing is downloaded.

Usage: python3 make_lora.py CONFIG_JSON OUT_DIR [BASE_MODEL_ID]
"""

from __future__ import annotations

import json
import random
import struct
import sys
from pathlib import Path

RANK = 8
ALPHA = 16
STD = 0.5  # large enough that the adapter changes greedy answers of a tiny model (a check must see it)
TARGETS = ("q_proj", "v_proj")
SEED = 20261203


def shapes(config: dict[str, object]) -> dict[str, tuple[int, int]]:
    """(in, out) features of each target projection."""
    hidden = int(config["hidden_size"])  # type: ignore[call-overload]
    heads = int(config["num_attention_heads"])  # type: ignore[call-overload]
    kv_heads = int(config.get("num_key_value_heads", heads))  # type: ignore[call-overload]
    head_dim = int(config.get("head_dim") or hidden // heads)  # type: ignore[call-overload]
    return {"q_proj": (hidden, heads * head_dim), "v_proj": (hidden, kv_heads * head_dim)}


def write_safetensors(path: Path, tensors: dict[str, tuple[list[int], list[float]]]) -> None:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    data = bytearray()
    for name in sorted(tensors):
        shape, values = tensors[name]
        begin = len(data)
        data += struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [begin, len(data)]}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(data))


def make(config_path: Path, out: Path, base_model: str = "") -> None:
    config = json.loads(config_path.read_text())
    rng = random.Random(SEED)
    tensors: dict[str, tuple[list[int], list[float]]] = {}
    for layer in range(int(config["num_hidden_layers"])):
        for target, (fan_in, fan_out) in shapes(config).items():
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{target}"
            tensors[prefix + ".lora_A.weight"] = ([RANK, fan_in], [rng.gauss(0, STD) for _ in range(RANK * fan_in)])
            tensors[prefix + ".lora_B.weight"] = ([fan_out, RANK], [rng.gauss(0, STD) for _ in range(fan_out * RANK)])
    out.mkdir(parents=True, exist_ok=True)
    write_safetensors(out / "adapter_model.safetensors", tensors)
    adapter_config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": RANK,
        "lora_alpha": ALPHA,
        "target_modules": list(TARGETS),
        "bias": "none",
        "base_model_name_or_path": base_model,
    }
    (out / "adapter_config.json").write_text(json.dumps(adapter_config, indent=1) + "\n")


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    make(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] if len(sys.argv) == 4 else "")
