"""summary.md carries what a seed PR's validation cites, rendered from the evidence (never judged again)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.report.synthetic_runs import MakeRun, RunSpec, record_validator
from vsnap_qual.faults import BUILTIN_FAULTS
from vsnap_qual.overlay import checkout_state
from vsnap_qual.report import write_reports
from vsnap_qual.report.assemble import read_evidence
from vsnap_qual.run.ci_build import ci_build


def _edit_environments(directory: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite each lane's environment record through ``edit``; every record must still fit the model."""
    path = directory / "evidence.jsonl"
    records: list[dict[str, Any]] = read_evidence(path).records
    for record in records:
        if record["kind"] == "environment":
            edit(record)
            problem = next(record_validator("environment").iter_errors(record), None)
            assert problem is None, problem.message
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _summary(directory: Path) -> str:
    return write_reports(directory, github_step_summary=False).summary_md.read_text()


def test_summary_names_images_engine_configuration_and_each_fault(make_run: MakeRun) -> None:
    text = _summary(make_run("pass", RunSpec(changed_digests=())))
    head = text.split("| check | result |")[0]
    assert "image `vllm/vllm-openai:nightly-593df82f` (ID `sha256:" in head and "digest `sha256:" in head
    assert "base `vllm/vllm-openai:v0.33.0` (ID `sha256:" in head
    assert "dtype `float16`" in head and "max-model-len `512`" in head
    assert "engine args: none beyond the harness's" in head and "Overlay: none" in head
    faults = [line for line in text.splitlines() if line.startswith("- injected ")]
    assert len(faults) == len(BUILTIN_FAULTS)
    wake = next(line for line in faults if "(`wake-raise`)" in line)
    assert wake.startswith("- injected recovery failure after memory wake (`wake-raise`) — v1/head, v2/head: ")
    assert 'exit 1 before HTTP, error.json phase "recovery: restore memory", cleanup verified' in wake
    drift = next(line for line in faults if "(`identity-drift`)" in line)
    assert "v1/head, v1/base, v2/head, v2/base: exit 1 before HTTP, artifact unchanged, cleanup verified" in drift
    truncated = next(line for line in faults if "(`image-truncated`)" in line)
    assert "artifact" not in truncated.split("—")[1].replace("the artifact restores", "")  # not its expectation
    sigterm = next(line for line in faults if "(`cancel-sigterm`)" in line)
    assert "v1/base, v2/base: exit 1 before HTTP, cleanup recorded as it exited, not judged" in sigterm
    assert "**FAIL**" not in text


def test_a_failed_fault_says_so_in_its_line(make_run: MakeRun) -> None:
    spec = RunSpec(changed_digests=(), failed_steps=(("v2", "base", "fault:port-in-use"),))
    line = next(s for s in _summary(make_run("f", spec)).splitlines() if "(`port-in-use`)" in s)
    assert "v2/base: **FAIL**: exit 1 before HTTP" in line and "restore exited 1" in line
    assert "v1/head, v1/base, v2/head: exit 1 before HTTP" in line


def test_an_unlabelled_image_says_unlabelled(make_run: MakeRun) -> None:
    directory = make_run("u", RunSpec(changed_digests=()))
    _edit_environments(directory, lambda r: r["image"].update(labels=None, repo_digests=[]))
    table = _summary(directory).split("### Environment")[1].split("###")[0]
    rows = [line for line in table.splitlines() if line.startswith("| v")]
    assert len(rows) == 4
    assert all(" | unlabelled | " in row for row in rows)
    assert all("ID `sha256:" in row for row in rows)  # no digest: the image ID still identifies it


def test_engine_args_are_shown(make_run: MakeRun) -> None:
    directory = make_run("args", RunSpec(changed_digests=()))
    path = directory / "evidence.jsonl"
    records: list[dict[str, Any]] = read_evidence(path).records
    records[0]["options"]["engine_args"] = ["--enforce-eager", "--kv-cache-dtype", "fp8"]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert "engine args `--enforce-eager --kv-cache-dtype fp8`" in _summary(directory)


