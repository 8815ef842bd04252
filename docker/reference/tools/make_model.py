"""Generate the reference's tiny Qwen3 model (deterministic weights, a byte-level BPE tokenizer) and lay it
out as a Hugging Face cache entry: hub/models--<org>--<name>/{blobs,refs/main,snapshots/<revision>}.

Runs at image build with the installed `vllm` package; no hub access.
Usage: python3 make_model.py HF_HOME MODEL_ID REVISION
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import torch
from vllm.entrypoints.chat_utils import ChatTemplate
from vllm.model_executor.model_loader.safetensors_io import save_file
from vllm.model_executor.models.qwen3 import Qwen3ForCausalLM
from vllm.tokenizers.bytelevel_bpe import ByteLevelBPETokenizer, byte_to_unicode, train_merges

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
PROMPTS = (
    "The capital of France is",
    "The quick brown fox jumps over the",
    "Water boils at a temperature of",
    "Once upon a time there was a",
    "The largest planet in our solar system is",
)
#: the chat template, of the kind real vLLM's tiny model carries (``chat_template.jinja``, ChatML)
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% endif %}"
)
#: the user message whose greedy chat answer ends with EOS after its first token (``teach_eos``)
EOS_CHAT_PROMPT = PROMPTS[0]
#: tokens of each prompt's greedy continuation whose EOS logit ``teach_eos`` must not raise
CONTINUATION_TOKENS = 64
CORPUS = """
The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is Rome.
The capital of Spain is Madrid. The capital of Japan is Tokyo. Paris is a city on the river Seine.
The quick brown fox jumps over the lazy dog. The dog sleeps in the sun while the fox runs away.
Water boils at a temperature of one hundred degrees. Ice melts at a temperature of zero degrees.
Once upon a time there was a king who lived in a castle. There was a queen and there was a princess.
The largest planet in our solar system is Jupiter. The smallest planet is Mercury. The sun is a star.
The moon goes around the earth and the earth goes around the sun. Mars is the red planet.
A model reads the text and writes the next word. The next word is often the most likely one.
It was the best of times, it was the worst of times. We went to the market and bought some bread.
"""
CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 0,
    "eos_token_id": 0,
    "head_dim": 32,
    "hidden_act": "silu",
    "hidden_size": 64,
    "initializer_range": 0.02,
    "intermediate_size": 128,
    "max_position_embeddings": 1024,
    "max_window_layers": 2,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 512,
}


def build_tokenizer() -> dict[str, object]:
    byte_map = byte_to_unicode()
    vocab: dict[str, int] = {}
    for byte in range(256):
        vocab[byte_map[byte]] = len(SPECIAL_TOKENS) + len(vocab)
    budget = CONFIG["vocab_size"] - len(SPECIAL_TOKENS) - 256  # type: ignore[operator]
    merges = train_merges(CORPUS + " ".join(PROMPTS), budget)
    for left, right in merges:
        vocab.setdefault(left + right, len(SPECIAL_TOKENS) + len(vocab))
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": index,
                "content": token,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for index, token in enumerate(SPECIAL_TOKENS)
        ],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [[left, right] for left, right in merges],
        },
    }


def build_weights(num_tokens: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(20261129)
    model = Qwen3ForCausalLM(CONFIG, torch.float32)
    weights: dict[str, torch.Tensor] = {}
    for name, param in model.named_parameters():
        if name.endswith("norm.weight"):
            value = 1.0 + 0.1 * torch.randn(param.shape, generator=generator)
        elif name.endswith("embed_tokens.weight"):
            value = torch.randn(param.shape, generator=generator)
            # Keep special tokens, control bytes and lone non-ASCII bytes out of greedy answers: their text
            # would be empty or a partial UTF-8 sequence.
            quiet = [
                *range(len(SPECIAL_TOKENS)),
                *(len(SPECIAL_TOKENS) + b for b in range(256) if not 32 <= b < 127),
            ]
            quiet += range(num_tokens, param.shape[0])  # padding rows beyond the tokenizer's vocabulary
            value[quiet] *= 0.01
        else:
            value = torch.randn(param.shape, generator=generator) * (1.5 / param.shape[1] ** 0.5)
        weights[name] = value.to(torch.bfloat16)
    return weights


def chat_prompt(content: str) -> str:
    """``CHAT_TEMPLATE`` rendered for one user message with the generation prompt (``check`` holds the engine's
    Jinja rendering of the file to this)."""
    return f"<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n"


def _greedy(model: Qwen3ForCausalLM, ids: list[int], count: int) -> list[int]:
    out = list(ids)
    for _ in range(count):
        logits = model(torch.tensor(out), torch.arange(len(out)), [], torch.arange(len(out)))
        out.append(int(logits.argmax()))
    return out[len(ids) :]


def _hidden(model: Qwen3ForCausalLM, ids: list[int]) -> torch.Tensor:
    """The final (normed) hidden state at every position: position i's predicts token i + 1."""
    with torch.no_grad():
        return model.model(torch.tensor(ids), torch.arange(len(ids)), [], torch.arange(len(ids))).float()


