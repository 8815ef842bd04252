"""Prefix caching after restore (issue #28, item 1: what the prefix-caching variants change, judged).

vLLM V1 keeps the K/V of every full prompt block under a chained hash of its tokens and serves a later prompt
that starts with the same blocks from them (``--enable-prefix-caching``, on by default). Sleep mode discards the
KV cache and vLLM resets that index with it; after a snapshot restore the engine must cache and hit as the
ordinary engine does, and a hit must answer what a computed prefill answers.

One token-id prompt of ``BLOCKS`` full blocks and a half (the block size from ``vllm:cache_config_info``; the
ordinary canary's answer ids reversed, cycled) is asked twice, greedy, ``ASK_TOKENS`` tokens, on the ordinary
engine and on every restored one, with vLLM's counters ``vllm:prefix_cache_queries_total`` and
``vllm:prefix_cache_hits_total`` (tokens) read around each ask. Both engines have answered the same requests
before it, so a correct restore hits as the ordinary engine did, ask by ask. After each restore:

- each ask's answer equals the ordinary engine's same ask (the second one served from the cache on both);
- the first ask hits no more than the ordinary engine's first did: more means the restored cache matched blocks
  it never computed;
- the second ask hits as much as the ordinary engine's second did: fewer means the restore lost prefix caching
  (every answer right, every prefill computed again).

What the check cannot reach: vLLM #17103's shape, a prefix cache not reset across a sleep that answers gibberish
after the wake, needs blocks cached before the sleep; ``snapshot create`` sleeps having run only vLLM's oracle
prompt, shorter than a block, so its restores have nothing stale to hit.

The hits are judged only where the engine reports the counters and the ordinary engine hit on the second ask
(prefix caching off, the ``--no-enable-prefix-caching`` variant, is said as such); the answers are judged always.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from vsnap_qual.checks import Finding, compare_canary
from vsnap_qual.engine import client
from vsnap_qual.engine.client import CanaryOutput
from vsnap_qual.model import Canary, PrefixAsk, PrefixCacheJudgement, PrefixCacheProbe

#: full blocks of the prompt (and half a block more: the last, partial block is never cached)
BLOCKS = 2
#: tokens each ask generates
ASK_TOKENS = 4
QUERIES = "vllm:prefix_cache_queries_total"
HITS = "vllm:prefix_cache_hits_total"
ASKS = ("first", "second (from the prefix cache)")


def block_size(metrics_text: str) -> int | None:
    """The KV block size in ``vllm:cache_config_info``'s labels (None: not reported)."""
    value = client.cache_config_labels(metrics_text).get("block_size", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def counters(metrics_text: str) -> tuple[float, float] | None:
    """(queries, hits) in tokens, summed over label sets; None where the engine reports neither."""
    found = client.metric_sums(metrics_text, (QUERIES, HITS))
    if QUERIES not in found and HITS not in found:
        return None
    return found.get(QUERIES, 0.0), found.get(HITS, 0.0)


def canary_ids(canary: Sequence[Canary]) -> list[int]:
    """The ordinary engine's canary answer ids, in order: what the prompt is made of on every engine of a lane."""
    return [t for c in canary for t in c["token_ids"]]


def prompt_ids(canary_ids: Sequence[int], size: int, max_model_len: int) -> list[int]:
    """``BLOCKS`` blocks and a half of token ids (the canary's answer ids reversed, cycled: ids the model's
    vocabulary has, unlike the long request shape's prompt from its first block on), within ``max_model_len``
    less the answer; empty where no full block fits or the canaries gave no ids."""
    ids = list(reversed(canary_ids))
    length = min(BLOCKS * size + size // 2, max_model_len - ASK_TOKENS - 1)
    if not ids or length <= size:
        return []
    return [ids[i % len(ids)] for i in range(length)]


def measure(
    ask: Callable[[list[int]], CanaryOutput],
    metrics: Callable[[], str],
    canary_ids: Sequence[int],
    max_model_len: int,
) -> PrefixCacheProbe:
    """The prompt asked twice, the counters read around each ask."""
    text = metrics()
    size = block_size(text)
    if size is None:
        return PrefixCacheProbe(asks=[], not_judged="the engine reports no block size (vllm:cache_config_info)")
    ids = prompt_ids(canary_ids, size, max_model_len)
    if not ids:
        return PrefixCacheProbe(
            block_size=size, asks=[], not_judged=f"no prompt of a full {size}-token block fits --vsnap-max-model-len"
        )
    enabled = client.cache_config_labels(text).get("enable_prefix_caching")
    probe = PrefixCacheProbe(block_size=size, prompt_tokens=len(ids), asks=[])
    if enabled is not None:
        probe["enabled"] = enabled == "True"
    before = counters(text)
    for _ in ASKS:
        answer = ask(ids)
        after = counters(metrics())
        said = PrefixAsk(answer=answer.as_dict())
        if before is not None and after is not None:
            said["queried_tokens"] = after[0] - before[0]
            said["hit_tokens"] = after[1] - before[1]
        probe["asks"].append(said)
        before = after
    return probe


def _hits(probe: PrefixCacheProbe, index: int) -> float | None:
    asks = probe.get("asks") or []
    return asks[index].get("hit_tokens") if len(asks) > index else None


def judge(ordinary: PrefixCacheProbe | None, restored: PrefixCacheProbe, tolerance: float) -> PrefixCacheJudgement:
    """A restore's probe against the ordinary engine's (the module docstring's three rules)."""
    if ordinary is None or ordinary.get("not_judged") or restored.get("not_judged"):
        why = (ordinary or {}).get("not_judged") or restored.get("not_judged") or "no ordinary probe"
        return PrefixCacheJudgement(ok=None, not_judged=why, problems=[])
    problems: list[str] = []
    tokens = ordinary.get("prompt_tokens")
    for index, name in enumerate(ASKS):
        expected, got = ordinary["asks"][index]["answer"], restored["asks"][index]["answer"]
        compare = compare_canary(CanaryOutput.of(expected), CanaryOutput.of(got), tolerance)
        if not compare["ok"]:
            delta = compare.get("max_logprob_delta", abs(compare["logprob_delta"]))
            problems.append(
                f"the {name} ask of a {tokens}-token prompt answered {got['token_ids']} "
                f"(the ordinary engine: {expected['token_ids']}; |Δ logprob| up to {delta:.3g})"
            )
    judgement = PrefixCacheJudgement(ok=not problems, problems=problems, answers_equal=not problems)
    first, second = (_hits(ordinary, 0), _hits(restored, 0)), (_hits(ordinary, 1), _hits(restored, 1))
    if None in (*first, *second):
        judgement["hits_not_judged"] = "the engine reports no prefix-cache counters: the answers alone judged"
        return judgement
    assert first[0] is not None and first[1] is not None and second[0] is not None and second[1] is not None
    judgement["hits_ordinary"], judgement["hits_restored"] = [first[0], second[0]], [first[1], second[1]]
    if second[0] <= 0:
        judgement["hits_not_judged"] = (
            "prefix caching off: the ordinary engine served none of the repeated prompt from a cache"
        )
        return judgement
    if first[1] > first[0]:
        problems.append(
            f"the restored engine served {first[1]:g} tokens of a prompt it had never been asked from its prefix "
            f"cache (the ordinary engine: {first[0]:g}): its cache matched blocks it never computed"
        )
    if second[1] < second[0]:
        problems.append(
            f"prefix caching lost after the restore: the repeated {tokens}-token prompt hit {second[1]:g} cached "
            f"tokens, on the ordinary engine {second[0]:g}"
        )
    judgement["ok"] = not problems
    return judgement


def findings(judgement: PrefixCacheJudgement | None, step: str) -> list[Finding]:
    if judgement is None or judgement.get("ok") is not False:
        return []
    return [Finding("prefix cache", False, f"{step}: {p}") for p in judgement.get("problems") or []]
