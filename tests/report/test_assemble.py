"""results.json assembly from evidence.jsonl: shape, verdict, incomplete (killed) runs."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tests.report.synthetic_runs import MakeRun, RunSpec
from vsnap_qual import procedure
from vsnap_qual.faults import BUILTIN_FAULTS
from vsnap_qual.report import schema, write_reports
from vsnap_qual.report.assemble import SCHEMA, assemble_file, load_results, read_evidence
from vsnap_qual.report.recorded import option_value


def test_complete_run_has_the_documented_shape(report_dir: Path) -> None:
    results = assemble_file(report_dir / "evidence.jsonl")
    assert results["schema"] == SCHEMA
    assert set(results) >= {
        "schema",
        "generated",
        "run",
        "verdict",
        "runners",
        "arms",
        "lanes",
        "steps",
        "evidence",
    }
    assert results["runners"] == ["v1", "v2"]
    assert results["arms"] == ["head", "base"]
    assert [(lane["runner"], lane["arm"]) for lane in results["lanes"]] == [
        ("v1", "head"),
        ("v1", "base"),
        ("v2", "head"),
        ("v2", "base"),
    ]
    assert all(lane["environment"] is not None and lane["environment"]["versions"]["vllm"] for lane in results["lanes"])
    # per runner, the procedure: head 9 lifecycle steps (with overlay), base 9 (vs-head, no overlay); each arm
    # the fault artifact and the faults of the table
    faults = 1 + len(BUILTIN_FAULTS)
    assert len(results["steps"]) == 2 * (9 + 9 + 2 * faults)
    assert sorted(results["coverage"]["required"]) == sorted(
        procedure.label(s["runner"], s["arm"], s["step"]) for s in results["steps"]
    )
    assert results["run"]["complete"] is True
    assert results["run"]["exitstatus"] == 1
    assert results["evidence"]["kinds"]["step"] == 2 * (9 + 9 + 2 * faults)
    assert option_value(results, "logprob-tolerance") == 0.001
    assert option_value(results, "vsnap_logprob_tolerance") == 0.001


def test_verdict_names_the_failed_step(report_dir: Path) -> None:
    verdict = assemble_file(report_dir / "evidence.jsonl")["verdict"]
    assert verdict["status"] == "fail"
    assert verdict["failed"] == ["v2/head/restore-2"]
    assert verdict["counts"] == {"passed": 4 * (10 + len(BUILTIN_FAULTS)) - 1, "failed": 1, "skipped": 0}


def test_passing_run(make_run: MakeRun) -> None:
    directory = make_run("ok", RunSpec(changed_digests=()))
    verdict = assemble_file(directory / "evidence.jsonl")["verdict"]
    assert verdict["status"] == "pass", verdict
    assert verdict["reasons"] == []


def test_killed_run_is_incomplete_and_names_the_last_step(make_run: MakeRun) -> None:
    directory = make_run("killed", RunSpec(changed_digests=(), complete=False, stop_after_steps=13))
    results = assemble_file(directory / "evidence.jsonl")
    assert results["run"]["complete"] is False
    assert results["verdict"]["status"] == "incomplete"
    last = results["run"]["last_step"]
    assert last is not None and last["label"] == "v1/head/fault:canary-perturb"
    assert any("v1/head/fault:canary-perturb" in r for r in results["verdict"]["reasons"])


def test_torn_last_line_is_counted_not_fatal(make_run: MakeRun) -> None:
    directory = make_run("torn", RunSpec(complete=False, stop_after_steps=3))
    evidence = directory / "evidence.jsonl"
    with evidence.open("a") as handle:
        handle.write('{"kind": "step", "runner": "v1", "arm": "he')  # SIGKILL mid-write
    parsed = read_evidence(evidence)
    assert parsed.malformed_lines == 1
    results = assemble_file(evidence)
    assert results["evidence"]["malformed_lines"] == 1
    last = results["run"]["last_step"]
    assert last is not None and last["label"] == "v1/head/create"


def test_empty_evidence_is_incomplete(tmp_path: Path) -> None:
    (tmp_path / "evidence.jsonl").write_text("")
    results = assemble_file(tmp_path / "evidence.jsonl")
    assert results["verdict"]["status"] == "incomplete"
    assert "no step was recorded" in " ".join(results["verdict"]["reasons"])


def test_load_results_checks_the_schema(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"schema": "something-else"}))
    with pytest.raises(ValueError, match="not a vsnap-qual results file"):
        load_results(path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="is not JSON"):
        load_results(path)


def test_load_results_reads_a_committed_results_json_gz(tmp_path: Path) -> None:
    """The evidence folder keeps large runs as results.json.gz: `vsnap-qual report` and `history` read them as they
    are (issue 47: a raw decode error before)."""
    committed = Path(__file__).resolve().parents[2] / "evidence/gpu/2026-12-07-v1-full-d575706/results.json.gz"
    assert load_results(committed)["verdict"]["status"] == "pass"
    broken = tmp_path / "results.json.gz"
    broken.write_bytes(b"not gzip")
    with pytest.raises(ValueError, match="cannot be read"):
        load_results(broken)


def test_every_container_of_a_lane_keeps_its_environment_record(report_dir: Path) -> None:
    """A lane runs its lifecycle and its faults in two containers, each with an environment record (``lane``,
    ``purpose``); the faults container's, written later, must not replace the lifecycle's."""
    evidence = report_dir / "evidence.jsonl"
    lines = evidence.read_text().splitlines()
    index, lifecycle = next(
        (i, record)
        for i, record in enumerate(map(json.loads, lines))
        if record["kind"] == "environment" and (record["runner"], record["arm"]) == ("v1", "head")
    )
    lifecycle.update(lane="v1-head", purpose="lifecycle")
    faults = {**lifecycle, "purpose": "faults", "container_id": "faults-box", "time": lifecycle["time"] + "1"}
    lines[index] = json.dumps(lifecycle)
    lines.insert(index + 1, json.dumps(faults))
    evidence.write_text("\n".join(lines) + "\n")

    results = assemble_file(evidence)
    lane = next(lane for lane in results["lanes"] if (lane["runner"], lane["arm"]) == ("v1", "head"))
    assert lane["environment"] is not None
    assert (lane["environment"]["purpose"], lane["environment"]["container_id"]) == (
        "lifecycle",
        lifecycle["container_id"],
    )
    assert [(e.get("purpose"), e["container_id"]) for e in lane.get("other_environments", [])] == [
        ("faults", "faults-box")
    ]
    # results.json keeps both, and validates against its schema
    written = json.loads(write_reports(report_dir, github_step_summary=False).results_json.read_text())
    (lane,) = [lane for lane in written["lanes"] if (lane["runner"], lane["arm"]) == ("v1", "head")]
    assert [lane["environment"]["container_id"], lane["other_environments"][0]["container_id"]] == [
        lifecycle["container_id"],
        "faults-box",
    ]
    jsonschema.validate(written, schema.json_schema())