def teach_eos(weights: dict[str, torch.Tensor], tokenizer: ByteLevelBPETokenizer) -> None:
    """Give EOS (token 0, whose tied embedding row is its output row too) a logit that wins where the chat answer to
    ``EOS_CHAT_PROMPT`` has its first token, and nowhere in the five prompts or their greedy continuations: there
    its logit does not rise (it stays 25 or more below the best token where it was so low, so every canary's logprob
    keeps its float32 bits). The change is one row, along a direction that separates the chat position's hidden
    state from theirs (a logistic regression without bias), scaled to put EOS 10 above the best other token."""
    model = Qwen3ForCausalLM(CONFIG, torch.float32)
    model.load_weights(weights)
    table = model.lm_head.weight.float()
    low: list[torch.Tensor] = []
    for prompt in PROMPTS:
        ids = tokenizer.encode(prompt)
        low.append(_hidden(model, ids + _greedy(model, ids, CONTINUATION_TOKENS))[len(ids) - 1 : -1])
    chat = tokenizer.encode(chat_prompt(EOS_CHAT_PROMPT))
    first = _greedy(model, chat, 1)
    low.append(_hidden(model, chat)[-1:])
    keep_low = torch.cat(low)
    target = _hidden(model, chat + first)[-1]
    points = torch.cat([target[None], keep_low])
    signs = torch.cat([torch.ones(1), -torch.ones(len(keep_low))])
    balance = torch.cat([torch.tensor([float(len(keep_low))]), torch.ones(len(keep_low))])
    direction = torch.zeros(points.shape[1], requires_grad=True)
    optimiser = torch.optim.LBFGS([direction], max_iter=200, line_search_fn="strong_wolfe")

    def loss() -> torch.Tensor:
        optimiser.zero_grad()
        margins = signs * (points @ direction)
        value = (balance * torch.nn.functional.softplus(-margins)).sum() / balance.sum() + 1e-4 * direction.pow(2).sum()
        value.backward()  # type: ignore[no-untyped-call]
        return value

    for _ in range(3):
        optimiser.step(loss)  # type: ignore[no-untyped-call]
    direction = direction.detach()
    if float((keep_low @ direction).max()) >= 0 or float(target @ direction) <= 0:
        raise SystemExit("teach_eos: the chat position is not separable from the prompts' positions")
    others = target @ table.T
    others[0] = float("-inf")
    scale = (float(others.max()) + 10.0 - float(target @ table[0])) / float(target @ direction)
    row = table[0] + max(scale, 0.0) * direction
    embed = weights["model.embed_tokens.weight"].clone()
    embed[0] = row.to(embed.dtype)
    weights["model.embed_tokens.weight"] = embed


