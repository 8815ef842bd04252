"""compare old.json new.json: what changed between two runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.report.synthetic_runs import MakeRun, RunSpec
from vsnap_qual import model
from vsnap_qual.cli import main
from vsnap_qual.report import write_reports
from vsnap_qual.report.compare_runs import diff_runs, format_markdown, format_text

BREAKING = RunSpec(
    changed_digests=(("v1", "restore-1", "model.layers.1.mlp.down_proj.weight"),),
    canary_token_flips=(("v1", "restore-1", 0),),
    kv={
        ("v1", "head"): (61_440, 61_200),
        ("v1", "base"): (61_440, 61_296),
        ("v2", "head"): (63_104, 63_088),
        ("v2", "base"): (63_104, 63_088),
    },
    step_seconds_scale=1.5,
)


def _environment(lane: model.Lane) -> model.Environment:
    environment = lane["environment"]
    assert environment is not None, lane
    return environment


@pytest.fixture
def two_runs(make_run: MakeRun) -> tuple[Path, Path]:
    old = make_run("old", RunSpec(changed_digests=()))
    new = make_run("new", BREAKING)
    write_reports(old, github_step_summary=False)
    write_reports(new, github_step_summary=False)
    return old / "results.json", new / "results.json"


def test_diff_names_changed_digests_and_canaries(two_runs: tuple[Path, Path]) -> None:
    from vsnap_qual.report.assemble import load_results

    diff = diff_runs(load_results(two_runs[0]), load_results(two_runs[1]))
    assert diff.changed
    assert [c.key for c in diff.steps] == ["v1/head/restore-1"]
    assert diff.steps[0].old == "passed" and diff.steps[0].new == "failed"
    assert [c.key for c in diff.digests] == ["v1 model.layers.1.mlp.down_proj.weight"]
    assert diff.digests[0].new == "changed (restore-1)"
    assert [c.key for c in diff.canary] == ["v1/head/restore-1 'The capital of France is'"]
    assert "mismatch" in diff.canary[0].new
    assert [c.key for c in diff.kv] == ["v1/head"] and "−96" in diff.kv[0].note
    assert any(c.key == "v1/head/create" and c.note == "+50%" for c in diff.timings)
    text = format_text(diff)
    assert "model.layers.1.mlp.down_proj.weight" in text and "The capital of France is" in text
    markdown = format_markdown(diff)
    assert "### Parameter digests whose status changed (1)" in markdown
    assert "| v1 model.layers.1.mlp.down_proj.weight | unchanged | changed (restore-1) |" in markdown


def test_identical_runs_have_no_change(two_runs: tuple[Path, Path]) -> None:
    from vsnap_qual.report.assemble import load_results

    old = load_results(two_runs[0])
    diff = diff_runs(old, old)
    assert not diff.changed
    assert all(c.note == "+0%" and "restore ready" in c.key for c in diff.timings)
    assert "No change" in format_text(diff)


def test_cli_compare(two_runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(two_runs[0]), str(two_runs[1])]) == 1  # PASS → FAIL
    out = capsys.readouterr().out
    assert "Steps that flipped (1):" in out and "model.layers.1.mlp.down_proj.weight" in out
    # Directories and Markdown work too.
    assert main(["compare", str(two_runs[0].parent), str(two_runs[1].parent), "--markdown", "--fail-on=never"]) == 0
    assert capsys.readouterr().out.startswith("## vsnap-qual compare")


def test_cli_compare_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(tmp_path / "nope.json"), str(tmp_path / "nope2.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_the_setup_that_differs_is_said_first(two_runs: tuple[Path, Path]) -> None:
    """Two runs on other images, runtimes, GPUs or options: each difference below may come from that, so it is
    said before anything else; the same setup says nothing of it."""
    import copy
    import json

    from vsnap_qual.report.assemble import load_results

    old = load_results(two_runs[0])
    assert diff_runs(old, old).setup == []
    new: dict[str, Any] = copy.deepcopy(dict(old))
    new["run"]["options"]["fault_timeout"] = 20.0
    new["run"]["options"]["report_dir"] = "/elsewhere"  # where the report went is no setup
    for lane in new["lanes"]:
        lane["environment"]["gpu"] = None  # the same engine on a CPU box
    diff = diff_runs(old, json.loads(json.dumps(new)))
    said = {c.key: (c.old, c.new) for c in diff.setup}
    assert said == {"GPU": ("NVIDIA H200 × 1", "none"), "option fault_timeout": ("300.0", "20.0")}, said
    text = format_text(diff)
    sections = [line for line in text.splitlines() if line.endswith("):")]
    assert sections[0].startswith("Setup differs") and "GPU: NVIDIA H200 × 1 → none" in text
    assert "| GPU | NVIDIA H200 × 1 | none |" in format_markdown(diff)


def test_a_file_without_a_run_id_is_refused(
    tmp_path: Path, two_runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    stub = tmp_path / "stub.json"  # a results file that names no run: not a run to compare with
    results = json.loads(two_runs[0].read_text())
    results["run"]["run_id"] = ""
    stub.write_text(json.dumps(results))
    assert main(["compare", str(stub), str(two_runs[1])]) == 2
    assert "names no run id" in capsys.readouterr().err


def test_an_image_pulled_again_under_the_same_tag_is_a_setup_difference(two_runs: tuple[Path, Path]) -> None:
    """The images are named as summary.md names them (``markdown.image_identity``: ID and first repo digest), so
    the same tag resolved to another digest is said as a setup difference, not only another image ID."""
    import copy
    import json

    from vsnap_qual.report.assemble import load_results
    from vsnap_qual.report.markdown import image_identity

    old = load_results(two_runs[0])
    new: dict[str, Any] = copy.deepcopy(dict(old))
    for lane in new["lanes"]:
        if lane["arm"] == "head":
            lane["environment"]["image"]["repo_digests"] = ["vllm/vllm-openai@sha256:" + "e" * 64]
    diff = diff_runs(old, json.loads(json.dumps(new)))
    said = {c.key: (c.old, c.new) for c in diff.setup}
    before = next(_environment(lane)["image"] for lane in old["lanes"] if lane["arm"] == "head")
    assert list(said) == ["image (head)"], said
    after = new["lanes"][0]["environment"]["image"]
    assert said["image (head)"] == (image_identity(before, code=False), image_identity(after, code=False))
    # plain words for the terminal: no Markdown backticks in the text output
    assert "digest sha256:eeeeeeeeeeee" in said["image (head)"][1] and "`" not in format_text(diff)