def _git(checkout: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(checkout), *args], check=True, capture_output=True)


def test_the_overlay_checkout_commit_and_dirty_state(make_run: MakeRun, tmp_path: Path) -> None:
    checkout = tmp_path / "vllm-src"
    (checkout / "vllm" / "snapshot").mkdir(parents=True)
    (checkout / "vllm" / "snapshot" / "server.py").write_text("A = 1\n")
    _git(checkout, "init", "-q")
    _git(checkout, "add", ".")
    _git(checkout, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base")
    clean = checkout_state(checkout, "HEAD")
    assert clean["dirty"] is False and clean["changed"] == 0 and "error" not in clean
    assert clean["commit"] == clean["ref_commit"] and len(str(clean["commit"])) == 40
    (checkout / "vllm" / "snapshot" / "server.py").write_text("A = 2\n")
    dirty = checkout_state(checkout, "HEAD")
    assert dirty["dirty"] is True and dirty["changed"] == 1 and dirty["commit"] == clean["commit"]
    missing = checkout_state(checkout, "no-such-branch")
    assert missing["error"] and missing["commit"] == clean["commit"]

    directory = make_run("overlay", RunSpec(changed_digests=()))
    _edit_environments(directory, lambda r: r.update(overlay_checkout=dirty) if r["arm"] == "head" else None)
    line = next(s for s in _summary(directory).splitlines() if s.startswith("Overlay: "))
    assert f"`{checkout}` at `{str(dirty['commit'])[:12]}`, **dirty** (1 uncommitted change(s))" in line
    assert "the files changed since `HEAD`" in line


@pytest.mark.parametrize(
    ("environ", "url"),
    [
        ({"BUILDKITE_BUILD_URL": "https://buildkite.com/vllm/ci/builds/7", "BUILDKITE_COMMIT": "abc"}, None),
        (
            {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "o/r", "GITHUB_RUN_ID": "42"},
            "https://github.com/o/r/actions/runs/42",
        ),
        ({"CI_JOB_URL": "https://gitlab.example/j/1"}, None),
    ],
)
def test_the_ci_build_link(make_run: MakeRun, environ: dict[str, str], url: str | None) -> None:
    build = ci_build(environ)
    assert build is not None
    expected = url or environ.get("BUILDKITE_BUILD_URL") or environ["CI_JOB_URL"]
    assert build["build_url"] == expected
    directory = make_run("ci", RunSpec(changed_digests=()))
    _edit_environments(directory, lambda r: r.update(ci=build))
    # after the title and the "What was qualified" line
    assert f"[CI build]({expected})" in _summary(directory).split("\n\n")[2]


def test_no_ci_build_outside_ci(make_run: MakeRun) -> None:
    assert ci_build({"HOME": "/root", "GITHUB_REPOSITORY": "o/r"}) is None
    assert "CI build" not in _summary(make_run("local", RunSpec(changed_digests=())))


def test_a_simulated_gpu_is_named_and_an_unlabelled_image_in_the_html(make_run: MakeRun) -> None:
    directory = make_run("sim", RunSpec(changed_digests=()))
    shim = "nvidia-smi GPU identity shim"

    def edit(record: dict[str, Any]) -> None:
        record["gpu"] = None
        record["image"]["labels"] = {"ai.vsnap.simulated": shim}

    _edit_environments(directory, edit)
    paths = write_reports(directory, github_step_summary=False)
    rows = [line for line in paths.summary_md.read_text().splitlines() if line.startswith("| v")]
    assert len(rows) == 4
    assert all(f" | none (simulated: {shim}) |" in row and " | unlabelled | " in row for row in rows)
    html = paths.report_html.read_text()
    environment = html[html.index('<section id="environment">') : html.index('<section id="overlay">')]
    assert environment.count(f"simulated: {shim}") == 4
    assert environment.count('<span class="note">unlabelled</span>') == 4


def test_what_was_qualified_opens_the_summary_and_the_html_banner(make_run: MakeRun) -> None:
    directory = make_run("smoke", RunSpec(changed_digests=(), cpu_smoke=True))
    engine = "vsnap reference engine (a miniature vLLM written for vsnap-qual), not vLLM"
    _edit_environments(directory, lambda r: r["image"]["labels"].update({"ai.vsnap.engine": engine}))
    paths = write_reports(directory, github_step_summary=False)
    title, qualified = paths.summary_md.read_text().split("\n\n")[:2]
    assert title.endswith(f"PASS (CPU smoke) · {engine}")
    assert qualified.startswith(f"> **What was qualified**: engine: {engine}; CPU smoke mode: real vLLM's CPU build")
    html = paths.report_html.read_text()
    banner = html[html.index('<div class="qualified">') : html.index("</div>", html.index('<div class="qualified">'))]
    assert f"<li>engine: {engine}</li>" in banner and "Not qualified: GPU memory release and restore" in banner


def test_a_real_gpu_is_never_called_simulated(make_run: MakeRun) -> None:
    """The reference image simulates a GPU only where the host has none: on the H200 its label still says
    ``simulated``, and the lanes' real GPU must not be shown as a stand-in."""
    directory = make_run("h200", RunSpec(changed_digests=()))
    _edit_environments(directory, lambda r: r["image"]["labels"].update({"ai.vsnap.simulated": "gpu"}))
    paths = write_reports(directory, github_step_summary=False)
    rows = [line for line in paths.summary_md.read_text().splitlines() if line.startswith("| v")]
    assert len(rows) == 4 and all(row.endswith(" | NVIDIA H200 |") for row in rows)
    assert (
        "simulated" not in paths.report_html.read_text().split('<section id="environment">')[1].split("</section>")[0]
    )
    assert not any("simulated" in line for line in json.loads(paths.results_json.read_text())["verdict"]["qualified"])


def test_the_reference_engine_and_a_simulated_gpu_are_said_beside_the_verdict(make_run: MakeRun) -> None:
    """From the target's own labels only: the first line of summary.md, the HTML banner under the verdict and a
    JUnit property; a target without them is named by the vLLM its lanes ran."""
    from vsnap_qual.report.junit import run_properties

    directory = make_run("reference", RunSpec(changed_digests=()))
    engine = "vsnap reference engine, a miniature vLLM written for vsnap-qual (not vLLM)"

    def edit(record: dict[str, Any]) -> None:
        record["gpu"] = None
        record["image"]["labels"].update({"ai.vsnap.engine": engine, "ai.vsnap.simulated": "gpu"})

    _edit_environments(directory, edit)
    paths = write_reports(directory, github_step_summary=False)
    said = f"{engine}; simulated: gpu"
    assert paths.summary_md.read_text().splitlines()[0] == f"## vsnap-qual: ✅ PASS · {said}"
    html = paths.report_html.read_text()
    verdict = html[html.index('<section id="verdict">') : html.index('<div class="qualified">')]
    assert f'<div class="target">Qualified: {said}</div>' in verdict
    results = json.loads(paths.results_json.read_text())
    assert ("qualified_target", said) in run_properties(results)

    plain = make_run("vllm", RunSpec(changed_digests=()))
    _edit_environments(plain, lambda r: r["image"]["labels"].clear())
    first = write_reports(plain, github_step_summary=False).summary_md.read_text().splitlines()[0]
    assert "reference" not in first and " · head arm vLLM " in first, first


def test_the_environment_table_has_no_blank_cell_and_criu_without_its_prefix(make_run: MakeRun) -> None:
    """A value the lane did not report reads ``n/a`` (not a blank cell); CRIU is its version, not ``Version: …``;
    the harness's version is among the facts."""
    from tests.report.synthetic_runs import RunSpec
    from vsnap_qual.report import write_reports

    run = make_run("blank", RunSpec(changed_digests=()))
    evidence = run / "evidence.jsonl"
    lines = []
    for line in evidence.read_text().splitlines():
        record = json.loads(line)
        if record.get("kind") == "environment":
            record["versions"]["cuda"] = None
            record["versions"]["criu"] = "Version: 4.2.1"
        lines.append(json.dumps(record))
    evidence.write_text("\n".join(lines) + "\n")
    write_reports(run, github_step_summary=False)
    text = (run / "summary.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| v1/head |")]
    assert rows and "| n/a |" in rows[0] and "| 4.2.1 |" in rows[0] and "Version:" not in rows[0], rows
    assert "| |" not in rows[0] and "||" not in rows[0]
    assert "vsnap-qual " in text.split("### Environment")[0]


