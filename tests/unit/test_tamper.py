"""The weight-tamper fault's parts (``vsnap_qual.faults.kinds.weights``): the private copy and the flip on real
files, the tensor chosen, and the judgement of each outcome."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest

from vsnap_qual.engine.client import CanaryOutput
from vsnap_qual.faults.kinds import weights as tamper
from vsnap_qual.faults.kinds.weights import TensorSpan
from vsnap_qual.model import Canary, Digest, WeightTamper

REVISION = "7f3a9c2e5b1d4086a2e4c6b8d0f1a3c5e7092b4d"


def _safetensors(tensors: dict[str, tuple[str, list[int], bytes]]) -> bytes:
    header, data, offset = {}, b"", 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        data, offset = data + raw, offset + len(raw)
    encoded = json.dumps(header).encode()
    return struct.pack("<Q", len(encoded)) + encoded + data


def _hf_cache(root: Path) -> Path:
    """An HF hub cache as huggingface_hub lays it out: snapshot files are relative links to blobs."""
    repo = root / "hub" / "models--org--tiny"
    blobs, snapshot = repo / "blobs", repo / "snapshots" / REVISION
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    files = {
        "model.safetensors": _safetensors(
            {"small": ("F32", [2], bytes(8)), "embed.weight": ("F32", [1024, 2], bytes(range(256)) * 32)}
        ),
        "config.json": b"{}",
    }
    for name, content in files.items():
        blob = blobs / hashlib.sha256(content).hexdigest()
        blob.write_bytes(content)
        (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    return snapshot


def _script(script: str, *args: str, home: Path) -> str:
    env = {**os.environ, "HF_HOME": str(home)}
    env.pop("HF_HUB_CACHE", None)
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, check=True)
    return done.stdout.strip().splitlines()[-1]


def test_the_private_copy_links_everything_but_the_shard_and_the_flip_changes_only_the_copy(tmp_path: Path) -> None:
    snapshot = _hf_cache(tmp_path / "cache")
    original = (snapshot / "model.safetensors").resolve().read_bytes()
    private = tmp_path / "private"
    said = json.loads(_script(tamper.COPY_SCRIPT, "org/tiny", REVISION, str(private), home=tmp_path / "cache"))
    shard = Path(said["shard"])
    assert shard == private / "hub/models--org--tiny/snapshots" / REVISION / "model.safetensors"
    assert not shard.is_symlink() and shard.read_bytes() == original
    config = shard.parent / "config.json"
    assert config.is_symlink() and config.resolve() == (snapshot / "config.json").resolve()
    assert (private / "hub/models--org--tiny/refs/main").read_text() == REVISION
    assert said["sha256"] == hashlib.sha256(original).hexdigest()
    embed = said["tensors"]["embed.weight"]
    assert embed["end"] - embed["start"] == 1024 * 2 * 4 and original[embed["start"] : embed["start"] + 4] == bytes(
        range(4)
    )

    after = _script(tamper.TAMPER_SCRIPT, str(shard), str(embed["start"]), "4096", home=tmp_path / "cache")
    changed = shard.read_bytes()
    assert after == hashlib.sha256(changed).hexdigest() != said["sha256"]
    start = embed["start"]
    assert changed[start : start + 4096] == bytes(b ^ 1 for b in original[start : start + 4096])
    assert changed[:start] == original[:start] and changed[start + 4096 :] == original[start + 4096 :]
    assert (snapshot / "model.safetensors").resolve().read_bytes() == original  # the user's cache untouched


def test_a_missing_revision_is_said_not_raised(tmp_path: Path) -> None:
    _hf_cache(tmp_path / "cache")
    said = json.loads(_script(tamper.COPY_SCRIPT, "org/tiny", "0" * 40, str(tmp_path / "p"), home=tmp_path / "cache"))
    assert said["error"].startswith("no snapshot directory")


def test_the_tensor_damaged_is_the_largest_one_the_ordinary_digests_observe() -> None:
    tensors = cast(  # only the offsets: all choose_tensor reads
        dict[str, TensorSpan],
        {
            "big.packed": {"start": 0, "end": 1000},
            "embed.weight": {"start": 1000, "end": 1500},
            "norm.weight": {"start": 1500, "end": 1510},
        },
    )
    assert tamper.choose_tensor(tensors, ["norm.weight", "embed.weight"]) == "embed.weight"
    assert tamper.choose_tensor(tensors, []) == "big.packed"  # nothing observed by name: the largest


RECORD = WeightTamper(tensor="embed.weight", shard="/w/model.safetensors", length=4096)


def _digests(**shas: str | None) -> dict[str, Digest]:
    return {name: {"sha256": sha} for name, sha in shas.items()}


def _compared(restored: dict[str, Digest], canaries: list[CanaryOutput] | None = None) -> WeightTamper:
    reference: list[Canary] = [{"prompt": "p", "token_ids": [1], "text": "a", "logprob": -0.5}]
    got = canaries if canaries is not None else [CanaryOutput("p", [1], "a", -0.5)]
    return tamper.compare(RECORD, _digests(**{"embed.weight": "e", "n": "n"}), reference, restored, got, 1e-3).copy()


def test_refused_with_a_message_is_as_expected_and_without_one_is_not() -> None:
    assert tamper.problems(RECORD, 1, ["RuntimeError: snapshot oracle mismatch"]) == []
    assert "without a message" in tamper.problems(RECORD, 1, ["", " "])[0]


def test_damage_named_by_the_digests_is_as_expected() -> None:
    loaded = _compared(_digests(**{"embed.weight": "x", "n": "n"}))
    assert loaded["changed"] == ["embed.weight"] and tamper.problems(loaded, 0, []) == []
    answered = _compared(_digests(**{"embed.weight": "e", "n": "n"}), [CanaryOutput("p", [2], "b", -0.5)])
    assert answered["canaries_differ"] == ["p"] and tamper.problems(answered, 0, []) == []


def test_nothing_changed_is_stale_weights_a_finding_against_the_engine() -> None:
    stale = _compared(_digests(**{"embed.weight": "e", "n": "n"}))
    said = tamper.problems(stale, 0, [])
    assert len(said) == 1 and said[0].startswith("finding against the engine:") and "#32718" in said[0]
    assert "4096 bytes of embed.weight" in said[0]


def test_nothing_changed_where_the_harness_cannot_see_is_never_a_pass() -> None:
    blind = _compared(_digests(**{"embed.weight": None, "n": "n"}))
    assert "cannot tell" in tamper.problems(blind, 0, [])[0]
    alone = dict(tamper.compare(RECORD, None, None, None, None, 1e-3))
    assert "no ordinary reference" in tamper.problems(alone, 0, [])[0]
    unasked = {**RECORD, "outcome": "unasked", "error": "ConnectionError"}
    assert "could not be asked" in tamper.problems(unasked, 0, [])[0]


@pytest.mark.parametrize("exit_code", [0, 1])
def test_no_record_no_judgement(exit_code: int) -> None:
    assert tamper.problems(None, exit_code, []) == []


def test_the_outcome_is_said_in_words_for_the_report() -> None:
    loaded = _compared(_digests(**{"embed.weight": "x", "n": "n"}), [CanaryOutput("p", [2], "b", -0.5)])
    said = tamper.outcome_words(loaded, 0)
    assert said == "loaded the damage, served it: the digests name embed.weight; 1 canary(ies) differ ('p')", said
    assert tamper.outcome_words(loaded, 1) == "refused"
    assert tamper.outcome_words(_compared(_digests(**{"embed.weight": "e", "n": "n"})), 0) == "nothing changed"
