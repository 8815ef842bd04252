"""Request shapes beyond one greedy prompt sent alone: what a restored server meets once it serves for real.

Each shape is recorded on the ordinary reference (twice, so the engine's own non-determinism is reported as such
and not as a restore defect) and compared after every restore, naming the shape and the first divergence:

- ``repeated``: the canaries asked again (and every soak round's answers after a restore: every answer compared,
  not only the first);
- ``seeded``: sampled output (temperature > 0, top-p, a per-request seed): vLLM's seeded requests are
  reproducible, so a restored engine must give the ordinary engine's tokens;
- ``concurrent``: several greedy canary requests in flight at once (the batched path), each compared with the
  ordinary engine's sequential answer to the same prompt;
- ``long``: one prompt (token ids) that fills the context up to ``max-model-len`` less its answer.

Pure planning and comparison here, and the canary plan the restores are compared on (:func:`canary_plan`, every
shape's base); the lane sends the requests (``lane.engine_api.LaneEngineApi``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from vsnap_qual import model
from vsnap_qual.contract import REQUEST_SHAPES as SHAPES
from vsnap_qual.contract import VLLM_CANARY_PROMPT
from vsnap_qual.engine.client import CanaryOutput

__all__ = ["SHAPES", "Request", "canary_plan", "compare", "long_prompt", "plan", "self_consistency", "send"]
#: the sampling of the seeded shape (any temperature > 0 and top-p < 1 would do: vLLM seeds per request)
SEEDED_TEMPERATURE = 0.8
SEEDED_TOP_P = 0.95
SEED_BASE = 1000


def canary_plan(prompts: Sequence[str], canary_tokens: int) -> list[tuple[str, int]]:
    """The canary requests, in order: vLLM's own one-token canary first (the manifest's oracle is its output),
    then every canary prompt for ``--vsnap-canary-tokens`` greedy tokens."""
    plan = [(VLLM_CANARY_PROMPT, 1)]
    if canary_tokens > 1:
        plan += [(p, canary_tokens) for p in prompts]
    else:
        plan += [(p, 1) for p in prompts if p != VLLM_CANARY_PROMPT]
    return plan


@dataclass(frozen=True)
class Request:
    """One completion request of a shape."""

    shape: str
    index: int
    prompt: str | tuple[int, ...]
    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0

    @property
    def label(self) -> str:
        """The prompt as the evidence names it (a token-id prompt by its length)."""
        return self.prompt if isinstance(self.prompt, str) else f"<{len(self.prompt)} token ids>"


def long_prompt(canary: Sequence[model.Canary], max_model_len: int, tokens: int) -> list[int]:
    """A token-id prompt that fills the context up to ``max_model_len`` less ``tokens`` answer tokens (and one
    spare): the ordinary reference's own canary answer ids, in order, cycled (ids the model's vocabulary has,
    the same on every arm that answered the same). Empty when the canaries gave no ids."""
    ids = [t for c in canary for t in c["token_ids"]]
    length = max_model_len - tokens - 1
    if not ids or length <= 0:
        return []
    return [ids[i % len(ids)] for i in range(length)]


def plan(
    shapes: Sequence[str],
    canaries: Sequence[tuple[str, int]],
    prompts: Sequence[str],
    tokens: int,
    concurrent: int,
    long_ids: Sequence[int],
) -> list[Request]:
    """The requests of the shapes asked for, in order (``canaries``: the canary plan, prompt and tokens)."""
    out: list[Request] = []
    if "repeated" in shapes:
        out += [Request("repeated", i, p, n) for i, (p, n) in enumerate(canaries)]
    if "seeded" in shapes:
        out += [
            Request("seeded", i, p, tokens, SEEDED_TEMPERATURE, SEEDED_TOP_P, SEED_BASE + i)
            for i, p in enumerate(prompts)
        ]
    if "concurrent" in shapes:
        out += [Request("concurrent", i, prompts[i % len(prompts)], tokens) for i in range(concurrent)]
    if "long" in shapes and long_ids:
        out.append(Request("long", 0, tuple(long_ids), tokens))
    return out


def send(requests: Sequence[Request], ask: Callable[[Request], CanaryOutput]) -> dict[str, list[model.Canary]]:
    """Every request's answer, by shape in plan order: the concurrent ones all in flight at once, the others
    one after another."""
    answers: dict[str, list[model.Canary]] = {}
    together = [r for r in requests if r.shape == "concurrent"]
    for request in requests:
        if request.shape != "concurrent":
            answers.setdefault(request.shape, []).append(ask(request).as_dict())
    if together:
        with ThreadPoolExecutor(max_workers=len(together)) as pool:
            answers["concurrent"] = [a.as_dict() for a in pool.map(ask, together)]
    return answers


def sequential_answer(prompt: str, canary: Sequence[model.Canary]) -> model.Canary | None:
    """The ordinary engine's answer to this prompt sent alone (the canary's)."""
    return next((c for c in canary if c["prompt"] == prompt and c.get("logprobs") is not None), None)


def expected_for(
    shape: str, index: int, ordinary: model.ShapeRecord, canary: Sequence[model.Canary]
) -> model.Canary | None:
    """What the ordinary engine answered to this request: its own answer to the same shape (a concurrent
    request: its sequential answer to the same prompt, the canary's)."""
    if shape == "concurrent":
        return sequential_answer(ordinary["answers"]["concurrent"][index]["prompt"], canary)
    answers = ordinary["answers"].get(shape) or []
    return answers[index] if index < len(answers) else None


def compare(
    ordinary: model.ShapeRecord,
    canary: Sequence[model.Canary],
    answers: Mapping[str, Sequence[model.Canary]],
    tolerance: float,
    compare_one: Callable[[CanaryOutput, CanaryOutput, float], model.CanaryCompare],
) -> list[model.ShapeCompare]:
    """Each answer of a restored engine against the ordinary engine's answer to the same request. A shape the
    ordinary engine did not answer the same way twice is recorded but not judged (its own non-determinism)."""
    out: list[model.ShapeCompare] = []
    for shape, given in answers.items():
        steady = ordinary["self_consistent"].get(shape, True)
        for index, actual in enumerate(given):
            expected = expected_for(shape, index, ordinary, canary)
            if expected is None:
                continue
            cmp = compare_one(CanaryOutput.of(expected), CanaryOutput.of(actual), tolerance)
            out.append(model.ShapeCompare(shape=shape, index=index, judged=steady, compare=cmp))
    return out


def self_consistency(
    first: Mapping[str, Sequence[model.Canary]],
    again: Mapping[str, Sequence[model.Canary]],
    canary: Sequence[model.Canary],
    tolerance: float,
    compare_one: Callable[[CanaryOutput, CanaryOutput, float], model.CanaryCompare],
) -> dict[str, bool]:
    """Per shape, whether the ordinary engine answered the same way twice (a concurrent batch: also the same as
    its sequential answers): only such a shape can judge a restored engine."""
    out: dict[str, bool] = {}
    for shape, given in first.items():
        twice = again.get(shape) or []
        same = len(twice) == len(given) and all(
            compare_one(CanaryOutput.of(a), CanaryOutput.of(b), tolerance)["ok"]
            for a, b in zip(given, twice, strict=True)
        )
        if shape == "concurrent":
            for answer in given:
                expected = sequential_answer(answer["prompt"], canary)
                same = same and expected is not None
                if expected is not None:
                    same = same and compare_one(CanaryOutput.of(expected), CanaryOutput.of(answer), tolerance)["ok"]
        out[shape] = same
    return out
