"""The committed real-vLLM run backs what the docs say about it: its figures and verdict as the README states them
(the whole assertion set is tests/real/test_real_qualification.py, run on it with VSNAP_REAL_QUAL_REPORT)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vsnap_qual import run_figures

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "docs" / "real-vllm-run" / "2026-12-02-full"


def _results() -> dict[str, Any]:
    return json.loads((RUN / "results.json").read_text())


def test_the_committed_run_is_a_cpu_smoke_fail_by_the_self_contained_finding_only() -> None:
    verdict = _results()["verdict"]
    assert verdict["headline"] == "FAIL (CPU smoke)"
    assert sorted(verdict["failed"]) == sorted(
        f"v1/{arm}/{step}" for arm in ("head", "base") for step in ("restore-after-stop", "fresh-box")
    )
    steps = _results()["steps"]
    faults = [s for s in steps if s["step"].startswith("fault:") and s["runner"] == "v1"]
    assert len(faults) == 24 and all(s["outcome"] == "passed" for s in faults)
    readme = (ROOT / "docs" / "real-vllm-run" / "README.md").read_text()
    assert "**Verdict: `FAIL (CPU smoke)`, by one finding of real vLLM's**" in readme
    assert "| fault-artifact + 12 faults | 12/12 as expected | 12/12 as expected |" in readme


def test_the_figures_the_docs_state_are_the_runs() -> None:
    module = run_figures
    figures = module.figures(_results())
    cold, restore = figures["cold_start_ready_s"]["median"], figures["restore_ready_s"]["median"]
    said = f"{restore:.1f} s vs {cold:.1f} s"
    assert said == "13.4 s vs 91.4 s"
    assert said in (ROOT / "README.md").read_text()
    sizes = {
        s["lane"]: s["results"]["artifact_bytes"]
        for s in _results()["steps"]
        if s["step"] == "create" and s["outcome"] == "passed"
    }
    assert f"{sizes['v1-head']:,} B" in (ROOT / "docs" / "real-vllm-run" / "README.md").read_text()


def test_the_fp8_and_prefix_cache_runs_are_what_the_docs_say() -> None:
    """Issue 28 on real vLLM's CPU build: the fp8 KV cache's capacity and scale buffers, and prefix caching across a
    restore (0 then 256 cached tokens of a 320-token prompt), as docs/real-vllm-run/README.md states them."""
    said = (ROOT / "docs" / "real-vllm-run" / "README.md").read_text()
    fp8 = json.loads((ROOT / "docs" / "real-vllm-run" / "2026-12-03-fp8-kv" / "results.json").read_text())
    ordinary = next(s for s in fp8["steps"] if s["step"] == "ordinary")["results"]
    restored = next(s for s in fp8["steps"] if s["step"] == "restore-1")["results"]
    assert ordinary["kv_tokens"] == restored["kv_tokens"] == 4194304 and "4,194,304 tokens" in said
    scales = [n for n in ordinary["digests"] if n.rsplit(".", 1)[-1] in ("_k_scale", "_v_scale")]
    assert len(scales) == 4 and restored["digest_compare"]["ok"] and restored["digest_compare"]["buffers"] == 9
    prefix = json.loads((ROOT / "docs" / "real-vllm-run" / "2026-12-03-prefix-cache" / "results.json").read_text())
    judged = [s["results"]["prefix_cache_judgement"] for s in prefix["steps"] if s["step"] == "restore-1"]
    assert len(judged) == 2 and all(j["ok"] and j["hits_restored"] == j["hits_ordinary"] == [0, 256] for j in judged)
    assert "0 then 256" in said and "320 token ids" in said


def test_the_shm_and_affinity_run_is_what_the_docs_say() -> None:
    """The create check's first real run: each create names its one semaphore and still delivers; the ordinary
    engines' OpenMP tasks bound to CPU 0, the restored ones unbound (docs/real-vllm-run/README.md)."""
    results = json.loads((ROOT / "docs" / "real-vllm-run" / "2026-12-03-shm-affinity" / "results.json").read_text())
    docs = (ROOT / "docs" / "real-vllm-run" / "README.md").read_text()
    steps = {(s["lane"], s["step"]): s for s in results["steps"]}
    for arm in ("head", "base"):
        create = steps[(f"v1-{arm}", "create")]
        (left,) = create["results"]["shm_left"]
        assert create["outcome"] == "failed" and left.startswith("/dev/shm/sem.mp-") and f"`{left}`" in docs
        assert steps[(f"v1-{arm}", "inspect")]["outcome"] == steps[(f"v1-{arm}", "restore-1")]["outcome"] == "passed"
        ordinary = steps[(f"v1-{arm}", "ordinary")]["results"]["decode_speed"]["cpu"]["cpus_allowed"]
        restored = steps[(f"v1-{arm}", "restore-1")]["results"]["decode_speed"]["cpu"]["cpus_allowed"]
        assert ordinary == {"0": 48, "0-1": 33} and restored == {"0-1": 81}
    assert "48 of 81 tasks may run only on CPU 0" in docs and "all 81 may run on 0-1" in docs
    fault = steps[("v1-head", "fault-artifact")]["results"]["shm_left_not_judged"]
    assert fault["files"][0].removeprefix("/dev/shm/") in docs
