"""The whole qualification, run as a user runs it, against the reference engine images (real Docker).

One full run (both runners × image and base arms, lifecycle and faults, a harmless overlay, a secret in the
environment) is shared by the assertions below; the other tests run what they need.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.integration.suite_helpers import (
    REFERENCE_BASE,
    REFERENCE_HEAD,
    SuiteRun,
    check_items,
    image_file,
    labelled_containers,
    make_overlay,
    run_suite,
)

if TYPE_CHECKING:
    from docker.client import DockerClient

pytestmark = pytest.mark.docker
SECRET = "secret-value-123"
OVERLAID = "vllm/snapshot/server.py"


@dataclass
class OverlaidRun(SuiteRun):
    """The module's full run, and the sha256 of the overlaid file it was given."""

    overlay_sha256: str


@pytest.fixture(scope="module")
def full_run(
    tmp_path_factory: pytest.TempPathFactory, docker_client: DockerClient, reference_images: None
) -> OverlaidRun:
    tmp = tmp_path_factory.mktemp("full")
    source = image_file(docker_client, REFERENCE_HEAD, "vllm.snapshot.server")
    checkout = make_overlay(tmp, {OVERLAID: source + "\n# vsnap-qual: a harmless overlay (comment only)\n"})
    run = run_suite(
        tmp / "report",
        "-n",
        "4",  # make qualify's: its four lanes at once (issue 45, --vsnap-overlap=lanes)
        f"--vsnap-base-image={REFERENCE_BASE}",
        f"--vsnap-overlay={checkout}",
        f"--vsnap-overlay-files={OVERLAID}",
        env={
            "HF_TOKEN": SECRET,
            "VSNAP_SECRETS": "VSNAP_TEST_EXTRA_SECRET",
            "VSNAP_TEST_EXTRA_SECRET": "another-secret-456",
        },
    )
    overlay_sha256 = hashlib.sha256((checkout / OVERLAID).read_bytes()).hexdigest()
    return OverlaidRun(run.returncode, run.output, run.report_dir, overlay_sha256)


def test_every_step_and_fault_passes_on_both_runners_and_arms(full_run: OverlaidRun) -> None:
    assert full_run.returncode == 0, full_run.output[-6000:]
    for runner in ("v1", "v2"):
        for arm in ("head", "base"):
            lane = f"{runner}-{arm}"
            for step in ("ordinary", "create", "inspect", "restore-1", "restart", "restore-2"):
                assert full_run.step(lane=lane, step=step)["outcome"] == "passed", (lane, step)
            faults = [s for s in full_run.steps(lane=lane) if s["step"].startswith("fault:")]
            # a kind refused before any engine starts runs once per image and arm (issue 45 item 4): on v1's lane,
            # and v2's lane of the same arm records where it ran
            ran = [f for f in faults if f["outcome"] == "passed"]
            elsewhere = [f for f in faults if (f["results"] or {}).get("runs_once", {}).get("ran_on") == f"v1-{arm}"]
            assert len(ran) >= 10 and len(ran) + len(elsewhere) == len(faults), (lane, faults)
            assert not elsewhere if runner == "v1" else len(elsewhere) == 10, (lane, elsewhere)
            assert all(f["outcome"] == "skipped" for f in elsewhere), elsewhere


def test_restores_match_the_ordinary_reference(full_run: OverlaidRun) -> None:
    for runner in ("v1", "v2"):
        ordinary = full_run.step(lane=f"{runner}-head", step="ordinary")["results"]
        # vLLM's one-token canary first, then 5 prompts x 16 greedy tokens
        assert len(ordinary["canary"]) == 6 and len(ordinary["canary"][0]["token_ids"]) == 1
        assert all(len(c["token_ids"]) == 16 for c in ordinary["canary"][1:])
        assert ordinary["kv_tokens"] and ordinary["kv_tokens"] > 0
        total = len(ordinary["digests"])
        assert total > 0 and all(d["sha256"] for d in ordinary["digests"].values())
        for n in (1, 2):
            restore = full_run.step(lane=f"{runner}-head", step=f"restore-{n}")["results"]
            assert len(restore["canary_compare"]) == 6 and all(c["ok"] for c in restore["canary_compare"])
            assert restore["kv_judgement"]["ok"] and restore["kv_tokens"] == restore["kv_create"]
            assert restore["soak"]["alive"] and restore["soak"]["probes"] > 0
            assert restore["digest_compare"]["unchanged"] == total == restore["digest_compare"]["total"]
            assert restore["kv_tokens"] > 0 and restore["kv_ordinary"] == ordinary["kv_tokens"]
        restart = full_run.step(lane=f"{runner}-head", step="restart")["results"]
        assert restart["sha256_before"] == restart["sha256_after"]
        assert restart["container_id_before"] == restart["container_id_after"]
    v1 = full_run.step(lane="v1-head", step="ordinary")["results"]["kv_tokens"]
    v2 = full_run.step(lane="v2-head", step="ordinary")["results"]["kv_tokens"]
    assert v1 != v2, "the two model runners size the KV cache differently"