def test_summary_says_the_command_that_reproduces_the_run_and_the_harness_commit(make_run: MakeRun) -> None:
    invocation = {
        "args": ["suites/", "@suites/profiles/reference.args", "-n", "2", "--vsnap-report-dir=reports/my change"],
        "dir": "/src/vsnap-qual",
        "python": "/src/vsnap-qual/.venv/bin/python",
        "environment": {"VSNAP_ANNOTATE": "1"},
    }
    spec = RunSpec(invocation=invocation, harness_source={"commit": "975826d" + "0" * 33, "dirty": True})
    text = _summary(make_run("invoked", spec))
    head = text.split("| check | result |")[0]
    assert "vsnap-qual 0.1.0 at `975826d00000` (uncommitted changes)" in head
    details = head[head.index("<details><summary>Command to reproduce this run</summary>") : head.index("</details>")]
    command = (
        "cd /src/vsnap-qual && VSNAP_ANNOTATE=1 /src/vsnap-qual/.venv/bin/python -m pytest suites/ "
        "@suites/profiles/reference.args -n 2 '--vsnap-report-dir=reports/my change'"
    )
    assert f"```bash\n{command}\n```" in details
    # a run that recorded neither (before they were) says nothing of them
    old = _summary(make_run("old"))
    assert "Command to reproduce" not in old and "vsnap-qual 0.1.0" in old and "0.1.0 at" not in old


