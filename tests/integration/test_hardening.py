"""Hardening: interrupted runs, hung engines and read-only model caches, against the real Docker engine."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.integration.suite_helpers import (
    REFERENCE_HEAD,
    REFERENCE_PROFILE,
    ROOT,
    image_file,
    labelled_containers,
    make_overlay,
    run_suite,
)

if TYPE_CHECKING:
    from docker.client import DockerClient

pytestmark = pytest.mark.docker


def _start_suite(report_dir: Path, *args: str) -> subprocess.Popen[str]:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "suites/",
        REFERENCE_PROFILE,
        "-p",
        "no:cacheprovider",
        f"--vsnap-report-dir={report_dir}",
        "--vsnap-runners=v1",
        *args,
    ]
    return subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


def _wait_for(path_glob: str, root: Path, proc: subprocess.Popen[str], limit: float = 300) -> Path:
    deadline = time.time() + limit
    while time.time() < deadline:
        found = sorted(root.glob(path_glob))
        if found:
            return found[0]
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            pytest.fail(f"the suite ended (exit {proc.returncode}) before {path_glob} appeared:\n{out[-3000:]}")
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"{path_glob} did not appear within {limit} s")


def _session_id(report_dir: Path) -> str:
    from vsnap_qual.evidence import read_records

    return next(str(r["run_id"]) for r in read_records(report_dir / "evidence.jsonl") if r["kind"] == "session")


@pytest.mark.parametrize(
    ("signum", "moment", "select"),
    [
        (signal.SIGINT, "logs/v1-head-lifecycle/create.log", "not fault"),
        (signal.SIGTERM, "logs/v1-head-lifecycle/restore-1.log", "not fault"),
        (signal.SIGTERM, "logs/v1-head-faults/restore-faulted.log", "fault"),
    ],
    ids=["sigint-during-create", "sigterm-during-restore", "sigterm-during-fault"],
)
def test_interrupt_cleans_up_and_keeps_the_evidence(
    tmp_path: Path,
    docker_client: DockerClient,
    reference_images: None,
    signum: signal.Signals,
    moment: str,
    select: str,
) -> None:
    report = tmp_path / "report"
    proc = _start_suite(report, "-m", select)
    _wait_for(moment, report, proc)
    time.sleep(0.5)
    os.kill(proc.pid, signum)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the interrupted suite did not stop within 120 s")
    session = _session_id(report)
    assert labelled_containers(docker_client, session) == [], "an interrupted run left its containers"
    from vsnap_qual.evidence import read_records

    kinds = [r["kind"] for r in read_records(report / "evidence.jsonl")]
    assert "session" in kinds and "environment" in kinds
    assert "step" in kinds, "the steps finished before the interrupt were not kept"


def test_sigkill_leftovers_are_swept_by_the_next_session(
    tmp_path: Path, docker_client: DockerClient, reference_images: None
) -> None:
    report = tmp_path / "report"
    proc = _start_suite(report, "-m", "not fault")
    _wait_for("logs/v1-head-lifecycle/create.log", report, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    session = _session_id(report)
    assert labelled_containers(docker_client, session), "SIGKILL should leave the container for the sweep"
    rendered = subprocess.run(["vsnap-qual", "report", str(report)], capture_output=True, text=True, cwd=ROOT)
    assert rendered.returncode == 4, rendered.stdout + rendered.stderr  # the recorded verdict: INCOMPLETE
    assert (report / "report.html").exists(), "a killed run must still render a (partial) report"
    assert "incomplete" in (report / "summary.md").read_text().lower()
    nothing = run_suite(tmp_path / "next", "-k", "no_such_test_selects_nothing")
    assert nothing.returncode == 5
    assert labelled_containers(docker_client, session) == [], "the next session did not sweep the leftovers"


def test_a_hung_engine_fails_within_its_budget_with_the_log_attached(
    tmp_path: Path, docker_client: DockerClient, reference_images: None
) -> None:
    source = image_file(docker_client, REFERENCE_HEAD, "vllm.entrypoints.cli.serve")
    hang = (
        "import time as _vsnap_time\n_vsnap_time.sleep(3600)  # vsnap-qual test: an engine that never becomes ready\n"
    )
    checkout = make_overlay(tmp_path, {"vllm/entrypoints/cli/serve.py": _overlay_after_future_imports(source, hang)})
    started = time.time()
    run = run_suite(
        tmp_path / "report",
        "-m",
        "not fault",
        "--vsnap-runners=v1",
        f"--vsnap-overlay={checkout}",
        "--vsnap-overlay-files=vllm/entrypoints/cli/serve.py",
        "--vsnap-timeouts=serve=20",
        "-k",
        "ordinary",
    )
    elapsed = time.time() - started
    assert run.returncode == 1, run.output[-3000:]
    step = run.step(lane="v1-head", step="ordinary")
    assert step["outcome"] == "failed" and "not ready within 20 s" in step["message"]
    assert step["seconds"] <= 20 + 10
    assert "vsnap log" in run.output, "the engine's log tail is not attached to the failure report"
    assert elapsed < 300
    assert labelled_containers(docker_client, run.session) == []  # other sessions may run on this host


def _overlay_after_future_imports(source: str, code: str) -> str:
    lines = source.splitlines(keepends=True)
    after = max((i + 1 for i, line in enumerate(lines) if line.startswith("from __future__")), default=0)
    return "".join(lines[:after]) + code + "".join(lines[after:])


def test_an_engine_that_stops_answering_http_fails_the_step_within_budget(
    tmp_path: Path, docker_client: DockerClient, reference_images: None
) -> None:
    """The server is up and healthy, but a completion never returns: the canary fails within the HTTP budget."""
    module = "vllm/entrypoints/openai/api_server.py"
    source = image_file(docker_client, REFERENCE_HEAD, "vllm.entrypoints.openai.api_server")
    marker = "def _completion(engine: LLMEngine, body: dict[str, Any]) -> dict[str, Any]:\n"
    assert marker in source, "the reference engine's completion handler moved: update this test's overlay"
    hung = source.replace(marker, marker + "    import time as _t\n    _t.sleep(3600)  # vsnap-qual test: no answer\n")
    checkout = make_overlay(tmp_path, {module: hung})
    run = run_suite(
        tmp_path / "report",
        "-m",
        "not fault",
        "--vsnap-runners=v1",
        f"--vsnap-overlay={checkout}",
        f"--vsnap-overlay-files={module}",
        "--vsnap-timeouts=http=5",
        "-k",
        "ordinary",
    )
    assert run.returncode == 1, run.output[-3000:]
    step = run.step(lane="v1-head", step="ordinary")
    assert step["outcome"] == "failed" and "timed out" in step["message"].lower()
    assert step["seconds"] <= 5 + 30  # one request's budget plus serve start and stop
    assert labelled_containers(docker_client, run.session) == []  # other sessions may run on this host


def test_a_command_that_never_exits_is_killed_at_its_deadline(
    tmp_path: Path, docker_client: DockerClient, reference_images: None
) -> None:
    """``vllm snapshot create`` hangs: the in-container deadline ends it and the step fails within budget + 10 s."""
    module = "vllm/snapshot/controller.py"
    source = image_file(docker_client, REFERENCE_HEAD, "vllm.snapshot.controller")
    checkout = make_overlay(
        tmp_path,
        {
            module: _overlay_after_future_imports(
                source, "import time as _t\n_t.sleep(3600)  # vsnap-qual test: a create that never exits\n"
            )
        },
    )
    run = run_suite(
        tmp_path / "report",
        "-m",
        "not fault",
        "--vsnap-runners=v1",
        f"--vsnap-overlay={checkout}",
        f"--vsnap-overlay-files={module}",
        "--vsnap-timeouts=create=15",
        "-k",
        "create",
    )
    assert run.returncode == 1, run.output[-3000:]
    step = run.step(lane="v1-head", step="create")
    assert step["outcome"] == "failed" and step["exit_code"] == 124, step
    assert step["seconds"] <= 15 + 10
    assert labelled_containers(docker_client, run.session) == []  # other sessions may run on this host


def test_model_cache_is_mounted_read_only_and_left_unchanged(
    tmp_path: Path, docker_client: DockerClient, reference_images: None
) -> None:
    cache = tmp_path / "hf"
    container = docker_client.containers.create(REFERENCE_HEAD, entrypoint=["true"])
    try:
        import io
        import tarfile

        home = _image_hf_home(docker_client)
        stream, _ = container.get_archive(home)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            tar.extractall(cache, filter="data")
    finally:
        container.remove(force=True)
    cache = next(p for p in cache.iterdir() if p.is_dir())

    def digest_tree() -> str:
        h = hashlib.sha256()
        for path in sorted(cache.rglob("*")):
            h.update(str(path.relative_to(cache)).encode())
            if path.is_file():
                h.update(path.read_bytes())
        return h.hexdigest()

    before = digest_tree()
    run = run_suite(tmp_path / "report", "-m", "not fault", "--vsnap-runners=v1", f"--vsnap-model-cache={cache}")
    assert run.returncode == 0, run.output[-4000:]
    env = next(r for r in run.records if r["kind"] == "environment")
    assert env["environment"]["HF_HOME"] == "/vsnap/hf"
    assert digest_tree() == before


def _image_hf_home(client: DockerClient) -> str:
    image = client.images.get(REFERENCE_HEAD)
    env: dict[str, str] = dict(e.split("=", 1) for e in image.attrs["Config"].get("Env") or [])
    return env.get("HF_HOME", "/root/.cache/huggingface")
