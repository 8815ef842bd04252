"""The reference engine serves the parts of vLLM's OpenAI API that clients use as vLLM 0.32 does: each kind of
request answered with the structure of real vLLM's recorded answer (``docker/reference/api-transcripts``: the same
keys and value types; the values are another model's), with vLLM's semantics (finish and stop reasons, stop strings,
EOS, ``n`` with a seed, logprobs alternatives, SSE chunks that reassemble to the whole answer, the chat template),
and ``/metrics`` counters that move by exactly each request's tokens."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from tests.reference.apishape import (
    EOS,
    TRANSCRIPTS,
    answer,
    counters,
    mismatches,
    moved,
    post,
    post_stream,
    stream_mismatches,
    transcript,
)
from tests.reference.refsupport import (
    ARTIFACT,
    ENGINE_ARGS,
    MODEL,
    LaneFactory,
    create_artifact,
    free_port,
    http_json,
    restore,
    wait_health,
)

PROMPT = "The capital of France is"
CHAT = [{"role": "user", "content": PROMPT}]
#: the tiny model's answer through the chat template: one token, then EOS (tools/make_model.py teach_eos)
CHAT_PROMPT_TEXT = f"<|im_start|>user\n{PROMPT}<|im_end|>\n<|im_start|>assistant\n"
#: sampling flat enough that the peaked tiny model's seeded samples differ from its greedy answer
HOT = 8.0


@pytest.fixture(scope="module")
def port(lane_factory: LaneFactory) -> Iterator[int]:
    """An ordinary ``vllm serve`` of the head image, with the tests' engine arguments."""
    lane = lane_factory("head")
    chosen = free_port()
    lane.background(f"exec vllm serve {' '.join(ENGINE_ARGS)} --host 127.0.0.1 --port {chosen} > /tmp/serve.log 2>&1")
    wait_health(chosen)
    yield chosen


def request(kind: str, **overrides: Any) -> dict[str, Any]:
    """vLLM's recorded request of ``kind`` (its model name replaced), with ``overrides``."""
    body = dict(transcript(kind)["request"]["body"] or {})
    body["model"] = MODEL
    body.update(overrides)
    return body


def same_shape(ours: Any, kind: str) -> None:
    record = transcript(kind)
    found = stream_mismatches(ours, record["sse_events"]) if "sse_events" in record else mismatches(ours, answer(kind))
    assert not found, "\n".join([f"{kind}: the reference's answer differs from vLLM 0.32's in structure:", *found])


def ask(port: int, kind: str, **overrides: Any) -> tuple[dict[str, Any], dict[str, float]]:
    """A non-streamed request of ``kind``: its answer (checked 200 and of vLLM's structure) and the counters it
    moved."""
    record = transcript(kind)
    before = counters(port)
    status, body = post(port, record["request"]["path"], request(kind, **overrides))
    after = counters(port)
    assert status == record["status"] == 200, body
    same_shape(body, kind)
    return body, moved(before, after)


def greedy(port: int, max_tokens: int = 12) -> dict[str, Any]:
    status, body = post(
        port,
        "/v1/completions",
        {"model": MODEL, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0, "return_token_ids": True},
    )
    assert status == 200, body
    choice: dict[str, Any] = body["choices"][0]
    return choice


def token_counts(moved_counters: dict[str, float], prompt: int, generated: int, **finished: int) -> None:
    """The counters moved by exactly ``prompt`` prompt tokens, ``generated`` generation tokens and ``finished``
    requests by reason (``vllm:request_success_total``), as vLLM's move."""
    assert moved_counters.get("vllm:prompt_tokens_total", 0) == prompt, moved_counters
    assert moved_counters.get("vllm:generation_tokens_total", 0) == generated, moved_counters
    reasons = {
        key[len('vllm:request_success_total{finished_reason="') : -2]: value
        for key, value in moved_counters.items()
        if key.startswith("vllm:request_success_total")
    }
    assert reasons == {reason: float(count) for reason, count in finished.items() if count}, moved_counters