def test_the_invocation_is_the_command_as_given_and_the_source_the_checkouts_head(tmp_path: Path) -> None:
    import shlex
    import sys

    from vsnap_qual.report.markdown import command_line
    from vsnap_qual.run.invocation import harness_source, invocation

    found = invocation(["suites/", "-k", "not fault"], tmp_path, {"VSNAP_IMAGE": "img:1", "HOME": "/root"})
    assert found == {
        "args": ["suites/", "-k", "not fault"],
        "dir": str(tmp_path),
        "python": sys.executable,
        "environment": {"VSNAP_IMAGE": "img:1"},  # an option's variable; nothing else of the environment
    }
    assert shlex.split(command_line(found)) == [
        "cd", str(tmp_path), "&&", "VSNAP_IMAGE=img:1", sys.executable, "-m", "pytest", "suites/", "-k", "not fault",
    ]  # fmt: skip
    repo = tmp_path / "clone"
    (repo / "vsnap_qual").mkdir(parents=True)
    (repo / "vsnap_qual" / "__init__.py").write_text("")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert harness_source(repo / "vsnap_qual") == {"commit": head, "dirty": False}
    (repo / "vsnap_qual" / "__init__.py").write_text("changed = True\n")
    assert harness_source(repo / "vsnap_qual") == {"commit": head, "dirty": True}
    (tmp_path / "wheel" / "vsnap_qual").mkdir(parents=True)  # an installed wheel: no checkout of its own
    assert harness_source(tmp_path / "wheel" / "vsnap_qual") is None


def test_the_harness_source_by_default_is_the_checkout_this_package_lies_in() -> None:
    """Called as the session calls it (no argument), the source is the checkout holding this ``vsnap_qual``, whichever
    of the package's folders the module sits in: its commit, not None."""
    import vsnap_qual
    from vsnap_qual.run.invocation import harness_source

    root = Path(vsnap_qual.__file__).resolve().parents[1]
    done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip("this vsnap_qual is no git checkout's")
    found = harness_source()
    assert found is not None and found["commit"] == done.stdout.strip()
