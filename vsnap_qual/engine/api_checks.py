"""The OpenAI API after a restore (issue 44, item 1): the parts of vLLM's API that real clients use and that the
canaries and request shapes do not (those ask ``/v1/completions``, greedy, ``min_tokens == max_tokens``, the chosen
token's logprob). Each is a named check over a few requests, asked of the ordinary engine (twice) and of every
restored one, and each answer is compared with the ordinary engine's answer to the same request:

- ``stream``: a completion streamed (``stream: true``, ``stream_options.include_usage``, ``logprobs: 1``): its
  server-sent events reassembled per choice (text, token ids, logprobs, ``finish_reason``), the final usage chunk
  and the closing ``data: [DONE]``;
- ``chat``: ``/v1/chat/completions`` through the model's chat template (greedy, ``top_logprobs: 2``);
- ``logprobs``: a completion with ``logprobs: 3``, the alternatives at every position;
- ``finish``: completions that leave ``min_tokens`` at its default, so that ``max_tokens``, a ``stop`` string (one
  taken from the ordinary engine's own greedy answer) or EOS (``logit_bias`` on the EOS id of an answer the
  ordinary engine ended by EOS) ends them, each with its ``finish_reason`` and ``stop_reason``;
- ``n-seeded``: ``n: 2`` sampled with a seed (vLLM seeds sample *i* with ``seed + i``: reproducible);
- ``models``: ``/v1/models`` (ids, roots, parents, ``max_model_len``; not the times or permission ids);
- ``tokenize``: ``/tokenize`` of the prompt and of the chat messages (the template rendered), where served.

The rules are the canary's (``checks.compare_canary``): token ids and text exact, every logprob within the tolerance;
as many alternatives at each position, and one listed by one engine only is allowed where its logprob is not above
the other list's last by more than the tolerance (a near tie at the cut-off), else it is a divergence. A request the
ordinary engine answered differently twice is recorded and not judged (its own non-determinism), as the request
shapes do. A feature the engine does not serve (the ordinary engine refuses the request: HTTP 404, 400 ...) is not
applicable, in the engine's words; a restored engine that then answers it otherwise is a divergence.

Pure planning, reading and comparison, and the HTTP of one request (:func:`ask`, ``requests`` at a host and port
the lane gives); the lane sends them (``lane.engine_api.LaneEngineApi.api_answers``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import requests

from vsnap_qual.checks import Finding, first_divergence
from vsnap_qual.model import ApiAnswer, ApiCheck, ApiChoice, ApiRecord, ApiRequest, ApiRequestCompare, ApiStatus

__all__ = ["CHECKS", "ask", "base_plan", "compare", "derived_plan", "findings", "judge", "record", "same_twice"]

#: the checks, in the order the report shows them
CHECKS = ("stream", "chat", "logprobs", "finish", "n-seeded", "models", "tokenize")
#: the chat answer's budget: the template adds tokens to the prompt, so it is kept well inside any max-model-len the
#: options accept (at least 32)
CHAT_TOKENS = 8
#: alternatives asked per position (N > 1), and in a chat answer
LOGPROBS_N = 3
CHAT_TOP = 2
#: the seeded ``n`` request
N_SAMPLES = 2
N_SEED = 4400
N_TEMPERATURE = 1.0
#: how hard the EOS request pushes EOS up (vLLM's reported logprobs are the raw ones, before the bias)
EOS_BIAS = 100
#: the check of each request :func:`derived_plan` may leave unasked
NOT_ASKED_CHECK = {"stop": "finish", "eos": "finish"}


def _request(name: str, check: str, path: str, body: dict[str, object] | None, method: str = "POST") -> ApiRequest:
    return ApiRequest(name=name, check=check, method=method, path=path, body=body)


def base_plan(model: str, prompt: str, tokens: int) -> list[ApiRequest]:
    """The requests that need nothing of the ordinary engine's answers (``prompt``: the first canary prompt,
    ``tokens``: ``--vsnap-canary-tokens``, ``min_tokens`` left at its default everywhere)."""
    greedy: dict[str, object] = {"model": model, "prompt": prompt, "max_tokens": tokens, "temperature": 0}
    messages = [{"role": "user", "content": prompt}]
    return [
        _request(
            "stream", "stream", "/v1/completions",
            {**greedy, "stream": True, "stream_options": {"include_usage": True}, "logprobs": 1,
             "return_token_ids": True},
        ),
        _request(
            "chat", "chat", "/v1/chat/completions",
            {"model": model, "messages": messages, "max_tokens": CHAT_TOKENS, "temperature": 0, "logprobs": True,
             "top_logprobs": CHAT_TOP, "return_token_ids": True},
        ),
        _request("logprobs", "logprobs", "/v1/completions", {**greedy, "logprobs": LOGPROBS_N}),
        _request("max_tokens", "finish", "/v1/completions", {**greedy, "logprobs": 0, "return_token_ids": True}),
        _request(
            "n", "n-seeded", "/v1/completions",
            {**greedy, "temperature": N_TEMPERATURE, "n": N_SAMPLES, "seed": N_SEED, "logprobs": 0,
             "return_token_ids": True},
        ),
        _request("models", "models", "/v1/models", None, method="GET"),
        _request("tokenize", "tokenize", "/tokenize", {"model": model, "prompt": prompt}),
        _request("tokenize_chat", "tokenize", "/tokenize", {"model": model, "messages": messages}),
    ]  # fmt: skip


def stop_string(text: str) -> str | None:
    """A stop string from inside a greedy answer's text, past its first characters (so the answer it stops is
    cut, not empty): two printable characters from its middle on, else None (too short to cut)."""
    if len(text) < 4:
        return None
    middle = len(text) // 2
    for start in range(middle, len(text) - 1):
        piece = text[start : start + 2]
        if piece.isprintable() and piece.strip() and piece.isascii():
            return piece
    piece = text[middle : middle + 2]
    return piece if piece.strip() else None


def eos_id(answers: Mapping[str, ApiAnswer]) -> int | None:
    """The EOS token id, from an answer the ordinary engine ended by EOS (``finish_reason`` stop with no
    ``stop_reason``: vLLM keeps the EOS id as the answer's last token id)."""
    for answer in answers.values():
        for choice in answer.get("choices") or []:
            ids = choice.get("token_ids")
            if choice.get("finish_reason") == "stop" and choice.get("stop_reason") is None and ids:
                return int(ids[-1])
    return None


def derived_plan(
    base: Sequence[ApiRequest], answers: Mapping[str, ApiAnswer]
) -> tuple[list[ApiRequest], dict[str, str]]:
    """The requests made from the ordinary engine's own answers to the base plan, and what could not be asked and
    why: a ``stop`` string from its greedy answer (``max_tokens``), EOS pushed up by ``logit_bias`` on the EOS id of
    an answer it ended by EOS."""
    template = next((r for r in base if r["name"] == "max_tokens"), None)
    if template is None or template["body"] is None:
        return [], {}
    out: list[ApiRequest] = []
    not_asked: dict[str, str] = {}
    greedy = (answers.get("max_tokens") or {}).get("choices") or []
    stop = stop_string(greedy[0].get("text") or "") if greedy else None
    if stop is not None:
        out.append(_request("stop", "finish", template["path"], {**template["body"], "stop": [stop]}))
    else:
        not_asked["stop"] = "the ordinary engine's greedy answer has too little text to take a stop string from"
    eos = eos_id(answers)
    if eos is not None:
        out.append(
            _request("eos", "finish", template["path"], {**template["body"], "logit_bias": {str(eos): EOS_BIAS}})
        )
    else:
        not_asked["eos"] = (
            "no answer of the ordinary engine ended by EOS (finish_reason stop with no stop_reason), so its id is "
            "not known to ask for it"
        )
    return out, not_asked


# ---- one request over HTTP ----------------------------------------------------------------------------------
def ask(request: ApiRequest, port: int, host: str = "127.0.0.1", timeout: float = 120.0) -> ApiAnswer:
    """One request's answer, read as compared (:func:`read`); a request that got no answer at all says why."""
    url = f"http://{host}:{port}{request['path']}"
    body = request["body"]
    streamed = bool(body and body.get("stream"))
    try:
        if request["method"] == "GET":
            response = requests.get(url, timeout=timeout)
        else:
            response = requests.post(url, json=body, timeout=timeout, stream=streamed)
        if response.status_code != 200:
            return ApiAnswer(status=response.status_code, error=refusal(response.text))
        if streamed:
            lines = [line.decode("utf-8", "replace") for line in response.iter_lines() if line]
            return read_stream(request, lines)
        return read(request, response.json())
    except (requests.RequestException, ValueError) as exc:
        return ApiAnswer(status=0, error=f"no answer: {type(exc).__name__}: {str(exc)[:300]}")


def refusal(text: str) -> str:
    """A refusal's own words: vLLM's ``error.message``, a framework's ``detail``, else the body's start."""
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip()[:300]
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:300]
        if body.get("detail"):
            return str(body["detail"])[:300]
    return text.strip()[:300]


