"""The OpenAI-compatible HTTP server (stdlib ThreadingHTTPServer) and `vllm serve`."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from vllm import envs
from vllm.entrypoints.openai.protocol import RequestError, error_body, system_fingerprint
from vllm.entrypoints.openai.serving_chat import chat_events, chat_response, plan_chat
from vllm.entrypoints.openai.serving_completion import completion_events, completion_response, plan_completion
from vllm.entrypoints.openai.serving_tokenization import detokenize, tokenize
from vllm.logger import flush_handlers, init_logger, set_process_label
from vllm.v1.engine.async_llm import LLMEngine
from vllm.version import __version__

logger = init_logger(__name__)

__all__ = ["RequestError", "bind_server_socket", "build_http_server", "error_body", "run_server", "serve_http"]


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
    name = config.served_model_name
    model = f'engine="0",model_name="{name}"'
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
        "# HELP vllm:request_success_total Count of successfully processed requests.",
        "# TYPE vllm:request_success_total counter",
        *(
            f'vllm:request_success_total{{engine="0",finished_reason="{reason}",model_name="{name}"}} {float(count)}'
            for reason, count in info["request_success"].items()
        ),
        "# HELP vllm:prompt_tokens_by_source_total Number of prompt tokens by source.",
        "# TYPE vllm:prompt_tokens_by_source_total counter",
        *(
            f'vllm:prompt_tokens_by_source_total{{engine="0",model_name="{name}",source="{source}"}} {float(count)}'
            for source, count in (
                ("local_compute", info["num_prompt_tokens"] - info["num_cached_prompt_tokens"]),
                ("local_cache_hit", info["num_cached_prompt_tokens"]),
                ("external_kv_transfer", 0),
            )
        ),
        "# HELP vllm:prompt_tokens_cached_total Number of cached prompt tokens (local + external).",
        "# TYPE vllm:prompt_tokens_cached_total counter",
        f"vllm:prompt_tokens_cached_total{{{model}}} {float(info['num_cached_prompt_tokens'])}",
        "# HELP vllm:prompt_tokens_cached_by_source_total Prefix-cache hit tokens by the cache tier that supplied "
        "them.",
        "# TYPE vllm:prompt_tokens_cached_by_source_total counter",
        *(
            f'vllm:prompt_tokens_cached_by_source_total{{engine="0",model_name="{name}",source="{source}"}} '
            f"{float(info['num_cached_prompt_tokens'] if source == 'device' else 0)}"
            for source in ("device", "host", "p2p", "disk", "external_unspecified")
        ),
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
    plan = plan_completion(engine, body)
    answers = engine.generate_batch(plan.prompts, plan.params, plan.lora_name)
    return completion_response(engine, plan, answers, system_fingerprint(config))


def _chat(engine: LLMEngine, body: dict[str, Any]) -> dict[str, Any]:
    plan = plan_chat(engine, body)
    return chat_response(engine, plan, engine.generate_batch([plan.prompt_ids], plan.params, plan.lora_name))


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

    def _send_events(self, events: Iterator[str]) -> None:
        """A streamed answer: server-sent events in HTTP/1.1 chunks, each written as soon as it is made. A client
        that goes away closes ``events`` (its requests are aborted in the engine core) and the connection."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        with contextlib.closing(events):
            try:
                for event in events:
                    data = event.encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.write(b"0\r\n\r\n")
            except OSError:  # the client went away mid-stream
                self.close_connection = True
        client = f"{self.client_address[0]}:{self.client_address[1]}"
        print(
            f'(APIServer pid={os.getpid()}) INFO:     {client} - "{self.command} {self.path} '
            f'{self.request_version}" 200 OK',
            flush=True,
        )

    def _completions(self) -> None:
        engine = self.server.engine
        body = self._body()
        if body.get("stream"):
            self._send_events(completion_events(engine, plan_completion(engine, body)))
        else:
            self._send(200, _completion(engine, body))

    def _chat_completions(self) -> None:
        engine = self.server.engine
        body = self._body()
        if body.get("stream"):
            self._send_events(chat_events(engine, plan_chat(engine, body)))
        else:
            self._send(200, _chat(engine, body))

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
            ("POST", "/v1/completions"): self._completions,
            ("POST", "/v1/chat/completions"): self._chat_completions,
            ("POST", "/tokenize"): lambda: self._send(200, tokenize(engine, self._body())),
            ("POST", "/detokenize"): lambda: self._send(200, detokenize(engine, self._body())),
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
        ("/v1/chat/completions", "POST"),
        ("/tokenize", "POST"),
        ("/detokenize", "POST"),
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
