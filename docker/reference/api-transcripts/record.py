"""Record an OpenAI-compatible server's answers, one JSON file per request kind (the reference engine's API
specification). Runs inside the server's image with that image's Python (standard library only): it starts
``vllm serve`` itself, waits for ``/health``, asks every kind, and stops the server.

Usage: python3 record.py OUTDIR -- <vllm serve arguments>

Each file holds the request (method, path, body), the HTTP status, the content type, the answer (JSON, or for a
stream the raw SSE text and its ``data:`` payloads in order), and the movement of vLLM's serving counters around
that one request (``/metrics`` read before and after; counters only, ``vllm:`` names, labels kept).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

PORT = 8321
BASE = f"http://127.0.0.1:{PORT}"
PROMPT = "The capital of France is"
COUNTER = re.compile(r"^(vllm:[a-z_:]+_total)(\{[^}]*\})? ([0-9.eE+-]+|NaN)$")


def http(method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 300) -> tuple[int, str, str]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        BASE + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.headers.get("content-type", ""), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("content-type", ""), error.read().decode()


def counters() -> dict[str, float]:
    _, _, text = http("GET", "/metrics")
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = COUNTER.match(line)
        if match:
            labels = re.sub(r'(engine|model_name)="[^"]*",?', "", match.group(2) or "").replace(",}", "}")
            key = match.group(1) + ("" if labels in ("", "{}") else labels)
            out[key] = float(match.group(3))
    return out


def metric_families(text: str) -> dict[str, Any]:
    """The ``vllm:`` families of a Prometheus exposition after every request: type, help and samples (histogram
    buckets and ``_created`` timestamps left out: they are many and say nothing of the API's shape)."""
    families: dict[str, Any] = {}
    for line in text.splitlines():
        if line.startswith("# HELP vllm:") or line.startswith("# TYPE vllm:"):
            _, what, name, rest = line.split(" ", 3)
            if name.endswith("_created"):
                continue
            families.setdefault(name, {"type": None, "help": None, "samples": []})[what.lower()] = rest
            continue
        match = re.match(r"^(vllm:[a-z_:]+?)(_total|_count|_sum|_bucket|_created)?(\{[^}]*\})? (\S+)$", line)
        if not match or match.group(2) in ("_bucket", "_created"):
            continue
        name = match.group(1)
        family = families.get(name) or families.get(name + (match.group(2) or ""))
        if family is None:
            continue
        labels = dict(re.findall(r'([a-zA-Z_]+)="([^"]*)"', match.group(3) or ""))
        family["samples"].append(
            {"name": name + (match.group(2) or ""), "labels": labels, "value": float(match.group(4))}
        )
    return families


def sse(text: str) -> list[Any]:
    events: list[Any] = []
    for line in text.split("\n"):
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def ask(out: Path, kind: str, method: str, path: str, body: dict[str, Any] | None = None, note: str = "") -> Any:
    before = counters()
    status, content_type, text = http(method, path, body)
    after = counters()
    moved = {key: after[key] - before.get(key, 0.0) for key in sorted(after) if after[key] != before.get(key, 0.0)}
    record: dict[str, Any] = {"kind": kind, "request": {"method": method, "path": path, "body": body}}
    if note:
        record["note"] = note
    record["status"] = status
    record["content_type"] = content_type
    if body is not None and body.get("stream"):
        record["sse_raw"] = text
        record["sse_events"] = sse(text)
        answer: Any = record["sse_events"]
    else:
        try:
            answer = json.loads(text)
        except ValueError:
            answer = text
        record["response"] = answer
    record["counters_moved"] = moved
    (out / f"{kind}.json").write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    print(f"{kind}: {status}", flush=True)
    return answer


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    serve = sys.argv[sys.argv.index("--") + 1 :]
    log = (out / "server.log").open("w")
    server = subprocess.Popen(
        ["vllm", "serve", *serve, "--host", "127.0.0.1", "--port", str(PORT)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if server.poll() is not None:
                raise SystemExit(f"server exited {server.returncode}")
            try:
                if http("GET", "/health", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(1)
        model = json.loads(http("GET", "/v1/models")[2])["data"][0]["id"]
        record_all(out, model)
        _, _, text = http("GET", "/metrics")
        (out / "metrics.json").write_text(json.dumps(metric_families(text), indent=1) + "\n")
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def record_all(out: Path, model: str) -> None:
    ask(out, "models", "GET", "/v1/models")
    ask(out, "version", "GET", "/version")
    ask(out, "tokenize", "POST", "/tokenize", {"model": model, "prompt": PROMPT})
    chat_messages = [{"role": "user", "content": PROMPT}]
    chat_tokens = ask(
        out,
        "tokenize_chat",
        "POST",
        "/tokenize",
        {"model": model, "messages": chat_messages, "add_generation_prompt": True},
    )
    ask(out, "tokenize_token_strs", "POST", "/tokenize", {"model": model, "prompt": PROMPT, "return_token_strs": True})
    ask(
        out,
        "detokenize_special",
        "POST",
        "/detokenize",
        {"model": model, "tokens": chat_tokens["tokens"]},
        note="the chat prompt's tokens, special ones included",
    )
    # the harness's canary
    ask(
        out,
        "completion_canary",
        "POST",
        "/v1/completions",
        {
            "model": model,
            "prompt": PROMPT,
            "max_tokens": 1,
            "min_tokens": 1,
            "temperature": 0,
            "seed": 0,
            "logprobs": 0,
            "return_token_ids": True,
        },
    )
    greedy = ask(
        out,
        "completion_length",
        "POST",
        "/v1/completions",
        {"model": model, "prompt": PROMPT, "max_tokens": 12, "temperature": 0, "return_token_ids": True},
        note="greedy, min_tokens left at its default: max_tokens ends it",
    )
    choice = greedy["choices"][0]
    ask(out, "detokenize", "POST", "/detokenize", {"model": model, "tokens": choice["token_ids"]})
    ask(
        out,
        "completion_logprobs",
        "POST",
        "/v1/completions",
        {"model": model, "prompt": PROMPT, "max_tokens": 4, "temperature": 0, "logprobs": 3},
    )
    # a stop string from inside the greedy answer: the third token's text onwards
    text = choice["text"]
    pieces = [
        json.loads(http("POST", "/detokenize", {"model": model, "tokens": [t]})[2])["prompt"]
        for t in choice["token_ids"]
    ]
    start = len("".join(pieces[:3]))
    stop = text[start : start + 3] if text[start : start + 3].strip() else text[start : start + 5]
    ask(
        out,
        "completion_stop",
        "POST",
        "/v1/completions",
        {
            "model": model,
            "prompt": PROMPT,
            "max_tokens": 12,
            "temperature": 0,
            "stop": [stop],
            "return_token_ids": True,
        },
        note=f"stop string {stop!r} taken from the greedy answer {text!r}",
    )
    ask(
        out,
        "completion_stop_included",
        "POST",
        "/v1/completions",
        {
            "model": model,
            "prompt": PROMPT,
            "max_tokens": 12,
            "temperature": 0,
            "stop": [stop],
            "include_stop_str_in_output": True,
            "return_token_ids": True,
        },
    )
    ask(
        out,
        "completion_stop_token_ids",
        "POST",
        "/v1/completions",
        {
            "model": model,
            "prompt": PROMPT,
            "max_tokens": 12,
            "temperature": 0,
            "stop_token_ids": [choice["token_ids"][3]],
            "return_token_ids": True,
        },
        note="stop_token_ids: the greedy answer's fourth token",
    )
    ask(
        out,
        "completion_eos",
        "POST",
        "/v1/completions",
        {
            "model": model,
            "prompt": PROMPT,
            "max_tokens": 12,
            "temperature": 0,
            "logit_bias": {"0": 100},
            "return_token_ids": True,
            "logprobs": 1,
        },
        note="logit_bias pushes EOS (token 0) to the top: EOS ends it",
    )
    ask(
        out,
        "completion_eos_after_min_tokens",
        "POST",
        "/v1/completions",
        {
            "model": model,
            "prompt": PROMPT,
            "max_tokens": 12,
            "min_tokens": 3,
            "temperature": 0,
            "logit_bias": {"0": 100},
            "return_token_ids": True,
        },
        note="EOS pushed to the top but suppressed for min_tokens=3",
    )
    body = {
        "model": model,
        "prompt": PROMPT,
        "max_tokens": 6,
        "temperature": 1.0,
        "n": 3,
        "seed": 1234,
        "return_token_ids": True,
    }
    ask(out, "completion_n_seed", "POST", "/v1/completions", body)
    ask(out, "completion_n_seed_again", "POST", "/v1/completions", body, note="the same request again")
    ask(
        out,
        "completion_batch",
        "POST",
        "/v1/completions",
        {"model": model, "prompt": [PROMPT, "Once upon a time there was a"], "max_tokens": 3, "temperature": 0},
    )
    ask(
        out,
        "completion_stream",
        "POST",
        "/v1/completions",
        {
            "model": model,
            "prompt": PROMPT,
            "max_tokens": 6,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "logprobs": 2,
            "return_token_ids": True,
        },
    )
    ask(
        out,
        "completion_stream_plain",
        "POST",
        "/v1/completions",
        {"model": model, "prompt": PROMPT, "max_tokens": 4, "temperature": 0, "stream": True},
    )
    ask(
        out,
        "completion_stream_stop",
        "POST",
        "/v1/completions",
        {
            "model": model,
            "prompt": PROMPT,
            "max_tokens": 12,
            "temperature": 0,
            "stream": True,
            "stop": [stop],
            "stream_options": {"include_usage": True},
            "return_token_ids": True,
        },
    )
    ask(
        out,
        "completion_stream_n_seed",
        "POST",
        "/v1/completions",
        {
            "model": model,
            "prompt": PROMPT,
            "max_tokens": 4,
            "temperature": 1.0,
            "stream": True,
            "n": 2,
            "seed": 1234,
            "stream_options": {"include_usage": True},
            "return_token_ids": True,
        },
        note="the same request as completion_n_seed's first two choices, streamed",
    )
    ask(
        out,
        "error_n_greedy",
        "POST",
        "/v1/completions",
        {"model": model, "prompt": PROMPT, "max_tokens": 4, "temperature": 0, "n": 2},
    )
    chat = ask(
        out,
        "chat",
        "POST",
        "/v1/chat/completions",
        {
            "model": model,
            "messages": chat_messages,
            "max_tokens": 8,
            "temperature": 0,
            "logprobs": True,
            "top_logprobs": 2,
            "return_token_ids": True,
        },
    )
    ask(
        out,
        "chat_stream",
        "POST",
        "/v1/chat/completions",
        {
            "model": model,
            "messages": chat_messages,
            "max_tokens": 6,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "logprobs": True,
            "top_logprobs": 1,
        },
    )
    ask(
        out,
        "chat_n_seed",
        "POST",
        "/v1/chat/completions",
        {"model": model, "messages": chat_messages, "max_tokens": 5, "temperature": 1.0, "n": 2, "seed": 7},
    )
    chat_text = chat["choices"][0]["message"]["content"]
    chat_stop = chat_text[2:5] if len(chat_text) >= 5 else chat_text[-1:]
    ask(
        out,
        "chat_stop",
        "POST",
        "/v1/chat/completions",
        {"model": model, "messages": chat_messages, "max_tokens": 8, "temperature": 0, "stop": [chat_stop]},
        note=f"stop string {chat_stop!r} taken from the greedy chat answer {chat_text!r}",
    )
    ask(
        out,
        "chat_eos",
        "POST",
        "/v1/chat/completions",
        {"model": model, "messages": chat_messages, "max_tokens": 8, "temperature": 0, "logit_bias": {"0": 100}},
    )
    ask(out, "error_unknown_model", "POST", "/v1/completions", {"model": "nope", "prompt": PROMPT})
    ask(out, "error_too_long", "POST", "/v1/completions", {"model": model, "prompt": PROMPT, "max_tokens": 100000})
    ask(
        out,
        "error_top_logprobs",
        "POST",
        "/v1/completions",
        {"model": model, "prompt": PROMPT, "max_tokens": 1, "logprobs": 100},
    )
    # the same prompt twice: the second finds the first's full blocks in the prefix cache
    # (long enough for full blocks of vLLM's CPU block size, 128; the reference's blocks are 16 tokens)
    long_prompt = " ".join(["The quick brown fox jumps over the lazy dog."] * 30)
    ask(
        out,
        "prefix_first",
        "POST",
        "/v1/completions",
        {"model": model, "prompt": long_prompt, "max_tokens": 2, "temperature": 0},
        note="a prompt of several full KV blocks, first asked",
    )
    ask(
        out,
        "prefix_again",
        "POST",
        "/v1/completions",
        {"model": model, "prompt": long_prompt, "max_tokens": 2, "temperature": 0},
    )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
