"""Real vLLM (the released 0.33.0 wheel's snapshot code) against the reference: its manifest model accepts the
reference's artifact, its `inspect_snapshot` output equals the reference's `vllm snapshot inspect`, and its
`validate_create_args` gives the same messages the reference's CLI does (exit 1), for the same arguments."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from tests.reference.refsupport import ARTIFACT, MODEL, REVISION, Lane, LaneFactory, RealVllm, create_artifact

BAD_CREATE_ARGS: list[list[str]] = [
    [MODEL],
    [MODEL, "--revision", "main"],
    [MODEL, "--revision", REVISION[:39]],
    [MODEL, "--revision", REVISION[:-1] + "g"],
    ["/tmp", "--revision", REVISION],
    [MODEL, "--revision", REVISION, "--tensor-parallel-size", "2"],
    [MODEL, "--revision", REVISION, "-pp", "2"],
    [MODEL, "--revision", REVISION, "--data-parallel-size", "2"],
    [MODEL, "--revision", REVISION, "--prefill-context-parallel-size", "2"],
    [MODEL, "--revision", REVISION, "--api-key", "secret"],
    [MODEL, "--revision", REVISION, "--api-server-count", "2"],
    [MODEL, "--revision", REVISION, "--headless"],
    [MODEL, "--revision", REVISION, "--grpc"],
    [MODEL, "--revision", REVISION, "--uds", "/tmp/vllm.sock"],
    [MODEL, "--revision", REVISION, "--middleware", "my.middleware"],
    [MODEL, "--revision", REVISION, "--ssl-keyfile", "key.pem"],
    [MODEL, "--revision", REVISION, "--ssl-ciphers", "ECDHE"],
    [MODEL, "--revision", REVISION, "--logprobs-mode", "raw_logits"],
    [MODEL, "--revision", REVISION, "--logprobs-mode", "processed_logits"],
    [
        MODEL,
        "--revision",
        REVISION,
        "--speculative-config",
        '{"method": "ngram", "num_speculative_tokens": 2}',
    ],
]

NAMESPACE_DUMP = """
import json, sys
from vllm.entrypoints.common.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = make_arg_parser(FlexibleArgumentParser())
parser.add_argument("--snapshot-dir", required=True)
print(json.dumps([vars(parser.parse_args([*argv, "--snapshot-dir", "/vsnap/work/never"]))
                  for argv in json.loads(sys.argv[1])]))
