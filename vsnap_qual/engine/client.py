"""Talking to a running engine over its public HTTP API: canary, digests, KV capacity, listener watch."""

from __future__ import annotations

import math
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import requests

from vsnap_qual.model import Canary, Digest

KV_LOG = re.compile(r"(?:GPU|CPU) KV cache size: ([0-9,]+) tokens")
METRIC_CACHE_INFO = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}", re.MULTILINE)
LABEL = re.compile(r'(\w+)="([^"]*)"')


class EngineError(RuntimeError):
    """The engine answered, but not as the contract says it must."""


@dataclass(frozen=True)
class CanaryOutput:
    """One greedy completion: vLLM's oracle shape (token ids, text, the first sampled token's logprob), and for
    a multi-token canary every position's sampled-token logprob (``logprobs``, one per token id)."""

    prompt: str
    token_ids: list[int]
    text: str
    logprob: float
    logprobs: list[float] | None = None

    @property
    def tokens(self) -> int:
        return len(self.token_ids)

    def as_dict(self) -> Canary:
        """The output as the evidence records it."""
        return Canary(
            prompt=self.prompt, token_ids=list(self.token_ids), text=self.text, logprob=self.logprob,
            logprobs=None if self.logprobs is None else list(self.logprobs),
        )  # fmt: skip

    @classmethod
    def of(cls, canary: Canary) -> CanaryOutput:
        """A recorded canary (``model.Canary``) as an output to compare."""
        return cls(
            canary["prompt"], list(canary["token_ids"]), canary["text"], canary["logprob"], canary.get("logprobs")
        )


def completion(
    port: int,
    model: str,
    prompt: str | list[int],
    host: str = "127.0.0.1",
    timeout: float = 120.0,
    max_tokens: int = 1,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
) -> CanaryOutput:
    """The snapshot canary request of the contract (§3.3 step 7) for any prompt; with ``max_tokens`` > 1 the
    same greedy request for that many tokens (``min_tokens`` equal, so every engine returns exactly as many). A
    request shape may sample (``temperature`` > 0, ``top_p``, its own ``seed``) or give the prompt as token ids
    (recorded as ``<N token ids>``)."""
    body: dict[str, object] = {
        "model": model,
        "prompt": prompt,
        "min_tokens": max_tokens,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "seed": seed,
        "logprobs": 0,
        "return_token_ids": True,
    }
    if top_p != 1.0:
        body["top_p"] = top_p
    said = prompt if isinstance(prompt, str) else f"<{len(prompt)} token ids>"
    response = requests.post(f"http://{host}:{port}/v1/completions", json=body, timeout=timeout)
    if response.status_code != 200:
        raise EngineError(f"completion for {said!r} returned HTTP {response.status_code}: {response.text[:300]}")
    choice = response.json()["choices"][0]
    logprobs = (choice.get("logprobs") or {}).get("token_logprobs") or []
    token_ids = choice.get("token_ids")
    if not isinstance(token_ids, list) or len(token_ids) != max_tokens or len(logprobs) != max_tokens:
        raise EngineError(
            f"completion for {said!r} must return exactly {max_tokens} token(s) with one logprob each: {choice}"
        )
    for value in logprobs:
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            raise EngineError(f"completion for {said!r} returned a non-finite logprob {value!r}")
    return CanaryOutput(
        said,
        [int(t) for t in token_ids],
        str(choice.get("text", "")),
        float(logprobs[0]),
        [float(v) for v in logprobs] if max_tokens > 1 else None,
    )


def param_digests(port: int, host: str = "127.0.0.1", timeout: float = 300.0) -> dict[str, Digest]:
    """Per-parameter digests from the probe's worker extension, through ``/collective_rpc`` (dev mode)."""
    response = requests.post(
        f"http://{host}:{port}/collective_rpc", json={"method": "vsnap_param_digests"}, timeout=timeout
    )
    if response.status_code == 404:
        raise EngineError("/collective_rpc is missing: the engine was not started with VLLM_SERVER_DEV_MODE=1")
    if response.status_code != 200:
        raise EngineError(
            f"/collective_rpc vsnap_param_digests returned HTTP {response.status_code}: {response.text[:300]}"
        )
    results = response.json().get("results")
    if not isinstance(results, list) or not results or not isinstance(results[0], dict):
        raise EngineError(f"/collective_rpc returned no per-worker digests: {str(results)[:300]}")
    digests: dict[str, Digest] = {}
    for rank, worker in enumerate(results):
        for name, info in worker.items():
            digests[name if rank == 0 else f"rank{rank}:{name}"] = Digest(
                sha256=info.get("sha256"),
                shape=list(info.get("shape") or []),
                dtype=str(info.get("dtype")),
                source=info.get("source", "parameter"),
            )
    return digests


def metrics_text(port: int, host: str = "127.0.0.1", timeout: float = 30.0) -> str:
    """The engine's ``/metrics`` text; empty when it serves none."""
    try:
        response = requests.get(f"http://{host}:{port}/metrics", timeout=timeout)
    except requests.RequestException:
        return ""
    return response.text if response.status_code == 200 else ""


