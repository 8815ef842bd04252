"""The API checks after a restore (``vsnap_qual.engine.api_checks``, issue 44 item 1): the plan made from the ordinary
engine's own answers, a stream reassembled from its events, the comparison by the canary's rules (the alternatives'
near ties at the cut-off included), what is not applicable or not judged, and the restore step failing on one
check alone with its first divergence named (on the unit tests' fake lane)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from tests.support.fake_lane import FakeLane, lifecycle_lane
from vsnap_qual import procedure, steps
from vsnap_qual.engine import api_checks
from vsnap_qual.lane.state import LifecycleState
from vsnap_qual.model import ApiAnswer, ApiChoice, ApiRecord, ApiRequest
from vsnap_qual.recorder import StepEvidence
from vsnap_qual.vllm_words import StepFailed

TOL = 1e-3
PLAN = api_checks.base_plan("m", "The capital of France is", 6)


def _request(name: str) -> Any:
    return next(r for r in [*PLAN, *api_checks.derived_plan(PLAN, _greedy_answers())[0]] if r["name"] == name)


def _choice(ids: list[int], finish: str = "length", reason: str | int | None = None, **more: Any) -> ApiChoice:
    choice = ApiChoice(index=0, text="".join(chr(97 + i % 26) for i in ids), token_ids=ids, finish_reason=finish,
                       stop_reason=reason)  # fmt: skip
    choice.update(cast(ApiChoice, more))
    return choice


def _greedy_answers() -> dict[str, ApiAnswer]:
    return {
        "max_tokens": ApiAnswer(status=200, choices=[_choice([1, 2, 3, 4, 5, 6])]),
        "chat": ApiAnswer(status=200, choices=[_choice([9, 0], "stop")]),  # ended by EOS: its last id
    }


def test_the_plan_takes_its_stop_string_and_eos_id_from_the_ordinary_engines_answers() -> None:
    names = [r["name"] for r in PLAN]
    assert names == ["stream", "chat", "logprobs", "max_tokens", "n", "models", "tokenize", "tokenize_chat"]
    assert all("min_tokens" not in (r["body"] or {}) for r in PLAN)  # ended by max_tokens, a stop string or EOS
    assert _request("logprobs")["body"]["logprobs"] > 1 and _request("n")["body"]["n"] > 1
    derived, not_asked = api_checks.derived_plan(PLAN, _greedy_answers())
    stop, eos = derived
    assert stop["body"] is not None and eos["body"] is not None
    assert stop["body"]["stop"] == ["ef"]  # from the middle of the greedy text, "bcdefg"
    assert eos["body"]["logit_bias"] == {"0": 100} and not not_asked
    # nothing ended by EOS and too short a text: neither is asked, and the record says why
    short = {"max_tokens": ApiAnswer(status=200, choices=[_choice([1, 2], "length")])}
    derived, not_asked = api_checks.derived_plan(PLAN, short)
    assert derived == [] and "ended by EOS" in not_asked["eos"] and "too little text" in not_asked["stop"]


def _sse(*events: object) -> list[str]:
    return [f"data: {e if isinstance(e, str) else json.dumps(e)}" for e in events]


def test_a_stream_is_reassembled_from_its_events_with_the_usage_chunk_and_done() -> None:
    def chunk(text: str, token: int, finish: str | None = None) -> dict[str, Any]:
        logprobs = {"tokens": [text], "token_logprobs": [-1.0], "top_logprobs": [{text: -1.0, "x": -2.0}]}
        return {"choices": [{"index": 0, "text": text, "token_ids": [token], "finish_reason": finish,
                             "stop_reason": None, "logprobs": logprobs}]}  # fmt: skip

    usage = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}
    lines = _sse(chunk(" a", 1), chunk(" b", 2), chunk(" c", 3, "length"), usage, "[DONE]")
    answer = api_checks.read_stream(_request("stream"), lines)
    (choice,) = answer["choices"]
    assert (choice["text"], choice["token_ids"], choice["finish_reason"]) == (" a b c", [1, 2, 3], "length")
    assert choice["tokens"] == [" a", " b", " c"] and len(choice["top_logprobs"] or []) == 3
    assert answer["usage"] == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    assert answer["events"] == 5 and answer["done"] and answer["usage_chunk"]
    # a stream that lost its last chunk or its [DONE] differs, and says how
    cut = api_checks.read_stream(_request("stream"), lines[:2] + lines[3:])
    assert "token ids differ from position 2" in str(api_checks.compare(answer, cut, TOL))
    undone = api_checks.read_stream(_request("stream"), lines[:-1])
    assert (
        api_checks.compare(answer, undone, TOL) == "stream closed by data: [DONE]: False, on the ordinary engine True"
    )
    # a chat stream's deltas
    chat = _sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
                {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop", "stop_reason": None}]},
                "[DONE]")  # fmt: skip
    read = api_checks.read_stream(_request("chat"), chat)
    assert read["choices"][0]["text"] == "Hi" and read["choices"][0]["finish_reason"] == "stop"


def test_answers_compare_by_the_canarys_rules_and_name_the_first_divergence() -> None:
    top = [{"a": -1.0, "b": -2.0, "c": -3.0}]
    base = ApiAnswer(status=200, choices=[_choice([1], tokens=["a"], logprobs=[-1.0], top_logprobs=top)])
    assert api_checks.compare(base, base, TOL) is None
    within = ApiAnswer(status=200, choices=[_choice([1], tokens=["a"], logprobs=[-1.0005], top_logprobs=top)])
    assert api_checks.compare(base, within, TOL) is None
    beyond = ApiAnswer(status=200, choices=[_choice([1], tokens=["a"], logprobs=[-1.01], top_logprobs=top)])
    assert "position 0: logprob -1.01, the ordinary engine's -1" in str(api_checks.compare(base, beyond, TOL))
    # the last alternative swapped for one in a near tie at the cut-off: allowed; one well above it: a divergence
    tie = [{"a": -1.0, "b": -2.0, "d": -3.0004}]
    near = ApiAnswer(status=200, choices=[_choice([1], tokens=["a"], logprobs=[-1.0], top_logprobs=tie)])
    assert api_checks.compare(base, near, TOL) is None
    other = [{"a": -1.0, "d": -1.5, "b": -2.0}]
    above = ApiAnswer(status=200, choices=[_choice([1], tokens=["a"], logprobs=[-1.0], top_logprobs=other)])
    said = api_checks.compare(base, above, TOL)
    assert said == "position 0: alternative 'd' (-1.5) listed only by the restored engine", said
    fewer = ApiAnswer(status=200, choices=[_choice([1], tokens=["a"], logprobs=[-1.0], top_logprobs=[top[0] | {}])])
    fewer["choices"][0]["top_logprobs"] = [{"a": -1.0, "b": -2.0}]
    said = api_checks.compare(base, fewer, TOL)
    assert said == "position 0: 2 alternatives listed, the ordinary engine's 3", said
    finish = ApiAnswer(status=200, choices=[_choice([1, 2], "stop", " x")])
    length = ApiAnswer(status=200, choices=[_choice([1, 2], "length")])
    assert api_checks.compare(finish, length, TOL) == "finish_reason 'length', the ordinary engine's 'stop'"
    refused = ApiAnswer(status=400, error="n must be 1 when using greedy sampling, got 2.")
    assert api_checks.compare(finish, refused, TOL) == (
        "HTTP 400: n must be 1 when using greedy sampling, got 2., the ordinary engine's 200"
    )


def _record(answers: dict[str, ApiAnswer], steady: bool = True) -> ApiRecord:
    plan = [r for r in PLAN if r["name"] in answers]
    return ApiRecord(requests=plan, answers=answers, self_consistent=dict.fromkeys(answers, steady), not_asked={})


def test_a_feature_the_ordinary_engine_does_not_serve_is_not_applicable_in_its_words() -> None:
    refused = {"chat": ApiAnswer(status=404, error="Not Found"), "models": ApiAnswer(status=200, fields={"d": 1})}
    (chat, models) = api_checks.judge(_record(refused), refused, TOL)
    assert (chat["check"], chat["status"], chat["ok"]) == ("chat", "not applicable", None)
    assert chat["detail"] == "chat: not served: the ordinary engine answered HTTP 404: Not Found"
    assert (models["status"], models["ok"]) == ("as ordinary", True)
    # served after a restore although the ordinary engine refused it: a divergence all the same
    served = {**refused, "chat": ApiAnswer(status=200, choices=[_choice([1])])}
    assert api_checks.judge(_record(refused), served, TOL)[0]["status"] == "differs"


def test_a_request_the_ordinary_engine_answered_differently_twice_is_not_judged() -> None:
    answers = {"n": ApiAnswer(status=200, choices=[_choice([1, 2])])}
    other = {"n": ApiAnswer(status=200, choices=[_choice([1, 3])])}
    (check,) = api_checks.judge(_record(answers, steady=False), other, TOL)
    assert (check["status"], check["ok"]) == ("not judged", None)
    assert "answered it differently twice (restored: token ids differ from position 1" in check["detail"]
    assert api_checks.findings([check], "restore-1") == []
    (wrong,) = api_checks.judge(_record(answers), other, TOL)
    (finding,) = api_checks.findings([wrong], "restore-1")
    assert finding.detail.startswith("restore-1: API n-seeded differs from the ordinary engine: n: token ids differ")


def _api_lane(**change: Any) -> FakeLane[LifecycleState]:
    lane = lifecycle_lane()
    for key, value in change.items():
        setattr(lane, key, value)
    steps.ordinary_reference(lane, StepEvidence.of(procedure.ORDINARY))
    steps.inspect(lane, StepEvidence.of(procedure.INSPECT))
    return lane


def test_the_ordinary_engine_is_asked_every_request_twice_and_each_restore_once() -> None:
    lane = _api_lane(unserved_api={"/tokenize"})
    ordinary = lane.state.ordinary
    assert ordinary is not None and ordinary.api is not None
    names = [r["name"] for r in ordinary.api["requests"]]
    assert names[-2:] == ["stop", "eos"]  # made from its own answers: its greedy text, its chat answer's EOS
    assert lane.api_calls == [names[:-2], names[-2:], names]
    rec = StepEvidence.of(procedure.RESTORE_1)
    steps.restore(lane, rec)
    assert lane.api_calls[-1] == names and sorted(rec.results["api_answers"]) == sorted(names)
    status = {c["check"]: c["status"] for c in rec.results["api_compare"]}
    assert status == {"stream": "as ordinary", "chat": "as ordinary", "logprobs": "as ordinary",
                      "finish": "as ordinary", "n-seeded": "as ordinary", "models": "as ordinary",
                      "tokenize": "not applicable"}  # fmt: skip


@pytest.mark.parametrize(("request_name", "check"), [("stream", "stream"), ("chat", "chat"), ("eos", "finish")])
def test_a_restore_wrong_on_one_api_request_fails_naming_that_check_alone(request_name: str, check: str) -> None:
    lane = _api_lane(wrong_api=request_name)
    rec = StepEvidence.of(procedure.RESTORE_1)
    with pytest.raises(StepFailed) as failure:
        steps.restore(lane, rec)
    message = str(failure.value)
    assert f"API {check} differs from the ordinary engine: {request_name}: " in message, message
    assert " | " not in message and "canary differs" not in message
    bad = [c["check"] for c in rec.results["api_compare"] if c["ok"] is False]
    assert bad == [check]


# ---- real vLLM 0.32's answers, as recorded (docker/reference/api-transcripts/vllm-0.32.0) ---------------------
TRANSCRIPTS = Path(__file__).resolve().parents[2] / "docker" / "reference" / "api-transcripts" / "vllm-0.32.0"


def _transcript(kind: str) -> tuple[ApiRequest, ApiAnswer]:
    """A recorded request of real vLLM 0.32 and its answer, read as the checks read an engine's."""
    record = json.loads((TRANSCRIPTS / f"{kind}.json").read_text())
    asked = record["request"]
    request = ApiRequest(name=kind, check=kind, method=asked["method"], path=asked["path"], body=asked["body"])
    if "sse_raw" in record:
        return request, api_checks.read_stream(request, [ln for ln in record["sse_raw"].split("\n") if ln])
    return request, api_checks.read(request, record["response"])


