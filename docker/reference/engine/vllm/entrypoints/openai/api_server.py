"""The OpenAI-compatible HTTP server (stdlib ThreadingHTTPServer) and `vllm serve`."""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from vllm import envs
from vllm.logger import flush_handlers, init_logger, set_process_label
from vllm.sampling_params import SamplingParams
from vllm.v1.engine.async_llm import LLMEngine
from vllm.version import __version__

logger = init_logger(__name__)


class RequestError(Exception):
    def __init__(self, status: int, message: str, error_type: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.param = param


def error_body(status: int, message: str, error_type: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": param, "code": status}}


def bind_server_socket(args: argparse.Namespace, reuse_port: bool = False) -> tuple[str, socket.socket]:
    host = args.host or ""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, args.port))
    sock.listen(128)
    sock.set_inheritable(False)
    return f"http://{args.host or '0.0.0.0'}:{args.port}", sock


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    engine: LLMEngine
    api_key: list[str] | None


def _metrics(engine: LLMEngine) -> str:
    info = engine.client.call("info")
    kv = info["kv_cache_config"]
    config = engine.vllm_config
    tokens = kv["num_blocks"] * kv["block_size"]
    labels = {
        "block_size": str(kv["block_size"]),
        "cache_dtype": "auto",
        "calculate_kv_scales": "False",
        "enable_prefix_caching": str(bool(info.get("enable_prefix_caching"))),
        "engine": "0",
        "gpu_memory_utilization": str(config.gpu_memory_utilization),
        "is_attention_free": "False",
        "kv_cache_max_concurrency": str(round(tokens / config.max_model_len, 2)),
        "kv_cache_memory_bytes": str(config.kv_cache_memory_bytes),
        "kv_cache_size_tokens": str(tokens),
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(kv["num_blocks"]),
        "num_gpu_blocks_override": "None",
        "prefix_caching_hash_algo": "sha256",
        "sliding_window": "None",
        "swap_space": "4",
    }
    rendered = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    model = f'engine="0",model_name="{config.served_model_name}"'
    lines = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{model}}} {float(engine.get_num_unfinished_requests())}",
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE vllm:prompt_tokens_total counter",
        f"vllm:prompt_tokens_total{{{model}}} {float(info['num_prompt_tokens'])}",
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
        "# TYPE vllm:generation_tokens_total counter",
        f"vllm:generation_tokens_total{{{model}}} {float(info['num_generation_tokens'])}",
        "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.",
        "# TYPE vllm:prefix_cache_queries_total counter",
        f"vllm:prefix_cache_queries_total{{{model}}} {float(info['prefix_cache_queries'])}",
        "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.",
        "# TYPE vllm:prefix_cache_hits_total counter",
        f"vllm:prefix_cache_hits_total{{{model}}} {float(info['prefix_cache_hits'])}",
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
        "# TYPE vllm:cache_config_info gauge",
        f"vllm:cache_config_info{{{rendered}}} 1.0",
    ]
    return "\n".join(lines) + "\n"


def _completion(engine: LLMEngine, body: dict[str, Any]) -> dict[str, Any]:
    config = engine.vllm_config
    model = body.get("model")
    if model is not None and model != config.served_model_name and model not in config.lora_modules:
        raise RequestError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    lora_name = model if model in config.lora_modules else None
    prompt = body.get("prompt")
    prompts: list[str | list[int]]
    token_prompt = isinstance(prompt, list) and bool(prompt) and all(isinstance(item, int) for item in prompt)
    if isinstance(prompt, str) or token_prompt:
        prompts = [prompt]  # type: ignore[list-item]
    elif isinstance(prompt, list) and prompt and all(isinstance(item, str) for item in prompt):
        prompts = list(prompt)
    else:
        raise RequestError(400, "prompt must be a string, a list of strings or a list of token ids", "BadRequestError")
    max_tokens = body.get("max_tokens", 16)
    min_tokens = body.get("min_tokens", 0) or 0
    logprobs = body.get("logprobs")
    temperature = body.get("temperature", 1.0)
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise RequestError(400, f"max_tokens must be at least 1, got {max_tokens}.", "BadRequestError")
    if not isinstance(min_tokens, int) or min_tokens < 0 or (max_tokens is not None and min_tokens > max_tokens):
        raise RequestError(400, f"min_tokens must be in [0, max_tokens], got {min_tokens}.", "BadRequestError")
    if logprobs is not None and (not isinstance(logprobs, int) or logprobs < 0 or logprobs > config.max_logprobs):
        raise RequestError(
            400,
            f"Requested sample logprobs of {logprobs}, which is greater than max allowed: {config.max_logprobs}",
            "BadRequestError",
        )
    return_token_ids = bool(body.get("return_token_ids"))
    choices: list[dict[str, Any]] = []
    prompt_tokens = completion_tokens = 0
    request_id = f"cmpl-{secrets.token_hex(8)}"
    for index, item in enumerate(prompts):
        prompt_ids = engine.tokenizer.encode(item) if isinstance(item, str) else item
        limit = max_tokens if max_tokens is not None else config.max_model_len - len(prompt_ids)
        if len(prompt_ids) + limit > config.max_model_len:
            raise RequestError(
                400,
                f"This model's maximum context length is {config.max_model_len} tokens. However, you "
                "requested "
                f"{len(prompt_ids) + limit} tokens ({len(prompt_ids)} in the messages, {limit} in the "
                "completion). "
                "Please reduce the length of the messages or completion.",
                "BadRequestError",
            )
        params = SamplingParams(
            temperature=float(temperature if temperature is not None else 1.0),
            min_tokens=min_tokens,
            max_tokens=limit,
            seed=body.get("seed"),
            logprobs=logprobs,
        )
        output = engine.complete(item, params, f"{request_id}-{index}", lora_name).outputs[0]
        logprob_block = None
        if output.logprobs is not None:
            tokens = [engine.tokenizer.decode([token]) for token in output.token_ids]
            offsets, position = [], 0
            for token_text in tokens:
                offsets.append(position)
                position += len(token_text)
            logprob_block = {
                "text_offset": offsets,
                "token_logprobs": [
                    entry[token].logprob for entry, token in zip(output.logprobs, output.token_ids, strict=True)
                ],
                "tokens": tokens,
                "top_logprobs": [
                    {value.decoded_token: value.logprob for value in entry.values()} for entry in output.logprobs
                ],
            }
        choices.append(
            {
                "index": index,
                "text": output.text,
                "logprobs": logprob_block,
                "finish_reason": output.finish_reason,
                "stop_reason": None,
                "token_ids": output.token_ids if return_token_ids else None,
                "prompt_logprobs": None,
                "prompt_token_ids": list(prompt_ids) if return_token_ids else None,
            }
        )
        prompt_tokens += len(prompt_ids)
        completion_tokens += len(output.token_ids)
    return {
        "id": request_id,
        "object": "text_completion",
        "created": int(time.time()),
        "model": lora_name or config.served_model_name,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": None,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
            "prompt_tokens_details": None,
        },
        "kv_transfer_params": None,
    }


