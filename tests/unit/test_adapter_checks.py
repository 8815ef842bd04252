"""The LoRA adapter checks (``vsnap_qual.engine.adapters``, issue 28): each adapter's canaries compared through the same
adapter, after a restore and between the base image and the image under test."""

from __future__ import annotations

from vsnap_qual.engine import adapters
from vsnap_qual.engine.client import CanaryOutput


def _answer(prompt: str, ids: list[int]) -> CanaryOutput:
    return CanaryOutput(prompt, ids, "".join(chr(97 + i % 26) for i in ids), -0.5)


HEAD = {"tiny": [_answer("p1", [1, 2]).as_dict(), _answer("p2", [3]).as_dict()]}


def test_the_base_image_answering_through_an_adapter_as_the_head_does_passes() -> None:
    same = adapters.compare(HEAD, {"tiny": [_answer("p1", [1, 2]), _answer("p2", [3])]}, 1e-3)
    (finding,) = adapters.arms_findings(same)
    assert finding.ok and finding.check == "adapter canaries"


def test_a_base_image_whose_adapter_answers_otherwise_fails_naming_the_adapter_and_prompt() -> None:
    other = adapters.compare(HEAD, {"tiny": [_answer("p1", [1, 2]), _answer("p2", [4])]}, 1e-3)
    (finding,) = adapters.arms_findings(other)
    assert not finding.ok
    assert finding.detail == (
        "the image under test and the base image disagree through adapter 'tiny': 1 of 2 canaries differ (first: 'p2')"
    )
    missing = adapters.compare(HEAD, {"tiny": [_answer("p1", [1, 2])]}, 1e-3)  # one canary unanswered
    (finding,) = adapters.arms_findings(missing)
    assert not finding.ok and finding.detail.endswith("not every canary answered")
    assert adapters.arms_findings({}) == []  # no adapter served: nothing to judge
