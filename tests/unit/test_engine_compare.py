from __future__ import annotations

import hashlib

from vsnap_qual import checks, model
from vsnap_qual.engine import client
from vsnap_qual.engine.client import CanaryOutput


def test_canary_compare_follows_oracles_match() -> None:
    ref = CanaryOutput("p", [12095], " Paris", -0.4242669641971588)
    same = checks.compare_canary(ref, CanaryOutput("p", [12095], " Paris", -0.4242669641971588), 1e-3)
    assert same["ok"] and same["bit_exact"]
    close = checks.compare_canary(ref, CanaryOutput("p", [12095], " Paris", -0.4240), 1e-3)
    assert close["ok"] and not close["bit_exact"]
    far = checks.compare_canary(ref, CanaryOutput("p", [12095], " Paris", -0.43), 1e-3)
    assert not far["ok"]
    other = checks.compare_canary(ref, CanaryOutput("p", [11], " Lyon", -0.4242669641971588), 1e-3)
    assert not other["ok"] and not other["token_ids_equal"] and not other["text_equal"]


def test_digest_compare_names_changes_and_never_counts_unobservable() -> None:
    ref: dict[str, model.Digest] = {
        "a": {"sha256": "1"},
        "b": {"sha256": "2"},
        "c": {"sha256": None},
        "d": {"sha256": "4"},
    }
    got: dict[str, model.Digest] = {"a": {"sha256": "1"}, "b": {"sha256": "X"}, "c": {"sha256": None}}
    result = checks.compare_digests(ref, got)
    assert result["unchanged"] == 1
    assert result["changed"] == ["b"]
    assert result["missing"] == ["d"]
    assert result["unobservable"] == ["c"]
    assert not result["ok"]
    assert checks.compare_digests({"a": {"sha256": "1"}}, {"a": {"sha256": "1"}})["ok"]


def test_kv_log_line_variants() -> None:
    gpu = "(EngineCore pid=7) INFO 11-29 16:31:10 [kv_cache_utils.py:1] GPU KV cache size: 54,048 tokens"
    cpu = (
        "(EngineCore pid=1) INFO 11-29 [kv_cache_utils.py:2327] CPU KV cache size: 1,048,576 tokens, "
        "Maximum concurrency for 512 tokens per request: 2048.00x"
    )
    assert client.kv_from_log(gpu) == 54048
    assert client.kv_from_log(cpu) == 1048576
    assert client.kv_from_log("nothing here") is None


def test_empty_digest_constant_is_the_sha256_of_nothing() -> None:
    assert hashlib.sha256(b"").hexdigest().startswith("e3b0c442")
