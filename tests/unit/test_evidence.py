from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any, cast

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


def test_concurrent_appends_never_tear_lines(tmp_path: Path) -> None:
    procs = [multiprocessing.Process(target=_writer, args=(str(tmp_path), 50)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    records: list[dict[str, Any]] = list(read_records(tmp_path / "evidence.jsonl"))
    assert len(records) == 150
    assert all(len(r["options"]["payload"]) == 6000 for r in records)


def test_secrets_are_redacted_everywhere(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path, Redactor(["secret-value-123"]))
    store.write(_session({"env": "HF_TOKEN=secret-value-123", "argv": ["--hf-token", "secret-value-123"]}))
    store.write_text(tmp_path / "logs" / "x.log", "token secret-value-123 seen")
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert "secret-value-123" not in path.read_text()
    record = json.loads((tmp_path / "evidence.jsonl").read_text())
    assert record["options"]["argv"] == ["--hf-token", "***"]


def test_torn_last_line_is_skipped(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    store.write(_session({}))
    with (tmp_path / "evidence.jsonl").open("a") as handle:
        handle.write('{"kind": "step", "ste')
    assert [r["kind"] for r in read_records(tmp_path / "evidence.jsonl")] == ["session"]


def test_refuse_used_report_dir_accepts_empty_and_new_directories_and_refuses_any_run_file(tmp_path: Path) -> None:
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


def test_a_deferred_store_writes_nothing_until_it_opens_then_the_header_once_and_what_it_held(tmp_path: Path) -> None:
    """xdist workers each hold the run's header; whichever opens first writes it (and the session's files), the
    others only their own records, after it."""
    from vsnap_qual import model

    report = tmp_path / "report"
    prepared = []
    stores = [EvidenceStore(report, deferred=True) for _ in range(2)]
    for n, store in enumerate(stores):
        store.stage([_session({}, run_id="r1")], lambda: prepared.append(1))
        store.write(model.PlanRecord(kind="plan", time="t", worker=f"gw{n}", selected=[], deselected=[],
                                     selection=cast(model.Selection, {})))  # fmt: skip
    assert not report.exists() and not stores[0].started and stores[0].holds("plan")
    stores[1].open()
    assert stores[0].started, "another process's open is seen"
    stores[0].open()
    stores[0].write(_session({}, run_id="not-a-header"))
    records = list(read_records(report / "evidence.jsonl"))
    assert [(r["kind"], r.get("run_id") or r.get("worker")) for r in records] == [
        ("session", "r1"), ("plan", "gw1"), ("plan", "gw0"), ("session", "not-a-header")
    ]  # fmt: skip
    assert prepared == [1], "the session's files are written once"
    assert not (report / "logs").exists(), "logs/ is made by the first log, not by the store"


def test_an_empty_directory_is_no_runs_evidence(tmp_path: Path) -> None:
    from vsnap_qual.evidence import ReportDirInUse, refuse_used_report_dir

    (tmp_path / "logs" / "v1-head").mkdir(parents=True)  # empty logs/ left by a refused run of an older version
    refuse_used_report_dir(tmp_path)
    (tmp_path / "logs" / "v1-head" / "ordinary.log").write_text("x")
    with pytest.raises(ReportDirInUse, match=r"\(logs\)"):
        refuse_used_report_dir(tmp_path)


def test_the_report_dir_check_creates_nothing(tmp_path: Path) -> None:
    from vsnap_qual.run.preflight import check_report_dir
    from vsnap_qual.run.preflight_result import PreflightError

    check_report_dir(tmp_path / "reports" / "my-change")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "a-file").write_text("")
    with pytest.raises(PreflightError, match="--vsnap-report-dir: .*/a-file is not a directory"):
        check_report_dir(tmp_path / "a-file" / "reports")
