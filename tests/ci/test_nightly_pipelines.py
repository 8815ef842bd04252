"""The CI definitions, validated by the tools their hosts publish and run the way CI runs them.

- Buildkite (.buildkite/nightly.yml: the scheduled resolve step; .buildkite/qualify.yml: the shards and the merge)
  against Buildkite's published pipeline schema (ci/schemas/, its origin in the README beside it), with jsonschema;
- the GitHub Actions workflow with actionlint (a dev dependency: its binary, and shellcheck's for the `run:` scripts);
- the Kubernetes Indexed Job example (ci/k8s/) by its structure (no cluster here);
- ci/nightly.sh executed with each definition's environment and arguments against stand-ins (tests/ci/nightly_script):
  one pytest command line for all of them, the shard's report directory, the merge, the image resolved and recorded.

Nothing here needs a GPU, Docker or the network. Issue 16's bullets stay: no -n 2 on the one-GPU queue, the model
cache documented and checked, VSNAP_ANNOTATE=0 honoured, no pip into the system Python, concurrency, every stop
leaves a report and an annotation, the base image pinned."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.ci.nightly_script import ROOT, SCRIPT, Nightly, NightlyRunner
from vsnap_qual import options

SCHEMA = ROOT / "ci" / "schemas" / "buildkite-pipeline.schema.json"
SCHEMA_README = ROOT / "ci" / "schemas" / "README.md"
WORKFLOW = ROOT / ".github" / "workflows" / "nightly.yml"
K8S = ROOT / "ci" / "k8s" / "qualify-indexed-job.yaml"
NEW_TAG = "|".join(
    [
        "image=vllm/vllm-openai:nightly-0123abc",
        "tag=nightly-0123abc",
        "digest=sha256:" + "b" * 64,
        "created=2026-12-06T03:00:00+00:00",
        "record=nightly-0123abc@sha256:" + "b" * 64,
        "last=nightly-fedcba9@sha256:" + "c" * 64,
        "new=true",
    ]
)
OLD_TAG = NEW_TAG.replace("new=true", "new=false").replace("last=nightly-fedcba9@sha256:" + "c" * 64,
                                                          "last=nightly-0123abc@sha256:" + "b" * 64)  # fmt: skip


@pytest.fixture
def nightly(tmp_path: Path) -> NightlyRunner:
    """ci/nightly.sh with a definition's environment and arguments, against the stand-ins."""
    return NightlyRunner(tmp_path)


# ---- reading the definitions ---------------------------------------------------------------------------------
def _yaml(path: Path) -> dict[str, Any]:
    loaded = yaml.safe_load(path.read_text())
    assert isinstance(loaded, dict), f"{path} is no mapping"
    return loaded


def _buildkite(name: str) -> dict[str, Any]:
    return _yaml(ROOT / ".buildkite" / f"{name}.yml")


def _step(pipeline: dict[str, Any], key: str) -> dict[str, Any]:
    steps = [s for s in pipeline["steps"] if isinstance(s, dict) and s.get("key") == key]
    assert len(steps) == 1, f"one step with key {key!r}"
    return steps[0]


def _commands(step: dict[str, Any]) -> list[str]:
    command = step.get("command", step.get("commands"))
    assert command, f"step {step.get('key')} runs nothing"
    return [command] if isinstance(command, str) else [str(c) for c in command]


def _script_args(command: str) -> list[str]:
    """The arguments a CI command gives ci/nightly.sh (it must be `bash ci/nightly.sh ...`)."""
    words = shlex.split(command)
    assert words[:2] == ["bash", "ci/nightly.sh"], f"not the nightly script: {command}"
    return words[2:]


def _github() -> dict[str | bool, Any]:
    """The GitHub workflow; its keys are strings but for the bare `on`, which YAML 1.1 reads as True."""
    workflow: dict[str | bool, Any] = yaml.safe_load(WORKFLOW.read_text())
    return workflow


def _github_expression(text: str, context: dict[str, str]) -> str:
    """`${{ a.b || 'default' }}` and `${{ a.b }}` as GitHub evaluates them with ``context`` (a missing or empty
    value is empty, `||` takes the default); anything else left for the assertion below to name."""

    def one(match: re.Match[str]) -> str:
        expression = match.group(1).strip()
        name, _, default = expression.partition("||")
        value = context.get(name.strip(), "")
        if default:
            value = value or default.strip().strip("'")
        return value

    evaluated = re.sub(r"\$\{\{(.*?)\}\}", one, text)
    assert "${{" not in evaluated, f"unevaluated expression: {text}"
    return evaluated


def _github_job_env(job: str, context: dict[str, str] | None = None) -> dict[str, str]:
    """The workflow's and ``job``'s environment, evaluated (a scheduled run has no inputs)."""
    flow = _github()
    context = context or {}
    merged = {**flow.get("env", {}), **flow["jobs"][job].get("env", {})}
    return {key: _github_expression(str(value), context) for key, value in merged.items()}


def _k8s() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(K8S.read_text()) if doc]


def _k8s_job(name: str) -> dict[str, Any]:
    jobs = [d for d in _k8s() if d["kind"] == "Job" and d["metadata"]["name"] == name]
    assert len(jobs) == 1, f"one Job {name}"
    return jobs[0]


def _container_env(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: str(item["value"]) for item in container.get("env", [])}


def _buildkite_shard_env(job: int = 0, image: str = "vllm/vllm-openai:nightly-0123abc") -> dict[str, str]:
    """A Buildkite shard's environment: qualify.yml's and its step's, the parallel job's, and the image (from the
    resolve step's meta-data, as the agent would answer)."""
    pipeline = _buildkite("qualify")
    step = _step(pipeline, "qualify")
    return {
        **pipeline["env"],
        **step.get("env", {}),
        "BUILDKITE": "true",
        "BUILDKITE_PARALLEL_JOB": str(job),
        "BUILDKITE_PARALLEL_JOB_COUNT": str(step["parallelism"]),
        "FAKE_META_vsnap_image": image,
    }


