"""What a lane asks of its engine over HTTP, at the box's endpoint for the port (the harness never assumes it
connects to the box's port): health, the canary plan's answers, the parameter digests, KV capacity, the request
shapes, the API checks, the decode speed, the prefix cache, and a LoRA adapter's files kept with the evidence.
Every wait on an answer is the engine's time (``StepRecorder.engine_wait``). Implements
:class:`vsnap_qual.lane.protocols.EngineApi` over a box; the measurements themselves are :mod:`vsnap_qual.engine`'s."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from vsnap_qual.box import Box
from vsnap_qual.config import LaneSpec, QualConfig
from vsnap_qual.contract import VLLM_CANARY_PROMPT
from vsnap_qual.engine import (
    adapters,
    api_checks,
    boundaries,
    client,
    decode_speed,
    prefix_cache,
    serving_series,
    shapes,
)
from vsnap_qual.engine.client import CanaryOutput
from vsnap_qual.model import (
    ApiAnswer,
    ApiRequest,
    BoundaryRequest,
    Canary,
    DecodeSpeed,
    Digest,
    KeptAdapter,
    PrefixCacheProbe,
    ServingSeries,
)
from vsnap_qual.recorder import StepRecorder


@dataclass(frozen=True, kw_only=True)
class LaneEngineApi:
    """The engine API of one lane's box."""

    box: Box
    recorder: StepRecorder
    config: QualConfig
    spec: LaneSpec

    @property
    def served_model(self) -> str:
        args = self.config.engine_argv(self.spec)
        if "--served-model-name" in args:
            return args[args.index("--served-model-name") + 1]
        return self.config.model

    def health(self, port: int, timeout: float = client.HEALTH_TIMEOUT) -> bool:
        with self.recorder.engine_wait():
            host, reach = self.box.endpoint(port)
            return client.health_ok(reach, host, timeout)

    def canaries(self, port: int, model: str | None = None) -> list[CanaryOutput]:
        """The canary plan's answers, from the served model or through ``model`` (a LoRA adapter's name)."""
        host, reach = self.box.endpoint(port)
        timeout = self.config.timeouts["http"]
        with self.recorder.engine_wait():
            return [
                client.completion(reach, model or self.served_model, p, host=host, timeout=timeout, max_tokens=n)
                for p, n in shapes.canary_plan(self.config.prompts, self.config.canary_tokens)
            ]

    def digests(self, port: int) -> dict[str, Digest]:
        host, reach = self.box.endpoint(port)
        with self.recorder.engine_wait():
            return client.param_digests(reach, host=host, timeout=self.config.timeouts["http"])

    def kv(self, port: int, log_text: str | None = None) -> tuple[int | None, str]:
        """KV capacity in tokens from ``/metrics``, else from ``log_text`` when given."""
        host, reach = self.box.endpoint(port)
        with self.recorder.engine_wait():
            tokens = client.kv_from_metrics(reach, host=host)
        if tokens is not None:
            return tokens, "metrics"
        if log_text is None:
            return None, "unavailable"
        tokens = client.kv_from_log(log_text)
        return tokens, "log" if tokens is not None else "unavailable"

    def shape_answers(self, port: int, requests: list[shapes.Request]) -> dict[str, list[Canary]]:
        """The request shapes' answers (the concurrent ones all in flight at once)."""
        host, reach = self.box.endpoint(port)
        timeout = self.config.timeouts["http"]

        def ask(r: shapes.Request) -> CanaryOutput:
            prompt = r.prompt if isinstance(r.prompt, str) else list(r.prompt)
            return client.completion(
                reach, self.served_model, prompt, host=host, timeout=timeout, max_tokens=r.max_tokens,
                temperature=r.temperature, top_p=r.top_p, seed=r.seed,
            )  # fmt: skip

        with self.recorder.engine_wait():
            return shapes.send(requests, ask)

    def api_answers(self, port: int, requests: Sequence[ApiRequest]) -> dict[str, ApiAnswer]:
        """The API checks' requests answered one after another, by name (``vsnap_qual.engine.api_checks``): a
        request with no answer at all is recorded as such, never raised."""
        host, reach = self.box.endpoint(port)
        timeout = self.config.timeouts["http"]
        with self.recorder.engine_wait():
            return {r["name"]: api_checks.ask(r, reach, host, timeout) for r in requests}

    def decode_speed(self, port: int) -> DecodeSpeed | None:
        """The fixed generation's speed (``vsnap_qual.engine.decode_speed``); None when ``--vsnap-decode-runs=0``."""
        runs = self.config.decode_runs
        if runs <= 0:
            return None
        host, reach = self.box.endpoint(port)
        timeout = self.config.timeouts["http"]
        prompt = self.config.prompts[0] if self.config.prompts else VLLM_CANARY_PROMPT

        def generate() -> int:
            with self.recorder.engine_wait():
                answer = client.completion(
                    reach, self.served_model, prompt, host=host, timeout=timeout, max_tokens=decode_speed.TOKENS
                )
            return len(answer.token_ids)

        def calibrate() -> tuple[float, float, float] | None:
            return decode_speed.parse_calibration(self.box.sh(decode_speed.CALIBRATION, timeout).stdout)

        # the CPU samples and the calibrations are the harness's own work (probes of the box), not the engine's time
        return decode_speed.measure(
            generate, runs, self._metrics(port), sample=self.box.cpu_sample,
            calibrate=calibrate if self.box.has_shell else None,
        )  # fmt: skip

    def prefix_cache(self, port: int, canary_ids: list[int]) -> PrefixCacheProbe:
        """The prefix-cache prompt asked twice, vLLM's counters read around each ask
        (``vsnap_qual.engine.prefix_cache``)."""
        host, reach = self.box.endpoint(port)
        timeout = self.config.timeouts["http"]

        def ask(ids: list[int]) -> CanaryOutput:
            with self.recorder.engine_wait():
                return client.completion(
                    reach, self.served_model, ids, host=host, timeout=timeout, max_tokens=prefix_cache.ASK_TOKENS
                )

        return prefix_cache.measure(ask, self._metrics(port), canary_ids, self.config.max_model_len)

    def serving_series(
        self, port: int, canary_ids: list[int], gpu_mib: Callable[[], int | None] | None
    ) -> ServingSeries:
        """The fixed request series (``vsnap_qual.engine.serving_series``): vLLM's counters read around it, the
        box's resident memory (and ``gpu_mib()``, where the lane has a GPU) after each request. The memory samples
        are the harness's own work, not the engine's time."""
        host, reach = self.box.endpoint(port)
        timeout = self.config.timeouts["http"]

        def metrics_status() -> tuple[int | None, str]:
            with self.recorder.engine_wait():
                return client.metrics_answer(reach, host, timeout)

        def ask(ids: list[int]) -> CanaryOutput:
            with self.recorder.engine_wait():
                return client.completion(
                    reach, self.served_model, ids, host=host, timeout=timeout, max_tokens=serving_series.ASK_TOKENS
                )

        def rss_kb() -> int | None:
            sample = self.box.cpu_sample()
            return None if sample is None else sample.get("rss_kb")

        return serving_series.measure(
            metrics_status, ask, canary_ids, self.config.max_model_len, rss_kb, gpu_mib
        )  # fmt: skip

    def in_flight(self, port: int) -> bool | None:
        """Whether the engine reports a request running now (``vllm:num_requests_running``); None: not reported."""
        text = self._metrics(port)()
        running = client.metric_sums(text, ["vllm:num_requests_running"]).get("vllm:num_requests_running")
        return None if running is None else running > 0

    def boundary_request(
        self, port: int, prompt: str, max_tokens: int, started: float
    ) -> tuple[BoundaryRequest, list[int] | None]:
        """One greedy completion across a boundary (``vsnap_qual.engine.boundaries``), ``min_tokens`` equal."""
        host, reach = self.box.endpoint(port)
        body: dict[str, object] = {
            "model": self.served_model, "prompt": prompt, "max_tokens": max_tokens, "min_tokens": max_tokens,
            "temperature": 0, "seed": 0, "logprobs": 0, "return_token_ids": True,
        }  # fmt: skip
        with self.recorder.engine_wait():
            record, ids = boundaries.send(
                f"http://{host}:{reach}/v1/completions", body, self.config.timeouts["http"], started
            )
        if record.get("outcome") == "closed" and not self.box.connect_proves_listener:
            # the runtime's proxy takes every connect and closes it while nothing listens in the box
            record.update({"accepted": False, "outcome": "refused", "detail": f"{record.get('detail')} (a proxy's)"})
        return record, ids

    def keep_adapter(self, name: str, path: str) -> KeptAdapter:
        """A LoRA adapter's files copied from the box into the report (``adapters/<lane>/<name>/``), with their
        sha256: the adapter the run asked is kept with its evidence."""
        store = self.recorder.store
        target = store.report_dir / "adapters" / self.spec.name / name
        files: dict[str, str] = {}
        for file in adapters.ADAPTER_FILES:
            data = self.box.read_bytes(f"{path.rstrip('/')}/{file}") if path else None
            if data is None:
                continue
            target.mkdir(parents=True, exist_ok=True)
            (target / file).write_bytes(data)
            files[file] = hashlib.sha256(data).hexdigest()
        return KeptAdapter(path=path, files=files, kept=store.relative(target) if files else None)

    def _metrics(self, port: int) -> Callable[[], str]:
        """A reader of the engine's ``/metrics`` text (an answer of the engine's: its time is the engine's)."""
        host, reach = self.box.endpoint(port)

        def metrics() -> str:
            with self.recorder.engine_wait():
                return client.metrics_text(reach, host, self.config.timeouts["http"])

        return metrics
