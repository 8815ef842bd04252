"""results.json against the schema generated from the typed evidence model (vsnap_qual/model.py)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jsonschema
import pytest

from tests.report.synthetic_runs import MakeRun, RunSpec
from vsnap_qual.report import schema, write_reports
from vsnap_qual.report.assemble import read_evidence
from vsnap_qual.report.schema import JsonSchema

SHIPPED = schema.SCHEMA_FILE


@functools.cache
def _results_validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SHIPPED.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _validator(schema: JsonSchema) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema)


def test_the_shipped_schema_is_the_one_the_model_generates() -> None:
    assert json.loads(SHIPPED.read_text()) == schema.json_schema(), "run: python -m vsnap_qual.report.schema"


@pytest.mark.parametrize(
    "spec",
    [
        RunSpec(),
        RunSpec(changed_digests=(), complete=False, stop_after_steps=9),
        RunSpec(runners=("v1",), arms=("head",), left_out=("*/fault*",), markexpr="not fault"),
        RunSpec(harness_errors=(("teardown", "suites/x.py::t", "NotFound"),)),
    ],
    ids=["failing", "killed", "narrowed", "harness-error"],
)
def test_results_json_and_every_evidence_record_validate(make_run: MakeRun, spec: RunSpec) -> None:
    directory = make_run("run", spec)
    for record in read_evidence(directory / "evidence.jsonl").records:
        errors = list(_validator(schema.record_schema(str(record["kind"]))).iter_errors(record))
        assert not errors, f"{record['kind']}: {errors[0].message} at {list(errors[0].absolute_path)}"
    paths = write_reports(directory, github_step_summary=False)
    results = json.loads(paths.results_json.read_text())
    errors = sorted(_results_validator().iter_errors(results), key=lambda e: list(e.path))
    assert not errors, f"{errors[0].message} at {list(errors[0].absolute_path)}"


def test_the_schema_catches_a_renamed_field(report_dir: Path) -> None:
    """A field renamed by a writer (``outcome`` → ``result``) is a violation, not silently ignored."""
    results = json.loads(write_reports(report_dir, github_step_summary=False).results_json.read_text())
    results["steps"][0]["result"] = results["steps"][0].pop("outcome")
    assert not _results_validator().is_valid(results)
    results["steps"][0]["outcome"] = results["steps"][0].pop("result")
    assert _results_validator().is_valid(results)
    # a step's results are checked against its own step's type: a restore's comparison missing its judgement
    restore = next(s for s in results["steps"] if s["step"] == "restore-1")
    restore["results"]["digest_compare"] = {"total": 1}
    assert not _results_validator().is_valid(results)


def test_a_step_s_results_are_checked_against_its_own_step_s_type(report_dir: Path) -> None:
    """The schema keys a record's results by its step: a field of another step's type is not checked there (step
    results are open), a field of its own type is."""
    results = json.loads(write_reports(report_dir, github_step_summary=False).results_json.read_text())
    ordinary = next(s for s in results["steps"] if s["step"] == "ordinary")
    ordinary["results"]["soak"] = {"alive": "yes"}  # a restore's field: the ordinary step's type does not declare it
    assert _results_validator().is_valid(results)
    ordinary["results"]["kv_tokens"] = "many"  # its own field, of another type
    assert not _results_validator().is_valid(results)
    ordinary["results"]["kv_tokens"] = 1
    fault = next(s for s in results["steps"] if s["step"].startswith("fault:"))
    fault["results"]["mismatches"] = "none"  # a fault step's own field: a list of strings
    assert not _results_validator().is_valid(results)
