"""Which fault kinds' judged path ends before any engine process starts, on every lane of every run given, from
the runs' own records (issue 45 item 4): the table ``docs/procedure.md`` keeps and ``vsnap_qual/faults/once.py``'s
``ONCE_KINDS`` is held to (``tests/evidence/test_engine_reach.py``). A fault step's record shows it ended so when its
command exited non-zero with no listener bound, no ``error.json``, no probe hook fired, the artifact byte-identical
and no process left (``faults.once.engine_reached``).

Run: ``.venv/bin/python bench/engine_reach.py [RESULTS ...]`` (``results.json`` or ``.gz``; default: the committed
full runs of ``faults.once.EVIDENCE``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vsnap_qual.faults.catalogue import FAULTS_BY_ID
from vsnap_qual.faults.once import EVIDENCE, Reach, reach, reach_markdown, shown_once
from vsnap_qual.report.kinds import fault_kind

ROOT = Path(__file__).resolve().parents[1]


def kind_of(fault_id: str, results: Mapping[str, Any]) -> str | None:
    """A fault's kind as its record says it; for evidence written before records carried it, the kind the
    built-in catalogue gives that fault id (chaos repeats ``<id>.N`` as their fault's)."""
    found = fault_kind(fault_id, results)
    if found:
        return found
    fault = FAULTS_BY_ID.get(fault_id.split(".", 1)[0])
    return fault.kind if fault else None


def load(path: Path) -> dict[str, Any]:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    data: dict[str, Any] = json.loads(raw)
    return data


def run_name(path: Path) -> str:
    """The run's folder (``gpu/2026-12-07-v1-full-d575706``) or, for a file of bench/data, the file's stem."""
    if path.parent.name == "data":
        return path.name.split(".json")[0]
    return f"{path.parent.parent.name}/{path.parent.name}"


def table(paths: Sequence[Path]) -> tuple[dict[str, list[Reach]], list[str]]:
    """Each run's cells, and the kinds shown to end before any engine process on every lane of every run."""
    runs = {run_name(p): reach(load(p)["steps"], kind_of) for p in paths}
    return runs, shown_once(runs)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="*", type=Path, help="results.json(.gz) files (default: faults.once.EVIDENCE)")
    args = parser.parse_args(argv)
    paths = args.results or [ROOT / p for p in EVIDENCE]
    runs, once = table(paths)
    print(reach_markdown(runs))
    print()
    print("Ended before any engine process on every lane of every run: " + (", ".join(once) or "no kind"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
