"""The report's one JSON boundary (``report.parse``): evidence and results.json read as the model, each value
checked once against its documented type."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from vsnap_qual import model
from vsnap_qual.report import parse, write_reports
from vsnap_qual.report.assemble import assemble_file, read_evidence


def _step(**over: Any) -> dict[str, Any]:
    step: dict[str, Any] = {
        "kind": "step",
        "time": "t",
        "runner": "v1",
        "arm": "head",
        "step": "restore-1",
        "nodeid": "n",
        "outcome": "passed",
        "message": "",
        "argv": None,
        "exit_code": 0,
        "started": "s",
        "ended": "e",
        "seconds": 1.5,
        "logs": [],
        "results": {},
    }
    return {**step, **over}


def test_well_formed_evidence_reads_back_unchanged(report_dir: Path) -> None:
    for raw in read_evidence(report_dir / "evidence.jsonl").records:
        assert parse.record(raw) == raw


def test_a_value_of_another_type_is_left_out_or_emptied_never_passed_on() -> None:
    record = parse.record(
        _step(
            seconds="slow",  # required float: its empty value
            engine_seconds="x",  # optional: left out
            logs=["a.log", 3, None],  # list items of another type: left out
            results={
                "kv_tokens": "many",  # optional step result: left out
                "canary": [{"prompt": "p", "token_ids": [1, "2"], "text": 3, "logprob": -0.1}],
                "digest_compare": {"total": 1, "ok": "yes"},  # required fields: their empty values
                "something_new": {"kept": True},  # step results are open
            },
            surprise=1,  # records are closed
        )
    )
    assert record is not None and record["kind"] == "step"
    step = record
    assert step["seconds"] == 0.0 and "engine_seconds" not in step and step["logs"] == ["a.log"]
    assert "surprise" not in step
    results: Mapping[str, object] = step["results"]  # open: a key no results type declares is kept
    assert "kv_tokens" not in results and results["something_new"] == {"kept": True}
    assert results["canary"] == [{"prompt": "p", "token_ids": [1], "text": "", "logprob": -0.1}]
    assert results["digest_compare"] == {
        "total": 1,
        "unchanged": 0,
        "changed": [],
        "missing": [],
        "unobservable": [],
        "extra": [],
        "ok": False,
    }


def test_a_record_that_cannot_be_placed_is_none_and_counted_malformed(tmp_path: Path) -> None:
    assert parse.record(_step(arm="middle")) is None  # a Literal has no empty value
    assert parse.record(_step(outcome=None)) is None
    assert parse.record({"kind": "telemetry", "time": "t"}) is None  # a kind the model does not know
    evidence = tmp_path / "evidence.jsonl"
    evidence.write_text("".join(json.dumps(r) + "\n" for r in (_step(), _step(arm=3), {"kind": "telemetry"})))
    results = assemble_file(evidence)
    assert len(results["steps"]) == 1
    assert results["evidence"]["malformed_lines"] == 1 and results["evidence"]["kinds"]["telemetry"] == 1


def test_results_json_reads_back_unchanged_and_a_union_keeps_what_the_value_is(report_dir: Path) -> None:
    """A results.json reads back as it was written; of a union's types the one the value already is wins (an
    empty selection stays ``NoSelection``, not a ``Selection`` of empty fields)."""
    written = json.loads(write_reports(report_dir, github_step_summary=False).results_json.read_text())
    assert parse.results(written) == written
    assert written["verdict"]["coverage"]["selection"]["markexpr"] == ""
    written["verdict"]["coverage"]["selection"] = {}
    assert parse.results(written)["verdict"]["coverage"]["selection"] == {}


def test_an_unreadable_results_json_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="verdict"):
        parse.results({"schema": model.SCHEMA, "verdict": {"status": "great"}})
