"""Issue 47: the bad-input table, every row a test. Each row is one input a user can get wrong, with the exit code
it must end in (pytest's usage error 4, nothing selected 5, the ``vsnap-qual`` commands' own 2, README's exit-code
table), the option its one error line names, the fix words in that same line, and what it may not leave behind:
no report directory, no file written, no container.

Most rows must be refused before any runtime call, so they run in-process with Docker made unreachable on purpose
(``DOCKER_HOST`` naming no socket): a row that reached the runtime would end in "Docker engine unreachable" instead
of its own message. The selection rows need collected items, so they run on the in-memory runtime of tests/seam
(preflight passes there, and nothing starts before the refusal). The few rows that only the engine can answer (the
overlay compiled by the image's own Python, the model the image holds, an absent image) need Docker and are marked
``docker``; each checks with the Docker SDK that no container of this process is left.

Issue 47's six wrong rows are named by ``wrong=`` (``WRONG`` lists them); a test checks that each is here.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import tests.seam.memory_runtime  # noqa: F401  (registers --vsnap-runtime=memory once: the selection rows')
from vsnap_qual import options
from vsnap_qual.box import LABEL_OWNER, LABEL_SESSION, owner_label

if TYPE_CHECKING:
    from docker.client import DockerClient

ROOT = Path(__file__).resolve().parents[2]
REV = "0" * 40
REFERENCE = "vsnap-reference:head"
REFERENCE_MODEL = "vsnap/tiny-qwen3"
REFERENCE_REV = "7f3a9c2e5b1d4086a2e4c6b8d0f1a3c5e7092b4d"
NO_DOCKER = "unix:///nonexistent/vsnap-bad-input-table.sock"
RESULTS_GZ = "evidence/gpu/2026-12-07-v1-full-d575706/results.json.gz"
SUITE = """
import pytest

@pytest.mark.vsnap_step("ordinary")
def test_uses_a_lane(vsnap_step):
    pass
"""
USAGE, NOTHING, CLI_BAD = 4, 5, 2

#: issue 47's six wrong rows, by the names the rows below give them
WRONG = {
    "overlay-compiled-by-the-engine": "under Docker the overlay's syntax check was skipped when the image's Python "
    "is newer than the harness's",
    "model-not-in-the-image": "no --vsnap-model-cache for a model the image does not hold was accepted",
    "host-base-python-is-python": "on the host runtime a base Python equal to the Python under test was accepted",
    "report-reads-results-gz": "vsnap-qual report could not read the committed results.json.gz",
    "report-out-not-writable": "report --out to a read-only directory or a file ended in a traceback, rc 1",
    "pyproject-vsnap-keys": "vsnap_* keys in pyproject.toml were silently ignored by pytest suites/",
}


@dataclass(frozen=True)
class Row:
    """One bad input. ``args`` may hold ``{t}`` (the row's scratch directory, its files made by ``needs``),
    ``{root}`` (the checkout), ``{ro}`` (a directory this process cannot write), ``{port}`` (a busy port)."""

    id: str
    args: tuple[str, ...]
    rc: int
    option: str  # named in the one error line
    fix: str  # words of the fix, in that same line
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)  # written in the run's directory (ini files)
    needs: tuple[str, ...] = ()
    cli: bool = False  # a vsnap-qual command (its arguments), not pytest
    base: bool = True  # pytest: the usual --vsnap-image, --vsnap-model, --vsnap-revision, --vsnap-report-dir
    runtime: str = "none"  # none: refused before any runtime call; memory: tests/seam's; docker: the real one
    wrong: str = ""  # one of WRONG
    writes: bool = False  # the row's command is meant to write (a bad input that now works)


def P(id: str, *args: str, rc: int = USAGE, option: str = "", fix: str, **kw: object) -> Row:  # noqa: N802
    """A pytest row; ``option`` defaults to the first argument's option name."""
    named = option or (args[0].split("=", 1)[0] if args else "")
    return Row(id, args, rc, named, fix, **kw)  # type: ignore[arg-type]


def C(id: str, *args: str, rc: int = CLI_BAD, option: str, fix: str, **kw: object) -> Row:  # noqa: N802
    """A ``vsnap-qual`` row."""
    return Row(id, args, rc, option, fix, cli=True, **kw)  # type: ignore[arg-type]


def _git_checkout(path: Path, files: Mapping[str, str]) -> None:
    for relative, text in files.items():
        (path / relative).parent.mkdir(parents=True, exist_ok=True)
        (path / relative).write_text(text)
    for args in (["init", "-q"], ["add", "."], ["-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True)


def _cache(t: Path, revision: str, weights: bool) -> None:
    snap = t / "hf" / "hub" / "models--org--m" / "snapshots" / revision
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (snap / "tokenizer.json").write_text("{}")
    if weights:
        (snap / "model.safetensors").write_text("")
    else:
        (snap / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "model-1.safetensors"}}))


