"""Time to a verdict of one finished run: its measured wall beside its critical path, the longest chain of engine
work that must happen in order (``vsnap_qual/timing/critical_path.py``'s docstring says how it is computed), as a
command.

Run: ``.venv/bin/python bench/critical_path.py RUN [--json]``, where RUN is a ``results.json`` (``.gz`` too) or a
report directory: its ``results.json``, ``results.json.gz`` or ``report/results.json`` (the GPU tier's prefix),
else its ``evidence.jsonl`` assembled. pytest's own session time is read from a ``junit.xml`` beside the results,
where there is one.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

from vsnap_qual.timing.critical_path import markdown, time_to_verdict

RESULTS_NAMES = ("results.json", "results.json.gz", "report/results.json", "report/results.json.gz")


def results_file(run: Path) -> Path | None:
    """The run's results file: ``run`` itself, or the first of :data:`RESULTS_NAMES` in it (None: only evidence)."""
    if run.is_file():
        return run
    return next((run / name for name in RESULTS_NAMES if (run / name).is_file()), None)


def load(run: Path) -> tuple[dict[str, Any], Path]:
    """The run's ``results.json`` as read, and the directory it was found in."""
    found = results_file(run)
    if found is not None:
        text = gzip.decompress(found.read_bytes()).decode() if found.suffix == ".gz" else found.read_text()
        return json.loads(text), found.parent
    evidence = run / "evidence.jsonl"
    if not evidence.is_file():
        raise FileNotFoundError(f"{run}: no results.json ({', '.join(RESULTS_NAMES)}) and no evidence.jsonl")
    from vsnap_qual.report.assemble import assemble_file

    return json.loads(json.dumps(assemble_file(evidence))), run


def pytest_seconds(directory: Path) -> float | None:
    """pytest's own session time: the ``time`` of ``junit.xml``'s testsuite beside the results (None: none)."""
    junit = directory / "junit.xml"
    if not junit.is_file():
        return None
    try:
        root = ElementTree.parse(junit).getroot()
    except ElementTree.ParseError:
        return None
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    value = suite.get("time") if suite is not None else None
    return float(value) if value else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a run's results.json (or .gz), or its report directory")
    parser.add_argument("--json", action="store_true", help="the figures as JSON instead of Markdown")
    args = parser.parse_args(argv)
    results, directory = load(args.run)
    found = time_to_verdict(results, pytest_seconds(directory))
    if args.json:
        print(json.dumps({"source": str(args.run), **dataclasses.asdict(found)}, indent=2))
    else:
        print(markdown(found, str(args.run)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
