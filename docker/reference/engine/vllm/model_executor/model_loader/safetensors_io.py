"""The safetensors file format (8-byte little-endian header length, JSON header, raw little-endian data),
read and written with torch alone."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch

DTYPE_NAMES: dict[torch.dtype, str] = {
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
}
NAME_DTYPES = {name: dtype for dtype, name in DTYPE_NAMES.items()}


def save_file(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str] | None = None) -> None:
    header: dict[str, object] = {"__metadata__": metadata or {"format": "pt"}}
    chunks: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        tensor = tensors[name].detach().contiguous().cpu()
        data = tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        header[name] = {
            "dtype": DTYPE_NAMES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with Path(path).open("wb") as output:
        output.write(struct.pack("<Q", len(encoded)))
        output.write(encoded)
        for chunk in chunks:
            output.write(chunk)


def load_file(path: Path) -> dict[str, torch.Tensor]:
    payload = Path(path).read_bytes()
    if len(payload) < 8:
        raise ValueError(f"safetensors file is truncated: {path}")
    (header_size,) = struct.unpack("<Q", payload[:8])
    if 8 + header_size > len(payload):
        raise ValueError(f"safetensors header is truncated: {path}")
    header = json.loads(payload[8 : 8 + header_size])
    data = memoryview(payload)[8 + header_size :]
    tensors: dict[str, torch.Tensor] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        if end > len(data):
            raise ValueError(f"safetensors data is truncated: {path} ({name})")
        dtype = NAME_DTYPES[info["dtype"]]
        raw = bytearray(data[start:end])
        flat = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(info["shape"]).clone()
    return tensors