BUILDERS: dict[str, Callable[[Path], object]] = {
    "prompts-malformed": lambda t: (t / "prompts.json").write_text('["ok", '),
    "prompts-object": lambda t: (t / "prompts.json").write_text('{"prompts": ["a"]}'),
    "prompts-empty": lambda t: (t / "prompts.txt").write_text("\n\n"),
    "prompts-latin1": lambda t: (t / "prompts.txt").write_bytes(b"caf\xe9 au lait\n"),
    "prompts-two": lambda t: (t / "prompts.txt").write_text("one\ntwo\n"),
    "a-file": lambda t: (t / "a-file").write_text(""),
    "text-file": lambda t: (t / "notes.txt").write_text("hello\n"),
    "dangling": lambda t: (t / "dangling").symlink_to(t / "nowhere"),
    "not-vllm": lambda t: (t / "not-vllm").mkdir(),
    "plain-vllm": lambda t: _git_free(t / "vllm-copy", {"vllm/a.py": "a = 1\n"}),
    "syntax-vllm": lambda t: _git_free(t / "syntax", {"vllm/snapshot/server.py": "def serve(:\n    pass\n"}),
    "unchanged-git": lambda t: _git_checkout(t / "unchanged", {"vllm/a.py": "a = 1\n"}),
    "cache-incomplete": lambda t: _cache(t, REV, weights=False),
    "cache-other-revision": lambda t: _cache(t, "1" * 40, weights=True),
    "known-malformed": lambda t: (t / "known.toml").write_text("[[finding]\nid = "),
    "results-empty": lambda t: (t / "results.json").write_text("{}"),
    "results-no-steps": lambda t: (t / "results.json").write_text('{"steps": []}'),
    "used-report": lambda t: _used_report(t / "used"),
    "empty-dir": lambda t: (t / "empty").mkdir(),
}


def _git_free(path: Path, files: Mapping[str, str]) -> None:
    for relative, text in files.items():
        (path / relative).parent.mkdir(parents=True, exist_ok=True)
        (path / relative).write_text(text)


def _used_report(path: Path) -> None:
    path.mkdir()
    (path / "evidence.jsonl").write_text(json.dumps({"kind": "session", "time": "t", "run_id": "20260101-000000-a"}))


