"""The OpenAI-compatible API as real vLLM 0.32 answers it, for the reference engine's API tests: the committed
transcripts (``docker/reference/api-transcripts/vllm-0.32.0``), the structure of an answer (keys and value types,
not values: the models differ), server-sent events, the serving counters of ``/metrics``."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from tests.reference.refsupport import REPO

TRANSCRIPTS = REPO / "docker" / "reference" / "api-transcripts" / "vllm-0.32.0"
#: fields whose null-ness depends on the request's course, not on the API's shape (a first or last chunk, a stop
#: string or token, a stream's first chunk of a choice): compared only where both are set
NULLABLE = frozenset({"finish_reason", "stop_reason", "prompt_token_ids"})
COUNTER = re.compile(r"^(vllm:[a-z_:]+_total)(\{[^}]*\})? (\S+)$")
EOS = 0


def transcript(kind: str) -> dict[str, Any]:
    """vLLM 0.32's recorded exchange of one kind: request, status, answer (or SSE events), counters moved."""
    loaded: dict[str, Any] = json.loads((TRANSCRIPTS / f"{kind}.json").read_text())
    return loaded


def answer(kind: str) -> Any:
    record = transcript(kind)
    return record["sse_events"] if "sse_events" in record else record["response"]


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def mismatches(ours: Any, theirs: Any, path: str = "$") -> list[str]:
    """Where ``ours`` differs from ``theirs`` in structure: a key one has and the other not, a value of another
    type (int and float are both numbers). Lists: each of our items against vLLM's first. A completion's
    ``top_logprobs`` entries map token texts to numbers (the texts are the model's). Nulls of :data:`NULLABLE`
    fields match anything."""
    field = path.rsplit(".", 1)[-1].split("[", 1)[0]
    if field in NULLABLE and (ours is None or theirs is None):
        return []
    if field == "stop_reason" and isinstance(ours, (str, int)) and isinstance(theirs, (str, int)):
        return []  # a stop string or a stop token id: the kind of stop the request asked for decides
    if _kind(ours) != _kind(theirs):
        return [f"{path}: {_kind(ours)} where vLLM has {_kind(theirs)} ({json.dumps(theirs)[:80]})"]
    if isinstance(ours, dict):
        if path.endswith("top_logprobs[]") and all(_kind(value) == "number" for value in theirs.values()):
            return [f"{path}[{key!r}]: not a number" for key, value in ours.items() if _kind(value) != "number"]
        out = [f"{path}.{key}: vLLM has it, the reference not" for key in theirs if key not in ours]
        out += [f"{path}.{key}: the reference has it, vLLM not" for key in ours if key not in theirs]
        for key in ours.keys() & theirs.keys():
            out += mismatches(ours[key], theirs[key], f"{path}.{key}")
        return out
    if isinstance(ours, list) and ours and theirs:
        out = []
        for item in ours:
            out += mismatches(item, theirs[0], f"{path}[]")
        return sorted(set(out))
    return []


def stream_mismatches(ours: list[Any], theirs: list[Any]) -> list[str]:
    """Where a streamed answer differs from vLLM's in framing or structure: both end with ``[DONE]``, have a usage
    chunk (``choices: []``) right before it or neither, and each chunk of one has the structure of some chunk of
    the other."""
    out = []
    if not ours or ours[-1] != "[DONE]" or "[DONE]" in ours[:-1]:
        out.append("the stream does not end with exactly one data: [DONE]")
    if not theirs or theirs[-1] != "[DONE]":
        raise AssertionError("the transcript's stream does not end with [DONE]")
    ours_chunks, theirs_chunks = [c for c in ours if c != "[DONE]"], theirs[:-1]

    def usage_last(chunks: list[Any]) -> bool:
        return bool(chunks) and chunks[-1].get("choices") == []

    if usage_last(ours_chunks) != usage_last(theirs_chunks):
        out.append(f"usage chunk last: the reference {usage_last(ours_chunks)}, vLLM {usage_last(theirs_chunks)}")
    if usage_last(ours_chunks) and usage_last(theirs_chunks):
        out += mismatches(ours_chunks.pop(), theirs_chunks.pop(), "$usage-chunk")
    if any(chunk.get("choices") == [] for chunk in ours_chunks):
        out.append("a usage chunk before the last chunk")
    for index, chunk in enumerate(ours_chunks):
        if all(mismatches(chunk, candidate) for candidate in theirs_chunks):
            best = min((mismatches(chunk, candidate) for candidate in theirs_chunks), key=len)
            out.append(f"chunk {index} is like none of vLLM's: {best}")
    for index, candidate in enumerate(theirs_chunks):
        if all(mismatches(chunk, candidate) for chunk in ours_chunks):
            out.append(f"vLLM's chunk {index} has no like among the reference's: {json.dumps(candidate)[:200]}")
    return out


@dataclass(frozen=True)
class Streamed:
    """A streamed answer: its content type, the raw body and the ``data:`` payloads in order."""

    content_type: str
    raw: str
    events: list[Any]


def post(port: int, path: str, body: dict[str, Any], timeout: float = 120) -> tuple[int, Any]:
    """POST a JSON body; the status and the JSON answer (errors too)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), json.loads(error.read())


def post_stream(port: int, path: str, body: dict[str, Any], timeout: float = 120) -> Streamed:
    """POST a streamed request and read the whole event stream."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        raw = response.read().decode()
        content_type = response.headers.get("content-type", "")
    return Streamed(content_type, raw, sse_events(raw))


def sse_events(raw: str) -> list[Any]:
    """The payloads of a server-sent event stream; every event must be one ``data:`` line and a blank line."""
    assert raw.endswith("\n\n"), raw[-200:]
    events: list[Any] = []
    for block in raw[:-2].split("\n\n"):
        assert block.startswith("data: ") and "\n" not in block, block[:200]
        payload = block[len("data: ") :]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def counters(port: int) -> dict[str, float]:
    """The ``vllm:*_total`` counters of ``/metrics``, keyed by name and labels other than engine and model."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = COUNTER.match(line)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
            kept = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k not in ("engine", "model_name"))
            out[match.group(1) + (f"{{{kept}}}" if kept else "")] = float(match.group(3))
    return out


def moved(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The counters that moved, by how much (the transcripts' ``counters_moved``)."""
    return {key: after[key] - before.get(key, 0.0) for key in sorted(after) if after[key] != before.get(key, 0.0)}
