"""``vllm.entrypoints.cli.snapshot``: the create parser is the full serve parser, and ``validate_create_args``
refuses what a snapshot cannot hold, before anything starts (vLLM's own words)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
from vllm.entrypoints.cli import snapshot as snapshot_cli
from vllm.utils.argparse_utils import FlexibleArgumentParser

MODEL = "vsnap/tiny-qwen3"
REVISION = "b04193068dc9e2d037b36de7fec6ef00cdea53c5"


def parse(*argv: str) -> argparse.Namespace:
    parser = FlexibleArgumentParser()
    subparsers = parser.add_subparsers(dest="subparser", required=True)
    snapshot_cli.SnapshotSubcommand(create_requested=argv[:1] == ("create",)).subparser_init(subparsers)
    return parser.parse_args(["snapshot", *argv])


@pytest.fixture(scope="module")
def create_args() -> argparse.Namespace:
    return parse("create", MODEL, "--snapshot-dir=/tmp/snapshot", "--revision", REVISION)


def test_pinned_remote_model_is_accepted(create_args: argparse.Namespace) -> None:
    snapshot_cli.validate_create_args(create_args)
    assert create_args.model_tag == MODEL and create_args.snapshot_dir == "/tmp/snapshot"


@pytest.mark.parametrize(
    ("attribute", "value", "message"),
    [
        ("revision", "main", "immutable remote model and 40-character --revision"),
        ("revision", REVISION[:12], "immutable remote model and 40-character --revision"),
        ("revision", "z" * 40, "immutable remote model and 40-character --revision"),
        ("model_tag", "LOCAL", "immutable remote model and 40-character --revision"),
        ("tensor_parallel_size", 2, "snapshot create currently requires tensor parallel size 1"),
        ("data_parallel_size", 2, "snapshot create currently requires data parallel size 1"),
        ("api_key", ["k"], "one unauthenticated plaintext HTTP server"),
        ("headless", True, "one unauthenticated plaintext HTTP server"),
        ("ssl_certfile", "/c.pem", "one unauthenticated plaintext HTTP server"),
        ("logprobs_mode", "raw_logits", "snapshot canary requires a log-probability mode"),
        ("speculative_config", {}, "snapshot create does not support speculative decoding"),
    ],
)
def test_create_refuses(
    attribute: str, value: Any, message: str, create_args: argparse.Namespace, tmp_path: Path
) -> None:
    args = argparse.Namespace(**vars(create_args))
    setattr(args, attribute, str(tmp_path) if value == "LOCAL" else value)
    with pytest.raises(ValueError, match=message):
        snapshot_cli.validate_create_args(args)


def test_api_key_in_the_environment_is_refused(
    create_args: argparse.Namespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "k")
    with pytest.raises(ValueError, match="one unauthenticated plaintext HTTP server"):
        snapshot_cli.validate_create_args(create_args)


def test_restore_and_inspect_parsers() -> None:
    restore = parse("restore", "/a", "--port", "9001")
    assert (restore.snapshot_dir, restore.host, restore.port) == ("/a", None, 9001)
    assert parse("restore", "/a").port == 8000
    assert parse("inspect", "/a").snapshot_dir == "/a"
    with pytest.raises(SystemExit):
        parse("list")
