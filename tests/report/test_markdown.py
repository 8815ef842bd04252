"""summary.md: the PR validation table, bounded in size."""

from __future__ import annotations

from pathlib import Path

from tests.report.synthetic_runs import MakeRun, RunSpec
from vsnap_qual.faults import BUILTIN_FAULTS
from vsnap_qual.report import write_reports
from vsnap_qual.report.assemble import assemble_file
from vsnap_qual.report.markdown import SUMMARY_LIMIT_BYTES, cell, render_markdown


def test_summary_holds_the_validation_table(report_dir: Path) -> None:
    text = write_reports(report_dir, github_step_summary=False).summary_md.read_text()
    assert text.startswith("## vsnap-qual: ❌ FAIL")
    assert "| check | result |\n|---|---|" in text
    for check in (
        "create, inspect, two restores across a container restart",
        "parameter digests",
        "canary equal to the ordinary reference",
        "injected failures",
        "KV-cache capacity",
    ):
        assert f"| {check}" in text
    assert "v1: all 30 unchanged" in text
    assert "v2 changed: model.norm.weight" in text
    faults = 4 * len(BUILTIN_FAULTS)
    assert f"{faults}/{faults} as expected" in text
    assert "63,104 / 63,088" in text
    assert "### Failed steps" in text and "`v2/head/restore-2`" in text


def test_summary_fits_under_the_limit_at_scale(make_run: MakeRun) -> None:
    changed = tuple(("v1", "restore-1", f"model.layers.{i}.mlp.down_proj.weight") for i in range(60))
    directory = make_run("big", RunSpec(params=1000, changed_digests=changed, log_lines=2))
    text = write_reports(directory, github_step_summary=False).summary_md.read_text()
    assert len(text.encode()) < SUMMARY_LIMIT_BYTES
    assert "… and 50 more" in text  # long name lists are cut, not the table


def test_truncation_is_graceful(report_dir: Path) -> None:
    results = assemble_file(report_dir / "evidence.jsonl")
    text = render_markdown(results, limit_bytes=1_500)
    assert len(text.encode()) <= 1_500
    assert "summary truncated" in text and "report.html" in text
    assert text.startswith("## vsnap-qual")


def test_incomplete_summary_names_the_last_step(make_run: MakeRun) -> None:
    directory = make_run("killed", RunSpec(complete=False, stop_after_steps=4, changed_digests=()))
    text = write_reports(directory, github_step_summary=False).summary_md.read_text()
    assert "⚠️ INCOMPLETE" in text
    assert "last step recorded: `v1/head/inspect`" in text


def test_cell_escapes_pipes_and_newlines() -> None:
    assert cell("a|b\nc") == "a\\|b c"
    assert cell("x" * 50, limit=10) == "x" * 9 + "…"


def test_a_weight_tamper_fault_says_what_the_restore_made_of_the_damage(make_run: MakeRun) -> None:
    from vsnap_qual.report.frames import fault_frame, records
    from vsnap_qual.report.markdown import fault_result_text

    rows = records(fault_frame(assemble_file(make_run("pass", RunSpec(changed_digests=())) / "evidence.jsonl")))
    row = dict(rows[0])
    assert row["tamper"] is None and "tampered weights" not in fault_result_text(row)  # type: ignore[arg-type]
    row["tamper"] = "loaded the damage, served it: the digests name model.embed_tokens.weight"
    said = fault_result_text(row)  # type: ignore[arg-type]
    assert "the tampered weights: loaded the damage, served it: the digests name model.embed_tokens.weight" in said
