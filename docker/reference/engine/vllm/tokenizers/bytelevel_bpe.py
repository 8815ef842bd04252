"""A byte-level BPE tokenizer read from a Hugging Face `tokenizer.json` (model type BPE, ByteLevel
pre-tokenizer and decoder), written for the reference engine: no `tokenizers` dependency."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from pathlib import Path

# GPT-2's pre-tokenisation split, restricted to what Python's `re` expresses (ASCII letters and digits are
# the classes; for ASCII text it splits exactly like the \p{L}/\p{N} pattern).
PRETOKENIZE = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")


@functools.lru_cache(maxsize=1)
def byte_to_unicode() -> dict[int, str]:
    """The reversible byte -> printable character map of byte-level BPE."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    mapping: dict[int, str] = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in mapping:
            mapping[byte] = chr(256 + extra)
            extra += 1
    return mapping


def _pairs(symbols: list[str]) -> set[tuple[str, str]]:
    return {(symbols[index], symbols[index + 1]) for index in range(len(symbols) - 1)}


class ByteLevelBPETokenizer:
    def __init__(self, vocab: dict[str, int], merges: Iterable[tuple[str, str]], special: dict[str, int]) -> None:
        self.vocab = dict(vocab)
        self.vocab.update(special)
        self.id_to_token = {index: token for token, index in self.vocab.items()}
        self.ranks = {pair: rank for rank, pair in enumerate(merges)}
        self.special_ids = set(special.values())
        self.byte_map = byte_to_unicode()
        self.char_to_byte = {char: byte for byte, char in self.byte_map.items()}
        self._cache: dict[str, list[str]] = {}
        # Hugging Face tokenizers match added tokens in the raw text before pre-tokenising (longest first), so a
        # prompt that spells "<|im_start|>" (a chat template's output) gets its id, not its bytes.
        names = sorted(special, key=len, reverse=True)
        self._special_split = re.compile("(" + "|".join(map(re.escape, names)) + ")") if names else None
        self.special = dict(special)

    @classmethod
    def from_file(cls, path: Path) -> ByteLevelBPETokenizer:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        model = data["model"]
        if model.get("type") != "BPE":
            raise ValueError(f"unsupported tokenizer model type: {model.get('type')}")
        merges = [tuple(item) if isinstance(item, list) else tuple(item.split(" ", 1)) for item in model["merges"]]
        special = {item["content"]: int(item["id"]) for item in data.get("added_tokens", [])}
        return cls(model["vocab"], merges, special)  # type: ignore[arg-type]

    def _bpe(self, word: str) -> list[str]:
        cached = self._cache.get(word)
        if cached is not None:
            return cached
        symbols = list(word)
        while len(symbols) > 1:
            candidates = [(self.ranks[pair], pair) for pair in _pairs(symbols) if pair in self.ranks]
            if not candidates:
                break
            _, (left, right) = min(candidates)
            merged: list[str] = []
            index = 0
            while index < len(symbols):
                if index < len(symbols) - 1 and symbols[index] == left and symbols[index + 1] == right:
                    merged.append(left + right)
                    index += 2
                else:
                    merged.append(symbols[index])
                    index += 1
            symbols = merged
        self._cache[word] = symbols
        return symbols

    def encode(self, text: str) -> list[int]:
        if self._special_split is None:
            return self._encode_ordinary(text)
        ids: list[int] = []
        for index, part in enumerate(self._special_split.split(text)):
            if index % 2:
                ids.append(self.special[part])
            elif part:
                ids.extend(self._encode_ordinary(part))
        return ids

    def _encode_ordinary(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in PRETOKENIZE.findall(text):
            mapped = "".join(self.byte_map[byte] for byte in piece.encode("utf-8"))
            ids.extend(self.vocab[symbol] for symbol in self._bpe(mapped))
        return ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        pieces: list[str] = []
        for index in ids:
            if skip_special_tokens and index in self.special_ids:
                continue
            pieces.append(self.id_to_token.get(int(index), ""))
        raw = bytes(self.char_to_byte[char] for char in "".join(pieces) if char in self.char_to_byte)
        return raw.decode("utf-8", errors="replace")

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        return [self.id_to_token.get(int(index), "") for index in ids]


def train_merges(corpus: str, num_merges: int) -> list[tuple[str, str]]:
    """Deterministic BPE training: most frequent pair first, ties broken by the pair itself."""
    byte_map = byte_to_unicode()
    words: dict[tuple[str, ...], int] = {}
    for piece in PRETOKENIZE.findall(corpus):
        key = tuple(byte_map[byte] for byte in piece.encode("utf-8"))
        words[key] = words.get(key, 0) + 1
    merges: list[tuple[str, str]] = []
    for _ in range(num_merges):
        counts: dict[tuple[str, str], int] = {}
        for word, frequency in words.items():
            for index in range(len(word) - 1):
                pair = (word[index], word[index + 1])
                counts[pair] = counts.get(pair, 0) + frequency
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        if counts[best] < 2:
            break
        merges.append(best)
        rewritten: dict[tuple[str, ...], int] = {}
        for word, frequency in words.items():
            symbols: list[str] = []
            index = 0
            while index < len(word):
                if index < len(word) - 1 and (word[index], word[index + 1]) == best:
                    symbols.append(word[index] + word[index + 1])
                    index += 2
                else:
                    symbols.append(word[index])
                    index += 1
            rewritten[tuple(symbols)] = rewritten.get(tuple(symbols), 0) + frequency
        words = rewritten
    return merges
