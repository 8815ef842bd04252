"""``vllm.snapshot.manifest`` and ``vllm.snapshot.types``: the manifest schema, its private-path rules, identity."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from vllm.snapshot.manifest import (
    SnapshotCompatibilityError,
    SnapshotSecurityError,
    inspect_snapshot,
    read_manifest,
    validate_artifact_root,
    validate_identity,
    write_manifest_atomic,
)
from vllm.snapshot.types import Oracle, oracles_match
from vsnap_fields import identity, manifest


@pytest.fixture
def artifact(tmp_path: Path) -> Path:
    path = tmp_path / "snapshot"
    path.mkdir(mode=0o700)
    return path


# ---- the manifest schema ------------------------------------------------------------------------------------


def test_manifest_round_trip_is_private_and_exact(artifact: Path) -> None:
    written = manifest()
    write_manifest_atomic(artifact, written)
    path = artifact / "manifest.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not (artifact / "manifest.json.tmp").exists()
    assert read_manifest(artifact) == written
    # sorted keys, compact separators
    assert path.read_text() == json.dumps(written.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    assert inspect_snapshot(artifact)["process_tree"] == [100, 101, 102]


def test_manifest_is_written_once(artifact: Path) -> None:
    write_manifest_atomic(artifact, manifest())
    with pytest.raises(SnapshotSecurityError, match="manifest already exists"):
        write_manifest_atomic(artifact, manifest())


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"unexpected": 1}, "Extra inputs are not permitted"),
        ({"schema_version": 2}, "schema version must be integer 1"),
        ({"schema_version": True}, "schema version must be integer 1"),
        ({"boundary": "post-engine-init-pre-http-bind"}, "boundary"),
        ({"cuda_holders": (103,)}, "cuda_holders must be a subset of process_tree"),
        ({"process_tree": (100, 100)}, "process_tree contains duplicate PIDs"),
        ({"process_tree": ()}, "process_tree"),
        ({"process_tree": (0, 102)}, "process_tree"),
        ({"oracle_token_ids": (1, 2)}, "oracle_token_ids"),
        ({"oracle_sampled_token_logprob": math.nan}, "finite float"),
        ({"artifact_bytes": -1}, "artifact_bytes"),
    ],
)
def test_manifest_rejects(changes: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment):
        manifest(**changes)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"artifact_bytes": -1}, "invalid snapshot manifest: artifact_bytes"),
        ({"cuda_holders": [999]}, "invalid snapshot manifest: root"),
        ({"schema_version": "1"}, "invalid snapshot manifest: schema_version"),
    ],
)
def test_read_manifest_names_the_bad_field(change: dict[str, Any], message: str, artifact: Path) -> None:
    payload = {**manifest().model_dump(mode="json"), **change}
    (artifact / "manifest.json").write_text(json.dumps(payload))
    with pytest.raises(SnapshotCompatibilityError) as caught:
        read_manifest(artifact)
    assert str(caught.value) == message


def test_read_manifest_requires_the_manifest(artifact: Path) -> None:
    with pytest.raises(SnapshotSecurityError, match="manifest does not exist"):
        read_manifest(artifact)


# ---- the artifact root ---------------------------------------------------------------------------------------


def test_artifact_root_must_be_a_private_directory(tmp_path: Path) -> None:
    validate_artifact_root(tmp_path / "new", creating=True)
    with pytest.raises(SnapshotSecurityError, match="snapshot path does not exist"):
        validate_artifact_root(tmp_path / "new", creating=False)
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o755)
    with pytest.raises(SnapshotSecurityError, match="snapshot directory must have mode 0700"):
        validate_artifact_root(open_dir, creating=False)
    link = tmp_path / "link"
    link.symlink_to(open_dir)
    with pytest.raises(SnapshotSecurityError, match="snapshot path is a symlink"):
        validate_artifact_root(link, creating=False)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "snap").mkdir(mode=0o700)
    with pytest.raises(SnapshotSecurityError, match="group- or world-writable ancestor"):
        validate_artifact_root(shared / "snap", creating=False)
    a_file = tmp_path / "file"
    a_file.write_text("")
    os.chmod(a_file, 0o600)
    with pytest.raises(SnapshotSecurityError, match="snapshot path is not a directory"):
        validate_artifact_root(a_file, creating=False)


# ---- identity ------------------------------------------------------------------------------------------------


def test_identity_match_passes() -> None:
    validate_identity(manifest(), identity())


def test_identity_mismatch_names_every_differing_field_in_schema_order() -> None:
    changed = identity(environment=(("VLLM_WORKER_MULTIPROC_METHOD", "c" * 64),), gpu_uuid="GPU-other")
    with pytest.raises(SnapshotCompatibilityError) as caught:
        validate_identity(manifest(), changed)
    assert str(caught.value) == "snapshot mismatch: gpu_uuid, environment"


def test_identity_ignores_non_identity_fields() -> None:
    validate_identity(manifest(model="another/model", process_tree=(7,), cuda_holders=(7,)), identity())


# ---- the oracle ----------------------------------------------------------------------------------------------


def test_oracle_holds_exactly_one_finite_token() -> None:
    with pytest.raises(ValueError, match="exactly one token"):
        Oracle((1, 2), "ab", -1.0)
    for bad in (math.nan, math.inf, True):
        with pytest.raises(ValueError, match="finite"):
            Oracle((1,), "a", bad)
    assert Oracle((1,), "a", -2).sampled_token_logprob == -2.0


def test_oracles_match_within_one_thousandth() -> None:
    expected = Oracle((265,), " is", -6.146)
    assert oracles_match(expected, Oracle((265,), " is", -6.146 + 0.0009))
    assert not oracles_match(expected, Oracle((265,), " is", -6.146 + 0.0011))
    assert not oracles_match(expected, Oracle((266,), " is", -6.146))
    assert not oracles_match(expected, Oracle((265,), " was", -6.146))