def test_overlay_is_verified_in_the_running_engine(full_run: OverlaidRun) -> None:
    for runner in ("v1", "v2"):
        files = full_run.step(lane=f"{runner}-head", step="overlay")["results"]["files"]
        assert [f["relative"] for f in files] == [OVERLAID]
        item = files[0]
        assert item["ok"] and item["host_sha256"] == full_run.overlay_sha256
        assert item["imported"], "no engine process reported importing the overlaid module"
        assert all(i["sha256"] == full_run.overlay_sha256 for i in item["imported"])


def test_reports_exist_and_hold_no_secret(full_run: OverlaidRun) -> None:
    for name in ("results.json", "report.html", "summary.md", "evidence.jsonl"):
        assert (full_run.report_dir / name).is_file(), name
    assert full_run.results["verdict"]
    summary = (full_run.report_dir / "summary.md").read_text()
    for row in (
        "KV-cache capacity: restored = created",
        "restored server alive through the observation window",
        "request shapes after each restore as on the ordinary engine",
        "cleanup audits",
        "multi-token canary equal to the ordinary reference (16 tokens each)",
    ):
        assert f"| {row}" in summary, row
    for path in full_run.report_dir.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert SECRET.encode() not in data and b"another-secret-456" not in data, path


def test_results_and_every_record_the_harness_wrote_validate_against_the_model(full_run: OverlaidRun) -> None:
    """What the real harness wrote (not a synthetic run) against the shipped schema and the record schemas."""
    import jsonschema

    from vsnap_qual.report import schema
    from vsnap_qual.report.assemble import read_evidence

    shipped = json.loads(schema.SCHEMA_FILE.read_text())
    errors = list(jsonschema.Draft202012Validator(shipped).iter_errors(full_run.results))
    assert not errors, f"{errors[0].message} at {list(errors[0].absolute_path)}"
    for record in read_evidence(full_run.report_dir / "evidence.jsonl").records:
        problems = list(jsonschema.Draft202012Validator(schema.record_schema(str(record["kind"]))).iter_errors(record))
        assert not problems, f"{record['kind']}: {problems[0].message} at {list(problems[0].absolute_path)}"
    verdict = full_run.results["verdict"]
    assert verdict["status"] == "pass", verdict["reasons"]
    coverage = verdict["coverage"]
    # the kinds refused before any engine starts ran once per image and arm: not applicable on v2's lanes (issue 45)
    assert coverage["required"] == len(coverage["passed"]) + len(coverage["not_applicable"]) > 0
    elsewhere = [entry["step"] for entry in coverage["not_applicable"]]
    assert len(elsewhere) == 20 and all(step.startswith("v2/") for step in elsewhere), elsewhere


def test_nothing_is_left_behind(full_run: OverlaidRun, docker_client: DockerClient) -> None:
    assert labelled_containers(docker_client, full_run.session) == []  # other sessions may run on this host


def test_base_image_fails_head_expectations_where_it_binds_http_first(tmp_path: Path, reference_images: None) -> None:
    run = run_suite(
        tmp_path / "report",
        "-m",
        "fault",
        "--vsnap-runners=v1",
        f"--vsnap-image={REFERENCE_BASE}",
        "--vsnap-expect=head",
        "-k",
        "fault_artifact or canary-perturb or wake-raise",
    )
    assert run.returncode == 1, run.output[-4000:]
    perturb = run.step(lane="v1-head", step="fault:canary-perturb")
    assert perturb["outcome"] == "failed"
    assert "HTTP was bound during the failed restore" in perturb["message"]
    assert perturb["results"]["observed"]["http_bound"] is True
    base_ok = run_suite(
        tmp_path / "report2",
        "-m",
        "fault",
        "--vsnap-runners=v1",
        f"--vsnap-image={REFERENCE_BASE}",
        "--vsnap-expect=base",
        "-k",
        "fault_artifact or canary-perturb or wake-raise",
    )
    assert base_ok.returncode == 0, base_ok.output[-4000:]


def test_a_disabled_hook_fails_as_an_ineffective_injection(tmp_path: Path, reference_images: None) -> None:
    import shutil

    from vsnap_qual.run.probe_copy import BUILT_IN as PROBE_DIR

    probe = tmp_path / "probe"
    shutil.copytree(PROBE_DIR, probe)
    faults_py = probe / "vsnap_probe" / "faults.py"
    text = faults_py.read_text()
    assert '"wake-raise"' in text
    faults_py.write_text(text.replace('"wake-raise"', '"wake-raise-disabled"'))
    run = run_suite(
        tmp_path / "report",
        "-m",
        "fault",
        "--vsnap-runners=v1",
        f"--vsnap-probe-dir={probe}",
        "-k",
        "fault_artifact or wake-raise",
    )
    assert run.returncode == 1, run.output[-4000:]
    step = run.step(lane="v1-head", step="fault:wake-raise")
    assert step["outcome"] == "failed" and "ineffective injection" in step["message"]