S = "--vsnap-"
ROWS: list[Row] = [
    # ---- engines: --vsnap-image, --vsnap-base-image, the runtime and its Pythons ---------------------------------
    P("image-unset", f"{S}model=org/m", base=False, option=f"{S}image", fix="must be set"),
    P("image-space", f"{S}image=my image:1", fix="e.g. vllm/vllm-openai:nightly"),
    P("image-upper-case", f"{S}image=Vllm/Vllm:1", fix="lower"),
    P("image-double-colon", f"{S}image=vllm::1", fix="vllm/vllm-openai"),
    P(
        "image-empty-env",
        f"{S}model=org/m",
        f"{S}revision={REV}",
        env={"VSNAP_IMAGE": ""},
        option=f"{S}image",
        fix="must be set",
        base=False,
    ),
    P("base-image-malformed", f"{S}base-image=a b", fix="e.g. vllm/vllm-openai:nightly"),
    P("base-image-is-image", f"{S}base-image=vsnap-table-not-needed:x", fix="drop --vsnap-base-image"),
    P("runtime-unknown", f"{S}runtime=podman", fix="use 'docker'"),
    P("runtime-env-twin", env={"VSNAP_RUNTIME": "kubernetes"}, option=f"{S}runtime", fix="environment VSNAP_RUNTIME"),
    P("python-with-docker", f"{S}python=/usr/bin/env", option=f"{S}python", fix="need --vsnap-runtime=host"),
    P("host-root-with-docker", f"{S}host-root={{t}}/lanes", fix="add --vsnap-runtime=host"),
    P("python-missing", f"{S}python={{t}}/no-python", fix="not an executable file"),
    P("base-python-missing", f"{S}base-python={{t}}/no-python", fix="not an executable file"),
    P("image-with-host-runtime", f"{S}runtime=host", option=f"{S}image", fix="qualifies the vllm of --vsnap-python"),
    P(
        "host-base-python-is-python",
        f"{S}runtime=host",
        f"{S}python={{python}}",
        f"{S}base-python={{python}}",
        f"{S}model=org/m",
        f"{S}revision={REV}",
        base=False,
        option=f"{S}base-python",
        fix="drop --vsnap-base-python",
        wrong="host-base-python-is-python",
    ),
    P(
        "host-base-python-is-this-python",
        f"{S}runtime=host",
        f"{S}base-python={{python}}",
        f"{S}model=org/m",
        f"{S}revision={REV}",
        base=False,
        option=f"{S}base-python",
        fix="give the Python of an environment with the unmodified vllm",
    ),
    P("docker-unreachable", f"{S}pull=never", env={"DOCKER_HOST": NO_DOCKER}, option="Docker", fix="Start it"),
    # ---- the overlay ----------------------------------------------------------------------------------------------
    P("overlay-missing", f"{S}overlay={{t}}/no-such-checkout", fix="give an existing directory"),
    P("overlay-a-file", f"{S}overlay={{t}}/a-file", needs=("a-file",), fix="give an existing directory"),
    P("overlay-not-vllm", f"{S}overlay={{t}}/not-vllm", needs=("not-vllm",), fix="point --vsnap-overlay at a vLLM"),
    P("overlay-not-git", f"{S}overlay={{t}}/vllm-copy", needs=("plain-vllm",), fix="--vsnap-overlay-files="),
    P("overlay-unchanged", f"{S}overlay={{t}}/unchanged", needs=("unchanged-git",), fix="set --vsnap-overlay-ref"),
    P(
        "overlay-ref-unknown",
        f"{S}overlay={{t}}/unchanged",
        f"{S}overlay-ref=no-such-ref",
        needs=("unchanged-git",),
        option=f"{S}overlay-ref",
        fix="give the branch, tag or commit",
    ),
    P("overlay-ref-empty", f"{S}overlay-ref=", fix="must not be empty"),
    P("overlay-files-outside-vllm", f"{S}overlay-files=setup.py", fix="under vllm/, ending .py"),
    P("overlay-files-dotdot", f"{S}overlay-files=vllm/../x.py", fix="under vllm/, ending .py"),
    P("overlay-files-without-overlay", f"{S}overlay-files=vllm/a.py", fix="needs --vsnap-overlay="),
    P(
        "overlay-files-absent",
        f"{S}overlay={{t}}/vllm-copy",
        f"{S}overlay-files=vllm/b.py",
        needs=("plain-vllm",),
        option=f"{S}overlay",
        fix="name files that exist",
    ),
    P(
        "overlay-syntax-harness-python",
        f"{S}overlay={{t}}/syntax",
        f"{S}overlay-files=vllm/snapshot/server.py",
        f"{S}runtime=memory",
        needs=("syntax-vllm",),
        runtime="memory",
        option=f"{S}overlay",
        fix="fix ",
    ),
    P("unit-command-without-overlay", f"{S}unit-command=pytest tests/x", fix="add --vsnap-overlay="),
    # ---- the model ------------------------------------------------------------------------------------------------
    P("model-unset", f"{S}model=", option=f"{S}model", fix="must be set"),
    P(
        "model-env-empty",
        f"{S}image=vsnap-table-not-needed:x",
        f"{S}revision={REV}",
        env={"VSNAP_MODEL": ""},
        base=False,
        option=f"{S}model",
        fix="must be set",
    ),
    P("revision-branch", f"{S}revision=main", fix="40-character lowercase hex commit"),
    P("revision-upper-hex", f"{S}revision={'A' * 40}", fix="40-character lowercase hex commit"),
    P("revision-short", f"{S}revision=abc1234", fix="40-character lowercase hex commit"),
    P(
        "revision-unset",
        f"{S}image=vsnap-table-not-needed:x",
        f"{S}model=org/m",
        base=False,
        option=f"{S}revision",
        fix="must be set",
    ),
    P("tokenizer-revision-tag", f"{S}tokenizer-revision=v1.0", fix="40-character lowercase hex commit"),
    P("dtype-int8", f"{S}dtype=int8", fix="use one of auto"),
    P("dtype-env-twin", env={"VSNAP_DTYPE": "int8"}, option=f"{S}dtype", fix="environment VSNAP_DTYPE"),
    P(
        "dtype-ini-twin",
        files={"pytest.ini": "[pytest]\nvsnap_dtype = int4\n"},
        option=f"{S}dtype",
        fix="ini vsnap_dtype",
    ),
    P("dtype-env-empty", env={"VSNAP_DTYPE": ""}, option="VSNAP_DTYPE", fix="unset it (default float16)"),
    P("max-model-len-word", f"{S}max-model-len=long", fix="not a whole number"),
    P("max-model-len-zero", f"{S}max-model-len=0", fix="must be positive"),
    P("max-model-len-below-minimum", f"{S}max-model-len=16", fix="give 32 or more"),
    P(
        "max-model-len-short-for-canaries",
        f"{S}max-model-len=64",
        f"{S}canary-tokens=60",
        f"{S}decode-runs=0",
        fix="raise --vsnap-max-model-len",
    ),
    P("max-model-len-short-for-decode", f"{S}max-model-len=64", fix="--vsnap-decode-runs=0"),
    P("model-cache-missing", f"{S}model-cache={{t}}/no-cache", fix="give an existing directory"),
    P("model-cache-incomplete", f"{S}model-cache={{t}}/hf", needs=("cache-incomplete",), fix="hf download org/m"),
    P(
        "model-cache-other-revision",
        f"{S}model-cache={{t}}/hf",
        needs=("cache-other-revision",),
        fix="hf download org/m --revision",
    ),
    # ---- the engine's command line --------------------------------------------------------------------------------
    P("gpu-memory-utilization-two", f"{S}gpu-memory-utilization=2", fix="within (0, 1]"),
    P("gpu-memory-utilization-zero", f"{S}gpu-memory-utilization=0", fix="within (0, 1]"),
    P("gpu-memory-utilization-word", f"{S}gpu-memory-utilization=half", fix="not a number"),
    P("engine-args-port", f"{S}engine-args=--port 9", fix="remove it from --vsnap-engine-args"),
    P("engine-args-revision", f"{S}engine-args=--revision main", fix="set it with --vsnap-revision"),
    P("engine-args-abbreviation", f"{S}engine-args=--max-model-l 64", fix="set it with --vsnap-max-model-len"),
    P("engine-args-unbalanced-quote", f'{S}engine-args=--x "a', fix="cannot split"),
    P("env-no-equals", f"{S}env=HF_TOKEN", fix="write NAME=VALUE pairs"),
    P("env-runner-flag", f"{S}env=VLLM_USE_V2_MODEL_RUNNER=1", fix="use --vsnap-runners"),
    P("variant-no-args", f"{S}variant=nopc=", fix="NAME='ENGINE ARGS'"),
    P("variant-bad-name", f"{S}variant=V1=--x", fix="lower-case letters"),
    P("variant-reserved-name", f"{S}variant=head=--x", fix="lower-case letters"),
    P("variant-twice", f"{S}variant=a=--x", f"{S}variant=a=--y", fix="give each variant one name"),
    P("variant-harness-flag", f"{S}variant=p=--port 1", option=f"{S}variant", fix="remove it from --vsnap-variant p"),
    P("runners-v3", f"{S}runners=v3", fix="runners are v1"),
    P("runners-none", f"{S}runners=,", fix="name at least one runner"),
    P(
        "runners-ini-twin",
        files={"pytest.ini": "[pytest]\nvsnap_runners = v9\n"},
        option=f"{S}runners",
        fix="ini vsnap_runners",
    ),
    # ---- prompts and the checks' figures --------------------------------------------------------------------------
    P("prompts-missing", f"{S}prompts={{t}}/no-prompts.json", fix="cannot read prompts file"),
    P("prompts-malformed-json", f"{S}prompts={{t}}/prompts.json", needs=("prompts-malformed",), fix="not valid JSON"),
    P("prompts-object", f"{S}prompts={{t}}/prompts.json", needs=("prompts-object",), fix="one prompt per line"),
    P("prompts-empty", f"{S}prompts={{t}}/prompts.txt", needs=("prompts-empty",), fix="one prompt per line"),
    P("prompts-not-utf8", f"{S}prompts={{t}}/prompts.txt", needs=("prompts-latin1",), fix="save it as UTF-8"),
    P("prompts-a-directory", f"{S}prompts={{t}}", fix="give a file"),
    P("prompts-unreadable-link", f"{S}prompts={{t}}/dangling", needs=("dangling",), fix="cannot read prompts file"),
    P(
        "canary-prompts-more-than-prompts",
        f"{S}prompts={{t}}/prompts.txt",
        f"{S}canary-prompts=5",
        needs=("prompts-two",),
        option=f"{S}canary-prompts",
        fix="lower it or give more prompts",
    ),
    P("canary-prompts-zero", f"{S}canary-prompts=0", fix="must be positive"),
    P("canary-tokens-negative", f"{S}canary-tokens=-3", fix="must be positive"),
    P("logprob-tolerance-negative", f"{S}logprob-tolerance=-1", fix="finite number >= 0"),
    P("logprob-tolerance-nan", f"{S}logprob-tolerance=nan", fix="finite number >= 0"),
    P("kv-tolerance-percent", f"{S}kv-tolerance=2", fix="for 2 % write 0.02"),
    P("kv-tolerance-zero", f"{S}kv-tolerance=0", fix="e.g. 0.02 for 2 %"),
    P("soak-negative", f"{S}soak=-1", fix="finite number >= 0"),
    P("observe-word", f"{S}observe=long", fix="not a number"),
    P("decode-runs-negative", f"{S}decode-runs=-1", fix="must be >= 0"),
    P("decode-tolerance-fraction", f"{S}decode-tolerance=0.5", fix="write 1.5"),
    P("request-shapes-unknown", f"{S}request-shapes=bursty", fix="choose from repeated"),
    P("request-shapes-empty", f"{S}request-shapes=,", fix="choose from repeated"),
    P("concurrent-requests-zero", f"{S}concurrent-requests=0", fix="must be positive"),
    # ---- the machine: GPUs, privileges, ports, timeouts -----------------------------------------------------------
    P("gpus-index", f"{S}gpus=gpu0", fix="GPU UUIDs from `nvidia-smi -L`"),
    P("gpus-twice", f"{S}gpus=GPU-12345678-aaaa,GPU-12345678-aaaa", fix="name each GPU once"),
    P("gpus-with-cpu-smoke", f"{S}cpu-smoke", f"{S}gpus=all", option=f"{S}cpu-smoke", fix="use --vsnap-gpus=none"),
    P("privileges-root", f"{S}privileges=root", fix="use 'privileged'"),
    P("pull-sometimes", f"{S}pull=sometimes", fix="use 'auto'"),
    P("port-base-privileged", f"{S}port-base=80", fix="within 1024..65000"),
    P("port-base-word", f"{S}port-base=http", fix="not a port number"),
    P("port-base-empty-env", env={"VSNAP_PORT_BASE": ""}, option="VSNAP_PORT_BASE", fix="unset it (default 0)"),
    P("port-base-busy", f"{S}port-base={{port}}", fix="pick another base or 0"),
    P("timeouts-negative", f"{S}timeouts=serve=-1", fix="must be a finite number >= 0"),
    P("timeouts-unknown-step", f"{S}timeouts=boot=10", fix="write NAME=SECONDS with NAME one of"),
    P("timeouts-no-equals", f"{S}timeouts=600", fix="write NAME=SECONDS"),
    P("fault-timeout-zero", f"{S}fault-timeout=0", fix="must be > 0 seconds"),
    P("cleanup-grace-over-half", f"{S}cleanup-grace=20", f"{S}fault-timeout=30", fix="at most half"),
    P("cleanup-grace-word", f"{S}cleanup-grace=soon", fix="not a number"),
    P("kill-seed-word", f"{S}kill-seed=lucky", fix="neither 'random' nor a whole number"),
    P("kill-seed-negative", f"{S}kill-seed=-1", fix="must be >= 0"),
    P("chaos-zero", f"{S}chaos=0", fix="must be positive"),
    # ---- where things go: report, probe, secrets, expectations, flags ---------------------------------------------
    P("report-dir-under-a-file", f"{S}report-dir={{t}}/a-file/report", needs=("a-file",), fix="choose a writable"),
    P("report-dir-is-a-file", f"{S}report-dir={{t}}/a-file", needs=("a-file",), fix="choose a writable"),
    P("report-dir-read-only", f"{S}report-dir={{ro}}/report", fix="choose a writable directory"),
    P("report-dir-holds-a-run", f"{S}report-dir={{t}}/used", needs=("used-report",), fix="rm -rf"),
    P("probe-dir-missing", f"{S}probe-dir={{t}}/no-probe", fix="give an existing directory"),
    P("secrets-not-names", f"{S}secrets=my-token", fix="give environment variable names"),
    P("expect-maybe", f"{S}expect=maybe", fix="use 'head'"),
    P("base-expect-maybe", f"{S}base-expect=maybe", fix="use 'head'"),
    P("doctor-env-not-boolean", env={"VSNAP_DOCTOR": "maybe"}, option=f"{S}doctor", fix="(true/false)"),
    P("annotate-env-not-boolean", env={"VSNAP_ANNOTATE": "2"}, option=f"{S}annotate", fix="(true/false)"),
    P(
        "cpu-smoke-ini-not-boolean",
        files={"pytest.ini": "[pytest]\nvsnap_cpu_smoke = please\n"},
        option=f"{S}cpu-smoke",
        fix="(true/false)",
    ),
    P("known-findings-missing", f"{S}known-findings={{t}}/no-known.toml", fix="docs/known-findings.md"),
    P(
        "known-findings-malformed",
        f"{S}known-findings={{t}}/known.toml",
        needs=("known-malformed",),
        fix="docs/known-findings.md",
    ),
    # ---- merged after the table: issue 45's overlap and faults once, issue 47's plan history -----------------------
    P("fault-runners-word", f"{S}fault-runners=sometimes", fix="use 'once'"),
    P("overlap-word", f"{S}overlap=maybe", fix="use 'lanes'"),
    P("plan-history-missing", f"{S}plan-history={{t}}/no-such-history", fix="give a previous run's results.json"),
    # ---- shards ---------------------------------------------------------------------------------------------------
    P("shard-beyond-count", f"{S}shard=3/2", fix="K counts from 1 to N"),
    P("shard-word", f"{S}shard=first", fix="K/N"),
    P("shard-count-zero", f"{S}shard-count=0", fix="must be positive"),
    P(
        "shard-times-missing",
        f"{S}shard=1/2",
        f"{S}shard-times={{t}}/no-results.json",
        option=f"{S}shard-times",
        fix="give a finished run's results.json",
    ),
    P(
        "shard-times-without-shard",
        f"{S}shard-times={{t}}/results.json",
        needs=("results-no-steps",),
        fix="give --vsnap-shard=K/N",
    ),
    P(
        "shard-times-no-steps",
        f"{S}shard=1/2",
        f"{S}shard-times={{t}}/results.json",
        needs=("results-no-steps",),
        option=f"{S}shard-times",
        fix="give a finished run's results.json",
    ),
    # ---- the environment, the ini file and pyproject.toml ---------------------------------------------------------
    P("env-misspelt", env={"VSNAP_MODLE": "org/m"}, option="VSNAP_MODLE", fix="did you mean VSNAP_MODEL"),
    P("env-wrong-case", env={"vsnap_image": "x"}, option="vsnap_image", fix="did you mean VSNAP_IMAGE"),
    P(
        "env-empty-over-ini",
        f"{S}model=org/m",
        f"{S}revision={REV}",
        env={"VSNAP_IMAGE": ""},
        files={"pytest.ini": "[pytest]\nvsnap_image = b:x\n"},
        base=False,
        option="VSNAP_IMAGE",
        fix="unset VSNAP_IMAGE to use the ini value",
    ),
    P(
        "pyproject-vsnap-keys",
        files={
            "pytest.ini": "[pytest]\n",
            "pyproject.toml": '[tool.pytest.ini_options]\nvsnap_image = "vllm/vllm-openai:nightly"\n',
        },
        option="vsnap_image",
        fix="pass them as --vsnap-* options",
        wrong="pyproject-vsnap-keys",
    ),
    P("option-abbreviated", f"{S}imag=vllm/vllm-openai:nightly", option=f"{S}imag", fix="unrecognized arguments"),
    P("option-unknown", f"{S}colour=blue", option=f"{S}colour", fix="unrecognized arguments"),
    # ---- selection: -k, -m, --deselect ----------------------------------------------------------------------------
    P(
        "keyword-selects-nothing",
        "-k",
        "no_such_test",
        f"{S}runtime=memory",
        runtime="memory",
        rc=NOTHING,
        option="-k 'no_such_test'",
        fix="-k matches the test names",
    ),
    P(
        "marker-selects-nothing",
        "-m",
        "no_such_marker",
        f"{S}runtime=memory",
        runtime="memory",
        rc=NOTHING,
        option="-m 'no_such_marker'",
        fix="-m fault selects the injected failures",
    ),
    P(
        "deselect-unknown-id",
        "--deselect=test_suite.py::test_no_such",
        f"{S}runtime=memory",
        runtime="memory",
        option="--deselect",
        fix="give a node id as `pytest --collect-only -q` lists them",
    ),
    P(
        "deselect-unknown-file",
        "--deselect=suites/test_lifecycle.py",
        f"{S}runtime=memory",
        runtime="memory",
        option="--deselect",
        fix="relative to the rootdir",
    ),
    # ---- vsnap-qual report ----------------------------------------------------------------------------------------
    C("report-source-missing", "report", "{t}/no-run", option="no-run", fix="does not exist"),
    C(
        "report-source-missing-as-pytest",
        "report",
        "{t}/no-run",
        "--exit=pytest",
        rc=USAGE,
        option="no-run",
        fix="does not exist",
    ),
    C("report-dir-without-run", "report", "{t}/empty", needs=("empty-dir",), option="empty", fix="holds neither"),
    C(
        "report-source-not-json",
        "report",
        "{t}/notes.txt",
        needs=("text-file",),
        option="notes.txt",
        fix="give a run's results.json (or .json.gz)",
    ),
    C(
        "report-source-dangling-link",
        "report",
        "{t}/dangling",
        needs=("dangling",),
        option="dangling",
        fix="does not exist",
    ),
    C(
        "report-reads-results-gz",
        "report",
        f"{{root}}/{RESULTS_GZ}",
        "--out",
        "{t}/out",
        rc=0,
        option="",
        fix="",
        wrong="report-reads-results-gz",
        writes=True,
    ),
    C(
        "report-out-a-file",
        "report",
        f"{{root}}/{RESULTS_GZ}",
        "--out",
        "{t}/a-file",
        needs=("a-file",),
        option="--out",
        fix="choose a writable directory",
        wrong="report-out-not-writable",
    ),
    C(
        "report-out-read-only",
        "report",
        f"{{root}}/{RESULTS_GZ}",
        "--out",
        "{ro}/out",
        option="--out",
        fix="choose a writable directory",
        wrong="report-out-not-writable",
    ),
    C(
        "report-out-under-a-file",
        "report",
        f"{{root}}/{RESULTS_GZ}",
        "--out",
        "{t}/a-file/out",
        needs=("a-file",),
        option="--out",
        fix="choose a writable directory",
    ),
    C(
        "report-known-findings-missing",
        "report",
        f"{{root}}/{RESULTS_GZ}",
        "--out",
        "{t}/out",
        "--vsnap-known-findings={t}/no-known.toml",
        option="--vsnap-known-findings",
        fix="docs/known-findings.md",
    ),
    C("report-exit-unknown", "report", "{t}/x", "--exit=shell", option="--exit", fix="choose from"),
    C("report-option-abbreviated", "report", "{t}/x", "--ou", "{t}/out", option="--ou", fix="unrecognized"),
    C("report-no-source", "report", option="source", fix="the following arguments are required"),
    # ---- vsnap-qual compare ---------------------------------------------------------------------------------------
    C("compare-old-missing", "compare", "{t}/no-old", f"{{root}}/{RESULTS_GZ}", option="no-old", fix="does not exist"),
    C(
        "compare-not-json",
        "compare",
        "{t}/notes.txt",
        f"{{root}}/{RESULTS_GZ}",
        needs=("text-file",),
        option="notes.txt",
        fix="give a run's results.json (or .json.gz)",
    ),
    C(
        "compare-no-run-id",
        "compare",
        "{t}/results.json",
        f"{{root}}/{RESULTS_GZ}",
        needs=("results-empty",),
        option="results.json",
        fix="give a run's results.json",
    ),
    C(
        "compare-fail-on-unknown",
        "compare",
        "{t}/a",
        "{t}/b",
        "--fail-on=always",
        option="--fail-on",
        fix="choose from",
    ),
    C("compare-one-run", "compare", f"{{root}}/{RESULTS_GZ}", option="new", fix="the following arguments are required"),
    # ---- vsnap-qual merge -----------------------------------------------------------------------------------------
    C("merge-no-shard", "merge", "--out", "{t}/merged", option="no shard given", fix="name the shards' report"),
    C("merge-shards-zero", "merge", "--out", "{t}/merged", "--shards=0", option="--shards", fix="at least 1"),
    C("merge-shards-word", "merge", "--out", "{t}/merged", "--shards=two", option="--shards", fix="invalid int value"),
    C(
        "merge-out-is-a-shard",
        "merge",
        "{t}/empty",
        "--out",
        "{t}/empty",
        needs=("empty-dir",),
        option="--out",
        fix="give a directory of its own",
    ),
    C(
        "merge-out-a-file",
        "merge",
        "{t}/empty",
        "--out",
        "{t}/a-file",
        needs=("empty-dir", "a-file"),
        option="--out",
        fix="choose a writable directory",
    ),
    C(
        "merge-shard-not-an-archive",
        "merge",
        "{t}/notes.txt",
        "--out",
        "{t}/merged",
        needs=("text-file",),
        option="notes.txt",
        fix="neither a shard's report directory nor a .tar.gz",
    ),
    C(
        "merge-no-out",
        "merge",
        "{t}/empty",
        needs=("empty-dir",),
        option="--out",
        fix="the following arguments are required",
    ),
    # ---- vsnap-qual history ---------------------------------------------------------------------------------------
    C("history-dir-missing", "history", "{t}/no-runs", "--out", "{t}/h", option="no-runs", fix="does not exist"),
    C(
        "history-no-runs",
        "history",
        "{t}/empty",
        "--out",
        "{t}/h",
        needs=("empty-dir",),
        option="empty",
        fix="results.json",
    ),
    C("history-window-zero", "history", "{t}/empty", "--window=0", option="--window", fix="must be positive"),
    C(
        "history-tolerance-negative",
        "history",
        "{t}/empty",
        "--tolerance=-1",
        option="--tolerance",
        fix="finite number >= 0",
    ),
    C(
        "history-out-a-file",
        "history",
        f"{{root}}/{RESULTS_GZ}",
        "--out",
        "{t}/a-file",
        needs=("a-file",),
        option="--out",
        fix="choose a writable directory",
    ),
    C(
        "history-out-read-only",
        "history",
        f"{{root}}/{RESULTS_GZ}",
        "--out",
        "{ro}/h",
        option="--out",
        fix="choose a writable directory",
    ),
    # ---- vsnap-qual doctor (the same options as pytest, read the same way) ----------------------------------------
    C(
        "doctor-option-abbreviated",
        "doctor",
        f"{S}imag=vllm/vllm-openai:nightly",
        option=f"{S}imag",
        fix="did you mean --vsnap-image? Write it in full",
    ),
    C("doctor-option-ambiguous", "doctor", f"{S}gpu=all", option=f"{S}gpu", fix="write the option in full"),
    C("doctor-option-misspelt", "doctor", f"{S}modle=org/m", option=f"{S}modle", fix="did you mean --vsnap-model"),
    C("doctor-dtype", "doctor", f"{S}dtype=int8", option=f"{S}dtype", fix="use one of auto"),
    C(
        "doctor-env-misspelt",
        "doctor",
        env={"VSNAP_MODLE": "org/m"},
        option="VSNAP_MODLE",
        fix="did you mean VSNAP_MODEL",
    ),
    C("doctor-image-malformed", "doctor", f"{S}image=Vllm/X:1", option=f"{S}image", fix="lower"),
    # ---- the vsnap-qual command itself ----------------------------------------------------------------------------
    C("command-missing", option="COMMAND", fix="the following arguments are required"),
    C("command-unknown", "qualify", option="qualify", fix="choose from"),
    C("nightly-tag-no-repository", "nightly-tag", option="repository", fix="the following arguments are required"),
    # ---- rows only the engine can answer (Docker) -----------------------------------------------------------------
    P(
        "overlay-compiled-by-the-engine",
        f"{S}image={REFERENCE}",
        f"{S}model={REFERENCE_MODEL}",
        f"{S}revision={REFERENCE_REV}",
        f"{S}overlay={{t}}/syntax",
        f"{S}overlay-files=vllm/snapshot/server.py",
        needs=("syntax-vllm",),
        runtime="docker",
        base=False,
        option=f"{S}overlay",
        fix="does not compile in the engine's own Python 3.13",
        wrong="overlay-compiled-by-the-engine",
    ),
    P(
        "model-not-in-the-image",
        f"{S}image={REFERENCE}",
        f"{S}model=org/absent",
        f"{S}revision={REFERENCE_REV}",
        runtime="docker",
        base=False,
        option=f"{S}model",
        fix="--vsnap-model-cache=<HF_HOME>",
        wrong="model-not-in-the-image",
    ),
    P(
        "revision-not-in-the-image",
        f"{S}image={REFERENCE}",
        f"{S}model={REFERENCE_MODEL}",
        f"{S}revision={REV}",
        runtime="docker",
        base=False,
        option=f"{S}revision",
        fix=f"cached: {REFERENCE_REV}",
    ),
    P(
        "image-absent-pull-never",
        f"{S}image=vsnap-no-such-image:never",
        f"{S}pull=never",
        runtime="docker",
        option=f"{S}image",
        fix="`docker pull vsnap-no-such-image:never` first",
    ),
    P(
        "image-misnamed",
        f"{S}image=reference:head",
        f"{S}pull=never",
        runtime="docker",
        option=f"{S}image",
        fix=f"Did you mean the local image {REFERENCE}?",
    ),
    P(
        "image-without-organisation",
        f"{S}image=vllm-openai-no-such:nightly",
        f"{S}pull=never",
        runtime="docker",
        option=f"{S}image",
        fix="if you meant an organisation's image, name it",
    ),
]