@pytest.mark.docker
def test_models_tokenize_and_detokenize(port: int) -> None:
    models = http_json(port, "/v1/models")
    assert not mismatches(models, answer("models")), mismatches(models, answer("models"))
    assert not mismatches(http_json(port, "/version"), answer("version"))
    tokens, _ = ask(port, "tokenize")
    assert tokens["count"] == len(tokens["tokens"]) and tokens["token_strs"] is None
    strs, _ = ask(port, "tokenize_token_strs")
    assert strs["tokens"] == tokens["tokens"] and len(strs["token_strs"]) == len(tokens["tokens"])
    chat, moved_counters = ask(port, "tokenize_chat")
    assert moved_counters == {}, "tokenizing is not serving: no counter moves"
    # the messages through the model's chat template: its special tokens are single tokens, nothing added
    status, plain = post(port, "/tokenize", {"model": MODEL, "prompt": CHAT_PROMPT_TEXT})
    assert status == 200 and chat["tokens"] == plain["tokens"]
    assert chat["tokens"].count(1) == 2 and chat["tokens"].count(2) == 1  # <|im_start|> twice, <|im_end|> once
    text, _ = ask(port, "detokenize", tokens=tokens["tokens"])
    assert text["prompt"] == PROMPT
    special, _ = ask(port, "detokenize_special", tokens=chat["tokens"])
    assert special["prompt"] == CHAT_PROMPT_TEXT, "vLLM's /detokenize keeps the special tokens"


@pytest.mark.docker
def test_max_tokens_ends_a_greedy_completion(port: int) -> None:
    body, moved_counters = ask(port, "completion_length")
    choice = body["choices"][0]
    assert (choice["finish_reason"], choice["stop_reason"]) == ("length", None)
    assert len(choice["token_ids"]) == body["usage"]["completion_tokens"] == 12
    assert choice["prompt_token_ids"] == post(port, "/tokenize", {"prompt": PROMPT})[1]["tokens"]
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + 12
    assert body["system_fingerprint"].startswith("vllm-")
    token_counts(moved_counters, len(choice["prompt_token_ids"]), 12, length=1)
    # the harness's canary is the same request with min_tokens == max_tokens == 1
    canary, _ = ask(port, "completion_canary")
    assert canary["choices"][0]["token_ids"] == choice["token_ids"][:1]


@pytest.mark.docker
def test_logprobs_alternatives_come_from_the_logits(port: int) -> None:
    body, _ = ask(port, "completion_logprobs")
    block = body["choices"][0]["logprobs"]
    whole = greedy(port, 4)
    assert block["tokens"] == [post(port, "/detokenize", {"tokens": [t]})[1]["prompt"] for t in whole["token_ids"]]
    assert block["text_offset"] == [sum(map(len, block["tokens"][:i])) for i in range(len(block["tokens"]))]
    for token, logprob, top in zip(block["tokens"], block["token_logprobs"], block["top_logprobs"], strict=True):
        # the sampled token (greedy: the most likely) and the top 3 with it: 3 entries, best first
        assert len(top) == 3 and next(iter(top)) == token and top[token] == logprob
        assert list(top.values()) == sorted(top.values(), reverse=True) and logprob < 0
    # EOS pushed up by logit_bias: sampled, yet reported with its raw logprob (before the bias), the top token
    # after it (logprobs=1: N + 1 entries when the sampled one is not the best)
    eos, _ = ask(port, "completion_eos")
    entry = eos["choices"][0]["logprobs"]
    assert entry["tokens"] == ["<|endoftext|>"] and len(entry["top_logprobs"][0]) == 2
    assert entry["token_logprobs"][0] < block["token_logprobs"][0]
    assert list(entry["top_logprobs"][0].values())[1] == block["token_logprobs"][0]


@pytest.mark.docker
def test_a_stop_string_ends_a_completion(port: int) -> None:
    text = greedy(port)["text"]
    stop = text[3:6]
    body, moved_counters = ask(port, "completion_stop", stop=[stop])
    choice = body["choices"][0]
    cut = text.index(stop)
    assert (choice["text"], choice["finish_reason"], choice["stop_reason"]) == (text[:cut], "stop", stop)
    # the token that completed the stop string is the answer's last (vLLM keeps it in token_ids)
    tokens = choice["token_ids"]
    upto = post(port, "/detokenize", {"tokens": tokens})[1]["prompt"]
    before = post(port, "/detokenize", {"tokens": tokens[:-1]})[1]["prompt"]
    assert stop in upto and stop not in before
    token_counts(moved_counters, len(choice["prompt_token_ids"]), len(tokens), stop=1)
    included, _ = ask(port, "completion_stop_included", stop=[stop])
    assert included["choices"][0]["text"] == text[: cut + len(stop)]
    assert included["choices"][0]["token_ids"] == tokens
    # a stop token id: the token ends the answer, its text left out, the id is the stop_reason
    token = greedy(port)["token_ids"][1]
    by_id, _ = ask(port, "completion_stop_token_ids", stop_token_ids=[token])
    first = by_id["choices"][0]
    assert (first["finish_reason"], first["stop_reason"], first["token_ids"][-1]) == ("stop", token, token)
    assert token not in first["token_ids"][:-1]


