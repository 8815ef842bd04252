from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from vsnap_qual import model
from vsnap_qual.clock import utc_now
from vsnap_qual.evidence import EvidenceStore, read_records
from vsnap_qual.redact import Redactor


def _session(options: dict[str, object], run_id: str = "r") -> model.SessionRecord:
    return model.SessionRecord(
        kind="session", time=utc_now(), run_id=run_id, harness_version="0", started=utc_now(), options=options, host={}
    )


def _writer(path: str, n: int) -> None:
    store = EvidenceStore(Path(path))
    for i in range(n):
        store.write(_session({"payload": "x" * 6000}, run_id=str(i)))


def test_concurrent_appends_never_tear_lines(tmp_path):
    procs = [multiprocessing.Process(target=_writer, args=(str(tmp_path), 50)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    records = list(read_records(tmp_path / "evidence.jsonl"))
    assert len(records) == 150
    assert all(len(r["options"]["payload"]) == 6000 for r in records)


def test_secrets_are_redacted_everywhere(tmp_path):
    store = EvidenceStore(tmp_path, Redactor(["secret-value-123"]))
    store.write(_session({"env": "HF_TOKEN=secret-value-123", "argv": ["--hf-token", "secret-value-123"]}))
    store.write_text(tmp_path / "logs" / "x.log", "token secret-value-123 seen")
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert "secret-value-123" not in path.read_text()
    record = json.loads((tmp_path / "evidence.jsonl").read_text())
    assert record["options"]["argv"] == ["--hf-token", "***"]


def test_torn_last_line_is_skipped(tmp_path):
    store = EvidenceStore(tmp_path)
    store.write(_session({}))
    with (tmp_path / "evidence.jsonl").open("a") as handle:
        handle.write('{"kind": "step", "ste')
    assert [r["kind"] for r in read_records(tmp_path / "evidence.jsonl")] == ["session"]


def test_refuse_used_report_dir_accepts_empty_and_new_directories_and_refuses_any_run_file(tmp_path):
    from vsnap_qual.evidence import RUN_MARKERS, ReportDirInUse, refuse_used_report_dir

    refuse_used_report_dir(tmp_path / "new")  # does not exist yet
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "junit.xml").write_text("")  # not a vsnap-qual file
    refuse_used_report_dir(tmp_path / "empty")
    for name in RUN_MARKERS:
        used = tmp_path / f"used-{name}"
        used.mkdir()
        (used / name).write_text("")
        with pytest.raises(ReportDirInUse, match="--vsnap-report-dir: .* already holds the evidence of another run"):
            refuse_used_report_dir(used)