def metrics_answer(port: int, host: str = "127.0.0.1", timeout: float = 30.0) -> tuple[int | None, str]:
    """``GET /metrics``: its HTTP status and text (None and why where nothing answered)."""
    try:
        response = requests.get(f"http://{host}:{port}/metrics", timeout=timeout)
    except requests.RequestException as exc:
        return None, f"no answer: {type(exc).__name__}: {exc}"
    return response.status_code, response.text


def kv_from_metrics(port: int, host: str = "127.0.0.1", timeout: float = 30.0) -> int | None:
    """KV capacity in tokens from ``vllm:cache_config_info``; None when the gauge carries no capacity."""
    try:
        response = requests.get(f"http://{host}:{port}/metrics", timeout=timeout)
    except requests.RequestException:
        return None
    if response.status_code != 200:
        return None
    labels = cache_config_labels(response.text)
    if not labels:
        return None
    if labels.get("kv_cache_size_tokens", "None").isdigit():
        return int(labels["kv_cache_size_tokens"])
    blocks, size = labels.get("num_gpu_blocks", "None"), labels.get("block_size", "None")
    if blocks.isdigit() and size.isdigit():
        return int(blocks) * int(size)
    return None


def cache_config_labels(metrics_text: str) -> dict[str, str]:
    """The labels of ``vllm:cache_config_info`` in a ``/metrics`` text ({}: no such gauge)."""
    match = METRIC_CACHE_INFO.search(metrics_text)
    return dict(LABEL.findall(match.group("labels"))) if match else {}


def metric_sums(metrics_text: str, names: Iterable[str]) -> dict[str, float]:
    """Each of ``names`` in a ``/metrics`` text, summed over its label sets (a name not reported is absent)."""
    found: dict[str, float] = {}
    for name in names:
        pattern = re.compile(rf"^{re.escape(name)}(?:\{{[^}}]*\}})?\s+([0-9.eE+-]+)\s*$", re.M)
        values = [float(v) for v in pattern.findall(metrics_text)]
        if values:
            found[name] = sum(values)
    return found


def kv_from_log(text: str) -> int | None:
    """The first ``GPU|CPU KV cache size: N tokens`` figure of a log (vLLM logs it once per engine)."""
    match = KV_LOG.search(text)
    return int(match.group(1).replace(",", "")) if match else None


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.05) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


#: how long one ``/health`` ask waits for its answer (a liveness look; a failed look is asked again with a deadline
#: sized by the server's measured answers: ``steps.probe_liveness``)
HEALTH_TIMEOUT = 2.0


def health_ok(port: int, host: str = "127.0.0.1", timeout: float = HEALTH_TIMEOUT) -> bool:
    try:
        return requests.get(f"http://{host}:{port}/health", timeout=timeout).status_code == 200
    except requests.RequestException:
        return False


class ListenerWatch:
    """Connect-polls a port from the host every ``interval`` seconds; remembers when it first accepted."""

    def __init__(self, port: int, host: str = "127.0.0.1", interval: float = 0.01) -> None:
        self.port, self.host, self.interval = port, host, interval
        self.first_bound: float | None = None
        self.last_closed: float | None = None  # the last poll that found nothing listening
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.polls += 1
            if self.first_bound is None:
                started = time.time()
                if port_open(self.port, self.host, timeout=self.interval):
                    self.first_bound = time.time()
                else:
                    self.last_closed = started
            self._stop.wait(self.interval)

    def __enter__(self) -> ListenerWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2.0)

    @property
    def bound(self) -> bool:
        return self.first_bound is not None

    @property
    def notice_latency(self) -> float | None:
        """How long after the listener bound the harness noticed it, at most: the gap between the last poll
        that found the port closed and the first that found it open."""
        if self.first_bound is None or self.last_closed is None:
            return None
        return self.first_bound - self.last_closed


def wait_until(
    predicate: Callable[[], bool],
    timeout: float,
    interval: float = 0.01,
    abort: Callable[[], str | None] | None = None,
) -> float:
    """Poll until ``predicate`` holds; return the time it did. ``abort`` may end the wait with a reason."""
    return wait_until_measured(predicate, timeout, interval, abort)[0]


def wait_until_measured(
    predicate: Callable[[], bool],
    timeout: float,
    interval: float = 0.01,
    abort: Callable[[], str | None] | None = None,
) -> tuple[float, float]:
    """Like :func:`wait_until`; also returns the notice latency bound: the time between the last poll that
    failed and the one that succeeded (the condition became true somewhere in that window)."""
    deadline = time.time() + timeout
    last_abort_check = 0.0
    last_false = time.time()
    while time.time() < deadline:
        if predicate():
            now = time.time()
            return now, now - last_false
        last_false = time.time()
        if abort and last_false - last_abort_check > 1.0:
            last_abort_check = last_false
            reason = abort()
            if reason:
                raise EngineError(reason)
        time.sleep(interval)
    raise EngineError(f"not ready within {timeout:.0f} s")
