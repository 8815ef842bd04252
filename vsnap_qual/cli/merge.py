"""``vsnap-qual merge SHARD... --out DIR``: the shards of one matrix as one report and one verdict (issue 46;
``vsnap_qual.report.merge`` does the merging, the report package renders it)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

JUNIT_FILE = "junit.xml"


def merge_command(
    inputs: Sequence[Path], out: Path, count: int | None, *, annotate: bool = False, github: bool = False
) -> str | None:
    """Merge ``inputs`` into ``out``: evidence, results.json, report.html, summary.md, junit.xml; the merged
    verdict's status, None when the inputs cannot be merged at all (said on stderr)."""
    from vsnap_qual.report import write_reports
    from vsnap_qual.report.junit import merged_junit
    from vsnap_qual.report.merge import MergeInputError, merge_into

    if count is not None and count < 1:
        print(f"vsnap-qual merge: --shards={count}: the shard count must be at least 1", file=sys.stderr)
        return None
    if not inputs and count is None:
        print(
            "vsnap-qual merge: no shard given: name the shards' report directories (or give --shards N)",
            file=sys.stderr,
        )
        return None
    if out.resolve() in {path.resolve() for path in inputs}:
        print(f"vsnap-qual merge: --out {out} is one of the shards: give a directory of its own", file=sys.stderr)
        return None
    existed = out.exists()
    try:
        merged = merge_into(inputs, out, count)
    except (MergeInputError, OSError) as exc:
        if not existed:  # a refused merge leaves nothing behind
            shutil.rmtree(out, ignore_errors=True)
        print(f"vsnap-qual merge: {exc}", file=sys.stderr)
        return None
    paths = write_reports(out, github_step_summary=github, annotate=annotate)
    junits = [source.directory / JUNIT_FILE for source in merged.kept if (source.directory / JUNIT_FILE).is_file()]
    merged_junit(junits, out / JUNIT_FILE, paths.results)
    for shard in merged.info["shards"]:
        lanes = ", ".join(shard["lanes"]) or "no lane"
        said = f" ({shard['message']})" if shard["message"] else ""
        print(f"shard {shard['k']}/{merged.info['n']}: {shard['status']}{said}: {lanes} [{shard['source'] or '-'}]")
    for note in paths.notes:
        print(f"note: {note}")
    print(
        f"{paths.results['verdict']['headline']}: wrote {paths.report_html}, {paths.summary_md}, {paths.results_json}"
    )
    return paths.verdict
