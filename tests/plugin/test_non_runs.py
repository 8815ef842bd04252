"""Sessions that run no qualification (``--help``, ``--version``, ``--co``, a refused run, a selection of nothing) show
what they show and leave nothing behind: no report directory, no verdict, nothing appended to a CI step summary; a
refused run's retry into the same report directory runs (issue 26)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SEAM = ROOT / "tests" / "seam"  # memory_runtime: a runtime with no Docker, registered with -p
REVISION = "0123456789abcdef0123456789abcdef01234567"
PROFILE = f"@{ROOT / 'suites' / 'profiles' / 'reference.args'}"
MEMORY = [
    "-p", "memory_runtime", "--vsnap-runtime=memory", "--vsnap-image=memory:head", "--vsnap-model=org/tiny",
    f"--vsnap-revision={REVISION}", "--vsnap-expect=base", "--vsnap-soak=0.5", "--vsnap-observe=0",
    "--vsnap-cleanup-grace=1",
    # the in-memory engine decodes nothing (it answers from a formula): its "decode speed" would be an HTTP round
    # trip's, which varied 2x between steps on CI's busy 2 cores; there is no decoding to time
    "--vsnap-decode-runs=0",
]  # fmt: skip


def pytest_in(
    cwd: Path, *args: str, env: dict[str, str] | None = None, session: bool = False
) -> subprocess.CompletedProcess[str]:
    """``python -m pytest suites/ ARGS`` from ``cwd`` (the default report root is the invocation directory);
    ``session``: in a process group of its own, as a terminal's foreground job is."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(ROOT / "suites"), "-p", "no:cacheprovider", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(SEAM), str(ROOT)]), **(env or {})},
        start_new_session=session,
    )


def everything_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.mark.parametrize("profile", [[], [PROFILE]], ids=["no-options", "reference-profile"])
def test_help_exits_0_lists_the_vsnap_options_and_writes_nothing(tmp_path: Path, profile: list[str]) -> None:
    done = pytest_in(tmp_path, *profile, "--help")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "vsnap-qual: vLLM snapshot qualification" in done.stdout
    for option in ("--vsnap-image", "--vsnap-report-dir", "--vsnap-kv-tolerance"):
        assert option in done.stdout, option
    assert everything_under(tmp_path) == [], "--help wrote into the invocation directory"


@pytest.mark.parametrize("profile", [[], [PROFILE]], ids=["no-options", "reference-profile"])
def test_version_exits_0_and_writes_nothing(tmp_path: Path, profile: list[str]) -> None:
    done = pytest_in(tmp_path, *profile, "--version")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "pytest" in done.stdout + done.stderr
    assert everything_under(tmp_path) == []


