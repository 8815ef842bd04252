"""``vllm.snapshot.controller`` and ``vllm.snapshot.runtime``: argv stripping, secret redaction, the environment
identity, the child's environment, the link-remap inventory. Nothing here starts an engine or runs CRIU: the
subprocess and the host identity are replaced where a test would otherwise reach them."""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest.mock import create_autospec

import pytest
from vllm.snapshot import runtime
from vllm.snapshot.controller import _child_engine_argv
from vllm.snapshot.runtime import LocalSnapshotTools, ProcessInventory, SnapshotCreateError
from vllm.snapshot.types import Oracle
from vsnap_fields import identity

REVISION = "b04193068dc9e2d037b36de7fec6ef00cdea53c5"


# ---- the child's argv ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "snapshot_dir",
    [
        ["--snapshot-dir", "/s"],
        ["--snapshot_dir", "/s"],
        ["--snapshot-d", "/s"],
        ["--snapshot-dir=/s"],
        ["--snapshot_dir=/s"],
        ["--snapshot-d=/s"],
    ],
)
def test_child_argv_strips_every_spelling_of_snapshot_dir(snapshot_dir: list[str]) -> None:
    argv = ("vsnap/tiny-qwen3", *snapshot_dir, "--revision", REVISION, "--dtype", "float32")
    child = _child_engine_argv(argparse.Namespace(), argv)
    assert child == ("vsnap/tiny-qwen3", "--revision", REVISION, "--dtype", "float32", "--enable-sleep-mode")


def test_child_argv_keeps_an_explicit_sleep_mode_once() -> None:
    child = _child_engine_argv(argparse.Namespace(), ("m", "--enable-sleep-mode", "--snapshot-dir", "/s"))
    assert child == ("m", "--enable-sleep-mode")


def test_child_argv_falls_back_to_the_process_argv_then_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["vllm", "snapshot", "create", "m", "--snapshot-dir", "/s", "--seed", "1"])
    assert _child_engine_argv(argparse.Namespace(model_tag="ignored"), None) == (
        "m",
        "--seed",
        "1",
        "--enable-sleep-mode",
    )
    monkeypatch.setattr(sys, "argv", ["python", "-c"])
    assert _child_engine_argv(argparse.Namespace(model_tag="m"), None) == ("m", "--enable-sleep-mode")
    with pytest.raises(SnapshotCreateError, match="requires a model argument"):
        _child_engine_argv(argparse.Namespace(model_tag=None, model=None), None)


# ---- secret redaction in the manifest's engine_argv ------------------------------------------------------------


def make_manifest(engine_argv: tuple[str, ...], tmp_path: Path) -> Any:
    tools = create_autospec(LocalSnapshotTools, instance=True)
    tools.current_identity.return_value = identity()
    tools._artifact_bytes.return_value = 0
    args = argparse.Namespace(model_tag="vsnap/tiny-qwen3", revision=REVISION, tokenizer_revision=None)
    return LocalSnapshotTools.make_manifest(
        tools, args, engine_argv, ProcessInventory(100, (100, 101), (101,), "GPU-x"), Oracle((1,), "a", -1.0), tmp_path
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("--api-key", "S1", "S2"), ("--api-key", "***", "***")),
        (("--api-key=S1",), ("--api-key=***",)),
        (("--api_key", "S1"), ("--api_key", "***")),
        (("--api-k", "S1", "--seed", "1"), ("--api-k", "***", "--seed", "1")),
        (("--hf-token", "S1", "S2"), ("--hf-token", "***", "S2")),
        (("--hf_tok=S1",), ("--hf_tok=***",)),
        (("--hf-overrides", "{}"), ("--hf-overrides", "{}")),
    ],
)
def test_manifest_redacts_secret_options(argv: tuple[str, ...], expected: tuple[str, ...], tmp_path: Path) -> None:
    made = make_manifest(("vsnap/tiny-qwen3", *argv), tmp_path)
    assert made.engine_argv == ("vsnap/tiny-qwen3", *expected)
    assert "S1" not in " ".join(made.engine_argv)
    assert made.tokenizer_revision == REVISION and made.served_model_name == "vsnap/tiny-qwen3"


