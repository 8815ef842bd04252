"""The CI definitions parse and call what exists; the options reference is generated, never stale."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import yaml

from vsnap_qual import options

ROOT = Path(__file__).resolve().parents[2]


def test_options_reference_is_current():
    assert (ROOT / "docs" / "options.md").read_text() == options.reference_markdown(), (
        "docs/options.md is stale: run `python -m vsnap_qual.options > docs/options.md`"
    )


def test_buildkite_pipeline_runs_the_nightly_script_on_a_gpu_queue():
    pipeline = yaml.safe_load((ROOT / ".buildkite" / "nightly.yml").read_text())
    step = pipeline["steps"][0]
    assert step["agents"]["queue"]
    assert step["command"] == ["bash ci/nightly.sh"]
    assert any(p.startswith("reports/nightly") for p in step["artifact_paths"])
    assert (ROOT / "ci" / "nightly.sh").is_file()


def test_github_workflow_uploads_the_report_always():
    flow = yaml.safe_load((ROOT / ".github" / "workflows" / "nightly.yml").read_text())
    triggers = flow.get("on", flow.get(True))  # YAML 1.1 reads a bare `on` as True
    assert "schedule" in triggers and "workflow_dispatch" in triggers
    job = flow["jobs"]["qualify"]
    assert "self-hosted" in job["runs-on"] and "gpu" in job["runs-on"]
    runs = [s.get("run") for s in job["steps"] if s.get("run")]
    assert runs == ["bash ci/nightly.sh"]
    upload = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    assert upload["if"] == "always()"


def test_nightly_script_dry_run_uses_only_options_the_plugin_accepts(tmp_path):
    env = {
        **os.environ,
        "VSNAP_IMAGE": "vllm/vllm-openai:nightly-abc",
        "VSNAP_DRY_RUN": "1",
        "VSNAP_BASE_IMAGE": "vllm/vllm-openai:latest",
        "VSNAP_ANNOTATE": "1",
    }
    done = subprocess.run(
        ["bash", str(ROOT / "ci" / "nightly.sh")], capture_output=True, text=True, env=env, check=True
    )
    commands = [shlex.split(line[2:]) for line in done.stdout.splitlines() if line.startswith("+ ")]
    assert [c[:2] for c in commands] == [["python3", "-m"], ["vsnap-qual", "doctor"], ["python3", "-m"]]
    pytest_args = [a for a in commands[2] if a.startswith("--vsnap-")]
    assert "--vsnap-annotate" in pytest_args
    parsed = options.parse_standalone(pytest_args, env={"VSNAP_MODEL": "Qwen/Qwen3-0.6B"})
    assert parsed["vsnap_base_image"] == "vllm/vllm-openai:latest"
    assert parsed["vsnap_annotate"] is True