def test_collect_only_renders_nothing_and_appends_nothing_to_the_step_summary(tmp_path: Path) -> None:
    summary = tmp_path / "step-summary.md"
    summary.write_text("## earlier step\n")
    report = tmp_path / "report"
    done = pytest_in(
        tmp_path, *MEMORY, f"--vsnap-report-dir={report}", "--co", "-q", env={"GITHUB_STEP_SUMMARY": str(summary)}
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "test_lifecycle.py::" in done.stdout, "the suites were collected"
    assert summary.read_text() == "## earlier step\n", "--co appended a verdict to $GITHUB_STEP_SUMMARY"
    for name in ("results.json", "report.html", "summary.md"):
        assert not (report / name).exists(), f"--co rendered {name}"
    assert "FAIL" not in output, output[-2000:]


def test_a_refused_run_leaves_its_report_dir_untouched_and_its_corrected_retry_runs_there(tmp_path: Path) -> None:
    """The GPU guide's workflow: ``--vsnap-report-dir=reports/my-change``, refused (a bad option; preflight: a busy
    port), fixed, run again into the same directory. A directory an older version left holding only an empty
    ``logs/`` is no run's evidence either."""
    report = tmp_path / "reports" / "my-change"
    bad_option = pytest_in(tmp_path, *MEMORY, f"--vsnap-report-dir={report}", "--vsnap-kv-tolerance=-1")
    assert bad_option.returncode == pytest.ExitCode.USAGE_ERROR, bad_option.stderr[-2000:]
    assert not (tmp_path / "reports").exists(), "a run refused for a bad option wrote its report directory"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        refused = pytest_in(tmp_path, *MEMORY, f"--vsnap-report-dir={report}", f"--vsnap-port-base={port}")
    assert refused.returncode == pytest.ExitCode.USAGE_ERROR, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert f"port {port} is in use" in refused.stderr
    assert everything_under(tmp_path) == [], "a run refused at preflight wrote into the report directory"
    (report / "logs").mkdir(parents=True)  # what a refused run of an older version left
    retry = pytest_in(
        tmp_path, *MEMORY, f"--vsnap-report-dir={report}", "--vsnap-runners=v1", "-k", "test_ordinary_reference"
    )
    assert retry.returncode == 0, retry.stdout[-3000:] + retry.stderr[-2000:]
    results = json.loads((report / "results.json").read_text())
    assert results["verdict"]["status"] == "pass" and "narrowed" in results["verdict"]["headline"]
    assert [s["step"] for s in results["steps"]] == ["ordinary"]


def test_a_selection_of_nothing_writes_nothing_and_lists_what_could_have_been_selected(tmp_path: Path) -> None:
    from vsnap_qual import procedure
    from vsnap_qual.faults import BUILTIN_FAULTS

    report = tmp_path / "report"
    done = pytest_in(tmp_path, *MEMORY, f"--vsnap-report-dir={report}", "-k", "restore_3", "-m", "not fault")
    assert done.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, done.stdout[-2000:] + done.stderr[-2000:]
    assert everything_under(tmp_path) == [], "a run that selected nothing wrote into the report directory"
    lines = done.stdout.splitlines()
    assert any(line.startswith("nothing selected by -k 'restore_3' -m 'not fault'") for line in lines), lines[-20:]
    listed = {line.split(":", 1)[0]: line.split(":", 1)[1] for line in lines if ": " in line}
    assert listed["lanes"].strip() == "v1-head, v2-head"
    assert listed["step ids"].strip() == ", ".join(s.name for s in procedure.LIFECYCLE)
    assert listed[f"fault names ({len(BUILTIN_FAULTS)})"].strip() == ", ".join(f.id for f in BUILTIN_FAULTS)
    assert "test_restore_1" in listed["tests"] and "test_fault" in listed["tests"]


#: Stops the run from inside ``vllm snapshot create`` (the memory box's), as Ctrl-C or a CI cancel would.
STOPPER = """
import os, signal
import memory_runtime

_create = memory_runtime.MemoryBox._create

def _stopped_create(self, *args):
    if {group}:  # a terminal's Ctrl-C: every process of the foreground job (xdist's controller and workers)
        os.killpg(os.getpgid(0), signal.{signal})
    else:
        os.kill(os.getpid(), signal.{signal})
    return _create(self, *args)

memory_runtime.MemoryBox._create = _stopped_create
"""


@pytest.mark.parametrize(
    ("sig", "xdist"), [("SIGINT", []), ("SIGTERM", []), ("SIGINT", ["-n", "2"])], ids=["SIGINT", "SIGTERM", "Ctrl-C-n2"]
)
def test_a_run_stopped_during_a_step_is_interrupted_naming_the_step_not_failed(
    tmp_path: Path, sig: str, xdist: list[str]
) -> None:
    """Under ``-n 2`` the signal goes to the whole job (controller and workers), as a terminal's Ctrl-C does."""
    (tmp_path / "stopper.py").write_text(STOPPER.replace("{signal}", sig).replace("{group}", str(bool(xdist))))
    report = tmp_path / "report"
    done = pytest_in(
        tmp_path, *MEMORY, "-p", "stopper", f"--vsnap-report-dir={report}", "--vsnap-runners=v1", "-m", "not fault",
        *xdist, env={"PYTHONPATH": os.pathsep.join([str(tmp_path), str(SEAM), str(ROOT)])}, session=bool(xdist),
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == pytest.ExitCode.INTERRUPTED, output[-3000:]
    results = json.loads((report / "results.json").read_text())
    verdict = results["verdict"]
    assert verdict["status"] == "interrupted", verdict["reasons"]
    assert verdict["headline"] == "INTERRUPTED (during v1/head/create)"
    how = "SIGTERM" if sig == "SIGTERM" else "Ctrl-C"
    assert verdict["reasons"][0].startswith(f"the run was interrupted ({how}) while v1/head/create ran; 1 of "), verdict
    create = next(s for s in results["steps"] if s["step"] == "create")
    assert create["outcome"] == "skipped" and create["message"].startswith("interrupted: the run was stopped")
    assert not any(s["outcome"] == "failed" for s in results["steps"]), "an interrupted step is not a failure"
    assert (report / "summary.md").read_text().startswith("## vsnap-qual: ⏹️ INTERRUPTED (during v1/head/create)")
    assert "FAIL" not in verdict["headline"] and "❌" not in output
