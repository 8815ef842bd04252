"""Generate the tiny Qwen3-architecture model of vsnap-vllm-cpu and lay it out as a Hugging Face cache entry.

Random weights (``torch.manual_seed(0)``), a byte-level BPE tokenizer trained here with ``tokenizers`` on a fixed
English corpus, ``head_dim=32`` (vLLM's CPU attention supports 32, 64, 80, ...; 16 kills the engine at the first
request). The result is ``<hf-home>/hub/models--<org>--<name>/{blobs,refs/main,snapshots/<revision>}``, so
``HF_HOME=<hf-home> HF_HUB_OFFLINE=1 vllm serve <org>/<name> --revision <revision>`` resolves it with no network.

Usage: python make_model.py --hf-home /opt/hf --repo-id vsnap/tiny-qwen3 --revision <40 hex>
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS_LINES = [
    "The capital of France is Paris.",
    "The capital of Germany is Berlin, and the capital of Italy is Rome.",
    "A small model is used to test the serving engine end to end.",
    "The quick brown fox jumps over the lazy dog.",
    "Snapshots capture an initialized engine so that it can be restored quickly.",
    "Every parameter of the model is hashed before and after a restore.",
    "What is the weather like today? It is sunny and warm in the city.",
    "Numbers: one, two, three, four, five, six, seven, eight, nine, ten.",
]
CONFIG = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 1024,
    "max_position_embeddings": 512,
    "tie_word_embeddings": True,
    "bos_token_id": 0,
    "eos_token_id": 0,
    "pad_token_id": 0,
}


def build_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        min_frequency=1,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([line for _ in range(20) for line in CORPUS_LINES], trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out))


def build_model(out: Path) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(**CONFIG)
    model = Qwen3ForCausalLM(config).to(torch.float32).eval()
    model.save_pretrained(str(out), safe_serialization=True)


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lay_out_cache(src: Path, hf_home: Path, repo_id: str, revision: str) -> Path:
    """Move generated files into the hub cache layout; returns the snapshot folder."""
    repo_dir = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    blobs = repo_dir / "blobs"
    snapshot = repo_dir / "snapshots" / revision
    blobs.mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "main").write_text(revision)
    for path in sorted(src.iterdir()):
        data = path.read_bytes()
        # The hub names LFS blobs (weights) by sha256 and plain git files by their git blob sha1.
        blob_name = hashlib.sha256(data).hexdigest() if path.suffix == ".safetensors" else git_blob_sha1(data)
        (blobs / blob_name).write_bytes(data)
        link = snapshot / path.name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.join("..", "..", "blobs", blob_name))
    return snapshot


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hf-home", required=True, type=Path)
    parser.add_argument("--repo-id", default="vsnap/tiny-qwen3")
    parser.add_argument("--revision", required=True)
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[0-9a-f]{40}", args.revision):
        parser.error("--revision must be 40 lowercase hex characters")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "model"
        out.mkdir()
        build_tokenizer(out)
        build_model(out)
        snapshot = lay_out_cache(out, args.hf_home, args.repo_id, args.revision)
    files = sorted(p.name for p in snapshot.iterdir())
    config = json.loads((snapshot / "config.json").read_text())
    print(f"model {args.repo_id}@{args.revision}: {files}; head_dim={config['head_dim']}", file=sys.stderr)
    shutil.rmtree(Path(args.hf_home) / "hub" / ".locks", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