@pytest.mark.docker
def test_eos_ends_an_answer_unless_min_tokens_holds_it_back(port: int) -> None:
    body, moved_counters = ask(port, "completion_eos")
    choice = body["choices"][0]
    assert (choice["token_ids"], choice["text"], choice["finish_reason"], choice["stop_reason"]) == (
        [EOS],
        "",
        "stop",
        None,
    )
    token_counts(moved_counters, 5, 1, stop=1)
    held, moved_counters = ask(port, "completion_eos_after_min_tokens")
    choice = held["choices"][0]
    assert choice["token_ids"][3:] == [EOS] and EOS not in choice["token_ids"][:3]
    assert choice["text"] == post(port, "/detokenize", {"tokens": choice["token_ids"][:3]})[1]["prompt"]
    token_counts(moved_counters, 5, 4, stop=1)
    # the model's own EOS: its chat answer is one token, then EOS, with no bias at all
    status, chat = post(port, "/v1/chat/completions", {"model": MODEL, "messages": CHAT, "return_token_ids": True})
    assert status == 200
    ended = chat["choices"][0]
    assert len(ended["token_ids"]) == 2 and ended["token_ids"][1] == EOS
    assert (ended["finish_reason"], ended["stop_reason"]) == ("stop", None)
    assert ended["message"]["content"] == post(port, "/detokenize", {"tokens": ended["token_ids"][:1]})[1]["prompt"]


@pytest.mark.docker
def test_n_samples_with_a_seed(port: int) -> None:
    body, moved_counters = ask(port, "completion_n_seed", temperature=HOT)
    again, _ = ask(port, "completion_n_seed_again", temperature=HOT)
    choices = [choice["token_ids"] for choice in body["choices"]]
    assert [choice["index"] for choice in body["choices"]] == [0, 1, 2]
    assert choices == [choice["token_ids"] for choice in again["choices"]], "the same seed, the same samples"
    assert len({tuple(tokens) for tokens in choices}) == 3, "each sample its own seed"
    # vLLM's parallel sampling: sample i is the request with seed + i
    for index, tokens in enumerate(choices):
        single = post(port, "/v1/completions", request("completion_n_seed", temperature=HOT, n=1, seed=1234 + index))
        assert single[1]["choices"][0]["token_ids"] == tokens
    # counted as vLLM counts: the prompt once per sample (usage says it once), every sample a request
    assert body["usage"]["prompt_tokens"] == 5 and body["usage"]["completion_tokens"] == 18
    token_counts(moved_counters, 15, 18, length=3)
    status, refused = post(port, "/v1/completions", request("error_n_greedy"))
    assert status == 400 and refused["error"]["message"] == answer("error_n_greedy")["error"]["message"]
    assert not mismatches(refused, answer("error_n_greedy"))


@pytest.mark.docker
def test_batched_prompts_answer_in_order(port: int) -> None:
    body, moved_counters = ask(port, "completion_batch")
    prompts = request("completion_batch")["prompt"]
    for index, prompt in enumerate(prompts):
        status, single = post(port, "/v1/completions", {**request("completion_batch"), "prompt": prompt})
        assert status == 200 and body["choices"][index]["text"] == single["choices"][0]["text"]
    assert moved_counters["vllm:generation_tokens_total"] == 6


@pytest.mark.docker
def test_a_stream_reassembles_to_the_whole_answer(port: int) -> None:
    for kind, whole_overrides in (
        ("completion_stream", {}),
        ("completion_stream_plain", {}),
        ("completion_stream_n_seed", {"temperature": HOT}),
    ):
        body = request(kind, **whole_overrides)
        before = counters(port)
        streamed = post_stream(port, "/v1/completions", body)
        streamed_moved = moved(before, counters(port))
        assert streamed.content_type == transcript(kind)["content_type"] == "text/event-stream; charset=utf-8"
        same_shape(streamed.events, kind)
        before = counters(port)
        status, whole = post(port, "/v1/completions", {**body, "stream": False, "stream_options": None})
        assert status == 200
        assert moved(before, counters(port)) == streamed_moved, "a stream counts as its whole answer does"
        parts = reassemble_completion(streamed.events)
        assert sorted(parts) == [choice["index"] for choice in whole["choices"]]
        for choice in whole["choices"]:
            part = parts[choice["index"]]
            assert part["text"] == choice["text"]
            assert (part["finish_reason"], part["stop_reason"]) == (choice["finish_reason"], choice["stop_reason"])
            if body.get("return_token_ids"):
                assert part["token_ids"] == choice["token_ids"]
            if body.get("logprobs") is not None:
                assert part["logprobs"] == choice["logprobs"]
        if body.get("stream_options", {}).get("include_usage"):
            usage = streamed.events[-2]["usage"]
            assert usage == {key: whole["usage"][key] for key in usage}
    # a stop string in a stream: the text before it, never a chunk past it
    text = greedy(port)["text"]
    stop = text[3:6]
    streamed = post_stream(port, "/v1/completions", request("completion_stream_stop", stop=[stop]))
    same_shape(streamed.events, "completion_stream_stop")
    part = reassemble_completion(streamed.events)[0]
    assert (part["text"], part["finish_reason"], part["stop_reason"]) == (text[: text.index(stop)], "stop", stop)