def test_the_table_covers_every_option_and_the_six_wrong_rows() -> None:
    """≥ 104 rows, unique ids; every ``--vsnap-*`` option in at least one row; every subcommand; the six wrong
    rows by name."""
    assert len(ROWS) >= 104, len(ROWS)
    ids = [row.id for row in ROWS]
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]
    text = " ".join(" ".join((*row.args, row.option, *row.env, *row.files.values())) for row in ROWS)
    missing = [spec.cli for spec in options.OPTIONS if spec.cli not in text and spec.dest not in text]
    assert not missing, f"options without a bad-input row: {missing}"
    from vsnap_qual.cli import SUBCOMMANDS

    commands = {row.args[0] for row in ROWS if row.cli and row.args}
    assert set(SUBCOMMANDS) <= commands, set(SUBCOMMANDS) - commands
    assert {row.wrong for row in ROWS if row.wrong} == set(WRONG)


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        yield busy.getsockname()[1]


def _read_only_dir(t: Path) -> Path:
    """A directory this process cannot write: a read-only one, or for root (which writes through modes) sysfs."""
    if os.geteuid() == 0:
        return Path("/sys")
    path = t / "read-only"
    path.mkdir()
    path.chmod(0o555)
    return path


def _tree(*roots: Path) -> dict[str, int]:
    return {
        str(path): path.lstat().st_mtime_ns
        for root in roots
        if root.exists()
        for path in [root, *root.rglob("*")]
        if not path.name.startswith("__pycache__")
    }