def test_real_vllms_recorded_answers_are_read_as_the_checks_compare_them() -> None:
    """The checks meet vLLM's own shapes: a stream reassembles to the whole answer's text, ids and logprobs; chat's
    content and alternatives, completions' alternatives, the finish and stop reasons, EOS's id, n's choices."""
    _, streamed = _transcript("completion_stream")
    whole = json.loads((TRANSCRIPTS / "completion_stream.json").read_text())["sse_events"][0]["choices"][0]
    (choice,) = streamed["choices"]
    assert (choice["text"], choice["token_ids"], choice["finish_reason"]) == (
        whole["text"], whole["token_ids"], "length"
    )  # fmt: skip
    assert choice["logprobs"] == whole["logprobs"]["token_logprobs"] and len(choice["top_logprobs"] or []) == 6
    assert streamed["usage"] == {"prompt_tokens": 5, "total_tokens": 11, "completion_tokens": 6}
    assert streamed["done"] and streamed["usage_chunk"] and api_checks.compare(streamed, streamed, TOL) is None
    _, plain = _transcript("completion_stream_plain")  # no token ids asked: the text alone, no usage chunk
    assert plain["choices"][0]["text"] == " is is is is" and plain["choices"][0]["token_ids"] is None
    assert plain["usage"] is None and not plain["usage_chunk"] and plain["done"]
    _, stopped = _transcript("completion_stream_stop")
    assert (stopped["choices"][0]["finish_reason"], stopped["choices"][0]["stop_reason"]) == ("stop", " is")
    _, sampled = _transcript("completion_stream_n_seed")
    assert [c["index"] for c in sampled["choices"]] == [0, 1] and all(
        len(c["token_ids"] or []) == 4 for c in sampled["choices"]
    )
    _, chat_stream = _transcript("chat_stream")
    assert chat_stream["choices"][0]["text"].startswith("\nEvery") and chat_stream["choices"][0]["tokens"]
    _, chat = _transcript("chat")
    (answer,) = chat["choices"]
    assert answer["text"] == "\nEveryEveryEveryEveryEveryEveryEvery" and answer["token_ids"] == [201] + [427] * 7
    assert answer["tokens"] == ["\n", *["Every"] * 7] and all(len(t) == 2 for t in answer["top_logprobs"] or [])
    _, alternatives = _transcript("completion_logprobs")
    assert [len(t) for t in alternatives["choices"][0]["top_logprobs"] or []] == [3, 3, 3, 3]
    answers = {k: _transcript(k)[1] for k in ("completion_length", "completion_stop", "completion_eos")}
    assert [(a["choices"][0]["finish_reason"], a["choices"][0]["stop_reason"]) for a in answers.values()] == [
        ("length", None), ("stop", " is"), ("stop", None)
    ]  # fmt: skip
    assert api_checks.eos_id(answers) == 0  # vLLM keeps EOS as the last token id
    _, models = _transcript("models")
    assert models["fields"] == {"data": [{"id": "vsnap/tiny-qwen3", "root": "vsnap/tiny-qwen3", "parent": None,
                                          "max_model_len": 512, "owned_by": "vllm"}]}  # fmt: skip
    _, tokens = _transcript("tokenize_chat")
    assert tokens["fields"]["count"] == len(tokens["fields"]["tokens"])  # type: ignore[arg-type]
    assert api_checks.refusal(
        json.dumps(json.loads((TRANSCRIPTS / "error_n_greedy.json").read_text())["response"])
    ) == ("n must be 1 when using greedy sampling, got 2.")