def _rpc_result(value: Any) -> Any:
    return value if isinstance(value, (dict, list)) else str(value)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - BaseHTTPRequestHandler's name
        return

    def _send(self, status: int, body: Any = None, content_type: str = "application/json") -> None:
        if body is None:
            payload = b""
        elif isinstance(body, str):
            payload = body.encode()
        else:
            payload = json.dumps(body, allow_nan=True).encode()
        self.send_response(status)
        if payload or content_type != "application/json":
            self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        phrase = HTTPStatus(status).phrase
        client = f"{self.client_address[0]}:{self.client_address[1]}"
        print(
            f'(APIServer pid={os.getpid()}) INFO:     {client} - "{self.command} {self.path} '
            f'{self.request_version}" {status} {phrase}',
            flush=True,
        )

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        try:
            loaded = json.loads(raw)
        except json.JSONDecodeError as error:
            raise RequestError(400, f"Invalid JSON body: {error}", "BadRequestError") from error
        if not isinstance(loaded, dict):
            raise RequestError(400, "Request body must be a JSON object", "BadRequestError")
        return loaded

    def _authorised(self) -> bool:
        keys = self.server.api_key
        if not keys or not self.path.startswith("/v1"):
            return True
        return self.headers.get("authorization", "") in {f"Bearer {key}" for key in keys}

    def _dispatch(self, method: str) -> None:
        engine = self.server.engine
        route = urlparse(self.path)
        dev = envs.server_dev_mode()
        routes: dict[tuple[str, str], Any] = {
            ("GET", "/health"): lambda: self._send(200 if not engine.client.dead else 503),
            ("GET", "/version"): lambda: self._send(200, {"version": __version__}),
            ("GET", "/v1/models"): lambda: self._send(200, self._models()),
            ("GET", "/metrics"): lambda: self._send(200, _metrics(engine), "text/plain; version=0.0.4; charset=utf-8"),
            ("POST", "/v1/completions"): lambda: self._send(200, _completion(engine, self._body())),
        }
        if dev:
            routes.update(
                {
                    ("POST", "/collective_rpc"): self._collective_rpc,
                    ("POST", "/sleep"): lambda: self._sleep(route.query),
                    ("POST", "/wake_up"): lambda: self._wake_up(route.query),
                    ("GET", "/is_sleeping"): lambda: self._send(
                        200, {"is_sleeping": bool(engine.client.call("is_sleeping"))}
                    ),
                }
            )
        action = routes.get((method, route.path))
        if action is None:
            known = {path for _, path in routes}
            if route.path in known:
                self._send(405, {"detail": "Method Not Allowed"})
            else:
                self._send(404, {"detail": "Not Found"})
            return
        if not self._authorised():
            self._send(401, {"error": "Unauthorized"})
            return
        try:
            action()
        except RequestError as error:
            self._send(error.status, error_body(error.status, str(error), error.error_type, error.param))
        except Exception as error:  # the engine failed: 500 like vLLM's exception handler
            logger.exception("Error in API server request %s %s", method, route.path)
            self._send(500, error_body(500, str(error), "InternalServerError"))

    def _models(self) -> dict[str, Any]:
        config = self.server.engine.vllm_config
        created = int(time.time())
        return {
            "object": "list",
            "data": [
                {
                    "id": config.served_model_name,
                    "object": "model",
                    "created": created,
                    "owned_by": "vllm",
                    "root": config.model,
                    "parent": None,
                    "max_model_len": config.max_model_len,
                    "permission": [
                        {
                            "id": f"modelperm-{secrets.token_hex(8)}",
                            "object": "model_permission",
                            "created": created,
                            "allow_create_engine": False,
                            "allow_sampling": True,
                            "allow_logprobs": True,
                            "allow_search_indices": False,
                            "allow_view": True,
                            "allow_fine_tuning": False,
                            "organization": "*",
                            "group": None,
                            "is_blocking": False,
                        }
                    ],
                }
            ]
            + [
                {
                    "id": name,
                    "object": "model",
                    "created": created,
                    "owned_by": "vllm",
                    "root": path,
                    "parent": config.served_model_name,
                    "max_model_len": None,
                }
                for name, path in config.lora_modules.items()
            ],
        }

    def _collective_rpc(self) -> None:
        body = self._body()
        method = body.get("method")
        if not method:
            raise RequestError(400, "Missing 'method' in request body", "Bad Request")
        timeout = body.get("timeout")
        results = self.server.engine.client.call(
            "collective_rpc", method, timeout, tuple(body.get("args") or ()), body.get("kwargs") or {}
        )
        self._send(200, {"results": [_rpc_result(result) for result in results]})

    def _sleep(self, query: str) -> None:
        level = int(parse_qs(query).get("level", ["1"])[0])
        self.server.engine.client.call("sleep", level)
        self._send(200)

    def _wake_up(self, query: str) -> None:
        tags = parse_qs(query).get("tags") or None
        self.server.engine.client.call("wake_up", tags)
        self._send(200)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_HEAD(self) -> None:
        self._dispatch("GET")