def _prepare(row: Row, t: Path, port: int) -> list[str]:
    t.mkdir()
    for need in row.needs:
        BUILDERS[need](t)
    places = {"t": str(t), "root": str(ROOT), "ro": str(_read_only_dir(t)), "port": str(port), "python": sys.executable}
    return [arg.format(**places) for arg in row.args]


def _error_line(row: Row, text: str) -> str:
    """The one error line that names the option (pytest's ``ERROR:``, a command's ``vsnap-qual …:`` or argparse's
    ``error:`` line, else the first line naming it: argparse's usage lines name options too); the row's fix words
    must be in it."""
    lines = [line for line in text.splitlines() if row.option in line]
    assert lines, f"{row.id}: no line names {row.option!r}:\n{text[-3000:]}"
    errors = [line for line in lines if line.startswith(("ERROR:", "vsnap-qual")) or " error: " in line]
    return errors[-1] if errors else lines[0]


def _check(row: Row, rc: int, text: str) -> None:
    assert rc == row.rc, f"{row.id}: exit {rc}, expected {row.rc}:\n{text[-3000:]}"
    assert "Traceback" not in text, f"{row.id}: a traceback:\n{text[-3000:]}"
    if row.option:
        line = _error_line(row, text)
        assert row.fix in line, f"{row.id}: the error line lacks the fix {row.fix!r}:\n{line}"