def reassemble_completion(events: list[Any]) -> dict[int, dict[str, Any]]:
    """A completion stream per choice: text, token ids, finish, and its logprobs joined back into one block."""
    out: dict[int, dict[str, Any]] = {}
    for event in events[:-1]:
        for choice in event["choices"]:
            whole = out.setdefault(
                choice["index"],
                {"text": "", "token_ids": [], "logprobs": None, "finish_reason": None, "stop_reason": None},
            )
            whole["text"] += choice["text"]
            whole["token_ids"] += choice["token_ids"] or []
            if choice["logprobs"] is not None:
                block = whole["logprobs"] or {"text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
                for key in block:
                    block[key] += choice["logprobs"][key]
                whole["logprobs"] = block
            if choice["finish_reason"] is not None:
                whole["finish_reason"], whole["stop_reason"] = choice["finish_reason"], choice["stop_reason"]
    return out


@pytest.mark.docker
def test_chat_completions_through_the_chat_template(port: int) -> None:
    body, moved_counters = ask(port, "chat", max_tokens=8)
    tokens = post(port, "/tokenize", {"model": MODEL, "messages": CHAT})[1]["tokens"]
    assert body["prompt_token_ids"] == tokens and body["usage"]["prompt_tokens"] == len(tokens)
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] == "stop"
    token_counts(moved_counters, len(tokens), len(choice["token_ids"]), stop=1)
    content = choice["logprobs"]["content"]
    assert [entry["token"] for entry in content] == [
        post(port, "/detokenize", {"tokens": [t]})[1]["prompt"] for t in choice["token_ids"]
    ]
    for entry in content:
        assert len(entry["top_logprobs"]) == 2 and entry["top_logprobs"][0]["token"] == entry["token"]
        assert entry["bytes"] == list(entry["token"].encode())
    streamed = post_stream(port, "/v1/chat/completions", request("chat_stream", max_tokens=8))
    same_shape(streamed.events, "chat_stream")
    first = streamed.events[0]["choices"][0]
    assert first["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["delta"].get("content", "") for e in streamed.events[1:-2] for c in e["choices"])
    assert text == choice["message"]["content"]
    assert streamed.events[-3]["choices"][0]["finish_reason"] == "stop"
    seeded, _ = ask(port, "chat_n_seed", temperature=HOT)
    assert [c["index"] for c in seeded["choices"]] == [0, 1]
    stop = choice["message"]["content"][-1]
    stopped, _ = ask(port, "chat_stop", stop=[stop])
    assert stopped["choices"][0]["message"]["content"] == choice["message"]["content"][:-1]
    assert (stopped["choices"][0]["finish_reason"], stopped["choices"][0]["stop_reason"]) == ("stop", stop)
    ask(port, "chat_eos")


@pytest.mark.docker
def test_counters_of_vllm_move_by_each_requests_tokens(port: int) -> None:
    ours = counters(port)
    theirs = {
        sample["name"] + json.dumps(sorted(k for k in sample["labels"] if k not in ("engine", "model_name")))
        for family in json.loads((TRANSCRIPTS / "metrics.json").read_text()).values()
        for sample in family["samples"]
    }
    for name in (
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prompt_tokens_cached_total",
    ):
        assert name in ours and name + "[]" in theirs
    for reason in ("stop", "length", "abort", "error", "repetition"):
        assert f'vllm:request_success_total{{finished_reason="{reason}"}}' in ours
    assert 'vllm:request_success_total["finished_reason"]' in theirs
    # a prompt of full KV blocks, asked twice: the second finds all but its last block's tokens cached
    first, moved_first = ask(port, "prefix_first")
    prompt = first["usage"]["prompt_tokens"]
    again, moved_again = ask(port, "prefix_again")
    block = 16
    hits = (prompt - 1) // block * block
    assert moved_first["vllm:prefix_cache_queries_total"] == moved_again["vllm:prefix_cache_queries_total"] == prompt
    assert moved_again["vllm:prefix_cache_hits_total"] == hits == moved_again["vllm:prompt_tokens_cached_total"]
    assert moved_again['vllm:prompt_tokens_by_source_total{source="local_cache_hit"}'] == hits
    assert moved_again['vllm:prompt_tokens_by_source_total{source="local_compute"}'] == prompt - hits
    token_counts(moved_again, prompt, 2, length=1)
    assert again["choices"][0]["text"] == first["choices"][0]["text"]


@pytest.mark.docker
def test_a_client_that_leaves_mid_stream_frees_the_engine(port: int) -> None:
    body = json.dumps(request("completion_stream", max_tokens=400, logprobs=None)).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
        conn.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        received = b""
        while b"data: " not in received:  # the headers, then the first chunk
            piece = conn.recv(4096)
            assert piece, received
            received += piece
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)
    # the engine is free again: the next requests are answered, the whole of them
    body_after, moved_counters = ask(port, "completion_length")
    assert body_after["choices"][0]["finish_reason"] == "length"
    token_counts(moved_counters, 5, 12, length=1)


