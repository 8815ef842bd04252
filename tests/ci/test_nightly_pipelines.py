"""The CI definitions, run the way CI runs them: both pipeline YAMLs parsed, and ci/nightly.sh executed with each
pipeline's environment against a stand-in venv (its python records `-m pip` / `-m pytest` and plays pytest's
exit; its vsnap-qual plays the doctor) and a recording `buildkite-agent` and `python3` on PATH. Nothing here
needs a GPU, Docker or the network; what is asserted is what the script really does with those commands.

Issue 16's CI bullets: no -n 2 on the one-H200 queue, the model cache documented and checked, VSNAP_ANNOTATE=0
honoured, no pip into the system Python, concurrency groups, a failed doctor (or any stop before the harness
renders its report) still leaves a report and an annotation, the base image pinned."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest
import yaml

from vsnap_qual import options

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "ci" / "nightly.sh"
SEP = "\x1f"

RECORDER = f"""#!/bin/sh
# records its arguments (one call a line, separated by US) and plays its part
name="$(basename "$0")"
{{ for a in "$@"; do printf '%s{SEP}' "$a"; done; printf '\\n'; }} >>"$CALLS/$name"
"""

FAKE_PYTHON = (
    RECORDER
    + """
case "$2" in
  pip) exit 0 ;;
  pytest)
    for a in "$@"; do
      case "$a" in --vsnap-report-dir=*) report="${a#--vsnap-report-dir=}" ;; esac
    done
    if [ "${FAKE_PYTEST_REPORT:-0}" = "1" ]; then
      mkdir -p "$report" && echo "## vsnap-qual: PASS" >"$report/summary.md"
    fi
    echo "${FAKE_PYTEST_OUTPUT:-}"
    exit "${FAKE_PYTEST_EXIT:-0}" ;;
esac
exit 0
"""
)
FAKE_DOCTOR = RECORDER + 'echo "${FAKE_DOCTOR_OUTPUT:-PASS all}"\nexit "${FAKE_DOCTOR_EXIT:-0}"\n'
FAKE_AGENT = RECORDER + 'cat >"$CALLS/annotation.md"\n'
# docker: `image inspect` answers as an agent holding FAKE_DOCKER_LOCAL's images ("image=number of repo digests",
# space-separated; others absent); `pull` exits FAKE_DOCKER_PULL_EXIT
FAKE_DOCKER = (
    RECORDER
    + """
if [ "$1" = "image" ] && [ "$2" = "inspect" ]; then
  for entry in ${FAKE_DOCKER_LOCAL:-}; do
    if [ "${entry%=*}" = "$5" ]; then echo "${entry##*=}"; exit 0; fi
  done
  echo "Error: No such image: $5" >&2; exit 1
fi
if [ "$1" = "pull" ]; then exit "${FAKE_DOCKER_PULL_EXIT:-0}"; fi
exit 0
"""
)


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@dataclass
class Nightly:
    returncode: int
    stdout: str
    stderr: str
    calls_dir: Path
    report_dir: Path

    def calls(self, name: str) -> list[list[str]]:
        path = self.calls_dir / name
        if not path.exists():
            return []
        return [line.split(SEP)[:-1] for line in path.read_text().splitlines()]

    def pytest_argv(self) -> list[str] | None:
        runs = [c for c in self.calls("python") if c[:2] == ["-m", "pytest"]]
        assert len(runs) <= 1
        return runs[0] if runs else None

    @property
    def summary(self) -> str:
        return (self.report_dir / "summary.md").read_text()

    @property
    def annotation(self) -> str | None:
        path = self.calls_dir / "annotation.md"
        return path.read_text() if path.exists() else None


class RunNightly(Protocol):
    """The ``nightly`` fixture: ci/nightly.sh run with ``env`` plus the stand-ins' ``FAKE_*`` settings."""

    def __call__(self, env: dict[str, str], **fake: str) -> Nightly: ...


