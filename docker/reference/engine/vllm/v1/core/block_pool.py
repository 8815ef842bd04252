"""Automatic prefix caching, as vLLM V1 keeps it (``--enable-prefix-caching``, on by default): every full block of
a prompt is known by a chained hash of its tokens (and the LoRA adapter it ran through), and a later prompt that
starts with the same blocks takes their K/V from the KV cache instead of its own prefill.

The engine core asks :meth:`PrefixCache.begin` for a request's block table and how many of its prompt tokens hit;
the model runner writes the computed prompt's K/V into those blocks and reads the hit ones back; :meth:`finish`
then keeps the prompt's full blocks by their hashes (least recently used evicted first when blocks run out). The
counters are vLLM's ``vllm:prefix_cache_queries_total`` and ``vllm:prefix_cache_hits_total`` (tokens). Sleep mode
discards the KV cache, so :meth:`reset` forgets every block (vLLM resets its prefix cache on sleep).

Blocks below ``first_block`` are never handed out: the runner's table-less passes (the warm-up, each decode step
after a request's first) write from block 0 up, as this engine always has.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict


class PrefixCache:
    def __init__(self, num_blocks: int, block_size: int, first_block: int, enabled: bool) -> None:
        self.block_size = block_size
        self.enabled = enabled and num_blocks > first_block
        self.first_block = first_block
        self.num_blocks = num_blocks
        self.next_block = first_block
        self.free: list[int] = []
        self.cached: OrderedDict[bytes, int] = OrderedDict()
        self.queries = 0
        self.hits = 0

    def hashes(self, token_ids: list[int], lora_name: str | None) -> list[bytes]:
        """The chained hash of each full block of ``token_ids``."""
        out: list[bytes] = []
        parent = (lora_name or "").encode()
        size = self.block_size
        for start in range(0, len(token_ids) - size + 1, size):
            block = ",".join(map(str, token_ids[start : start + size])).encode()
            parent = hashlib.sha256(parent + b"|" + block).digest()
            out.append(parent)
        return out

    def _take(self, keep: set[int]) -> int | None:
        if self.free:
            return self.free.pop()
        if self.next_block < self.num_blocks:
            self.next_block += 1
            return self.next_block - 1
        for key, block in self.cached.items():  # least recently used first
            if block not in keep:
                del self.cached[key]
                return block
        return None

    def begin(self, token_ids: list[int], lora_name: str | None) -> tuple[list[int], int] | None:
        """The block table of a prompt (its hit blocks first) and how many of its tokens hit; None when prefix
        caching is off or the pool cannot hold the prompt (the runner then computes it as it always did)."""
        if not self.enabled:
            return None
        hashes = self.hashes(token_ids, lora_name)
        table: list[int] = []
        for key in hashes:
            block = self.cached.get(key)
            if block is None:
                break
            table.append(block)
        if len(table) * self.block_size >= len(token_ids):  # as vLLM: the last token is always computed
            table.pop()
        hit = len(table) * self.block_size
        needed = -(-len(token_ids) // self.block_size)
        while len(table) < needed:
            block = self._take(set(table))
            if block is None:
                self.free.extend(table[hit // self.block_size :])
                return None
            table.append(block)
        for key in hashes[: hit // self.block_size]:
            self.cached.move_to_end(key)
        self.queries += len(token_ids)
        self.hits += hit
        return table, hit

    def finish(self, token_ids: list[int], lora_name: str | None, table: list[int], hit: int) -> None:
        """The prompt's K/V are in ``table``: keep its full blocks by their hashes, give the rest back."""
        hashes = self.hashes(token_ids, lora_name)
        for index, block in enumerate(table):
            if index < hit // self.block_size:
                continue  # already cached under its hash
            if index < len(hashes) and hashes[index] not in self.cached:
                self.cached[hashes[index]] = block
            else:
                self.free.append(block)

    def abort(self, table: list[int], hit: int) -> None:
        """The prompt's pass failed: its own blocks go back (the hit ones stay cached)."""
        self.free.extend(table[hit // self.block_size :])

    def reset(self) -> None:
        """Forget every cached block (their K/V are gone)."""
        self.free.extend(self.cached.values())
        self.cached.clear()