def build_http_server(engine: LLMEngine, sock: socket.socket, args: argparse.Namespace) -> _Server:
    server = _Server(sock.getsockname()[:2], Handler, bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    server.engine = engine
    server.api_key = args.api_key or ([os.environ["VLLM_API_KEY"]] if os.environ.get("VLLM_API_KEY") else None)
    return server


def serve_http(engine: LLMEngine, sock: socket.socket, listen_address: str, args: argparse.Namespace) -> None:
    """Serve until SIGTERM/SIGINT or until the engine core dies; then shut the engine down."""
    server = build_http_server(engine, sock, args)
    logger.info("Starting vLLM API server 0 on %s", listen_address)
    logger.info("Available routes are:")
    for path, methods in (
        ("/health", "GET"),
        ("/metrics", "GET"),
        ("/version", "GET"),
        ("/v1/models", "GET"),
        ("/v1/completions", "POST"),
        *(
            (("/collective_rpc", "POST"), ("/sleep", "POST"), ("/wake_up", "POST"), ("/is_sleeping", "GET"))
            if envs.server_dev_mode()
            else ()
        ),
    ):
        logger.info("Route: %s, Methods: %s", path, methods)
    stopping = threading.Event()

    def stop(*_: Any) -> None:
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    def engine_died() -> None:
        if not stopping.is_set():
            logger.error("Engine core process died unexpectedly; shutting down the API server.")
            flush_handlers()
            stop()

    engine.client.when_dead(engine_died)
    print(f"(APIServer pid={os.getpid()}) INFO:     Started server process [{os.getpid()}]", flush=True)
    print(f"(APIServer pid={os.getpid()}) INFO:     Waiting for application startup.", flush=True)
    print(f"(APIServer pid={os.getpid()}) INFO:     Application startup complete.", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        print(f"(APIServer pid={os.getpid()}) INFO:     Shutting down", flush=True)
        engine.shutdown(timeout=5)
        sock.close()
        flush_handlers()
    if not engine.client.dead or stopping.is_set():
        return
    sys.exit(1)


def _non_default_args(args: argparse.Namespace) -> dict[str, Any]:
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    defaults = vars(make_arg_parser(FlexibleArgumentParser()).parse_args([]))
    return {
        key: value
        for key, value in sorted(vars(args).items())
        if key in defaults and value != defaults[key] and not callable(value)
    }


def run_server(args: argparse.Namespace) -> None:
    """`vllm serve`: bind, start the engine core, serve."""
    from vllm.config import create_engine_config
    from vllm.entrypoints.common.cli_args import validate_parsed_serve_args
    from vllm.plugins import load_general_plugins
    from vllm.v1.engine.core_client import EngineCoreClient

    set_process_label("APIServer")
    logger.info("vLLM API server version %s", __version__)
    logger.info("non-default args: %s", _non_default_args(args))
    load_general_plugins()
    validate_parsed_serve_args(args)
    listen_address, sock = bind_server_socket(args)
    vllm_config = create_engine_config(args)
    flush_handlers()
    client = EngineCoreClient(vllm_config)
    engine = LLMEngine(vllm_config, client)
    serve_http(engine, sock, listen_address, args)


__all__ = ["bind_server_socket", "build_http_server", "run_server", "serve_http"]
