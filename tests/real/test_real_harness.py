"""The harness as a user runs it against real vLLM: ``pytest suites/ --vsnap-image=vsnap-vllm-cpu:0.32.0``.

One run (both runners, lifecycle only, with one overlaid real ``vllm/snapshot`` file); the assertions read its
``evidence.jsonl`` and compare with what real vLLM does on a CPU (issue 7).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import harness_child
from tests.real.realtier import (
    IMAGE,
    OVERLAY_COMMENT,
    OVERLAY_IMAGE_PATH,
    REPO,
    RealContainer,
    Served,
    connect_docker,
    sha256_hex,
)

EMPTY_SHA256 = sha256_hex(b"")
# 1 GiB (VLLM_CPU_KVCACHE_SPACE=1) / (2 (K,V) x 2 kv heads x head_dim 32 x 4 B fp32 x 2 layers) per token.
EXPECTED_KV_TOKENS = (1 << 30) // (2 * 2 * 32 * 4 * 2)
# vLLM 0.32.0's own stop on a CPU: create's child refuses --enable-sleep-mode (vllm/config/model.py:657).
CREATE_REASON = "Sleep mode is not supported on current platform"
V2_REASON = "Model Runner V2 requires Triton"


@pytest.fixture(scope="module")
def harness_run(
    real: RealContainer, server_slot: dict[str, Served], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    # Serial heavy work: no idle shared server next to the harness's lanes.
    if "served" in server_slot:
        server_slot.pop("served").stop()
    work = tmp_path_factory.mktemp("harness-real")
    original = connect_docker().containers.run(IMAGE, ["cat", OVERLAY_IMAGE_PATH], remove=True, network_mode="none")
    checkout = work / "vllm-checkout"
    (checkout / "vllm" / "snapshot").mkdir(parents=True)
    overlay = checkout / "vllm" / "snapshot" / "runtime.py"
    overlay.write_bytes(original + OVERLAY_COMMENT)
    report = work / "report"
    argv = [
        sys.executable, "-m", "pytest", "suites/", "-p", "no:cacheprovider", "-m", "not fault",
        f"--vsnap-image={IMAGE}",
        "--vsnap-gpus=none",
        "--vsnap-runners=v1,v2",
        f"--vsnap-model={real.model}",
        f"--vsnap-revision={real.revision}",
        "--vsnap-dtype=float32",
        "--vsnap-privileges=all-caps",  # real CRIU; this host refuses --privileged
        "--vsnap-expect=base",  # 0.32.0 is the released behaviour
        f"--vsnap-overlay={checkout}",
        "--vsnap-overlay-files=vllm/snapshot/runtime.py",
        f"--vsnap-report-dir={report}",
    ]  # fmt: skip
    proc = harness_child.run(argv, cwd=REPO, timeout=1800)
    evidence_path = report / "evidence.jsonl"
    assert evidence_path.exists(), proc.stdout[-4000:] + proc.stderr[-4000:]
    records = [json.loads(line) for line in evidence_path.read_text().splitlines() if line.strip()]
    steps = {(r["runner"], r["step"]): r for r in records if r["kind"] == "step" and r["arm"] == "head"}
    return {
        "proc": proc,
        "records": records,
        "steps": steps,
        "overlay_sha256": sha256_hex(overlay.read_bytes()),
        "report": report,
    }


def _step(run: dict[str, Any], runner: str, step: str) -> dict[str, Any]:
    key = (runner, step)
    assert key in run["steps"], sorted(run["steps"])
    return dict(run["steps"][key])


def test_run_is_complete(harness_run: dict[str, Any]) -> None:
    kinds = [r["kind"] for r in harness_run["records"]]
    assert kinds[0] == "session" and kinds[-1] == "session_end"
    envs = [r for r in harness_run["records"] if r["kind"] == "environment"]
    assert {e["runner"] for e in envs} == {"v1", "v2"}
    for env in envs:
        assert env["versions"]["vllm"] == "0.32.0"
        assert env["versions"]["torch"] == "2.13.0+cpu"
        assert env["gpu"] is None
        assert env["versions"]["criu"] == "Version: 4.2.1"


def test_v1_ordinary_reference_reads_real_vllm(harness_run: dict[str, Any]) -> None:
    rec = _step(harness_run, "v1", "ordinary")
    assert rec["outcome"] == "passed", rec["message"]
    results = rec["results"]
    canary = results["canary"]
    assert canary and all(c["token_ids"] for c in canary)
    assert any(len(c["token_ids"]) > 1 for c in canary)  # the plan has multi-token canaries too
    digests = results["digests"]
    # the CPU worker's named_parameters(), then its named_buffers(): one rotary cache and four attention scales
    # (k, v, q, prob) per layer
    assert sum(d["source"] != "buffer" for d in digests.values()) == 18
    assert sum(d["source"] == "buffer" for d in digests.values()) == 9
    assert all(d["sha256"] != EMPTY_SHA256 for d in digests.values())
    assert all(d["sha256"] for d in digests.values())
    assert sum(d["source"] == "reconstructed" for d in digests.values()) == 8
    assert results["kv_tokens"] == EXPECTED_KV_TOKENS


def test_v2_is_reported_unsupported_with_vllms_reason(harness_run: dict[str, Any]) -> None:
    rec = _step(harness_run, "v2", "ordinary")
    assert rec["outcome"] != "passed"
    assert V2_REASON in (rec["message"] or "")


@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_create_reports_vllms_preflight_reason_and_later_steps_skip_with_it(
    harness_run: dict[str, Any], runner: str
) -> None:
    # V2 cannot even start an engine; its create stops at whichever of vLLM's two refusals comes first.
    reasons = (CREATE_REASON,) if runner == "v1" else (CREATE_REASON, V2_REASON)
    create = _step(harness_run, runner, "create")
    # vLLM's own refusal is an environment limitation (steps.LIMITATIONS), quoted, not a failed create.
    assert create["outcome"] == "skipped", create["message"]
    assert (create["message"] or "").startswith("environment limitation: "), create["message"]
    assert any(r in (create["message"] or "") for r in reasons), create["message"]
    assert any(r in create["results"]["vllm_reason"] for r in reasons), create["results"]
    for later in ("inspect", "restart"):
        rec = _step(harness_run, runner, later)
        assert rec["outcome"] == "skipped"
        assert any(r in (rec["message"] or "") for r in reasons), rec["message"]


def test_overlay_of_a_real_snapshot_file_is_verified(harness_run: dict[str, Any]) -> None:
    rec = _step(harness_run, "v1", "overlay")
    assert rec["outcome"] == "passed", rec["message"]
    (entry,) = rec["results"]["files"]
    assert entry["module"] == "vllm.snapshot.runtime"
    assert entry["host_sha256"] == harness_run["overlay_sha256"]
    assert entry["imported"]
    assert all(i["sha256"] == harness_run["overlay_sha256"] for i in entry["imported"])


def test_probe_loaded_in_every_engine_process(harness_run: dict[str, Any]) -> None:
    rec = _step(harness_run, "v1", "overlay")
    # API server, engine core and worker of the ordinary serve (+ the create CLI, + vLLM's model-inspection child).
    assert len(rec["results"]["probe_loaded_pids"]) >= 3


def test_report_files_written(harness_run: dict[str, Any]) -> None:
    report: Path = harness_run["report"]
    for name in ("results.json", "report.html", "summary.md"):
        assert (report / name).exists(), name


def test_verdict_is_not_a_qualification_and_quotes_vllm(harness_run: dict[str, Any]) -> None:
    # Nothing failed, vLLM refused: the verdict is PARTIAL (never PASS, never FAIL), and its reasons quote vLLM.
    results = json.loads((harness_run["report"] / "results.json").read_text())
    verdict = results["verdict"]
    assert verdict["status"] == "partial", verdict["reasons"]
    assert verdict["failed"] == [], verdict["failed"]
    assert any(CREATE_REASON in reason for reason in verdict["reasons"]), verdict["reasons"]
    assert any(V2_REASON in reason for reason in verdict["reasons"]), verdict["reasons"]