def restored_series(port: int) -> list[tuple[Any, dict[str, float]]]:
    """A fixed series of requests of every kind, each answer (less its id and time) with the counters it moved."""
    out: list[tuple[Any, dict[str, float]]] = []
    text = greedy(port)["text"]
    asks: list[tuple[str, str, dict[str, Any]]] = [
        ("post", "completion_logprobs", {}),
        ("post", "completion_stop", {"stop": [text[3:6]]}),
        ("post", "completion_eos_after_min_tokens", {}),
        ("post", "completion_n_seed", {"temperature": HOT}),
        ("stream", "completion_stream", {}),
        ("stream", "completion_stream_n_seed", {"temperature": HOT}),
        ("post", "chat", {"max_tokens": 8}),
        ("stream", "chat_stream", {"max_tokens": 8}),
        ("post", "tokenize_chat", {}),
    ]
    for how, kind, overrides in asks:
        path = transcript(kind)["request"]["path"]
        before = counters(port)
        if how == "stream":
            streamed = post_stream(port, path, request(kind, **overrides))
            same_shape(streamed.events, kind)
            got: Any = [without_identity(event) for event in streamed.events]
        else:
            status, body = post(port, path, request(kind, **overrides))
            assert status == 200, body
            same_shape(body, kind)
            got = without_identity(body)
        out.append((got, moved(before, counters(port))))
    out.append((http_json(port, "/v1/models")["data"][0]["id"], {}))
    return out


def without_identity(value: Any) -> Any:
    """An answer less what differs between two asks of one engine (its id, its time) and between an ordinary
    and a snapshot engine (the configuration's fingerprint: sleep mode)."""
    if not isinstance(value, dict):
        return value
    return {key: item for key, item in value.items() if key not in ("id", "created", "system_fingerprint")}


def tokens_of(series: list[tuple[Any, dict[str, float]]]) -> list[Any]:
    """The series' answers as tokens, texts, finish and stop reasons (no logprob values)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("logprobs", "logprob", "top_logprobs")}
        if isinstance(value, list):
            return [strip(item) for item in value]
        return value

    return [strip(got) for got, _ in series]


@pytest.mark.docker
def test_a_restored_engine_serves_the_api_as_before(lane_factory: LaneFactory, port: int) -> None:
    """After `vllm snapshot restore` the engine (the frozen process, resumed) answers every kind as the ordinary
    engine does, and its counters go on from their values at the dump: two restores of one artifact start equal,
    past what create asked before the dump, and move by the same requests' tokens alike."""
    lane = lane_factory("head")
    created = create_artifact(lane)
    assert created.code == 0, created.stderr
    series = []
    starts = []
    for _ in range(2):
        restored_port = free_port()
        result = restore(lane, restored_port)
        assert result.code == 0, result.stderr
        starts.append(counters(restored_port))
        series.append(restored_series(restored_port))
        lane.stop_session(int(lane.read(f"{ARTIFACT}/restored.pid")))
    assert starts[0] == starts[1], "both restores resume the counters of the frozen process"
    # after the dump only the recovery's private canary and the controller's public canary asked: the requests
    # create's child made before it (its reference and rehearsal canaries) are still counted
    after_dump = 2
    assert starts[0]['vllm:request_success_total{finished_reason="length"}'] > after_dump, starts[0]
    assert series[0] == series[1]
    ordinary = restored_series(port)
    assert tokens_of(series[0]) == tokens_of(ordinary)
