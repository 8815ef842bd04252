"""`vllm snapshot create|inspect|restore`: the parser and the create-argument rules of vLLM's snapshot CLI."""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path
from typing import Any

from vllm.entrypoints.cli.types import CLISubcommand

_HEX = frozenset("0123456789abcdefABCDEF")
_PARALLEL = (
    ("tensor parallel", "tensor_parallel_size"),
    ("pipeline parallel", "pipeline_parallel_size"),
    ("data parallel", "data_parallel_size"),
    ("prefill context parallel", "prefill_context_parallel_size"),
)
_SSL_OPTIONS = ("ssl_keyfile", "ssl_certfile", "ssl_ca_certs", "enable_ssl_refresh", "ssl_ciphers")
_SPECULATIVE_OPTIONS = ("speculative_config", "spec_method", "spec_model", "spec_tokens")


def validate_create_args(args: argparse.Namespace) -> None:
    """Reject what snapshot create does not support, before anything starts (ValueError -> exit 1)."""
    model = str(getattr(args, "model_tag", None) or args.model)
    revision = str(getattr(args, "revision", None) or "")
    pinned = len(revision) == 40 and set(revision) <= _HEX
    if Path(model).exists() or not pinned:
        raise ValueError("snapshot create requires an immutable remote model and 40-character --revision")
    for label, option in _PARALLEL:
        if getattr(args, option) != 1:
            raise ValueError(f"snapshot create currently requires {label} size 1")
    frontend_unsupported = bool(
        args.api_server_count not in (None, 1)
        or args.grpc
        or args.headless
        or args.api_key
        or os.environ.get("VLLM_API_KEY")
        or args.uds
        or args.middleware
        or any(getattr(args, option) for option in _SSL_OPTIONS)
    )
    if frontend_unsupported:
        raise ValueError("snapshot create requires one unauthenticated plaintext HTTP server")
    if args.logprobs_mode in {"raw_logits", "processed_logits"}:
        raise ValueError("snapshot canary requires a log-probability mode")
    if any(getattr(args, option, None) is not None for option in _SPECULATIVE_OPTIONS):
        raise ValueError("snapshot create does not support speculative decoding")
    if (platform.system(), platform.machine()) != ("Linux", "x86_64"):
        raise ValueError("snapshot create requires Linux x86_64")


def run_create(args: argparse.Namespace) -> None:
    validate_create_args(args)
    from vllm.snapshot.controller import create_snapshot

    create_snapshot(args)


def run_inspect(args: argparse.Namespace) -> None:
    from vllm.snapshot.manifest import inspect_snapshot

    print(json.dumps(inspect_snapshot(Path(args.snapshot_dir)), indent=2))


def _raise_terminated(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def run_restore(args: argparse.Namespace) -> None:
    import importlib.util
    import signal

    from vllm.snapshot.controller import restore_snapshot

    # Head behaviour (the flavour with SnapshotSession, vllm/snapshot/engine.py): a SIGTERM'd restore raises, so
    # the controller's BaseException cleanup terminates the pinned restored tree at once. As released (base),
    # SIGTERM ends the command by Python's default action and the restored child lives on until its deadline.
    if importlib.util.find_spec("vllm.snapshot.engine") is not None:
        signal.signal(signal.SIGTERM, _raise_terminated)
    restore_snapshot(args)


class SnapshotSubcommand(CLISubcommand):
    name = "snapshot"

    def __init__(self, *, create_requested: bool = False) -> None:
        self.create_requested = create_requested

    @staticmethod
    def cmd(args: argparse.Namespace) -> None:
        args.snapshot_dispatch(args)

    def subparser_init(self, subparsers: Any) -> argparse.ArgumentParser:
        parser = subparsers.add_parser(
            self.name,
            help="Create, inspect, or restore an initialized vLLM snapshot.",
            usage="vllm snapshot <create|inspect|restore> [options]",
        )
        actions = parser.add_subparsers(required=True, dest="snapshot_action")
        create = actions.add_parser("create", help="Create a snapshot from an initialized TP1 engine.")
        if self.create_requested:
            from vllm.entrypoints.common.cli_args import make_arg_parser

            create = make_arg_parser(create)
        else:
            create.add_argument("model_tag", nargs="?")
        create.add_argument("--snapshot-dir", required=True)
        create.set_defaults(snapshot_dispatch=run_create)

        inspect = actions.add_parser("inspect", help="Inspect a snapshot without restoring it.")
        inspect.add_argument("snapshot_dir")
        inspect.set_defaults(snapshot_dispatch=run_inspect)

        restore = actions.add_parser("restore", help="Restore a same-host TP1 snapshot.")
        restore.add_argument("snapshot_dir")
        restore.add_argument("--host", default=None)
        restore.add_argument("--port", type=int, default=8000)
        restore.set_defaults(snapshot_dispatch=run_restore)
        return parser


def cmd_init(*, create_requested: bool = False) -> list[CLISubcommand]:
    return [SnapshotSubcommand(create_requested=create_requested)]