@pytest.fixture
def nightly(tmp_path: Path) -> RunNightly:
    """Run ci/nightly.sh with exactly the given environment (plus the stand-ins), as a CI agent would."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    _write(venv / "bin" / "python", FAKE_PYTHON)
    _write(venv / "bin" / "vsnap-qual", FAKE_DOCTOR)
    shim = tmp_path / "shim"
    shim.mkdir()
    _write(shim / "python3", RECORDER)  # `python3 -m venv`: recorded; the stand-in venv above is the result
    _write(shim / "buildkite-agent", FAKE_AGENT)
    _write(shim / "docker", FAKE_DOCKER)
    calls = tmp_path / "calls"
    calls.mkdir()
    cache = tmp_path / "hf"
    cache.mkdir()

    def run(env: dict[str, str], **fake: str) -> Nightly:
        report = tmp_path / "report"
        full = {
            "PATH": f"{shim}:/usr/bin:/bin",
            "HOME": str(tmp_path),
            "CALLS": str(calls),
            "VENV": str(venv),
            "REPORT_DIR": str(report),
            "VSNAP_MODEL_CACHE": str(cache),
            **{k: v for k, v in env.items() if k not in ("REPORT_DIR",)},
            **fake,
        }
        if full.get("VSNAP_MODEL_CACHE") == "/data/hf":  # the pipelines' agent path: this machine's stand-in
            full["VSNAP_MODEL_CACHE"] = str(cache)
        import subprocess

        done = subprocess.run(["bash", str(SCRIPT)], env=full, capture_output=True, text=True, timeout=120)
        return Nightly(done.returncode, done.stdout, done.stderr, calls, report)

    return run


def _buildkite() -> tuple[dict[str, Any], dict[str, Any]]:
    pipeline: dict[str, Any] = yaml.safe_load((ROOT / ".buildkite" / "nightly.yml").read_text())
    return pipeline, pipeline["steps"][0]


def _github() -> dict[str | bool, Any]:
    """The GitHub workflow; its keys are strings but for the bare `on`, which YAML 1.1 reads as True."""
    workflow: dict[str | bool, Any] = yaml.safe_load((ROOT / ".github" / "workflows" / "nightly.yml").read_text())
    return workflow


def _github_env(inputs: dict[str, str] | None = None) -> dict[str, str]:
    """The qualify job's environment with its `${{ github.event.inputs.X || 'default' }}` expressions evaluated
    as GitHub does: the dispatch input when given, else the default (a scheduled run has no inputs)."""
    inputs = inputs or {}
    env = {}
    for key, value in _github()["jobs"]["qualify"]["env"].items():
        text = str(value)
        match = re.fullmatch(r"\$\{\{\s*github\.event\.inputs\.(\w+)\s*\|\|\s*'([^']*)'\s*\}\}", text)
        env[key] = (inputs.get(match.group(1)) or match.group(2)) if match else text
        assert "${{" not in env[key], f"unevaluated expression in {key}: {text}"
    return env


def _buildkite_env(image: str = "vllm/vllm-openai:nightly-0123abc") -> dict[str, str]:
    pipeline, step = _buildkite()
    return {**pipeline["env"], **step["env"], "VSNAP_IMAGE": image}  # the schedule sets VSNAP_IMAGE


# ---- no -n 2 on the one-GPU queue ----------------------------------------------------------------------------
def test_buildkite_on_the_one_h200_queue_runs_the_lanes_one_after_another(nightly: RunNightly) -> None:
    _, step = _buildkite()
    assert step["agents"]["queue"] == "gpu_1_h200"
    run = nightly(_buildkite_env(), FAKE_PYTEST_REPORT="1")
    assert run.returncode == 0, run.stderr
    argv = run.pytest_argv()
    assert argv is not None and "-n" not in argv and not any(a.startswith("--numprocesses") for a in argv)


def test_github_workflow_runs_the_lanes_one_after_another(nightly: RunNightly) -> None:
    run = nightly(_github_env(), FAKE_PYTEST_REPORT="1")
    assert run.returncode == 0, run.stderr
    argv = run.pytest_argv()
    assert argv is not None and "-n" not in argv


def test_two_workers_only_when_an_agent_says_so(nightly: RunNightly) -> None:
    run = nightly({**_buildkite_env(), "VSNAP_WORKERS": "2"}, FAKE_PYTEST_REPORT="1")
    argv = run.pytest_argv()
    assert argv is not None and argv[argv.index("-n") + 1] == "2"


def test_the_pytest_command_uses_only_options_the_plugin_accepts(nightly: RunNightly) -> None:
    run = nightly(_buildkite_env(), FAKE_PYTEST_REPORT="1")
    argv = run.pytest_argv() or []
    assert argv[:2] == ["-m", "pytest"] and "-c" in argv and argv[argv.index("-c") + 1] == "/dev/null"
    assert "--dist" not in argv, "the plugin schedules the lanes itself"
    parsed = options.parse_standalone([a for a in argv if a.startswith("--vsnap-")], env={})
    assert parsed["vsnap_base_image"] == "vllm/vllm-openai:v0.33.0" and parsed["vsnap_annotate"] is True


# ---- the model cache -----------------------------------------------------------------------------------------
def test_both_pipelines_name_a_model_cache_and_the_github_workflow_says_how_to_fill_it() -> None:
    pipeline, _ = _buildkite()
    assert pipeline["env"]["VSNAP_MODEL_CACHE"]
    assert _github()["jobs"]["qualify"]["env"]["VSNAP_MODEL_CACHE"]
    script = SCRIPT.read_text()
    model = re.search(r'VSNAP_MODEL="\$\{VSNAP_MODEL:-([^}]+)\}"', script).group(1)  # type: ignore[union-attr]
    revision = re.search(r'VSNAP_REVISION="\$\{VSNAP_REVISION:-([0-9a-f]{40})\}"', script).group(1)  # type: ignore[union-attr]
    workflow = (ROOT / ".github" / "workflows" / "nightly.yml").read_text()
    assert f"huggingface-cli download {model} --revision {revision}" in workflow, "the documented download is stale"


def test_a_missing_model_cache_stops_before_setup_with_a_report_and_an_annotation(
    nightly: RunNightly, tmp_path: Path
) -> None:
    env = {**_github_env(), "VSNAP_MODEL_CACHE": str(tmp_path / "no-such-cache"), "VSNAP_ANNOTATE": "1"}
    run = nightly(env, GITHUB_STEP_SUMMARY=str(tmp_path / "step-summary.md"))
    assert run.returncode == 1 and "VSNAP_MODEL_CACHE" in run.stderr
    assert "model cache missing" in run.summary and "no-such-cache" in run.summary
    assert run.annotation == run.summary
    assert (tmp_path / "step-summary.md").read_text() == run.summary
    assert run.calls("python3") == [] and run.pytest_argv() is None, "nothing set up or run"


def test_the_doctor_checks_the_cache_the_suites_will_mount(nightly: RunNightly) -> None:
    """The doctor runs with the model, revision and cache in its environment (it checks the cache holds that
    revision: vsnap_qual.cli.doctor's model cache check), before any engine starts."""
    run = nightly(_github_env(), FAKE_PYTEST_REPORT="1")
    assert run.calls("vsnap-qual") == [["doctor"]]
    from vsnap_qual.cli import doctor

    assert "model_cache_problems" in Path(doctor.__file__).read_text()


def test_without_any_model_cache_the_script_refuses_to_start(nightly: RunNightly) -> None:
    env = {k: v for k, v in _github_env().items() if k != "VSNAP_MODEL_CACHE"}
    run = nightly(env, VSNAP_MODEL_CACHE="")
    assert run.returncode != 0 and "VSNAP_MODEL_CACHE" in run.stderr


# ---- VSNAP_ANNOTATE ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["0", "", "false"])
def test_annotate_off_means_no_annotation_anywhere(nightly: RunNightly, value: str) -> None:
    failed = nightly({**_buildkite_env(), "VSNAP_ANNOTATE": value}, FAKE_DOCTOR_EXIT="1")
    assert failed.returncode == 1 and failed.calls("buildkite-agent") == [] and failed.annotation is None
    passed = nightly({**_buildkite_env(), "VSNAP_ANNOTATE": value}, FAKE_PYTEST_REPORT="1")
    argv = passed.pytest_argv() or []
    assert "--vsnap-annotate" not in argv
    if value:  # the harness reads VSNAP_ANNOTATE itself too: the value must mean "off" there as well
        assert options.parse_standalone([], env={"VSNAP_ANNOTATE": value})["vsnap_annotate"] is False


def test_annotate_on_annotates_the_failure(nightly: RunNightly) -> None:
    run = nightly({**_buildkite_env(), "VSNAP_ANNOTATE": "1"}, FAKE_DOCTOR_EXIT="1")
    assert run.calls("buildkite-agent") == [["annotate", "--style", "error", "--context", "vsnap-qual"]]


# ---- a private venv ------------------------------------------------------------------------------------------
def test_setup_never_pip_installs_into_the_system_python(nightly: RunNightly, tmp_path: Path) -> None:
    run = nightly(_github_env(), FAKE_PYTEST_REPORT="1")
    assert run.calls("python3") == [["-m", "venv", str(tmp_path / "venv")]], "python3 only makes the venv"
    pips = [c for c in run.calls("python") if c[:2] == ["-m", "pip"]]
    assert pips == [["-m", "pip", "install", "-q", "-e", "."]], "pip runs in the venv's own python"


# ---- concurrency ---------------------------------------------------------------------------------------------
def test_one_qualification_at_a_time_on_each_pipeline() -> None:
    _, step = _buildkite()
    assert step["concurrency"] == 1 and step["concurrency_group"]
    flow = _github()
    assert flow["concurrency"]["group"] and flow["concurrency"]["cancel-in-progress"] is False


# ---- every stop leaves a report ------------------------------------------------------------------------------
def test_a_failed_doctor_leaves_a_report_and_an_annotation(nightly: RunNightly, tmp_path: Path) -> None:
    run = nightly(
        {**_buildkite_env(), "VSNAP_ANNOTATE": "1"},
        FAKE_DOCTOR_EXIT="1",
        FAKE_DOCTOR_OUTPUT="FAIL GPUs: none visible",
        GITHUB_STEP_SUMMARY=str(tmp_path / "gh.md"),
    )
    assert run.returncode == 1 and run.pytest_argv() is None
    assert "doctor" in run.summary and "none visible" in run.summary
    assert run.annotation == run.summary and (tmp_path / "gh.md").read_text() == run.summary


def test_options_the_harness_refuses_leave_a_report_with_its_message(nightly: RunNightly) -> None:
    message = "ERROR: --vsnap-gpus: -n 2 runs 2 runner lanes at once (v1, v2) but this host has 1 GPU"
    run = nightly(
        {**_buildkite_env(), "VSNAP_ANNOTATE": "1", "VSNAP_WORKERS": "2"},
        FAKE_PYTEST_EXIT="4",
        FAKE_PYTEST_OUTPUT=message,
    )
    assert run.returncode == 4
    assert "pytest stopped before the report (exit 4)" in run.summary and message in run.summary
    assert run.annotation == run.summary


def test_the_harness_report_is_kept_when_it_rendered_one(nightly: RunNightly) -> None:
    run = nightly({**_buildkite_env(), "VSNAP_ANNOTATE": "1"}, FAKE_PYTEST_EXIT="1", FAKE_PYTEST_REPORT="1")
    assert run.returncode == 1 and run.summary == "## vsnap-qual: PASS\n", "not overwritten by the fallback"
    assert run.calls("buildkite-agent") == [], "the harness annotates its own report"


def test_no_tests_is_a_failure(nightly: RunNightly) -> None:
    run = nightly(_buildkite_env(), FAKE_PYTEST_EXIT="5")
    assert run.returncode == 1 and "no tests ran" in run.stderr


# ---- the base arm --------------------------------------------------------------------------------------------
def test_the_base_image_is_a_pinned_release_on_both_pipelines() -> None:
    pinned = re.compile(r"^vllm/vllm-openai:v\d+\.\d+\.\d+$")
    pipeline, _ = _buildkite()
    assert pinned.match(pipeline["env"]["VSNAP_BASE_IMAGE"])
    assert pinned.match(_github_env()["VSNAP_BASE_IMAGE"]), "the scheduled run's base"
    workflow = _github()
    triggers = workflow["on"] if "on" in workflow else workflow[True]  # YAML 1.1 reads a bare `on` as True
    assert pinned.match(triggers["workflow_dispatch"]["inputs"]["base_image"]["default"])


def test_the_dry_run_prints_the_same_commands_and_runs_none(nightly: RunNightly) -> None:
    run = nightly({**_buildkite_env(), "VSNAP_DRY_RUN": "1"})
    assert run.returncode == 0 and run.calls("python") == [] and run.calls("python3") == []
    printed = [line[2:] for line in run.stdout.splitlines() if line.startswith("+ ")]
    assert printed[0].startswith("python3 -m venv") and "-m pytest -c /dev/null" in printed[-1]
    assert os.path.basename(printed[-2].split()[0]) == "vsnap-qual"  # the doctor, after the pulls


# ---- images pulled before the doctor (issue 26) --------------------------------------------------------------
def test_a_dry_run_with_a_new_tag_shows_the_pull_before_the_doctor(nightly: RunNightly) -> None:
    run = nightly({**_buildkite_env("vllm/vllm-openai:nightly-0123abc"), "VSNAP_DRY_RUN": "1"})
    assert run.returncode == 0, run.stderr
    shown = [line for line in run.stdout.splitlines() if line.startswith("+ ")]
    pulls = [i for i, line in enumerate(shown) if line.startswith("+ docker pull ")]
    doctor = next(i for i, line in enumerate(shown) if line.endswith("vsnap-qual doctor"))
    assert [shown[i] for i in pulls] == ["+ docker pull vllm/vllm-openai:nightly-0123abc",
                                         "+ docker pull vllm/vllm-openai:v0.33.0"]  # fmt: skip
    assert pulls and max(pulls) < doctor, shown
    assert not [c for c in run.calls("docker") if c[:1] == ["pull"]], "a dry run pulls nothing"


def test_the_images_are_pulled_as_the_harness_would_then_the_suites_take_them_as_pulled(nightly: RunNightly) -> None:
    tag, base = "vllm/vllm-openai:nightly", "vllm/vllm-openai:v0.33.0"
    built = "vllm/vllm-openai@sha256:" + "a" * 64
    run = nightly({**_buildkite_env(tag), "VSNAP_BASE_IMAGE": base}, FAKE_PYTEST_REPORT="1",
                  FAKE_DOCKER_LOCAL=f"{tag}=1 {base}=0")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert [c for c in run.calls("docker") if c[:1] == ["pull"]] == [["pull", tag]], "a moving tag, not a local build"
    assert f"nightly: {base} was built on this agent: not pulled" in run.stdout
    assert "--vsnap-pull=missing" in (run.pytest_argv() or [])
    pinned = nightly({**_buildkite_env(built)}, FAKE_PYTEST_REPORT="1", FAKE_DOCKER_LOCAL=f"{built}=1")
    assert ["pull", built] not in pinned.calls("docker")


def test_a_failed_pull_stops_before_the_doctor_with_a_report(nightly: RunNightly) -> None:
    run = nightly({**_buildkite_env("vllm/vllm-openai:nightly-0123abc"), "VSNAP_ANNOTATE": "1"},
                  FAKE_DOCKER_PULL_EXIT="1")  # fmt: skip
    assert run.returncode == 1
    assert run.calls("vsnap-qual") == [], "the doctor did not run"
    assert "FAIL — pull" in run.summary and "docker pull vllm/vllm-openai:nightly-0123abc failed" in run.summary