# ---- the environment identity --------------------------------------------------------------------------------


def env_identity() -> dict[str, str]:
    return dict(LocalSnapshotTools()._environment_identity())


def test_environment_identity_hashes_values_and_leaves_out_the_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_VSNAP_SETTING", "secret-value")
    monkeypatch.setenv("VLLM_API_KEY", "secret-key")
    monkeypatch.setenv("VLLM_SNAPSHOT_TIMEOUT_S", "30")
    monkeypatch.setenv("UNRELATED_SETTING", "x")
    found = env_identity()
    assert found["VLLM_VSNAP_SETTING"] == hashlib.sha256(b"VLLM_VSNAP_SETTING\0secret-value").hexdigest()
    assert "secret-value" not in str(found) and "secret-key" not in str(found)
    assert not {"VLLM_API_KEY", "VLLM_SNAPSHOT_TIMEOUT_S", "UNRELATED_SETTING"} & set(found)
    monkeypatch.setenv("VLLM_VSNAP_SETTING", "other")
    assert env_identity()["VLLM_VSNAP_SETTING"] != found["VLLM_VSNAP_SETTING"]


def test_environment_identity_counts_the_worker_method_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    implicit = env_identity()
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    assert env_identity() == implicit


def test_environment_identity_counts_the_nccl_ib_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM 0.32.0 added the child default NCCL_IB_DISABLE=1 and counts it in the identity when unset (0.31.0 does
    not: there, unset and "1" are two different environments)."""
    monkeypatch.delenv("NCCL_IB_DISABLE", raising=False)
    implicit = env_identity()
    monkeypatch.setenv("NCCL_IB_DISABLE", "1")
    assert env_identity() == implicit
    monkeypatch.setenv("NCCL_IB_DISABLE", "0")
    assert env_identity() != implicit


def test_snapshot_timeout_must_be_positive_and_finite(monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("0", "-1", "nan", "inf"):
        monkeypatch.setenv("VLLM_SNAPSHOT_TIMEOUT_S", value)
        with pytest.raises(ValueError, match="positive finite number"):
            LocalSnapshotTools()


# ---- the child's environment ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("configured", "expected"), [(None, "1"), ("0", "0")])
def test_child_environment_defaults_nccl_ib_disable(
    configured: str | None, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM 0.32.0 launches the snapshot child with NCCL_IB_DISABLE=1 unless set (0.31.0 passes the parent's as is),
    without changing the parent's environment."""
    if configured is None:
        monkeypatch.delenv("NCCL_IB_DISABLE", raising=False)
    else:
        monkeypatch.setenv("NCCL_IB_DISABLE", configured)
    before = os.environ.copy()
    process = create_autospec(subprocess.Popen, instance=True)
    process.pid = 4242
    popen = create_autospec(subprocess.Popen, return_value=process)
    monkeypatch.setattr(runtime.subprocess, "Popen", popen)
    assert LocalSnapshotTools().launch_child(tmp_path, ("m",)) == 4242
    env = popen.call_args.kwargs["env"]
    assert env.get("NCCL_IB_DISABLE") == expected
    assert env["VLLM_WORKER_MULTIPROC_METHOD"] == os.environ.get("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    assert popen.call_args.args[0][1:3] == ["-m", "vllm.snapshot.server"]
    assert os.environ == before


# ---- CRIU's link remaps ----------------------------------------------------------------------------------------


def test_link_remap_inventory_counts_only_numbered_remaps(tmp_path: Path) -> None:
    tools = LocalSnapshotTools()
    tools.shm_dir = tmp_path
    for name in ("link_remap.12", "link_remap.x", "psm_0abc", "link_remap."):
        (tmp_path / name).write_text("")
    assert tools._link_remap_names() == {"link_remap.12"}


def test_link_remap_inventory_error_is_reported(tmp_path: Path) -> None:
    """vLLM 0.32.0 refuses an unreadable /dev/shm ("could not inventory CRIU link remaps"); 0.31.0 sees no remaps."""
    tools = LocalSnapshotTools()
    tools.shm_dir = tmp_path / "missing"
    with pytest.raises(SnapshotCreateError, match="could not inventory CRIU link remaps"):
        tools._link_remap_names()