BREAK_AT = "        self.model_runner.reload_weights()\n"
BREAK = (
    BREAK_AT
    + "        for _name, _param in self.model_runner.model.named_parameters():  # vsnap-qual test: a subtle bug\n"
    + "            if _name.endswith('embed_tokens.weight'):\n"
    + "                _param.data[-1, 0] += 0.01\n"
)


def test_an_overlay_that_breaks_restored_weights_fails_canary_and_digests(
    tmp_path: Path, docker_client: DockerClient, reference_images: None
) -> None:
    """A real overlay over the image's vllm package with a subtle bug in the weight reload that snapshots use:
    vLLM's single private canary still passes, but the restore steps must fail and name the parameter."""
    source = image_file(docker_client, REFERENCE_HEAD, "vllm.v1.worker.gpu_worker")
    assert BREAK_AT in source, "the reference engine's reload path changed: update this test's overlay"
    checkout = make_overlay(tmp_path, {"vllm/v1/worker/gpu_worker.py": source.replace(BREAK_AT, BREAK)})
    run = run_suite(
        tmp_path / "report",
        "-m",
        "not fault",
        "--vsnap-runners=v1",
        f"--vsnap-overlay={checkout}",
        "--vsnap-overlay-files=vllm/v1/worker/gpu_worker.py",
    )
    assert run.returncode == 1, run.output[-4000:]
    assert run.step(lane="v1-head", step="ordinary")["outcome"] == "passed"
    assert run.step(lane="v1-head", step="overlay")["outcome"] == "passed"
    restore = run.step(lane="v1-head", step="restore-1")
    assert restore["outcome"] == "failed"
    compare = restore["results"]["digest_compare"]
    assert "model.embed_tokens.weight" in compare["changed"], restore["message"]
    assert compare["unchanged"] == compare["total"] - len(compare["changed"])
    assert "parameter digests differ" in restore["message"] and compare["changed"][0] in restore["message"]
    if not all(c["ok"] for c in restore["results"]["canary_compare"]):
        assert "canary differs from the ordinary reference" in restore["message"]


GOLDEN = Path(__file__).parent / "golden" / "make-qualify-check-items.json"


def test_make_qualify_concludes_as_recorded(full_run: OverlaidRun) -> None:
    """`make qualify`'s configuration (the reference profile, the base arm, -n 4), in this module's one full run
    (with its harmless overlay, so the overlay is judged too, and ``--vsnap-observe=0``: the window has its own
    tests; one run instead of two keeps .ci/run inside its time), reaches the recorded verdict, checks, items, step
    outcomes and coverage, less times and ids, so a change that moves any judgement shows here. First recorded
    from a run of main before the runtime seam restructure (0cb1647); since then the lifecycle steps
    restore-after-stop and fresh-box, the checks "self-contained", "unit" (not run) and "request shapes", the seven
    identity faults beside identity-drift (issue 25) and this run's overlay were added, recorded from a run of the
    commit that made this one run serve both; then the four random-kill faults (issue 29), whose cleanup item is
    the audit after the harness's sweep wherever vLLM's own is not judged, so a kill's item is there whatever
    moment it drew; then (issue 28) the weight-tamper fault, the decode-speed row and the LoRA adapter row (not
    run: no lane serves an adapter), then the prefix-cache row (its items those of the decode row: every restore),
    then (issue 44) the API row: seven checks of the OpenAI API after every restore; then (issues 44, 45) the
    serving and boundaries rows (the stop's items left out: ``_deterministic``), and the 10 kinds refused before
    any engine starts run once per image and arm (not applicable on v2's lanes, `-n 4` with the lanes at once).
    A deliberate change of what the qualification concludes updates the golden file in the same commit, saying
    why."""
    assert full_run.returncode == 0, full_run.output[-6000:]
    assert _deterministic(check_items(full_run.results)) == json.loads(GOLDEN.read_text())


def _deterministic(items: dict[str, Any]) -> dict[str, Any]:
    """The check items less ``boundaries.*.restore-2.stop``: on the reference engine the request in flight at the
    stop is judged only where the engine reported it running before it finished, which the reference engine's
    ``/metrics`` does at one lane in four runs or none (two runs of this module: v2/base once, v2/head once), so its
    presence is a matter of timing here; the stop's judgement has its own tests (tests/unit/test_boundaries.py)."""
    for check in items["checks"]:
        if check["id"] == "boundaries":
            check["items"] = [item for item in check["items"] if not item[0].endswith(".restore-2.stop")]
    return items
