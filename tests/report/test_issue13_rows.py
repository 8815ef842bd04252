"""The validation rows for what a broken snapshot does: KV judged from the restores, liveness, multi-token
canaries (pure: a results mapping in, rows out)."""

from __future__ import annotations

from typing import Any

from vsnap_qual import model
from vsnap_qual.report import parse
from vsnap_qual.report.frames import compare_all
from vsnap_qual.report.validation_table import validation_checks


def _step(name: str, **results: Any) -> dict[str, Any]:
    return {"runner": "v1", "arm": "head", "step": name, "outcome": "passed", "results": results}


def _canary(tokens: int, ids: list[int]) -> dict[str, Any]:
    return {"prompt": "p", "token_ids": ids, "text": "x", "logprob": -0.1, "logprobs": [-0.1] * tokens}


def _results(kv_restored: int, alive: bool, diverges: int | None) -> dict[str, Any]:
    ref_long = _canary(4, [1, 2, 3, 4])
    got_long = _canary(4, [1, 2, 3, 4] if diverges is None else [1, 9, 3, 4])
    compare = {
        "prompt": "p",
        "tokens": 4,
        "expected": ref_long,
        "actual": got_long,
        "token_ids_equal": diverges is None,
        "text_equal": True,
        "logprob_delta": 0.0,
        "max_logprob_delta": 0.0,
        "first_divergence": diverges,
        "bit_exact": diverges is None,
        "ok": diverges is None,
    }
    judgement = {
        "restored": kv_restored,
        "created": 4096,
        "ordinary": 4100,
        "ok": kv_restored == 4096,
        "problems": [] if kv_restored == 4096 else [f"KV capacity after restore is {kv_restored:,} tokens"],
    }
    soak = {"alive": alive, "probes": 8, "seconds": 3.0, **({} if alive else {"died_after_s": 2.1})}
    return {
        "runners": ["v1"],
        "arms": ["head"],
        "lanes": [{"runner": "v1", "arm": "head"}],
        "options": {"logprob_tolerance": 1e-3},
        "run": {"complete": True},
        "steps": [
            _step("ordinary", canary=[ref_long], kv_tokens=4100),
            _step("create", kv_tokens=4096),
            _step(
                "restore-1",
                canary=[got_long],
                canary_compare=[compare],
                kv_tokens=kv_restored,
                kv_ordinary=4100,
                kv_judgement=judgement,
                soak=soak,
            ),
        ],
    }


def _rows(results: dict[str, Any]) -> dict[str, model.Check]:
    run = parse.run_evidence(results)  # what the report reads is the model: the mapping above, read as it
    return {c["short"]: c for c in validation_checks(run, compare_all(run))}


def test_a_sound_restore_passes_the_kv_liveness_and_multi_token_rows() -> None:
    rows = _rows(_results(4096, True, None))
    assert rows["KV"]["status"] == "pass" and "restored 4,096" in rows["KV"]["result"]
    assert rows["liveness"]["status"] == "pass" and "1/1 restores alive" in rows["liveness"]["result"]
    assert rows["multi-token"]["status"] == "pass" and "(4 tokens each)" in rows["multi-token"]["name"]


def test_a_broken_restore_fails_each_row_for_its_own_defect() -> None:
    assert _rows(_results(3072, True, None))["KV"]["status"] == "FAIL"
    dead = _rows(_results(4096, False, None))["liveness"]
    assert dead["status"] == "FAIL" and "died 2.1 s after restore" in dead["details"][0]
    corrupt = _rows(_results(4096, True, 1))["multi-token"]
    assert corrupt["status"] == "FAIL" and "first diverging position 1" in corrupt["details"][0]