# ---- Buildkite against its published schema ------------------------------------------------------------------
def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA.read_text())
    return schema


def test_the_kept_schema_is_the_one_its_readme_names() -> None:
    readme = SCHEMA_README.read_text()
    assert "buildkite/pipeline-schema" in readme and "`schema.json`" in readme
    commit = re.search(r"commit\s+`([0-9a-f]{40})`", readme)
    digest = re.search(r"sha256 of the file\s+`([0-9a-f]{64})`", readme)
    assert commit and digest, "the README names the commit and the file's sha256"
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == digest.group(1), "the copy differs from its origin"


@pytest.mark.parametrize("name", ["nightly", "qualify"])
def test_each_buildkite_pipeline_is_valid_against_buildkites_schema(name: str) -> None:
    jsonschema.Draft7Validator.check_schema(_schema())
    errors = sorted(jsonschema.Draft7Validator(_schema()).iter_errors(_buildkite(name)), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


@pytest.mark.parametrize(
    ("mistake", "change"),
    [
        ("a misspelt key", lambda step: step.update(paralellism=step.pop("parallelism"))),
        ("parallelism as words", lambda step: step.update(parallelism="four")),
        ("allow_dependency_failure as words", lambda step: step.update(allow_dependency_failure="yes")),
    ],
)
def test_the_schema_catches_a_broken_step(mistake: str, change: Any) -> None:
    """The validation can fail: each mistake, made in a copy of qualify.yml, is refused by the schema."""
    pipeline = _buildkite("qualify")
    key = "merge" if "dependency" in mistake else "qualify"
    change(_step(pipeline, key))
    assert list(jsonschema.Draft7Validator(_schema()).iter_errors(pipeline)), f"{mistake} passed the schema"


def test_buildkite_runs_the_shards_in_parallel_and_merges_them_whatever_they_did() -> None:
    qualify = _buildkite("qualify")
    shard, merge = _step(qualify, "qualify"), _step(qualify, "merge")
    assert shard["parallelism"] >= 2
    assert [_script_args(c) for c in _commands(shard)] == [["shard"]], "K and N from BUILDKITE_PARALLEL_JOB(_COUNT)"
    shard_root = qualify["env"]["VSNAP_SHARD_ROOT"]
    assert shard["artifact_paths"] == f"{shard_root}/**/*", "each shard uploads its report directory"
    assert merge["depends_on"] == "qualify" and merge["allow_dependency_failure"] is True
    download, merging = _commands(merge)
    assert shlex.split(download)[:4] == ["buildkite-agent", "artifact", "download", f"{shard_root}/**/*"]
    assert _script_args(merging) == ["merge"]
    assert merge["artifact_paths"] == f"{qualify['env']['REPORT_DIR']}/**/*" and merge["env"]["VSNAP_ANNOTATE"] == "1"


def test_the_scheduled_buildkite_pipeline_names_no_image_and_uploads_the_qualification() -> None:
    nightly = _buildkite("nightly")
    resolve = _step(nightly, "resolve")
    assert [_script_args(c) for c in _commands(resolve)] == [["resolve"]]
    for pipeline in (nightly, _buildkite("qualify")):
        text = json.dumps(pipeline)
        assert "VSNAP_IMAGE" not in text, "a schedule sets nothing: the resolve step finds the image"
    assert "buildkite-agent pipeline upload .buildkite/qualify.yml" in SCRIPT.read_text()
    assert nightly["env"]["VSNAP_NIGHTLY_STATE"] == _buildkite("qualify")["env"]["VSNAP_NIGHTLY_STATE"], (
        "the resolve and merge steps read and write one record"
    )
    assert _step(_buildkite("qualify"), "merge")["agents"] == resolve["agents"], "on the agents that keep the state"


def test_buildkite_resolve_hands_the_new_tag_on_and_uploads_the_shards(nightly: NightlyRunner) -> None:
    env = {**_buildkite("nightly")["env"], "BUILDKITE": "true"}
    run = nightly(env, "resolve", FAKE_NIGHTLY_TAG_OUTPUT=NEW_TAG)
    assert run.returncode == 0, run.stderr
    agent = run.calls("buildkite-agent")
    assert ["meta-data", "set", "vsnap-image", "vllm/vllm-openai:nightly-0123abc"] in agent
    assert ["meta-data", "set", "vsnap-nightly-record", "nightly-0123abc@sha256:" + "b" * 64] in agent
    assert agent[-1] == ["pipeline", "upload", ".buildkite/qualify.yml"] and (ROOT / ".buildkite/qualify.yml").is_file()
    tag = run.calls("vsnap-qual")[0]
    assert tag[:2] == ["nightly-tag", "vllm/vllm-openai"] and tag[tag.index("--pattern") + 1] == "nightly-*"
    assert tag[tag.index("--last-file") + 1] == str(run.state_dir / "last-qualified")
    assert run.pytest_argv() is None, "the resolve step qualifies nothing itself"


def test_a_buildkite_shard_takes_the_image_the_resolve_step_set(nightly: NightlyRunner) -> None:
    run = nightly(_buildkite_shard_env(job=2), "shard", FAKE_PYTEST_REPORT="1")
    assert run.returncode == 0, run.stderr
    assert ["meta-data", "get", "vsnap-image", "--default", ""] in run.calls("buildkite-agent")
    assert [c for c in run.calls("docker") if c[:1] == ["pull"]][0] == ["pull", "vllm/vllm-openai:nightly-0123abc"]
    argv = run.pytest_argv() or []
    assert f"--vsnap-report-dir={run.shard_root / 'shard-3'}" in argv, "BUILDKITE_PARALLEL_JOB 2 is shard 3"
    assert not any(a.startswith("--vsnap-shard") for a in argv), "the plugin reads Buildkite's own variables"
    assert run.shard_summary(3).startswith("## vsnap-qual: PASS")


# ---- GitHub Actions with actionlint --------------------------------------------------------------------------
def _tool(name: str) -> str:
    """A dev tool's binary: beside this Python (the venv `make install-dev` filled), else on PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed: it is a dev dependency (pip install -e '.[dev]', make install-dev)")
    return found


def _actionlint(*paths: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    command = [_tool("actionlint"), f"-shellcheck={_tool('shellcheck')}", "-pyflakes=", "-no-color", *map(str, paths)]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_actionlint_finds_nothing_in_the_workflows() -> None:
    done = _actionlint()
    assert done.returncode == 0 and not done.stdout.strip(), f"actionlint (exit {done.returncode}):\n{done.stdout}"


def test_actionlint_sees_a_broken_workflow(tmp_path: Path) -> None:
    """The check can fail: a copy of the workflow whose merge job needs a job that does not exist, and whose shard
    step quotes badly for shellcheck, is refused, each finding named."""
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    shutil.copy(ROOT / ".github" / "actionlint.yaml", tmp_path / ".github" / "actionlint.yaml")
    text = WORKFLOW.read_text().replace("needs: [resolve, qualify]", "needs: [resolve, qualfy]")
    text = text.replace("run: bash ci/nightly.sh merge", "run: cd $HOME/x && bash ci/nightly.sh merge")
    (tmp_path / ".github" / "workflows" / "nightly.yml").write_text(text)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)  # actionlint finds .github from the git root
    done = _actionlint(cwd=tmp_path)
    assert done.returncode == 1
    assert '"qualfy"' in done.stdout and "SC2086" in done.stdout, done.stdout


def test_github_runs_a_matrix_of_shards_then_one_merge_whatever_they_did() -> None:
    jobs = _github()["jobs"]
    qualify, merge = jobs["qualify"], jobs["merge"]
    shards = qualify["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, len(shards) + 1)) and len(shards) >= 2
    assert qualify["strategy"]["fail-fast"] is False and qualify["needs"] == "resolve"
    runs = [s for s in qualify["steps"] if "run" in s]
    assert [s["run"] for s in runs] == [
        "bash ci/nightly.sh shard --vsnap-shard=${{ matrix.shard }}/${{ strategy.job-total }}"
    ]
    upload = next(s for s in qualify["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@"))
    root = _github()["env"]["VSNAP_SHARD_ROOT"]
    assert upload["if"] == "always()" and upload["with"]["path"] == f"{root}/shard-${{{{ matrix.shard }}}}"
    assert upload["with"]["name"] == "shard-${{ matrix.shard }}"
    assert merge["needs"] == ["resolve", "qualify"] and merge["if"].startswith("always()")
    download = next(s for s in merge["steps"] if str(s.get("uses", "")).startswith("actions/download-artifact@"))
    assert download["with"] == {"pattern": "shard-*", "path": root}, "each shard's artifact into ROOT/shard-K"
    assert [_script_args(s["run"]) for s in merge["steps"] if "run" in s] == [["merge"]]
    assert merge["env"]["VSNAP_NIGHTLY_RECORD"] == "${{ needs.resolve.outputs.record }}"


def test_github_resolves_the_image_and_qualifies_only_a_new_one(nightly: NightlyRunner, tmp_path: Path) -> None:
    resolve, qualify = _github()["jobs"]["resolve"], _github()["jobs"]["qualify"]
    assert [_script_args(s["run"]) for s in resolve["steps"] if "run" in s] == [["resolve"]]
    assert qualify["if"] == "needs.resolve.outputs.qualify == 'true'"
    assert qualify["env"]["VSNAP_IMAGE"] == "${{ needs.resolve.outputs.image }}"
    outputs = tmp_path / "github-output"
    env = _github_job_env("resolve")
    assert env["VSNAP_IMAGE"] == "", "a scheduled run names no image"
    new = nightly(env, "resolve", FAKE_NIGHTLY_TAG_OUTPUT=NEW_TAG, GITHUB_OUTPUT=str(outputs))
    assert new.returncode == 0, new.stderr
    said = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    assert said == {"image": "vllm/vllm-openai:nightly-0123abc", "record": "nightly-0123abc@sha256:" + "b" * 64,
                    "qualify": "true"}  # fmt: skip
    assert set(resolve["outputs"]) == set(said)
    outputs.unlink()
    old = nightly(env, "resolve", FAKE_NIGHTLY_TAG_OUTPUT=OLD_TAG, GITHUB_OUTPUT=str(outputs))
    assert old.returncode == 0 and outputs.read_text() == "qualify=false\n"


def test_a_dispatched_image_is_qualified_without_resolving(nightly: NightlyRunner, tmp_path: Path) -> None:
    outputs = tmp_path / "github-output"
    env = _github_job_env("resolve", {"github.event.inputs.image": "registry.example.com/team/vllm:mine"})
    run = nightly(env, "resolve", GITHUB_OUTPUT=str(outputs))
    assert run.returncode == 0 and run.calls("vsnap-qual") == [], "nothing resolved"
    assert outputs.read_text() == "image=registry.example.com/team/vllm:mine\nrecord=\nqualify=true\n"


# ---- Kubernetes: an Indexed Job and a merge Job ---------------------------------------------------------------
def test_the_kubernetes_example_is_an_indexed_job_of_gpu_shards_and_a_merge() -> None:
    job = _k8s_job("vsnap-qualify")
    spec = job["spec"]
    assert job["apiVersion"] == "batch/v1" and spec["completionMode"] == "Indexed"
    count = spec["completions"]
    assert count >= 2 and spec["parallelism"] == count
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["hostPID"] is True and pod["hostIPC"] is True
    (container,) = pod["containers"]
    assert container["command"][:2] == ["bash", "ci/nightly.sh"]
    assert container["command"][2:] == ["shard", f"--vsnap-shard-count={count}"], "N is the Job's completions"
    assert int(container["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    assert container["securityContext"]["privileged"] is True
    root = _container_env(container)["VSNAP_SHARD_ROOT"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    shared = next(name for name, path in mounts.items() if root.startswith(path + "/"))
    assert volumes[shared]["hostPath"]["path"] == mounts[shared], "the same path as the node's Docker sees"
    assert volumes["docker-socket"]["hostPath"]["path"] == "/var/run/docker.sock"
    merge = _k8s_job("vsnap-merge")["spec"]["template"]["spec"]
    (merger,) = merge["containers"]
    assert merger["command"] == ["bash", "ci/nightly.sh", "merge"]
    assert _container_env(merger)["VSNAP_SHARD_ROOT"] == root
    waits = " ".join(" ".join(c["command"]) for c in merge["initContainers"])
    assert "job vsnap-qualify" in waits and "Complete|Failed" in waits, "the merge also follows a failed shard"
    assert "kernel.io_uring_disabled=2" in K8S.read_text()


def test_a_kubernetes_shard_is_its_completion_index_plus_one(nightly: NightlyRunner) -> None:
    container = _k8s_job("vsnap-qualify")["spec"]["template"]["spec"]["containers"][0]
    env = {**_container_env(container), "JOB_COMPLETION_INDEX": "1"}
    run = nightly(env, *container["command"][2:], FAKE_PYTEST_REPORT="1")
    assert run.returncode == 0, run.stderr
    argv = run.pytest_argv() or []
    assert f"--vsnap-report-dir={run.shard_root / 'shard-2'}" in argv and argv[-1] == "--vsnap-shard-count=4"


# ---- one invocation everywhere -------------------------------------------------------------------------------
def _normalized(argv: list[str], run: Nightly) -> list[str]:
    """The pytest command line less what differs by design: the shard option and the shard's own directory."""
    report = str(run.report_dir) if f"--vsnap-report-dir={run.report_dir}" in argv else None
    if report is None:
        report = next(a.split("=", 1)[1] for a in argv if a.startswith("--vsnap-report-dir="))
    return [a.replace(report, "<report>") for a in argv if not a.startswith("--vsnap-shard")]


def _every_definitions_pytest(nightly: NightlyRunner) -> Iterator[tuple[str, list[str]]]:
    """Each CI definition's qualification, run as its host runs it: its name and the pytest argv it gave."""
    shard = _step(_buildkite("qualify"), "qualify")
    for command in _commands(shard):
        run = nightly(_buildkite_shard_env(), *_script_args(command), FAKE_PYTEST_REPORT="1")
        yield "buildkite", _normalized(run.pytest_argv() or [], run)
    step = next(s for s in _github()["jobs"]["qualify"]["steps"] if "run" in s)
    context = {"needs.resolve.outputs.image": "vllm/vllm-openai:nightly-0123abc", "matrix.shard": "2",
               "strategy.job-total": "4"}  # fmt: skip
    run = nightly(_github_job_env("qualify", context), *_script_args(_github_expression(step["run"], context)),
                  FAKE_PYTEST_REPORT="1")  # fmt: skip
    yield "github", _normalized(run.pytest_argv() or [], run)
    container = _k8s_job("vsnap-qualify")["spec"]["template"]["spec"]["containers"][0]
    env = {**_container_env(container), "VSNAP_IMAGE": "vllm/vllm-openai:nightly-0123abc", "JOB_COMPLETION_INDEX": "0"}
    run = nightly(env, *container["command"][2:], FAKE_PYTEST_REPORT="1")
    yield "kubernetes", _normalized(run.pytest_argv() or [], run)
    run = nightly({"VSNAP_IMAGE": "vllm/vllm-openai:nightly-0123abc", "VSNAP_BASE_IMAGE": "vllm/vllm-openai:v0.33.0"},
                  FAKE_PYTEST_REPORT="1")  # fmt: skip
    yield "one machine", _normalized(run.pytest_argv() or [], run)


def test_every_ci_definition_runs_one_pytest_command_line(nightly: NightlyRunner) -> None:
    seen = dict(_every_definitions_pytest(nightly))
    assert set(seen) == {"buildkite", "github", "kubernetes", "one machine"}
    assert all(seen.values()), f"a definition ran no pytest: {seen}"
    assert seen["github"] == seen["buildkite"] == seen["kubernetes"], seen
    # the one machine's run differs only by annotating its own report (a shard never does: the merge annotates)
    assert [a for a in seen["one machine"] if a != "--vsnap-annotate"] == seen["buildkite"], seen


def test_the_ci_files_hold_no_pytest_command_of_their_own() -> None:
    for path in (ROOT / ".buildkite" / "nightly.yml", ROOT / ".buildkite" / "qualify.yml", WORKFLOW, K8S):
        assert "pytest" not in re.sub(r"#.*", "", path.read_text()), f"{path} runs pytest itself"


def test_the_gpu_guide_points_the_nightly_at_the_script() -> None:
    guide = (ROOT / "docs" / "gpu-guide.md").read_text()
    section = guide[guide.index("## 4. The nightly") :]
    for needle in ("ci/nightly.sh", "vsnap-qual nightly-tag", ".buildkite/qualify.yml", "ci/k8s/", "vsnap-qual merge"):
        assert needle in section, needle


# ---- the one-machine run (the default stage) ------------------------------------------------------------------
def _one_machine_env(image: str = "vllm/vllm-openai:nightly-0123abc") -> dict[str, str]:
    return {"VSNAP_IMAGE": image, "VSNAP_BASE_IMAGE": "vllm/vllm-openai:v0.33.0", "VSNAP_WORKERS": "1"}


def test_on_one_gpu_the_lanes_run_one_after_another(nightly: NightlyRunner) -> None:
    assert _step(_buildkite("qualify"), "qualify")["agents"]["queue"] == "gpu_1_h200"
    context = {"matrix.shard": "1", "strategy.job-total": "4", "needs.resolve.outputs.image": "x/y:z"}
    github = (_github_job_env("qualify", context), ["shard", "--vsnap-shard=1/4"])
    for env, args in ((_buildkite_shard_env(), ["shard"]), github):
        assert env["VSNAP_WORKERS"] == "1"
        run = nightly(env, *args, FAKE_PYTEST_REPORT="1")
        argv = run.pytest_argv()
        assert argv is not None and "-n" not in argv and not any(a.startswith("--numprocesses") for a in argv)


def test_two_workers_only_when_an_agent_says_so(nightly: NightlyRunner) -> None:
    run = nightly({**_one_machine_env(), "VSNAP_WORKERS": "2"}, FAKE_PYTEST_REPORT="1")
    argv = run.pytest_argv()
    assert argv is not None and argv[argv.index("-n") + 1] == "2"


def test_the_pytest_command_uses_only_options_the_plugin_accepts(nightly: NightlyRunner) -> None:
    run = nightly({**_one_machine_env(), "VSNAP_ANNOTATE": "1"}, FAKE_PYTEST_REPORT="1")
    argv = run.pytest_argv() or []
    assert argv[:3] == ["-m", "pytest", "suites/"], argv  # the README's one invocation, the suites' own ini
    assert "--dist" not in argv, "the plugin schedules the lanes itself"
    parsed = options.parse_standalone([a for a in argv if a.startswith("--vsnap-")], env={})
    assert parsed["vsnap_base_image"] == "vllm/vllm-openai:v0.33.0" and parsed["vsnap_annotate"] is True


def test_the_scripts_own_variables_are_no_misspelt_options() -> None:
    """The harness refuses a VSNAP_* variable a letter off an option's: none of the script's own may be one."""
    names = set(re.findall(r"\b(VSNAP_[A-Z_]+)", SCRIPT.read_text()))
    assert {"VSNAP_NIGHTLY_STATE", "VSNAP_SHARD_ROOT", "VSNAP_NIGHTLY_RECORD"} <= names
    assert [n for n in sorted(names) if options.misspelled_variable(n)] == []


# ---- the model cache -----------------------------------------------------------------------------------------
def test_every_qualifying_definition_names_a_model_cache_and_github_says_how_to_fill_it() -> None:
    assert _buildkite("qualify")["env"]["VSNAP_MODEL_CACHE"]
    assert _github()["jobs"]["qualify"]["env"]["VSNAP_MODEL_CACHE"]
    container = _k8s_job("vsnap-qualify")["spec"]["template"]["spec"]["containers"][0]
    assert _container_env(container)["VSNAP_MODEL_CACHE"] == "/data/hf"
    script = SCRIPT.read_text()
    model = re.search(r'VSNAP_MODEL="\$\{VSNAP_MODEL:-([^}]+)\}"', script).group(1)  # type: ignore[union-attr]
    revision = re.search(r'VSNAP_REVISION="\$\{VSNAP_REVISION:-([0-9a-f]{40})\}"', script).group(1)  # type: ignore[union-attr]
    assert f"hf download {model} --revision {revision}" in WORKFLOW.read_text(), "the documented download is stale"


def test_a_missing_model_cache_stops_before_setup_with_a_report_and_an_annotation(
    nightly: NightlyRunner, tmp_path: Path
) -> None:
    run = nightly({**_one_machine_env(), "VSNAP_ANNOTATE": "1"}, VSNAP_MODEL_CACHE=str(tmp_path / "no-such-cache"),
                  GITHUB_STEP_SUMMARY=str(tmp_path / "step-summary.md"))  # fmt: skip
    assert run.returncode == 1 and "VSNAP_MODEL_CACHE" in run.stderr
    assert "model cache missing" in run.summary and "no-such-cache" in run.summary
    assert run.annotation == run.summary
    assert (tmp_path / "step-summary.md").read_text() == run.summary
    assert run.calls("python3") == [] and run.pytest_argv() is None, "nothing set up or run"


def test_the_doctor_checks_the_cache_the_suites_will_mount(nightly: NightlyRunner) -> None:
    """The doctor runs with the model, revision and cache in its environment (it checks the cache holds that
    revision: vsnap_qual.cli.doctor's model cache check), before any engine starts."""
    run = nightly(_one_machine_env(), FAKE_PYTEST_REPORT="1")
    assert run.calls("vsnap-qual") == [["doctor"]]
    from vsnap_qual.cli import doctor

    assert "model_cache_problems" in Path(doctor.__file__).read_text()


def test_without_any_model_cache_a_qualifying_stage_refuses_to_start(nightly: NightlyRunner) -> None:
    for args in ([], ["shard", "--vsnap-shard=1/2"]):
        run = nightly(_one_machine_env(), *args, VSNAP_MODEL_CACHE="")
        assert run.returncode != 0 and "VSNAP_MODEL_CACHE" in run.stderr


# ---- VSNAP_ANNOTATE ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["0", "", "false"])
def test_annotate_off_means_no_annotation_anywhere(nightly: NightlyRunner, value: str) -> None:
    failed = nightly({**_one_machine_env(), "VSNAP_ANNOTATE": value}, FAKE_DOCTOR_EXIT="1")
    assert failed.returncode == 1 and failed.calls("buildkite-agent") == [] and failed.annotation is None
    passed = nightly({**_one_machine_env(), "VSNAP_ANNOTATE": value}, FAKE_PYTEST_REPORT="1")
    argv = passed.pytest_argv() or []
    assert "--vsnap-annotate" not in argv
    refused = nightly({"VSNAP_ANNOTATE": value}, FAKE_NIGHTLY_TAG_OUTPUT=OLD_TAG)
    assert refused.returncode == 0 and refused.annotation is None
    if value:  # the harness reads VSNAP_ANNOTATE itself too: the value must mean "off" there as well
        assert options.parse_standalone([], env={"VSNAP_ANNOTATE": value})["vsnap_annotate"] is False


def test_annotate_on_annotates_the_failure(nightly: NightlyRunner) -> None:
    run = nightly({**_one_machine_env(), "VSNAP_ANNOTATE": "1"}, FAKE_DOCTOR_EXIT="1")
    assert run.calls("buildkite-agent") == [["annotate", "--style", "error", "--context", "vsnap-qual"]]


# ---- a private venv ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("stage", [[], ["resolve"], ["shard", "--vsnap-shard=1/2"], ["merge"]])
def test_setup_never_pip_installs_into_the_system_python(nightly: NightlyRunner, stage: list[str]) -> None:
    (nightly.shards / "shard-1").mkdir(parents=True)
    run = nightly(_one_machine_env(), *stage, FAKE_PYTEST_REPORT="1", FAKE_MERGE_SUMMARY="## vsnap-qual: PASS")
    assert run.calls("python3") == [["-m", "venv", str(nightly.venv)]], "python3 only makes the venv"
    pips = [c for c in run.calls("python") if c[:2] == ["-m", "pip"]]
    assert pips == [["-m", "pip", "install", "-q", "-e", "."]], "pip runs in the venv's own python"


# ---- concurrency ---------------------------------------------------------------------------------------------
def test_one_qualification_at_a_time_on_each_pipeline() -> None:
    shard = _step(_buildkite("qualify"), "qualify")
    assert shard["concurrency"] == shard["parallelism"] and shard["concurrency_group"], "one build's shards at once"
    resolve = _step(_buildkite("nightly"), "resolve")
    assert resolve["concurrency"] == 1 and resolve["concurrency_group"]
    flow = _github()
    assert flow["concurrency"]["group"] and flow["concurrency"]["cancel-in-progress"] is False
    pod = _k8s_job("vsnap-qualify")["spec"]["template"]["spec"]
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname", "one shard a node"


# ---- every stop leaves a report ------------------------------------------------------------------------------
def test_a_failed_doctor_leaves_a_report_and_an_annotation(nightly: NightlyRunner, tmp_path: Path) -> None:
    run = nightly(
        {**_one_machine_env(), "VSNAP_ANNOTATE": "1"},
        FAKE_DOCTOR_EXIT="1",
        FAKE_DOCTOR_OUTPUT="FAIL GPUs: none visible",
        GITHUB_STEP_SUMMARY=str(tmp_path / "gh.md"),
    )
    assert run.returncode == 1 and run.pytest_argv() is None
    assert "doctor" in run.summary and "none visible" in run.summary
    assert run.annotation == run.summary and (tmp_path / "gh.md").read_text() == run.summary


def test_options_the_harness_refuses_leave_a_report_with_its_message(nightly: NightlyRunner) -> None:
    message = "ERROR: --vsnap-gpus: -n 2 runs 2 runner lanes at once (v1, v2) but this host has 1 GPU"
    run = nightly(
        {**_one_machine_env(), "VSNAP_ANNOTATE": "1", "VSNAP_WORKERS": "2"},
        FAKE_PYTEST_EXIT="4",
        FAKE_PYTEST_OUTPUT=message,
    )
    assert run.returncode == 4
    assert "pytest stopped before the report (exit 4)" in run.summary and message in run.summary
    assert run.annotation == run.summary


def test_the_harness_report_is_kept_when_it_rendered_one(nightly: NightlyRunner) -> None:
    run = nightly({**_one_machine_env(), "VSNAP_ANNOTATE": "1"}, FAKE_PYTEST_EXIT="1", FAKE_PYTEST_REPORT="1")
    assert run.returncode == 1 and run.summary == "## vsnap-qual: PASS\n", "not overwritten by the fallback"
    assert run.calls("buildkite-agent") == [], "the harness annotates its own report"


def test_no_tests_is_a_failure(nightly: NightlyRunner) -> None:
    run = nightly(_one_machine_env(), FAKE_PYTEST_EXIT="5")
    assert run.returncode == 1 and "no tests ran" in run.stderr


# ---- the image: resolved, refused, recorded ------------------------------------------------------------------
def test_nothing_new_is_a_one_line_summary_an_annotation_and_exit_0(nightly: NightlyRunner, tmp_path: Path) -> None:
    run = nightly({"VSNAP_ANNOTATE": "1"}, FAKE_NIGHTLY_TAG_OUTPUT=OLD_TAG,
                  GITHUB_STEP_SUMMARY=str(tmp_path / "gh.md"))  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.summary.startswith("## vsnap-qual: nothing new since nightly-0123abc (")
    assert len(run.summary.strip().splitlines()) == 1
    assert run.annotation == run.summary and run.annotation_style == "info"
    assert (tmp_path / "gh.md").read_text() == run.summary
    assert run.pytest_argv() is None and run.calls("docker") == [] and run.recorded is None


def test_a_registry_error_is_a_fail_summary_naming_it(nightly: NightlyRunner) -> None:
    error = "vsnap-qual nightly-tag: error: GET https://registry-1.docker.io/v2/vllm/vllm-openai/tags/list: HTTP 429"
    run = nightly({"VSNAP_ANNOTATE": "1"}, FAKE_NIGHTLY_TAG_EXIT="2", FAKE_NIGHTLY_TAG_ERROR=error)
    assert run.returncode == 1
    assert run.summary.startswith("## vsnap-qual: FAIL — the registry could not be read") and error in run.summary
    assert run.annotation == run.summary and run.annotation_style == "error"
    assert run.pytest_argv() is None and run.calls("docker") == []


def test_a_new_tag_is_qualified_then_recorded(nightly: NightlyRunner) -> None:
    run = nightly({"VSNAP_BASE_IMAGE": "vllm/vllm-openai:v0.33.0"}, FAKE_NIGHTLY_TAG_OUTPUT=NEW_TAG,
                  FAKE_PYTEST_REPORT="1")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert ["pull", "vllm/vllm-openai:nightly-0123abc"] in run.calls("docker")
    assert run.recorded == "nightly-0123abc@sha256:" + "b" * 64


@pytest.mark.parametrize(("exit_code", "recorded"), [("1", True), ("2", False), ("4", False)])
def test_only_a_verdict_is_recorded(nightly: NightlyRunner, exit_code: str, recorded: bool) -> None:
    """FAIL is a verdict on the tag (not tried again); INTERRUPTED (2) or refused options (4) are tried again."""
    run = nightly({}, FAKE_NIGHTLY_TAG_OUTPUT=NEW_TAG, FAKE_PYTEST_EXIT=exit_code,
                  FAKE_PYTEST_REPORT="1" if exit_code != "4" else "0")  # fmt: skip
    assert run.returncode == int(exit_code)
    assert (run.recorded is not None) is recorded, run.stdout


# ---- shards and the merge ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("env", "args", "k"),
    [
        ({"BUILDKITE_PARALLEL_JOB": "0", "BUILDKITE_PARALLEL_JOB_COUNT": "4"}, [], 1),
        ({"JOB_COMPLETION_INDEX": "3"}, ["--vsnap-shard-count=4"], 4),
        ({"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "5", "SLURM_ARRAY_TASK_COUNT": "4"}, [], 3),
        ({}, ["--vsnap-shard=2/4"], 2),
    ],
)
def test_a_shard_writes_its_own_report_directory_and_never_annotates(
    nightly: NightlyRunner, env: dict[str, str], args: list[str], k: int
) -> None:
    run = nightly({**_one_machine_env(), **env, "VSNAP_ANNOTATE": "1"}, "shard", *args, FAKE_PYTEST_REPORT="1")
    assert run.returncode == 0, run.stderr
    argv = run.pytest_argv() or []
    assert f"--vsnap-report-dir={run.shard_root / f'shard-{k}'}" in argv
    assert f"--junitxml={run.shard_root / f'shard-{k}' / 'junit.xml'}" in argv
    assert [a for a in argv if a.startswith("--vsnap-shard")] == args
    assert "--vsnap-annotate" not in argv and run.annotation is None, "the merge annotates the one verdict"


@pytest.mark.parametrize("args", [["--vsnap-shard=1/4", "-k", "x"], ["-m", "fault"], []])
def test_a_shard_takes_only_a_shard_option(nightly: NightlyRunner, args: list[str]) -> None:
    run = nightly(_one_machine_env(), "shard", *args)
    assert run.returncode == 2 and run.pytest_argv() is None and run.calls("python3") == []


def _shard_dirs(runner: NightlyRunner, complete: list[int], stopped: dict[int, str]) -> None:
    for k in complete:
        (runner.shards / f"shard-{k}").mkdir(parents=True)
        (runner.shards / f"shard-{k}" / "evidence.jsonl").write_text("{}\n")
    for k, why in stopped.items():
        (runner.shards / f"shard-{k}").mkdir(parents=True)
        (runner.shards / f"shard-{k}" / "summary.md").write_text(f"## vsnap-qual: FAIL — {why}\n")


def test_the_merge_takes_every_shard_and_says_why_a_stopped_one_stopped(nightly: NightlyRunner, tmp_path: Path) -> None:
    _shard_dirs(nightly, [1, 2, 4], {3: "doctor found a required check failing"})
    merged = "## vsnap-qual: INCOMPLETE — shard 3 of 4 left no evidence (lanes v2/head, v2/base)"
    env = {"VSNAP_ANNOTATE": "1", "VSNAP_NIGHTLY_RECORD": "nightly-0123abc@sha256:" + "b" * 64}
    run = nightly(
        env, "merge", FAKE_MERGE_SUMMARY=merged, FAKE_MERGE_EXIT="4", GITHUB_STEP_SUMMARY=str(tmp_path / "gh.md")
    )
    assert run.returncode == 4
    (call,) = run.calls("vsnap-qual")
    assert call == ["merge", *(str(nightly.shards / f"shard-{k}") for k in (1, 2, 3, 4)), "--out", str(nightly.report)]
    assert run.summary.startswith(merged) and "### shard-3 stopped before the harness" in run.summary
    assert "#### vsnap-qual: FAIL — doctor found a required check failing" in run.summary
    assert run.annotation == run.summary and run.annotation_style == "error"
    assert (tmp_path / "gh.md").read_text() == run.summary
    assert run.recorded is None, "INCOMPLETE is tried again"


@pytest.mark.parametrize(("exit_code", "style"), [("0", "success"), ("1", "error"), ("3", "warning")])
def test_a_merged_verdict_records_the_tag(nightly: NightlyRunner, exit_code: str, style: str) -> None:
    _shard_dirs(nightly, [1, 2], {})
    env = {"VSNAP_ANNOTATE": "1", "BUILDKITE": "true", "FAKE_META_vsnap_nightly_record": "nightly-x@sha256:" + "d" * 64}
    run = nightly(env, "merge", FAKE_MERGE_SUMMARY="## vsnap-qual: verdict", FAKE_MERGE_EXIT=exit_code)
    assert run.returncode == int(exit_code) and run.annotation_style == style
    assert run.recorded == "nightly-x@sha256:" + "d" * 64, "the record the resolve step left in the meta-data"


def test_no_shard_at_all_merges_into_incomplete(nightly: NightlyRunner) -> None:
    run = nightly({"VSNAP_ANNOTATE": "1", "VSNAP_NIGHTLY_RECORD": "nightly-x@sha256:" + "d" * 64}, "merge")
    assert run.returncode == 4 and run.summary.startswith("## vsnap-qual: INCOMPLETE — no shard left a report")
    assert run.annotation == run.summary and run.calls("vsnap-qual") == [] and run.recorded is None


def test_a_merge_that_writes_no_summary_still_leaves_one(nightly: NightlyRunner) -> None:
    _shard_dirs(nightly, [1], {})
    run = nightly({"VSNAP_ANNOTATE": "1"}, "merge", FAKE_MERGE_EXIT="2")
    assert run.returncode == 2 and "vsnap-qual merge wrote no summary (exit 2)" in run.summary


# ---- the base arm --------------------------------------------------------------------------------------------
def test_the_base_image_is_a_pinned_release_everywhere() -> None:
    pinned = re.compile(r"^vllm/vllm-openai:v\d+\.\d+\.\d+$")
    assert pinned.match(_buildkite("qualify")["env"]["VSNAP_BASE_IMAGE"])
    assert pinned.match(_github_job_env("qualify")["VSNAP_BASE_IMAGE"]), "the scheduled run's base"
    workflow = _github()
    triggers = workflow["on"] if "on" in workflow else workflow[True]  # YAML 1.1 reads a bare `on` as True
    assert pinned.match(triggers["workflow_dispatch"]["inputs"]["base_image"]["default"])
    container = _k8s_job("vsnap-qualify")["spec"]["template"]["spec"]["containers"][0]
    assert pinned.match(_container_env(container)["VSNAP_BASE_IMAGE"])


def test_the_dry_run_prints_the_same_commands_and_runs_none(nightly: NightlyRunner) -> None:
    run = nightly({**_one_machine_env(), "VSNAP_DRY_RUN": "1"})
    assert run.returncode == 0 and run.calls("python") == [] and run.calls("python3") == []
    printed = [line[2:] for line in run.stdout.splitlines() if line.startswith("+ ")]
    assert printed[0].startswith("python3 -m venv") and "-m pytest suites/ --vsnap-report-dir=" in printed[-1]
    assert os.path.basename(printed[-2].split()[0]) == "vsnap-qual"  # the doctor, after the pulls
    resolving = nightly({"VSNAP_DRY_RUN": "1"})
    shown = [line[2:] for line in resolving.stdout.splitlines() if line.startswith("+ ")]
    assert any(" nightly-tag vllm/vllm-openai " in f" {line} " for line in shown), shown
    assert resolving.calls("vsnap-qual") == [], "a dry run asks no registry"


# ---- images pulled before the doctor (issue 26) --------------------------------------------------------------
def test_a_dry_run_with_a_new_tag_shows_the_pull_before_the_doctor(nightly: NightlyRunner) -> None:
    run = nightly({**_one_machine_env("vllm/vllm-openai:nightly-0123abc"), "VSNAP_DRY_RUN": "1"})
    assert run.returncode == 0, run.stderr
    shown = [line for line in run.stdout.splitlines() if line.startswith("+ ")]
    pulls = [i for i, line in enumerate(shown) if line.startswith("+ docker pull ")]
    doctor = next(i for i, line in enumerate(shown) if line.endswith("vsnap-qual doctor"))
    assert [shown[i] for i in pulls] == ["+ docker pull vllm/vllm-openai:nightly-0123abc",
                                         "+ docker pull vllm/vllm-openai:v0.33.0"]  # fmt: skip
    assert pulls and max(pulls) < doctor, shown
    assert not [c for c in run.calls("docker") if c[:1] == ["pull"]], "a dry run pulls nothing"


def test_the_images_are_pulled_as_the_harness_would_then_the_suites_take_them_as_pulled(
    nightly: NightlyRunner,
) -> None:
    tag, base = "vllm/vllm-openai:nightly", "vllm/vllm-openai:v0.33.0"
    built = "vllm/vllm-openai@sha256:" + "a" * 64
    run = nightly({**_one_machine_env(tag), "VSNAP_BASE_IMAGE": base}, FAKE_PYTEST_REPORT="1",
                  FAKE_DOCKER_LOCAL=f"{tag}=1 {base}=0")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert [c for c in run.calls("docker") if c[:1] == ["pull"]] == [["pull", tag]], "a moving tag, not a local build"
    assert f"nightly: {base} was built on this agent: not pulled" in run.stdout
    assert "--vsnap-pull=missing" in (run.pytest_argv() or [])
    nightly.reset_calls()
    pinned = nightly(_one_machine_env(built), FAKE_PYTEST_REPORT="1", FAKE_DOCKER_LOCAL=f"{built}=1")
    assert ["pull", built] not in pinned.calls("docker")


def test_a_failed_pull_stops_before_the_doctor_with_a_report(nightly: NightlyRunner) -> None:
    run = nightly({**_one_machine_env("vllm/vllm-openai:nightly-0123abc"), "VSNAP_ANNOTATE": "1"},
                  FAKE_DOCKER_PULL_EXIT="1")  # fmt: skip
    assert run.returncode == 1
    assert run.calls("vsnap-qual") == [], "the doctor did not run"
    assert "FAIL — pull" in run.summary and "docker pull vllm/vllm-openai:nightly-0123abc failed" in run.summary
