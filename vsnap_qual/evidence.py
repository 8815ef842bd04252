"""The evidence store: one JSONL file appended as the run goes (docs/design.md §4), and its one reader.

Each record is written with an exclusive ``flock`` and fsynced, so pytest-xdist workers can share the file and
a killed run still leaves everything gathered up to the kill. Secret values are replaced by ``***`` before a
record reaches the disk. Reading gives the lines as JSON objects, unchecked: the report checks them against the
model once (``report.parse``).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vsnap_qual import model, probe_copy
from vsnap_qual.redact import Redactor

__all__ = ["EVIDENCE_FILE", "Evidence", "EvidenceStore", "ReportDirInUse", "read_evidence", "read_records",
           "refuse_used_report_dir"]  # fmt: skip

EVIDENCE_FILE = "evidence.jsonl"
#: What a run leaves in its report directory; any of them there means another run's evidence.
RUN_MARKERS: tuple[str, ...] = (
    EVIDENCE_FILE,
    "results.json",
    "preflight.json",
    "report.html",
    "summary.md",
    "logs",
    "lanes",
    probe_copy.COPY_NAME,
    probe_copy.SMOKE_COPY_NAME,
)


class ReportDirInUse(ValueError):
    """The report directory already holds another run's evidence (runs never merge)."""


def refuse_used_report_dir(report_dir: Path) -> None:
    """Raise :class:`ReportDirInUse` when ``report_dir`` holds another run's files: evidence is only appended
    to, so a second run there would merge two runs into one verdict. Checked before anything starts."""
    found = [name for name in RUN_MARKERS if (report_dir / name).exists()]
    if not found:
        return
    run_id = None
    evidence = report_dir / EVIDENCE_FILE
    if evidence.is_file():
        run_id = next((r.get("run_id") for r in read_records(evidence) if r.get("kind") == "session"), None)
    owner = f"run {run_id}" if run_id else "another run"
    raise ReportDirInUse(
        f"--vsnap-report-dir: {report_dir} already holds the evidence of {owner} ({', '.join(found)}); "
        "a run never adds to another run's report. Choose an empty or new directory, or remove that one "
        f"first (rm -rf {report_dir})"
    )


class EvidenceStore:
    """Append-only JSONL evidence under ``report_dir``; logs live beside it under ``logs/``."""

    def __init__(self, report_dir: Path, redactor: Redactor | None = None) -> None:
        self.report_dir = report_dir
        self.path = report_dir / EVIDENCE_FILE
        self.logs_dir = report_dir / "logs"
        self.redact = redactor or Redactor(())
        self.logs_dir.mkdir(parents=True, exist_ok=True)

    def write(self, record: model.Record) -> model.Record:
        """Append one typed evidence record (``vsnap_qual.model``), redacted, as one line under an exclusive lock;
        returns the record as written."""
        written = self.redact(record)
        line = json.dumps(written, sort_keys=False, default=str) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, line.encode("utf-8"))
            os.fsync(fd)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        return written

    def log_path(self, lane: str, step: str, suffix: str = "log") -> Path:
        """A fresh path for one step's log, e.g. ``logs/v1-head/create.log``."""
        directory = self.logs_dir / lane
        directory.mkdir(parents=True, exist_ok=True)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in step)
        path = directory / f"{safe}.{suffix}"
        n = 2
        while path.exists():
            path = directory / f"{safe}-{n}.{suffix}"
            n += 1
        return path

    def write_text(self, path: Path, text: str) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.redact.text(text), encoding="utf-8")
        return path

    def relative(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.report_dir))
        except ValueError:
            return str(path)


def redact_tree(root: Path, redact: Redactor) -> list[Path]:
    """Rewrite every file under ``root`` that holds a secret value (logs streamed by the engine itself, which
    no writer of ours could filter). Returns the files changed."""
    if not redact.values:
        return []
    needles = [v.encode() for v in redact.values]
    changed = []
    for path in root.rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if any(n in data for n in needles):
            for needle in needles:
                data = data.replace(needle, b"***")
            path.write_bytes(data)
            changed.append(path)
    return changed


@dataclass(frozen=True)
class Evidence:
    """The lines of an evidence file: each a JSON object with a string ``kind``, not yet checked against the
    model (untyped JSON: ``report.parse`` checks it, once); ``malformed_lines`` counts the rest."""

    records: list[dict[str, Any]]
    malformed_lines: int = 0


def read_evidence(path: Path) -> Evidence:
    """Parse ``evidence.jsonl``; a torn last line (the run was killed mid-write) is counted, not fatal."""
    records: list[dict[str, Any]] = []  # JSON objects as written, checked against the model later
    malformed = 0
    with path.open(encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                malformed += 1
                continue
            if isinstance(record, dict) and isinstance(record.get("kind"), str):
                records.append(record)
            else:
                malformed += 1
    return Evidence(records, malformed)


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """The records of an evidence file (:func:`read_evidence`'s: untyped JSON objects), one by one."""
    yield from read_evidence(path).records