"""


@pytest.fixture(scope="module")
def head_lane_with_artifact(lane_factory: LaneFactory) -> Lane:
    lane: Lane = lane_factory("head")
    created = create_artifact(lane)
    assert created.code == 0, created.stderr
    return lane


@pytest.mark.docker
def test_real_manifest_model_accepts_the_artifact_and_inspect_output_is_identical(
    head_lane_with_artifact: Lane, real_vllm: RealVllm, tmp_path: Path
) -> None:
    lane = head_lane_with_artifact
    artifact = tmp_path / "artifact"
    artifact.mkdir(mode=0o700)
    manifest_text = lane.read(f"{ARTIFACT}/manifest.json")
    (artifact / "manifest.json").write_text(manifest_text)
    (artifact / "manifest.json").chmod(0o600)
    real = real_vllm.run("manifest", str(artifact))
    assert real["ok"], real
    ours = lane.exec(["vllm", "snapshot", "inspect", ARTIFACT])
    assert ours.code == 0
    assert ours.stdout == real["rendered"] + "\n"
    # The published file is what vLLM writes: compact, key-sorted JSON.
    assert manifest_text == json.dumps(json.loads(manifest_text), sort_keys=True, separators=(",", ":"))


@pytest.mark.docker
@pytest.mark.parametrize(
    ("mutation", "location"),
    [
        ({"schema_version": True}, "schema_version"),
        ({"oracle_sampled_token_logprob": 0}, "oracle_sampled_token_logprob"),
        ({"unexpected": 1}, "unexpected"),
        ({"boundary": "post-engine-init-pre-http-bind"}, "boundary"),
        ({"cuda_holders": [1]}, "root"),
        ({"oracle_token_ids": [1, 2]}, "oracle_token_ids"),
    ],
)
def test_both_reject_the_same_bad_manifests(
    head_lane_with_artifact: Lane,
    real_vllm: RealVllm,
    tmp_path: Path,
    mutation: dict[str, object],
    location: str,
) -> None:
    lane = head_lane_with_artifact
    manifest = json.loads(lane.read(f"{ARTIFACT}/manifest.json"))
    manifest.update(mutation)
    payload = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
    artifact = tmp_path / "artifact"
    artifact.mkdir(mode=0o700)
    (artifact / "manifest.json").write_text(payload)
    real = real_vllm.run("manifest", str(artifact))
    assert not real["ok"] and real["error"] == f"invalid snapshot manifest: {location}", real
    bad = "/vsnap/work/bad"
    encoded = base64.b64encode(payload.encode()).decode()
    result = lane.sh(
        f"rm -rf {bad} && mkdir -m 0700 {bad} && echo {encoded} | base64 -d > {bad}/manifest.json "
        f"&& vllm snapshot inspect {bad}"
    )
    assert result.code == 1 and result.stdout == ""
    last = result.stderr.rstrip().splitlines()[-1]
    assert last == f"vllm.snapshot.manifest.SnapshotCompatibilityError: invalid snapshot manifest: {location}"


@pytest.mark.docker
def test_create_validation_matches_real_vllm(
    head_lane_with_artifact: Lane, real_vllm: RealVllm, tmp_path: Path
) -> None:
    lane = head_lane_with_artifact
    dumped = lane.exec(["python3", "-c", NAMESPACE_DUMP, json.dumps(BAD_CREATE_ARGS)])
    assert dumped.code == 0, dumped.stderr
    namespaces = tmp_path / "namespaces.json"
    namespaces.write_text(dumped.stdout)
    expected = real_vllm.run("validate-create", str(namespaces))
    assert all(isinstance(message, str) for message in expected), expected
    assert len(set(expected)) >= 6
    for argv, message in zip(BAD_CREATE_ARGS, expected, strict=True):
        result = lane.exec(["vllm", "snapshot", "create", *argv, "--snapshot-dir", "/vsnap/work/never"], 60)
        assert result.code == 1, (argv, result.stderr)
        assert result.stderr.rstrip().splitlines()[-1] == f"ValueError: {message}", argv
        assert "Traceback (most recent call last)" in result.stderr
        assert result.stdout == ""
    assert lane.exec(["test", "-e", "/vsnap/work/never"]).code == 1


@pytest.mark.docker
@pytest.mark.parametrize(
    "argv",
    [
        ["snapshot", "create", MODEL, "--revision", REVISION],
        ["snapshot", "create", MODEL, "--snapshot-dir", "/x", "--no-such-option"],
        ["snapshot", "restore"],
        ["snapshot", "restore", "/x", "--port", "eighty"],
        ["snapshot", "inspect"],
        ["snapshot", "list"],
        ["serve", MODEL, "--no-such-option"],
        ["serve", MODEL, "--dtype", "float64"],
    ],
)
def test_usage_errors_exit_2(head_lane_with_artifact: Lane, argv: list[str]) -> None:
    result = head_lane_with_artifact.exec(["vllm", *argv], 60)
    assert result.code == 2, result.stderr
    assert "usage: " in result.stderr and "error: " in result.stderr


@pytest.mark.docker
def test_snapshot_help_lists_the_three_subcommands(head_lane_with_artifact: Lane) -> None:
    result = head_lane_with_artifact.exec(
        ["python3", "-X", "importtime", "/usr/local/bin/vllm", "snapshot", "--help"], 60
    )
    assert result.code == 0
    assert "{create,inspect,restore}" in result.stdout
    for line in (
        "Create a snapshot from an initialized TP1 engine.",
        "Inspect a snapshot without restoring it.",
        "Restore a same-host TP1 snapshot.",
    ):
        assert line in result.stdout
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    assert not {"torch", "vllm.snapshot.controller", "vllm.snapshot.server"} & imported