def _usage(value: Any) -> dict[str, int] | None:
    if not isinstance(value, dict):
        return None
    return {k: int(value[k]) for k in ("prompt_tokens", "completion_tokens", "total_tokens") if k in value}


def _completion_logprobs(block: Any) -> tuple[list[str], list[float], list[dict[str, float]]]:
    if not isinstance(block, dict):
        return [], [], []
    tokens = [str(t) for t in block.get("tokens") or []]
    logprobs = [float(v) for v in block.get("token_logprobs") or []]
    top = [{str(k): float(v) for k, v in (entry or {}).items()} for entry in block.get("top_logprobs") or []]
    return tokens, logprobs, top


def _chat_logprobs(block: Any) -> tuple[list[str], list[float], list[dict[str, float]]]:
    content = block.get("content") if isinstance(block, dict) else None
    if not isinstance(content, list):
        return [], [], []
    tokens = [str(entry.get("token")) for entry in content]
    logprobs = [float(entry.get("logprob")) for entry in content]
    top = [{str(t.get("token")): float(t.get("logprob")) for t in entry.get("top_logprobs") or []} for entry in content]
    return tokens, logprobs, top


def _choice(raw: Mapping[str, Any], chat: bool) -> ApiChoice:
    text = (raw.get("message") or {}).get("content") if chat else raw.get("text")
    ids = raw.get("token_ids")
    tokens, logprobs, top = (_chat_logprobs if chat else _completion_logprobs)(raw.get("logprobs"))
    choice = ApiChoice(
        index=int(raw.get("index") or 0),
        text=str(text or ""),
        token_ids=[int(t) for t in ids] if isinstance(ids, list) else None,
        finish_reason=raw.get("finish_reason"),
        stop_reason=raw.get("stop_reason"),
    )
    if raw.get("logprobs") is not None:
        choice.update(ApiChoice(tokens=tokens, logprobs=logprobs, top_logprobs=top))
    return choice


