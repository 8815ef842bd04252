"""The committed real-vLLM run backs what the docs say about it: its figures and verdict as docs/measured.md states them
(the whole assertion set is tests/real/test_real_qualification.py, run on it with VSNAP_REAL_QUAL_REPORT)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from vsnap_qual.timing import run_figures

ROOT = Path(__file__).resolve().parents[2]
REAL_VLLM = ROOT / "evidence" / "real-vllm"
RUN = REAL_VLLM / "2026-12-02-full-f7df29a"


T = TypeVar("T")


def _known(value: T | None) -> T:
    """A figure every committed run has (None only where a run lacks the steps it is computed from)."""
    assert value is not None, "the committed run lacks the steps this figure is computed from"
    return value


def _results() -> Any:
    """The committed run's results.json, as loaded (read as its fields are named)."""
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
    readme = (REAL_VLLM / "README.md").read_text()
    assert "**Verdict: `FAIL (CPU smoke)`, by one finding of real vLLM's**" in readme
    assert "| fault-artifact + 12 faults | 12/12 as expected | 12/12 as expected |" in readme


def test_the_figures_the_docs_state_are_the_runs() -> None:
    module = run_figures
    figures = module.figures(_results())
    cold, restore = _known(figures["cold_start_ready_s"])["median"], _known(figures["restore_ready_s"])["median"]
    said = f"{restore:.1f} s vs {cold:.1f} s"
    assert said == "13.4 s vs 91.4 s"
    assert said in (ROOT / "docs" / "measured.md").read_text()
    sizes = {
        s["lane"]: s["results"]["artifact_bytes"]
        for s in _results()["steps"]
        if s["step"] == "create" and s["outcome"] == "passed"
    }
    assert f"{sizes['v1-head']:,} B" in (REAL_VLLM / "README.md").read_text()


def test_the_fp8_and_prefix_cache_runs_are_what_the_docs_say() -> None:
    """Issue 28 on real vLLM's CPU build: the fp8 KV cache's capacity and scale buffers, and prefix caching across a
    restore (0 then 256 cached tokens of a 320-token prompt), as evidence/real-vllm/README.md states them."""
    said = (REAL_VLLM / "README.md").read_text()
    fp8 = json.loads((REAL_VLLM / "2026-12-03-fp8-kv-a7b1802" / "results.json").read_text())
    ordinary = next(s for s in fp8["steps"] if s["step"] == "ordinary")["results"]
    restored = next(s for s in fp8["steps"] if s["step"] == "restore-1")["results"]
    assert ordinary["kv_tokens"] == restored["kv_tokens"] == 4194304 and "4,194,304 tokens" in said
    scales = [n for n in ordinary["digests"] if n.rsplit(".", 1)[-1] in ("_k_scale", "_v_scale")]
    assert len(scales) == 4 and restored["digest_compare"]["ok"] and restored["digest_compare"]["buffers"] == 9
    prefix = json.loads((REAL_VLLM / "2026-12-03-prefix-cache-hugepages-439dc3d" / "results.json").read_text())
    judged = [s["results"]["prefix_cache_judgement"] for s in prefix["steps"] if s["step"] == "restore-1"]
    assert len(judged) == 2 and all(j["ok"] and j["hits_restored"] == j["hits_ordinary"] == [0, 256] for j in judged)
    assert "0 then 256" in said and "320 token ids" in said


def test_the_shm_and_affinity_run_is_what_the_docs_say() -> None:
    """The create check's first real run: each create names its one semaphore and still delivers; the ordinary
    engines' OpenMP tasks bound to CPU 0, the restored ones unbound (evidence/real-vllm/README.md)."""
    results = json.loads((REAL_VLLM / "2026-12-03-shm-affinity-6c31433" / "results.json").read_text())
    docs = (REAL_VLLM / "README.md").read_text()
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


