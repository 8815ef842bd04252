"""The child's side of the capture barrier: control arguments, ready/release markers, stream detach."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm.snapshot.manifest import ReleaseMarker, ValidationError, _write_json_atomic, validation_path
from vllm.snapshot.types import Oracle

CANARY_PROMPT = "The capital of France is"


class SnapshotBarrierError(RuntimeError):
    """The controller supplied an invalid snapshot release marker."""


@dataclass(frozen=True)
class ListenerConfig:
    host: str | None
    port: int


@dataclass(frozen=True)
class ControlArgs:
    ready_file: Path
    release_file: Path
    release_timeout_s: float


def parse_control_args(argv: list[str]) -> tuple[ControlArgs, list[str]]:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--ready-file", type=Path, required=True)
    parser.add_argument("--release-file", type=Path, required=True)
    parser.add_argument("--release-timeout-s", type=float, default=900.0)
    control, remaining = parser.parse_known_args(argv)
    if remaining and remaining[0] == "--":
        remaining = remaining[1:]
    if control.release_timeout_s <= 0:
        raise ValueError("release timeout must be positive")
    return ControlArgs(control.ready_file, control.release_file, control.release_timeout_s), remaining


def parse_vllm_args(argv: list[str]) -> argparse.Namespace:
    from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="python -m vllm.snapshot.server")
    args = make_arg_parser(parser).parse_args(argv)
    if args.model_tag is not None:
        args.model = args.model_tag
    if args.grpc or args.headless:
        raise ValueError("snapshot server requires the HTTP frontend")
    if args.api_server_count not in (None, 1):
        raise ValueError("snapshot server supports one API server")
    args.api_server_count = None
    validate_parsed_serve_args(args)
    return args


def write_ready_atomic(path: Path, oracle: Oracle) -> None:
    _write_json_atomic(
        path,
        {
            "sampled_token_logprob": oracle.sampled_token_logprob,
            "token_ids": oracle.token_ids,
            "text": oracle.text,
        },
    )


def read_release_marker(path: Path) -> ListenerConfig:
    if stat.S_ISLNK(path.lstat().st_mode):
        raise SnapshotBarrierError("release marker must not be a symlink")
    try:
        payload = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise SnapshotBarrierError("release marker is not valid JSON") from error
    try:
        marker = ReleaseMarker.validate(payload)
    except ValidationError as error:
        raise SnapshotBarrierError(f"release marker is invalid: {validation_path(error)}") from error
    return ListenerConfig(host=marker.host, port=marker.port)


class ReleaseBudget:
    """Polling budget of the release wait. It counts poll sleeps only, so time spent frozen (captured) does
    not count; a restored process continues with what was left at capture."""

    def __init__(self, timeout_s: float) -> None:
        if timeout_s <= 0:
            raise ValueError("release timeout must be positive")
        self.remaining_s = timeout_s


async def wait_for_release_marker(
    path: Path, *, timeout_s: float, poll_interval_s: float = 0.05, budget: ReleaseBudget | None = None
) -> ListenerConfig:
    budget = budget or ReleaseBudget(timeout_s)
    if poll_interval_s <= 0:
        raise ValueError("release poll interval must be positive")
    while not path.exists():
        if budget.remaining_s <= 0:
            raise TimeoutError(f"release marker not found before timeout: {path}")
        delay = min(poll_interval_s, budget.remaining_s)
        await asyncio.sleep(delay)
        budget.remaining_s -= delay
    return read_release_marker(path)


def detach_snapshot_streams() -> None:
    """Point stdout/stderr at /dev/null so the captured image holds no launch-log descriptors."""
    sys.stdout.flush()
    sys.stderr.flush()
    sink = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(sink, sys.stdout.fileno())
        os.dup2(sink, sys.stderr.fileno())
    finally:
        os.close(sink)


def oracle_from_request_output(request_output: Any, error_type: type[Exception]) -> Oracle:
    try:
        candidate = request_output.outputs[0]
        token_ids = tuple(candidate.token_ids)
        (sampled,) = token_ids
        return Oracle(token_ids, candidate.text, candidate.logprobs[0][sampled].logprob)
    except ValueError as error:
        raise error_type("snapshot canary must produce exactly one finite token logprob") from error
    except (AttributeError, IndexError, KeyError, TypeError) as error:
        raise error_type("snapshot canary did not return sampled token logprob") from error
