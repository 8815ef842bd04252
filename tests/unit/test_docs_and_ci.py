"""The nightly script's dry run calls what exists; the options reference is generated, never stale."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from pathlib import Path

from vsnap_qual import options

ROOT = Path(__file__).resolve().parents[2]


def test_options_reference_is_current() -> None:
    assert (ROOT / "docs" / "options.md").read_text() == options.reference_markdown(), (
        "docs/options.md is stale: run `python -m vsnap_qual.options > docs/options.md`"
    )


# The pipelines' shapes (Buildkite against its schema, the workflow with actionlint, the Kubernetes example, one
# pytest command line for all) are tests/ci/test_nightly_pipelines.py's.


#: a docker that holds no image and pulls nothing (the script asks `docker image inspect` even in a dry run)
NO_IMAGES_DOCKER = '#!/bin/sh\n[ "$1" = image ] && exit 1\nexit 0\n'


def _docker_shim(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "docker").write_text(NO_IMAGES_DOCKER)
    (directory / "docker").chmod(0o755)
    return directory


def _dry_run(**extra: str) -> list[list[str]]:
    with tempfile.TemporaryDirectory(prefix="vsnap-docker-shim-") as shim_dir:
        return _dry_run_with(_docker_shim(Path(shim_dir)), **extra)


def _dry_run_with(shim: Path, **extra: str) -> list[list[str]]:
    env = {
        **os.environ,
        "PATH": f"{shim}:{os.environ['PATH']}",
        "VSNAP_IMAGE": "vllm/vllm-openai:nightly-abc",
        "VSNAP_MODEL_CACHE": "/data/hf",
        "VSNAP_DRY_RUN": "1",
        "VSNAP_BASE_IMAGE": "vllm/vllm-openai:v0.33.0",
        **extra,
    }
    done = subprocess.run(
        ["bash", str(ROOT / "ci" / "nightly.sh")], capture_output=True, text=True, env=env, check=True
    )
    return [shlex.split(line[2:]) for line in done.stdout.splitlines() if line.startswith("+ ")]


def test_nightly_script_dry_run_uses_a_private_venv_and_only_options_the_plugin_accepts() -> None:
    commands = _dry_run(VSNAP_ANNOTATE="1")
    venv = ".venv-nightly/bin/"
    assert commands[0][:3] == ["python3", "-m", "venv"]
    assert commands[1][:4] == [venv + "python", "-m", "pip", "install"], "never the system Python"
    assert commands[2:4] == [
        ["docker", "pull", "vllm/vllm-openai:nightly-abc"],
        ["docker", "pull", "vllm/vllm-openai:v0.33.0"],
    ]
    assert commands[4] == [venv + "vsnap-qual", "doctor"], "pulled before the doctor, which never pulls"
    pytest_cmd = commands[5]
    assert pytest_cmd[:3] == [venv + "python", "-m", "pytest"] and "-n" not in pytest_cmd
    pytest_args = [a for a in pytest_cmd if a.startswith("--vsnap-")]
    parsed = options.parse_standalone(pytest_args, env={"VSNAP_MODEL": "Qwen/Qwen3-0.6B"})
    assert parsed["vsnap_base_image"] == "vllm/vllm-openai:v0.33.0"
    assert parsed["vsnap_annotate"] is True


def test_nightly_script_annotates_only_when_asked_and_spreads_lanes_only_when_told() -> None:
    assert "--vsnap-annotate" not in _dry_run(VSNAP_ANNOTATE="0")[-1]
    assert "--vsnap-annotate" not in _dry_run()[-1]
    pytest_cmd = _dry_run(VSNAP_WORKERS="2")[-1]
    assert pytest_cmd[pytest_cmd.index("-n") + 1] == "2"


def test_nightly_script_refuses_to_start_without_a_model_cache() -> None:
    env = {k: v for k, v in os.environ.items() if k != "VSNAP_MODEL_CACHE"}
    env.update(VSNAP_IMAGE="vllm/vllm-openai:nightly-abc", VSNAP_DRY_RUN="1")
    done = subprocess.run(["bash", str(ROOT / "ci" / "nightly.sh")], capture_output=True, text=True, env=env)
    assert done.returncode != 0 and "VSNAP_MODEL_CACHE" in done.stderr


def test_a_failing_doctor_still_leaves_a_report(tmp_path: Path) -> None:
    """Under the old `set -e` a failed doctor ended the script with no summary.md for CI to show."""
    fake = tmp_path / "venv"
    (fake / "bin").mkdir(parents=True)
    (fake / "bin" / "python").symlink_to("/bin/true")
    doctor = fake / "bin" / "vsnap-qual"
    doctor.write_text("#!/bin/sh\necho 'FAIL GPUs: none visible'\nexit 1\n")
    doctor.chmod(0o755)
    shim = _docker_shim(tmp_path / "shim")
    (shim / "python3").write_text("#!/bin/sh\nexit 0\n")  # `python3 -m venv`: the venv above already exists
    (shim / "python3").chmod(0o755)
    cache = tmp_path / "hf"
    cache.mkdir()
    report = tmp_path / "report"
    env = {
        **os.environ,
        "PATH": f"{shim}:{os.environ['PATH']}",
        "VSNAP_IMAGE": "vllm/vllm-openai:nightly-abc",
        "VSNAP_MODEL_CACHE": str(cache),
        "VENV": str(fake),
        "REPORT_DIR": str(report),
    }
    done = subprocess.run(["bash", str(ROOT / "ci" / "nightly.sh")], capture_output=True, text=True, env=env)
    assert done.returncode == 1
    summary = (report / "summary.md").read_text()
    assert "FAIL" in summary and "doctor" in summary and "none visible" in summary