def read(request: ApiRequest, body: Any) -> ApiAnswer:
    """A whole (not streamed) answer of ``request``, as compared."""
    if not isinstance(body, dict):
        return ApiAnswer(status=200, error=f"not a JSON object: {str(body)[:200]}")
    if request["path"] == "/v1/models":
        models = [
            {k: m.get(k) for k in ("id", "root", "parent", "max_model_len", "owned_by")}
            for m in body.get("data") or []
            if isinstance(m, dict)
        ]
        return ApiAnswer(status=200, fields={"data": models})
    if request["path"] == "/tokenize":
        return ApiAnswer(status=200, fields={k: body.get(k) for k in ("count", "max_model_len", "tokens")})
    chat = request["path"].endswith("/chat/completions")
    choices = [_choice(c, chat) for c in body.get("choices") or [] if isinstance(c, dict)]
    return ApiAnswer(
        status=200, choices=sorted(choices, key=lambda c: c.get("index", 0)), usage=_usage(body.get("usage"))
    )


def read_stream(request: ApiRequest, lines: Sequence[str]) -> ApiAnswer:
    """A streamed answer's ``data:`` events reassembled per choice (text, token ids, logprobs and alternatives
    appended in order; the finishing chunk's ``finish_reason`` and ``stop_reason``), the usage chunk (no choices)
    and whether ``data: [DONE]`` closed it."""
    chat = request["path"].endswith("/chat/completions")
    choices: dict[int, ApiChoice] = {}
    answer = ApiAnswer(status=200, events=0, done=False, usage_chunk=False, usage=None)
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        answer["events"] = answer.get("events", 0) + 1
        if data == "[DONE]":
            answer["done"] = True
            continue
        try:
            event = json.loads(data)
        except ValueError:
            answer["error"] = f"an event that is not JSON: {data[:200]}"
            continue
        if not isinstance(event, dict):
            continue
        if isinstance(event.get("error"), dict):
            answer["error"] = f"an error event: {refusal(data)}"
        if event.get("usage") is not None and not event.get("choices"):
            answer["usage"], answer["usage_chunk"] = _usage(event["usage"]), True
        for raw in event.get("choices") or []:
            index = int(raw.get("index") or 0)
            into = choices.setdefault(index, ApiChoice(index=index, text="", token_ids=None, finish_reason=None))
            part = _choice({**raw, "message": raw.get("delta") or {}}, chat)
            into["text"] = into.get("text", "") + part.get("text", "")
            ids = part.get("token_ids")
            if ids is not None:
                into["token_ids"] = [*(into.get("token_ids") or []), *ids]
            if "tokens" in part:
                into["tokens"] = [*(into.get("tokens") or []), *(part.get("tokens") or [])]
                into["logprobs"] = [*(into.get("logprobs") or []), *(part.get("logprobs") or [])]
                into["top_logprobs"] = [*(into.get("top_logprobs") or []), *(part.get("top_logprobs") or [])]
            if part.get("finish_reason") is not None:
                into["finish_reason"] = part["finish_reason"]
                into["stop_reason"] = part.get("stop_reason")
    answer["choices"] = [choices[i] for i in sorted(choices)]
    return answer


