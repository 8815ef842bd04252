"""Engine-feature variants (``--vsnap-variant``, issue 28) against the reference engine (real Docker): each variant
is a lane of its own with its own ordinary reference and lifecycle, its column in the report; a variant the engine
refuses is not applicable in the engine's own words, never a pass of something that did not run."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

import pytest

from tests.integration.suite_helpers import SuiteRun, run_suite

if TYPE_CHECKING:
    from docker.client import DockerClient

pytestmark = pytest.mark.docker

SPEC = '--speculative-config \'{"method": "ngram", "num_speculative_tokens": 2}\''
REFUSAL = "snapshot create does not support speculative decoding"
#: the adapter the reference image generates at build (docker/reference/tools/make_lora.py)
LORA = "--enable-lora --max-loras 1 --max-lora-rank 8 --lora-modules tiny-lora=/opt/vsnap/adapters/tiny-lora"


@pytest.fixture(scope="module")
def variant_run(
    tmp_path_factory: pytest.TempPathFactory, docker_client: DockerClient, reference_images: None
) -> SuiteRun:
    tmp = tmp_path_factory.mktemp("variants")
    return run_suite(
        tmp / "report",
        "--vsnap-runners=v1",
        "--vsnap-variant=nopc=--no-enable-prefix-caching",
        f"--vsnap-variant=spec={SPEC}",
        f"--vsnap-variant=lora={LORA}",
        "--vsnap-base-image=vsnap-reference:base",
        "-m",
        "not fault",
        "-k",  # the head arms' first steps; of the base arms only the lora lane's reference and its vs-head
        "((ordinary or create or inspect or restore_1) and not base) or (v1-base-lora and (ordinary or agrees))",
    )


def test_each_variant_runs_its_own_lane_with_its_own_ordinary_reference(variant_run: SuiteRun) -> None:
    assert variant_run.returncode == 0, variant_run.output[-6000:]
    plain = variant_run.step(lane="v1-head", step="ordinary")
    nopc = variant_run.step(lane="v1-head-nopc", step="ordinary")
    assert plain["runner"] == "v1" and "variant" not in plain
    assert nopc["runner"] == "v1+nopc" and nopc["variant"] == "nopc"
    # the variant's engine command carries its arguments after the harness's; the plain lane's does not
    assert "--no-enable-prefix-caching" in nopc["argv"] and "--no-enable-prefix-caching" not in plain["argv"]
    for lane in ("v1-head", "v1-head-nopc"):
        for step in ("create", "inspect", "restore-1"):
            assert variant_run.step(lane=lane, step=step)["outcome"] == "passed", (lane, step)
    restore = variant_run.step(lane="v1-head-nopc", step="restore-1")
    assert "--no-enable-prefix-caching" in variant_run.step(lane="v1-head-nopc", step="create")["argv"]
    assert all(c["ok"] for c in restore["results"]["canary_compare"])
    envs = [r for r in variant_run.records if r["kind"] == "environment" and r.get("lane") == "v1-head-nopc"]
    assert envs and all(e["runner"] == "v1+nopc" and e["variant"] == "nopc" for e in envs)


def test_a_variant_the_engine_refuses_is_not_applicable_in_its_words(variant_run: SuiteRun) -> None:
    ordinary = variant_run.step(lane="v1-head-spec", step="ordinary")
    assert ordinary["outcome"] == "passed"  # serve takes it; snapshot create refuses it
    create = variant_run.step(lane="v1-head-spec", step="create")
    assert create["outcome"] == "skipped" and create["message"].startswith("not applicable: ")
    assert REFUSAL in create["message"] and "variant spec" in create["message"]
    later = variant_run.step(lane="v1-head-spec", step="restore-1")
    assert later["outcome"] == "skipped" and later["message"].startswith("not applicable: ")
    results = json.loads((variant_run.report_dir / "results.json").read_text())
    not_applicable = results["verdict"]["coverage"].get("not_applicable") or []
    assert any(REFUSAL in n["message"] and n["step"].startswith("v1+spec/head/") for n in not_applicable)
    summary = (variant_run.report_dir / "summary.md").read_text()
    assert "v1+nopc" in summary and "Variants: `nopc`" in summary


def test_the_report_has_a_column_group_per_variant(variant_run: SuiteRun) -> None:
    results = json.loads((variant_run.report_dir / "results.json").read_text())
    assert [(lane["runner"], lane["arm"]) for lane in results["lanes"]] == [
        ("v1", "head"),
        ("v1+nopc", "head"),
        ("v1+spec", "head"),
        ("v1+lora", "head"),
        ("v1+lora", "base"),
    ]
    digests = next(c for c in results["verdict"]["checks"] if c["id"] == "digests")
    assert {i["id"] for i in digests["items"]} >= {"digests.v1.head.restore-1", "digests.v1+nopc.head.restore-1"}
    assert not any(i["id"].startswith("digests.v1+spec.") for i in digests["items"])  # nothing ran to judge


def test_a_lora_variant_asks_its_adapter_the_canaries_and_keeps_the_adapter_with_the_evidence(
    variant_run: SuiteRun,
) -> None:
    ordinary = variant_run.step(lane="v1-head-lora", step="ordinary")
    assert ordinary["outcome"] == "passed", ordinary["message"]
    base = [c["token_ids"] for c in ordinary["results"]["canary"]]
    through = [c["token_ids"] for c in ordinary["results"]["adapter_canary"]["tiny-lora"]]
    assert len(through) == len(base) and through != base  # the adapter takes effect: a dropped one would show
    kept = ordinary["results"]["adapters"]["tiny-lora"]
    assert kept["path"] == "/opt/vsnap/adapters/tiny-lora" and set(kept["files"]) == {
        "adapter_config.json",
        "adapter_model.safetensors",
    }
    copy = variant_run.report_dir / kept["kept"] / "adapter_model.safetensors"
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == kept["files"]["adapter_model.safetensors"]
    restore = variant_run.step(lane="v1-head-lora", step="restore-1")
    assert restore["outcome"] == "passed", restore["message"]
    compared = restore["results"]["adapter_compare"]["tiny-lora"]
    assert len(compared) == len(base) and all(c["ok"] for c in compared)
    row = next(c for c in variant_run.results["verdict"]["checks"] if c["id"] == "adapters")
    assert row["status"] == "pass" and [i["id"] for i in row["items"]] == ["adapters.v1+lora.head.restore-1"]
    # the base image's engine answers through the adapter as the image under test's (the vs-head step)
    versus = variant_run.step(lane="v1-base-lora", step="vs-head")
    assert versus["outcome"] == "passed", versus["message"]
    assert [c["ok"] for c in versus["results"]["adapter_compare"]["tiny-lora"]] == [True] * len(base)