def _owned_containers(client: DockerClient) -> list[str]:
    return [
        entry["Id"]
        for entry in client.api.containers(all=True, filters={"label": LABEL_SESSION})
        if (entry.get("Labels") or {}).get(LABEL_OWNER) == owner_label()
    ]


def _run_pytest(
    row: Row, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, t: Path, args: list[str]
) -> tuple[int, str]:
    for name in [n for n in os.environ if n.upper().startswith("VSNAP_")]:
        monkeypatch.delenv(name)
    if row.runtime != "docker":
        monkeypatch.setenv("DOCKER_HOST", NO_DOCKER)  # a row that reaches Docker says so instead of its message
    for key, value in row.env.items():
        monkeypatch.setenv(key, value)
    base = (
        ["--vsnap-image=vsnap-table-not-needed:x", "--vsnap-model=org/m", f"--vsnap-revision={REV}"] if row.base else []
    )
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        result = pytester.runpytest_inprocess(
            "-p",
            "vsnap_qual",
            "-p",
            "no:cacheprovider",
            *base,
            f"--vsnap-report-dir={t / 'report'}",
            *args,
        )
    finally:
        signal.signal(signal.SIGTERM, sigterm)  # an active session made SIGTERM an interrupt
    return int(result.ret), result.stdout.str() + "\n" + result.stderr.str()