# ---- comparison ---------------------------------------------------------------------------------------------
def _alternatives(
    position: int, expected: Mapping[str, float], actual: Mapping[str, float], tolerance: float
) -> str | None:
    for token in expected.keys() & actual.keys():
        if abs(actual[token] - expected[token]) > tolerance:
            return (
                f"position {position}: alternative {token!r} has logprob {actual[token]:.6g}, the ordinary engine's "
                f"{expected[token]:.6g}"
            )
    for mine, other, who in ((expected, actual, "ordinary"), (actual, expected, "restored")):
        floor = min(other.values(), default=math.inf)
        for token in mine.keys() - other.keys():
            if mine[token] > floor + tolerance:  # above what the other listed: not a near tie at its cut-off
                return f"position {position}: alternative {token!r} ({mine[token]:.6g}) listed only by the {who} engine"
    return None


def compare_choice(expected: ApiChoice, actual: ApiChoice, tolerance: float) -> str | None:
    """The first difference of two choices in words (None: the same by the canary's rules)."""
    e_ids, a_ids = expected.get("token_ids"), actual.get("token_ids")
    if e_ids is not None and a_ids is not None and e_ids != a_ids:
        at = first_divergence(e_ids, a_ids)
        return f"token ids differ from position {at}: ordinary {e_ids}, restored {a_ids}"
    if (e_ids is None) != (a_ids is None):
        return f"token ids: ordinary {e_ids}, restored {a_ids}"
    if expected.get("text") != actual.get("text"):
        return f"text differs: ordinary {expected.get('text')!r}, restored {actual.get('text')!r}"
    for key in ("finish_reason", "stop_reason"):
        if expected.get(key) != actual.get(key):
            return f"{key} {actual.get(key)!r}, the ordinary engine's {expected.get(key)!r}"
    if expected.get("tokens") != actual.get("tokens"):
        e_tok, a_tok = expected.get("tokens") or [], actual.get("tokens") or []
        at = next(
            (i for i, (e, a) in enumerate(zip(e_tok, a_tok, strict=False)) if e != a), min(len(e_tok), len(a_tok))
        )
        return f"logprob tokens differ from position {at}: ordinary {e_tok}, restored {a_tok}"
    for position, (e, a) in enumerate(zip(expected.get("logprobs") or [], actual.get("logprobs") or [], strict=False)):
        if abs(a - e) > tolerance:
            return f"position {position}: logprob {a:.6g}, the ordinary engine's {e:.6g} (|Δ| {abs(a - e):.3g})"
    e_top, a_top = expected.get("top_logprobs") or [], actual.get("top_logprobs") or []
    if len(e_top) != len(a_top):
        return f"alternatives at {len(a_top)} positions, the ordinary engine's at {len(e_top)}"
    for position, (e_alt, a_alt) in enumerate(zip(e_top, a_top, strict=True)):
        if len(e_alt) != len(a_alt):  # vLLM lists N, or N + 1 where the sampled token is not among the top N
            return f"position {position}: {len(a_alt)} alternatives listed, the ordinary engine's {len(e_alt)}"
        said = _alternatives(position, e_alt, a_alt, tolerance)
        if said:
            return said
    return None