def test_the_variants_make_run_fails_by_the_two_known_findings_alone() -> None:
    """`make qualify-vllm-cpu-variants` verbatim: every failure is a create's own semaphore or the not-self-contained
    artifact; LoRA, prefix caching off and fp8 KV run on V1, n-gram is refused in vLLM's words, V2 needs Triton; the
    decode-speed range the docs give is the run's (evidence/real-vllm/README.md)."""
    import gzip

    name = "2026-12-03-variants-make-fb96162"
    results = json.loads(gzip.decompress((REAL_VLLM / name / "results.json.gz").read_bytes()))
    section = (REAL_VLLM / "README.md").read_text().split(f"`{name}/`", 1)[1].split("\n## ")[0]
    section = " ".join(section.split())
    steps = {(s["lane"], s["step"]): s for s in results["steps"]}
    failed = {key for key, s in steps.items() if s["outcome"] == "failed"}
    lanes = [f"v1-{arm}-{variant}" for variant in ("lora", "nopc", "fp8kv") for arm in ("head", "base")]
    assert failed == {(lane, step) for lane in lanes for step in ("create", "restore-after-stop", "fresh-box")}
    assert results["verdict"]["status"] == "fail" and "18 failed, 36 passed, 122 not applicable" in section
    for lane in lanes:
        (left,) = steps[(lane, "create")]["results"]["shm_left"]
        assert left.startswith("/dev/shm/sem.mp-")
        for step in ("restore-after-stop", "fresh-box"):
            assert "the artifact is not self-contained" in steps[(lane, step)]["message"]
    refused = "snapshot create does not support speculative decoding"
    assert refused in steps[("v1-head-ngram", "create")]["message"] and refused in section
    v2 = [s for (lane, _), s in steps.items() if lane.startswith("v2-")]
    assert all(s["outcome"] == "skipped" and s["message"].startswith("not applicable: ") for s in v2)
    assert all("requires Triton" in s["message"] or refused in s["message"] for s in v2)
    judged = [
        (s["results"]["decode_judgement"]["slowdown"], s["results"]["decode_speed"]["cpu"]["cpus_allowed"])
        for (lane, step), s in steps.items()
        if step in ("restore-1", "restore-2") and lane in lanes
    ]
    assert len(judged) == 12 and all(allowed == {"0-1": n} for _, allowed in judged for n in allowed.values())
    low, high = min(j for j, _ in judged), max(j for j, _ in judged)
    assert f"decoded at {low:.2f}–{high:.2f}× of their lane's ordinary engine" in section


def test_the_affinity_experiments_table_is_its_sets() -> None:
    """bench/affinity_after_restore.py's two runs: the medians in the docs' table and the claims beside it."""
    import statistics

    docs = (REAL_VLLM / "README.md").read_text()
    medians: dict[str, dict[str, dict[str, float]]] = {}
    for version in ("0.32.0", "0.31.0"):
        found = json.loads((REAL_VLLM / "2026-12-04-affinity-a97748c" / f"{version}.json").read_text())
        rows = found["rows"]
        assert found["facts"]["cpus"] == {"bound": "0", "free": "0-1"}
        assert found["facts"]["restored_worker_cpus"] == ["0-1"] * 3, "every restore left the worker free"
        medians[version] = {
            engine: {
                state: statistics.median(r["tps"] for r in rows if r["engine"] == engine and r["state"] == state)
                for state in ("bound", "free")
            }
            for engine in ("ordinary", "restore-1", "restore-2", "restore-3")
        }
        ordinary = medians[version]["ordinary"]["bound"]
        slowest = min(m for engine, states in medians[version].items() if engine != "ordinary" for m in states.values())
        assert ordinary / slowest <= 1.08 + 0.005, (version, ordinary / slowest)
    for engine in ("ordinary", "restore-1", "restore-2", "restore-3"):
        cells = " | ".join(f"{medians[v][engine]['bound']:.1f} / {medians[v][engine]['free']:.1f}" for v in medians)
        assert f"| {engine} | {cells} |" in docs, engine
