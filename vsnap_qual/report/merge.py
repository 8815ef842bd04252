"""``vsnap-qual merge``: the shards of one matrix (issue 46) as one run, judged once by the same verdict code.

Each shard is a report directory (or that directory packed as one ``.tar.gz``, for schedulers whose shards share no
filesystem) holding its ``evidence.jsonl``, whose session record names its shard of the matrix (``shard``: K of N,
the matrix's id, which shard runs each lane). The merge reads them all, decides which matrix it merges (the id most
shards carry), and accounts for every shard 1..N: present once and finished (``ok``), holding no lane (``empty``),
``missing``, given twice (``duplicate``: the first copy counts), of another matrix (``foreign``: left out) or
stopped before its end (``interrupted``). The merged evidence is the shards' records, with one session record whose
coverage is the whole matrix's and whose ``merge`` says what each shard brought; ``report.assemble`` and
``report.verdict`` then judge it as any run: a shard that is not ``ok`` or ``empty`` makes the verdict INCOMPLETE
naming its lanes, and setups that differ between shards (host kernel, driver, CRIU, GPU) are named per lane.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tarfile
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vsnap_qual import model
from vsnap_qual.clock import utc_now
from vsnap_qual.evidence import EVIDENCE_FILE, Evidence, read_evidence
from vsnap_qual.report import parse

#: the report directory's parts that the merged report links to (copied beside it; lanes never share a name)
_COPIED = ("logs", "adapters")
_SHARD_NAME = re.compile(r"shard-(\d+)")


class MergeInputError(ValueError):
    """A merge input that cannot be read at all (not a directory, not an archive)."""


@dataclass
class ShardSource:
    """One input of the merge: where it was given, the directory read, and what its evidence holds (its session
    record and end read as the model's, ``report.parse``)."""

    given: str
    directory: Path
    evidence: Evidence | None
    problem: str = ""
    session: model.SessionRecord | None = None
    end: model.SessionEndRecord | None = None

    @property
    def shard(self) -> model.ShardInfo | None:
        return self.session.get("shard") if self.session else None

    @property
    def k_hint(self) -> int:
        """The shard's number: its record's, else its directory's name (``shard-3``), else 0."""
        if self.shard:
            return self.shard["k"]
        found = _SHARD_NAME.search(Path(self.given).name)
        return int(found.group(1)) if found else 0


def read_source(given: Path, scratch: Path) -> ShardSource:
    """A shard's report directory, or its ``.tar.gz`` unpacked under ``scratch``."""
    directory = given
    if given.is_file():
        if not tarfile.is_tarfile(given):
            raise MergeInputError(f"{given} is neither a shard's report directory nor a .tar.gz of one")
        directory = Path(tempfile.mkdtemp(prefix="shard-", dir=scratch))
        with tarfile.open(given) as archive:
            archive.extractall(directory, filter="data")  # no path outside it, no device, no link out
        inner = list(directory.iterdir())
        if len(inner) == 1 and inner[0].is_dir() and not (directory / EVIDENCE_FILE).exists():
            directory = inner[0]  # packed with its directory's name
    elif not given.is_dir():
        return ShardSource(str(given), given, None, problem=f"{given} does not exist")
    path = directory / EVIDENCE_FILE
    if not path.is_file():
        return ShardSource(str(given), directory, None, problem=f"no {EVIDENCE_FILE} in {given}")
    evidence = read_evidence(path)
    source = ShardSource(str(given), directory, evidence)
    for raw in evidence.records:
        record = parse.record(raw)
        if record is None:
            continue
        if record["kind"] == "session" and source.session is None:
            source.session = record
        elif record["kind"] == "session_end":
            source.end = record
    return source


@dataclass
class Merged:
    """The merged run's evidence and what each shard brought."""

    evidence: Evidence
    info: model.MergeInfo
    kept: list[ShardSource] = field(default_factory=list)


def _chosen_matrix(sources: Sequence[ShardSource]) -> str | None:
    """The matrix id most shards carry (the lowest shard number's on a tie)."""
    carried = [(s, s.shard) for s in sources if s.shard]
    ids = Counter(shard["matrix_id"] for _, shard in carried)
    if not ids:
        return None
    best = max(ids.values())
    tied = [(s, shard) for s, shard in carried if ids[shard["matrix_id"]] == best]
    return min(tied, key=lambda pair: (pair[0].k_hint, pair[0].given))[1]["matrix_id"]


def _lanes_of(reference: model.ShardInfo | None, k: int) -> list[str]:
    return [lane["name"] for lane in (reference["matrix_lanes"] if reference else []) if lane["shard"] == k]


def _merged_shard(k: int, status: str, source: ShardSource | None, lanes: list[str], message: str) -> model.MergedShard:
    shard = source.shard if source else None
    session = source.session if source else None
    return model.MergedShard(
        k=k,
        status=status,
        source=source.given if source else "",
        run_id=session["run_id"] if session else None,
        matrix_id=shard["matrix_id"] if shard else None,
        lanes=lanes,
        host=session["host"] if session else model.Host(),
        message=message,
    )


def _assignment(shard: model.ShardInfo | None) -> dict[str, int]:
    return {lane["name"]: lane["shard"] for lane in (shard["matrix_lanes"] if shard else [])}


def merge_sources(sources: Sequence[ShardSource], expected_n: int | None = None) -> Merged:
    """Account for every shard of the chosen matrix and merge the evidence of those that count."""
    matrix = _chosen_matrix(sources)
    ours = [s for s in sources if s.shard and s.shard["matrix_id"] == matrix]
    reference = min(ours, key=lambda s: (s.k_hint, s.given)).shard if ours else None
    n = expected_n or (reference["n"] if reference else max([s.k_hint for s in sources] + [1]))
    split = _assignment(reference)

    def counts(source: ShardSource) -> bool:
        shard = source.shard
        return source in ours and shard is not None and shard["n"] == n and _assignment(shard) == split

    shards: list[model.MergedShard] = []
    kept: list[ShardSource] = []
    for source in sources:
        if counts(source) or (source.evidence is None and 1 <= source.k_hint <= n):
            continue  # counted below; an unreadable one is said with the missing shard of its number
        shard = source.shard
        if source.problem:
            why = source.problem
        elif shard is None:
            why = "not a shard: its session record names no shard of a matrix"
        elif source not in ours or shard["n"] != n:
            why = f"matrix {shard['matrix_id']} in {shard['n']} shards, not the merged matrix {matrix} in {n}"
        else:
            why = "it assigns the lanes to shards otherwise (balanced by other step times)"
        shards.append(_merged_shard(source.k_hint, "foreign", source, [], why))
    for k in range(1, n + 1):
        lanes = _lanes_of(reference, k)
        mine = [s for s in sources if counts(s) and s.k_hint == k]
        if not mine:
            unreadable = [s.problem for s in sources if s.evidence is None and s.k_hint == k]
            shards.append(_merged_shard(k, "missing", None, lanes, "; ".join(unreadable)))
            continue
        first, *again = mine
        end = first.end
        if end is None or end.get("interrupted") or not end["complete"]:
            how = end.get("interrupted", "stopped before its end") if end else "no session_end: killed before its end"
            shards.append(_merged_shard(k, "interrupted", first, lanes, how))
        else:
            shards.append(_merged_shard(k, "empty" if not lanes else "ok", first, lanes, ""))
        kept.append(first)
        for extra in again:
            shards.append(_merged_shard(k, "duplicate", extra, lanes, f"also given as {first.given}"))
    shards.sort(key=lambda s: (s["k"], s["status"] == "duplicate"))
    info = model.MergeInfo(matrix_id=matrix or "", n=n, shards=shards, setups=_setups(kept))
    return Merged(_merged_evidence(kept, info, reference), info, kept)


def _lane_facts(source: ShardSource) -> dict[str, dict[str, str]]:
    """Each lane's setup facts in one shard: the host kernel (its session's), driver, CRIU and GPU (its lanes')."""
    kernel = (source.session["host"].get("kernel") if source.session else None) or "unknown"
    facts: dict[str, dict[str, str]] = {}
    assert source.evidence is not None
    for raw in source.evidence.records:
        record = parse.record(raw) if raw.get("kind") == "environment" else None
        if record is None or record["kind"] != "environment":
            continue
        versions, gpu = record["versions"], record["gpu"] or {}
        lane = record.get("lane") or f"{record['runner']}-{record['arm']}"
        facts[lane] = {
            "host kernel": kernel,
            "GPU driver": versions.get("driver") or "none",
            "CRIU": (versions.get("criu") or "unknown").removeprefix("Version: "),
            "GPU": str(gpu.get("name") or "none"),
        }
    return facts


def _setups(kept: Sequence[ShardSource]) -> list[model.SetupDifference]:
    by_fact: dict[str, dict[str, list[str]]] = {}
    for source in kept:
        for lane, facts in _lane_facts(source).items():
            for fact, value in facts.items():
                lanes = by_fact.setdefault(fact, {}).setdefault(value, [])
                if lane not in lanes:
                    lanes.append(lane)
    return [model.SetupDifference(fact=fact, values=values) for fact, values in by_fact.items() if len(values) > 1]


def _merged_evidence(kept: Sequence[ShardSource], info: model.MergeInfo, reference: model.ShardInfo | None) -> Evidence:
    """One run's records: a session record for the whole matrix (the first shard's, its coverage the matrix's,
    its ``merge``), every kept shard's environments, plans, steps and harness errors, and one end."""
    first = kept[0].session if kept else None
    ids = sorted(s.session["run_id"] for s in kept if s.session)
    of_runs = hashlib.sha256("|".join(ids).encode()).hexdigest()[:6]
    now = utc_now()
    session = model.SessionRecord(
        kind="session",
        time=first["time"] if first else now,
        run_id=f"merged-{(info['matrix_id'] or 'none')[:12]}-{of_runs}",
        harness_version=first["harness_version"] if first else "",
        started=min((s.session["started"] for s in kept if s.session), default=now),
        options=first["options"] if first else {},
        host=first["host"] if first else model.Host(),
        merge=info,
    )
    for key in ("probe", "smoke", "invocation", "harness_source", "preflight"):
        if first and key in first:
            session[key] = first[key]
    coverage = model.Coverage(**(first.get("coverage") or {})) if first else model.Coverage()
    if reference is not None:
        coverage["required"] = list(reference["required"])
        coverage["runners"] = list(dict.fromkeys(lane["column"] for lane in reference["matrix_lanes"]))
        coverage["arms"] = list(dict.fromkeys(lane["arm"] for lane in reference["matrix_lanes"]))
    if coverage:
        session["coverage"] = coverage
    records: list[dict[str, object]] = [dict(session)]
    malformed = 0
    ends: list[model.SessionEndRecord] = []
    for source in kept:
        assert source.evidence is not None
        malformed += source.evidence.malformed_lines
        records += [dict(r) for r in source.evidence.records if r.get("kind") not in ("session", "session_end")]
        if source.end is not None:
            ends.append(source.end)
    finished = [e for e in ends if e["complete"] and not e.get("interrupted")]
    counts: Counter[str] = Counter()
    for end in ends:
        counts.update(end.get("pytest_counts") or {})
    end_record = model.SessionEndRecord(
        kind="session_end",
        time=max((e["time"] for e in ends), default=now),
        ended=max((e["ended"] for e in ends), default=now),
        exitstatus=max((e["exitstatus"] for e in finished), default=0),
        complete=True,  # each shard's completeness is the merge's own account (``merge.shards``)
        environment_limitations=[x for e in ends for x in e.get("environment_limitations") or []],
    )
    if counts:
        end_record["pytest_counts"] = dict(counts)
    records.append(dict(end_record))
    return Evidence(records=records, malformed_lines=malformed)


def merge_into(inputs: Sequence[Path], out: Path, expected_n: int | None = None) -> Merged:
    """Read ``inputs`` (report directories or their ``.tar.gz``), merge them, write the merged ``evidence.jsonl``
    into ``out`` and copy the shards' logs and adapters beside it; the merge (its records and account)."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vsnap-merge-") as scratch:
        sources = [read_source(path, Path(scratch)) for path in inputs]
        merged = merge_sources(sources, expected_n)
        for source in merged.kept:
            for part in _COPIED:
                if (source.directory / part).is_dir():
                    shutil.copytree(source.directory / part, out / part, dirs_exist_ok=True)
    with (out / EVIDENCE_FILE).open("w", encoding="utf-8") as handle:
        for record in merged.evidence.records:
            handle.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
    return merged
