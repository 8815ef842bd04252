"""The overlay row of the validation table renders the overlay step's findings in plain words."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.report.synthetic_runs import MakeRun, RunSpec, record_validator
from vsnap_qual import overlay
from vsnap_qual.report import write_reports
from vsnap_qual.report.assemble import read_evidence


def _edit_overlay_files(directory: Path, edit: Callable[[dict[str, Any], dict[str, Any]], None]) -> None:
    path = directory / "evidence.jsonl"
    records: list[dict[str, Any]] = read_evidence(path).records
    for record in records:
        if record.get("step") == "overlay":
            for item in record["results"]["files"]:
                edit(record, item)
                item["fresh_import"] = item.get("fresh_import") or {
                    "exit_code": 0,
                    "path": item["image_path"],
                    "sha256": item["host_sha256"],
                }
                item["finding"], item["finding_detail"] = overlay.file_finding(item)
            problem = next(record_validator("step").iter_errors(record), None)
            assert problem is None, problem.message
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _overlay_check(directory: Path) -> dict[str, Any]:
    write_reports(directory, github_step_summary=False)
    results = json.loads((directory / "results.json").read_text())
    return next(c for c in results["verdict"]["checks"] if c["id"] == "overlay")


def test_a_file_no_engine_process_imported_passes_in_plain_words(make_run: MakeRun) -> None:
    directory = make_run("unused", RunSpec(changed_digests=()))

    def unused(record: dict[str, Any], item: dict[str, Any]) -> None:
        if item["module"].endswith(".controller"):
            item["imported"] = []

    _edit_overlay_files(directory, unused)
    check = _overlay_check(directory)
    assert check["status"] == "pass"
    assert check["result"] == (
        "3 file(s), hashes equal in 12 process imports; overlaid, not imported by the engine "
        "(fresh import verified): vllm.snapshot.controller"
    )
    html = (directory / "report.html").read_text()
    assert "overlaid, not imported by the engine (no engine process loaded it)" in html


def test_a_file_imported_from_elsewhere_fails_naming_where(make_run: MakeRun) -> None:
    directory = make_run("elsewhere", RunSpec(changed_digests=()))

    def elsewhere(record: dict[str, Any], item: dict[str, Any]) -> None:
        if item["module"].endswith(".server") and record["runner"] == "v2":
            item["imported"][1].update(path="/opt/other/vllm/snapshot/server.py", sha256="f" * 64)
            item["ok"] = False

    _edit_overlay_files(directory, elsewhere)
    check = _overlay_check(directory)
    assert check["status"] == "FAIL"
    (detail,) = check["details"]
    assert detail.startswith("not in effect: v2: ")
    assert "engine_core (pid 101) loaded /opt/other/vllm/snapshot/server.py whose sha256 starts ffffffffffff" in detail
    assert "{" not in detail  # plain words, no Python dict