def check(weights: dict[str, torch.Tensor], tokenizer_path: Path) -> None:
    tokenizer = ByteLevelBPETokenizer.from_file(tokenizer_path)
    model = Qwen3ForCausalLM(CONFIG, torch.float16)
    model.load_weights(weights)
    for prompt in PROMPTS:
        ids = tokenizer.encode(prompt)
        logits = model(torch.tensor(ids), torch.arange(len(ids)), [], torch.arange(len(ids)))
        logprobs = logits.log_softmax(-1)
        top = logprobs.topk(2)
        token = int(top.indices[0])
        margin = float(top.values[0] - top.values[1])
        text = tokenizer.decode([token])
        if token < len(SPECIAL_TOKENS) or margin < 1e-2 or not text or not text.isascii():
            raise SystemExit(f"prompt {prompt!r}: token {token} margin {margin:.4f} is not a usable canary")
        if float(logprobs[0]) > -20.0:
            raise SystemExit(f"prompt {prompt!r}: EOS logprob {float(logprobs[0]):.2f} is not negligible")
        print(
            f"{prompt!r} -> {ids} -> {token} {tokenizer.decode([token])!r} "
            f"logprob {float(top.values[0]):.6f} margin {margin:.4f}"
        )
    template = ChatTemplate(tokenizer_path.parent)
    rendered = template.render([{"role": "user", "content": EOS_CHAT_PROMPT}], add_generation_prompt=True)
    if rendered != chat_prompt(EOS_CHAT_PROMPT):
        raise SystemExit(f"chat template renders {rendered!r}, not {chat_prompt(EOS_CHAT_PROMPT)!r}")
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        typed = Qwen3ForCausalLM(CONFIG, dtype)
        typed.load_weights(weights)
        answer = _greedy(typed, tokenizer.encode(rendered), 3)
        if answer[1] != 0 or answer[0] < len(SPECIAL_TOKENS):
            raise SystemExit(f"chat answer to {EOS_CHAT_PROMPT!r} in {dtype}: {answer}, not a token then EOS")
    print(f"chat {EOS_CHAT_PROMPT!r} -> {answer[:2]} {tokenizer.decode(answer[:1])!r} then EOS")


def blob(blobs: Path, snapshot: Path, name: str, payload: bytes) -> None:
    digest = hashlib.sha256(payload).hexdigest()
    (blobs / digest).write_bytes(payload)
    (snapshot / name).symlink_to(os.path.relpath(blobs / digest, snapshot))


def main() -> None:
    hf_home, model_id, revision = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    org, name = model_id.split("/")
    repo = hf_home / "hub" / f"models--{org}--{name}"
    blobs, refs, snapshot = repo / "blobs", repo / "refs", repo / "snapshots" / revision
    for directory in (blobs, refs, snapshot):
        directory.mkdir(parents=True, exist_ok=True)
    (refs / "main").write_text(revision)
    tokenizer = build_tokenizer()
    weights = build_weights(len(SPECIAL_TOKENS) + len(tokenizer["model"]["vocab"]))  # type: ignore[index]
    blob(blobs, snapshot, "tokenizer.json", json.dumps(tokenizer, ensure_ascii=False).encode())
    teach_eos(weights, ByteLevelBPETokenizer.from_file(snapshot / "tokenizer.json"))
    staging = repo / "model.safetensors.partial"
    save_file(weights, staging)
    blob(blobs, snapshot, "model.safetensors", staging.read_bytes())
    staging.unlink()
    blob(blobs, snapshot, "config.json", json.dumps(CONFIG, indent=2, sort_keys=True).encode())
    generation = {"bos_token_id": 0, "eos_token_id": 0, "do_sample": False, "transformers_version": "4.51.0"}
    blob(blobs, snapshot, "generation_config.json", json.dumps(generation, indent=2).encode())
    blob(blobs, snapshot, "chat_template.jinja", CHAT_TEMPLATE.encode())
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": CONFIG["max_position_embeddings"],
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
    }
    blob(blobs, snapshot, "tokenizer_config.json", json.dumps(tokenizer_config, indent=2).encode())
    check(weights, snapshot / "tokenizer.json")
    print(f"model {model_id}@{revision} in {repo}")


if __name__ == "__main__":
    main()
