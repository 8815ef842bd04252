"""The prefix-cache check's rules (``vsnap_qual.engine.prefix_cache``): the prompt it builds, what it reads of vLLM's
counters around each ask, and how a restore's asks are judged against the ordinary engine's."""

from __future__ import annotations

from vsnap_qual.engine import prefix_cache
from vsnap_qual.engine.client import CanaryOutput
from vsnap_qual.model import PrefixCacheProbe

INFO = 'vllm:cache_config_info{block_size="16",enable_prefix_caching="True",engine="0"} 1.0\n'


def _metrics(queries: float, hits: float) -> str:
    return (
        INFO
        + f'vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {queries}\n'
        + f'vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}\n'
    )


def _answer(ids: list[int], logprob: float = -0.5) -> CanaryOutput:
    return CanaryOutput(
        prompt="<40 token ids>", token_ids=ids, text="x", logprob=logprob, logprobs=[logprob] * len(ids)
    )


class Engine:
    """A fake engine with a prefix cache: each ask of a prompt seen before hits its full blocks but the last."""

    def __init__(self, answers: list[list[int]], hit_second: bool = True, stale: int = 0) -> None:
        self.answers, self.hit_second, self.stale = answers, hit_second, stale
        self.queries = self.hits = 0.0
        self.seen: list[list[int]] = []
        self.prompts: list[list[int]] = []

    def ask(self, ids: list[int]) -> CanaryOutput:
        self.prompts.append(ids)
        self.queries += len(ids)
        if ids in self.seen and self.hit_second:
            self.hits += (len(ids) // 16) * 16
        elif ids not in self.seen:
            self.hits += self.stale
        self.seen.append(ids)
        return _answer(self.answers[len(self.prompts) - 1])

    def metrics(self) -> str:
        return _metrics(self.queries, self.hits)


def _probe(engine: Engine, canary_ids: list[int] | None = None, max_model_len: int = 512) -> PrefixCacheProbe:
    return prefix_cache.measure(engine.ask, engine.metrics, canary_ids or [5, 6, 7], max_model_len)


def test_the_prompt_is_two_blocks_and_a_half_of_the_canarys_ids_reversed() -> None:
    engine = Engine([[1], [1]])
    probe = _probe(engine, [5, 6, 7])
    assert probe["block_size"] == 16 and probe["prompt_tokens"] == 40 and probe["enabled"] is True
    assert engine.prompts[0] == engine.prompts[1] and engine.prompts[0][:4] == [7, 6, 5, 7]
    assert [a.get("hit_tokens") for a in probe["asks"]] == [0, 32]
    assert [a.get("queried_tokens") for a in probe["asks"]] == [40, 40]


def test_a_context_too_short_for_one_block_is_not_judged_and_asks_nothing() -> None:
    engine = Engine([[1], [1]])
    probe = _probe(engine, max_model_len=20)  # 20 - 4 - 1 = 15 tokens: not one full block of 16
    assert probe["asks"] == [] and "full 16-token block" in probe["not_judged"] and engine.prompts == []
    assert prefix_cache.judge(probe, probe, 0.0)["ok"] is None


def test_an_engine_without_the_counters_is_judged_on_its_answers_alone() -> None:
    ordinary = Engine([[1, 2], [1, 2]])
    restored = Engine([[1, 2], [1, 3]])
    plain = (INFO, INFO)
    a = prefix_cache.measure(ordinary.ask, lambda: plain[0], [5], 512)
    b = prefix_cache.measure(restored.ask, lambda: plain[1], [5], 512)
    assert "hit_tokens" not in a["asks"][0]
    judged = prefix_cache.judge(a, b, 0.0)
    assert judged["ok"] is False and "no prefix-cache counters" in judged["hits_not_judged"]
    assert judged["problems"] == [
        "the second (from the prefix cache) ask of a 40-token prompt answered [1, 3] (the ordinary engine: [1, 2]; "
        "|Δ logprob| up to 0)"
    ]


def test_a_restore_that_answers_and_hits_as_the_ordinary_engine_passes() -> None:
    judged = prefix_cache.judge(_probe(Engine([[1], [2]])), _probe(Engine([[1], [2]])), 0.0)
    assert judged == {
        "ok": True,
        "problems": [],
        "answers_equal": True,
        "hits_ordinary": [0.0, 32.0],
        "hits_restored": [0.0, 32.0],
    }
    assert prefix_cache.findings(judged, "restore-1") == []


def test_a_restore_that_lost_prefix_caching_fails_with_right_answers() -> None:
    judged = prefix_cache.judge(_probe(Engine([[1], [2]])), _probe(Engine([[1], [2]], hit_second=False)), 0.0)
    assert judged["ok"] is False
    assert judged["problems"] == [
        "prefix caching lost after the restore: the repeated 40-token prompt hit 0 cached tokens, on the ordinary "
        "engine 32"
    ]
    (finding,) = prefix_cache.findings(judged, "restore-2")
    assert finding.check == "prefix cache" and finding.detail.startswith("restore-2: prefix caching lost")


def test_a_restore_that_hits_a_prompt_it_never_saw_fails() -> None:
    judged = prefix_cache.judge(_probe(Engine([[1], [2]])), _probe(Engine([[1], [2]], stale=16)), 0.0)
    assert judged["ok"] is False and len(judged["problems"]) == 1
    assert "served 16 tokens of a prompt it had never been asked from its prefix cache" in judged["problems"][0]


def test_a_cached_answer_that_differs_fails_whatever_the_hits() -> None:
    judged = prefix_cache.judge(_probe(Engine([[1], [2]])), _probe(Engine([[1], [9]])), 0.0)
    assert judged["ok"] is False and judged["hits_restored"] == [0.0, 32.0]
    assert judged["problems"][0].startswith("the second (from the prefix cache) ask of a 40-token prompt answered [9]")


def test_prefix_caching_off_on_the_ordinary_engine_leaves_the_hits_unjudged() -> None:
    judged = prefix_cache.judge(
        _probe(Engine([[1], [2]], hit_second=False)), _probe(Engine([[1], [2]], hit_second=False)), 0.0
    )
    assert judged["ok"] is True and judged["hits_not_judged"].startswith("prefix caching off")