def compare(expected: ApiAnswer, actual: ApiAnswer, tolerance: float) -> str | None:
    """The first difference of two answers to the same request in words (None: the same by the canary's rules)."""
    if expected.get("status") != actual.get("status"):
        said = f": {actual['error']}" if actual.get("error") else ""
        return f"HTTP {actual.get('status')}{said}, the ordinary engine's {expected.get('status')}"
    if expected.get("status") != 200:
        return None  # refused alike
    if actual.get("error") and not expected.get("error"):
        return str(actual["error"])
    if "fields" in expected or "fields" in actual:
        e_fields, a_fields = expected.get("fields") or {}, actual.get("fields") or {}
        for key in sorted(e_fields.keys() | a_fields.keys()):
            if e_fields.get(key) != a_fields.get(key):
                return f"{key}: {a_fields.get(key)!r}, the ordinary engine's {e_fields.get(key)!r}"
        return None
    for key in ("done", "usage_chunk"):
        if expected.get(key) != actual.get(key):
            words = {"done": "closed by data: [DONE]", "usage_chunk": "a final usage chunk"}[key]
            return f"stream {words}: {actual.get(key)}, on the ordinary engine {expected.get(key)}"
    e_choices, a_choices = expected.get("choices") or [], actual.get("choices") or []
    if len(e_choices) != len(a_choices):
        return f"{len(a_choices)} choice(s), the ordinary engine's {len(e_choices)}"
    for e_choice, a_choice in zip(e_choices, a_choices, strict=True):
        differs = compare_choice(e_choice, a_choice, tolerance)
        if differs:
            return f"choice {e_choice.get('index', 0)}: {differs}" if len(e_choices) > 1 else differs
    if expected.get("usage") != actual.get("usage"):
        return f"usage {actual.get('usage')}, the ordinary engine's {expected.get('usage')}"
    return None


def same_twice(first: Mapping[str, ApiAnswer], again: Mapping[str, ApiAnswer], tolerance: float) -> dict[str, bool]:
    """Per request, whether the ordinary engine answered it the same way twice (only such a request judges a
    restored engine)."""
    return {name: name in again and compare(answer, again[name], tolerance) is None for name, answer in first.items()}


def record(
    base: Sequence[ApiRequest],
    send: Callable[[Sequence[ApiRequest]], dict[str, ApiAnswer]],
    tolerance: float,
) -> ApiRecord:
    """The ordinary engine's record: the base plan asked, the requests made from its answers asked, then every
    request asked once more (its self-consistency)."""
    first = send(base)
    derived, not_asked = derived_plan(base, first)
    first.update(send(derived))
    plan = [*base, *derived]
    again = send(plan)
    return ApiRecord(
        requests=plan, answers=first, self_consistent=same_twice(first, again, tolerance), not_asked=not_asked
    )


#: a check's status from its requests': the first of these any request has
_PRECEDENCE: tuple[ApiStatus, ...] = ("differs", "as ordinary", "not judged", "not applicable")


def _status(statuses: Sequence[ApiStatus]) -> ApiStatus:
    return next((s for s in _PRECEDENCE if s in statuses), "not applicable")


def judge(ordinary: ApiRecord, answers: Mapping[str, ApiAnswer], tolerance: float) -> list[ApiCheck]:
    """Each check after a restore: its requests' answers against the ordinary engine's, by :func:`compare`."""
    out: list[ApiCheck] = []
    for check in CHECKS:
        compared: list[ApiRequestCompare] = []
        for request in (r for r in ordinary["requests"] if r["check"] == check):
            name = request["name"]
            expected, actual = ordinary["answers"].get(name), answers.get(name)
            if expected is None or actual is None:
                continue
            said = compare(expected, actual, tolerance)
            status: ApiStatus
            if expected.get("status") != 200 and said is None:
                status = "not applicable"
                said = (
                    f"not served: the ordinary engine answered HTTP {expected.get('status')}: {expected.get('error')}"
                )
            elif not ordinary["self_consistent"].get(name, True):
                status = "not judged"
                said = "the ordinary engine answered it differently twice" + (f" (restored: {said})" if said else "")
            else:
                status = "differs" if said else "as ordinary"
            compared.append(ApiRequestCompare(name=name, status=status, detail=said or ""))
        for name, why in ordinary.get("not_asked", {}).items():
            if NOT_ASKED_CHECK.get(name) == check:
                compared.append(ApiRequestCompare(name=name, status="not judged", detail=f"not asked: {why}"))
        if not compared:
            continue
        status = _status([c["status"] for c in compared])
        first = next((c for c in compared if c["status"] == status), compared[0])
        detail = f"{first['name']}: {first['detail']}" if first["detail"] else ""
        ok = False if status == "differs" else (True if status == "as ordinary" else None)
        out.append(ApiCheck(check=check, status=status, ok=ok, detail=detail, requests=compared))
    return out


def findings(compared: Sequence[ApiCheck], step: str) -> list[Finding]:
    """One failed finding per check whose judged requests differ, naming the first divergence."""
    return [
        Finding(f"API {c['check']}", False, f"{step}: API {c['check']} differs from the ordinary engine: {c['detail']}")
        for c in compared
        if c["ok"] is False
    ]
