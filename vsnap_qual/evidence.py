"""The evidence store: one JSONL file appended as the run goes (docs/design.md §4), and its one reader.

Each record is written with an exclusive ``flock`` and fsynced, so pytest-xdist workers can share the file and
a killed run still leaves everything gathered up to the kill. Secret values are replaced by ``***`` before a
record reaches the disk. Reading gives the lines as JSON objects, unchecked: the report checks them against the
model once (``report.parse``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from vsnap_qual import model
from vsnap_qual.redact import Redactor
from vsnap_qual.run import probe_copy

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
    "handoff",  # issue 45: what lanes at once handed each other (plugin.process.handoff_dir)
    probe_copy.COPY_NAME,
    probe_copy.SMOKE_COPY_NAME,
)


class ReportDirInUse(ValueError):
    """The report directory already holds another run's evidence (runs never merge)."""


def refuse_used_report_dir(report_dir: Path) -> None:
    """Raise :class:`ReportDirInUse` when ``report_dir`` holds another run's files: evidence is only appended
    to, so a second run there would merge two runs into one verdict. Checked before anything starts."""
    found = [name for name in RUN_MARKERS if _holds_something(report_dir / name)]
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


def _holds_something(path: Path) -> bool:
    """A run's file, or a directory holding a file: empty directories (``logs/`` left by a refused run of an
    older version) are no run's evidence."""
    if path.is_dir() and not path.is_symlink():
        return any(not p.is_dir() or p.is_symlink() for p in path.rglob("*"))
    return path.exists() or path.is_symlink()


class EvidenceStore:
    """Append-only JSONL evidence under ``report_dir``; logs live beside it under ``logs/``.

    ``deferred``: nothing is written into ``report_dir`` (not even the directory) until :meth:`open`, which the
    plugin calls when the run's first lane starts; records written before are held and written then, after the
    run's header (:meth:`stage`). So a refused run, ``--co`` or a selection of nothing leaves the directory as it
    was, and a retry into it is not refused."""

    def __init__(self, report_dir: Path, redactor: Redactor | None = None, *, deferred: bool = False) -> None:
        self.report_dir = report_dir
        self.path = report_dir / EVIDENCE_FILE
        self.logs_dir = report_dir / "logs"
        self.redact = redactor or Redactor(())
        self._open = not deferred
        self._held: list[tuple[str, bytes]] = []  # (kind, line) written before open()
        self._header: list[model.Record] = []
        self._prepare: Callable[[], None] | None = None

    def stage(self, header: list[model.Record], prepare: Callable[[], None] | None = None) -> None:
        """What the run writes first, once, whichever process opens the store first: ``prepare`` (the session's
        files) then the ``header`` records (the session record)."""
        self._header = list(header)
        self._prepare = prepare

    @property
    def started(self) -> bool:
        """Whether the run has begun writing: this process opened the store, or another process of the run did."""
        return self._open or (self.path.is_file() and self.path.stat().st_size > 0)

    def holds(self, kind: str) -> bool:
        """Whether a record of ``kind`` is held, not yet written (the store is not open)."""
        return any(held == kind for held, _ in self._held)

    def open(self) -> None:
        """Start writing: create the directory; if the evidence file is still empty (no process of this run
        opened it), write the session's files and the header; then the records held so far. Under the evidence
        file's lock, so xdist workers starting their first lanes at once write the header once."""
        if self._open:
            return
        self.report_dir.mkdir(parents=True, exist_ok=True)
        with self._locked() as fd:
            lines = []
            if os.fstat(fd).st_size == 0:
                if self._prepare is not None:
                    self._prepare()
                lines = [self._line(self.redact(record)) for record in self._header]
            lines += [line for _, line in self._held]
            if lines:
                os.write(fd, b"".join(lines))
                os.fsync(fd)
        self._held.clear()
        self._open = True

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @staticmethod
    def _line(written: model.Record) -> bytes:
        return (json.dumps(written, sort_keys=False, default=str) + "\n").encode("utf-8")

    def write(self, record: model.Record) -> model.Record:
        """Append one typed evidence record (``vsnap_qual.model``), redacted, as one line under an exclusive lock
        (held until :meth:`open` while the store is not open); returns the record as written."""
        written = self.redact(record)
        if not self._open:
            self._held.append((str(written.get("kind")), self._line(written)))
            return written
        with self._locked() as fd:
            os.write(fd, self._line(written))
            os.fsync(fd)
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

    records: list[dict[str, object]]
    malformed_lines: int = 0


def read_evidence(path: Path) -> Evidence:
    """Parse ``evidence.jsonl``; a torn last line (the run was killed mid-write) is counted, not fatal."""
    records: list[dict[str, object]] = []  # JSON objects as written, checked against the model later
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


def read_records(path: Path) -> Iterator[dict[str, object]]:
    """The records of an evidence file (:func:`read_evidence`'s: untyped JSON objects), one by one."""
    yield from read_evidence(path).records