def _run_cli(
    row: Row, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> tuple[int, str]:
    from vsnap_qual.cli import main

    for name in [n for n in os.environ if n.upper().startswith("VSNAP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("DOCKER_HOST", NO_DOCKER)
    for key, value in row.env.items():
        monkeypatch.setenv(key, value)
    try:
        rc = main(args)
    except SystemExit as exc:  # argparse's own usage errors
        rc = int(exc.code or 0)
    out = capsys.readouterr()
    return rc, out.out + "\n" + out.err


def _run(
    row: Row,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    port: int,
) -> None:
    t = tmp_path / "s"
    args = _prepare(row, t, port)
    if not row.cli:
        pytester.makepyfile(test_suite=SUITE)
        for name, text in row.files.items():
            (pytester.path / name).write_text(text)
    watched = (t, pytester.path) if not row.cli else (t,)
    before = _tree(*watched)
    if row.cli:
        rc, text = _run_cli(row, capsys, monkeypatch, args)
    else:
        rc, text = _run_pytest(row, pytester, monkeypatch, t, args)
    _check(row, rc, text)
    if not row.writes:
        after = _tree(*watched)
        added = sorted(set(after) - set(before))
        assert not added, f"{row.id}: wrote {added}"
        assert not (t / "report").exists()


@pytest.mark.parametrize("row", [r for r in ROWS if r.runtime != "docker"], ids=lambda r: r.id)
def test_bad_input(
    row: Row,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    busy_port: int,
) -> None:
    """One row: refused with its exit code and one error line naming the option and the fix; nothing written, no
    runtime reached (the Docker it would reach does not answer, and the row's message is not that one)."""
    _run(row, pytester, monkeypatch, capsys, tmp_path, busy_port)


@pytest.mark.docker
@pytest.mark.parametrize("row", [r for r in ROWS if r.runtime == "docker"], ids=lambda r: r.id)
def test_bad_input_the_engine_answers(
    row: Row,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    busy_port: int,
    docker_client: DockerClient,
) -> None:
    """A row only the engine can answer, against the real Docker: refused before any lane, and the one-shot
    containers that asked the image are gone (none labelled by this process is left)."""
    if REFERENCE in " ".join(row.args) and not docker_client.images.list(name=REFERENCE):
        pytest.fail(f"{REFERENCE} is needed: make reference")
    _run(row, pytester, monkeypatch, capsys, tmp_path, busy_port)
    assert not _owned_containers(docker_client), f"{row.id}: a container of this process is left"
