"""The ``vsnap-qual`` command: ``report`` re-renders a run, ``compare`` diffs two runs.

Each subcommand is one entry in ``SUBCOMMANDS``: a function that adds its arguments to its subparser and a
handler that returns the exit status. Adding a subcommand (``doctor``) is adding one entry.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vsnap_qual import __version__

#: Exit status when an input cannot be read (argparse itself exits 2 on usage errors).
EXIT_BAD_INPUT = 1


@dataclass(frozen=True)
class Subcommand:
    """One ``vsnap-qual`` subcommand: its help line, its arguments and its handler."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source",
        type=Path,
        help="results.json, evidence.jsonl, or a report directory holding one of them",
    )
    parser.add_argument("--out", type=Path, default=None, help="where to write the reports (default: beside SOURCE)")


def _run_report(args: argparse.Namespace) -> int:
    from vsnap_qual.report import render_reports
    from vsnap_qual.report.assemble import EVIDENCE_FILE, RESULTS_FILE, assemble_file, load_results

    source: Path = args.source
    if source.is_dir():
        # Prefer the evidence: it is what a killed run leaves, and results.json is assembled from it.
        for name in (EVIDENCE_FILE, RESULTS_FILE):
            if (source / name).is_file():
                source = source / name
                break
        else:
            print(
                f"vsnap-qual report: {source} holds neither {EVIDENCE_FILE} nor {RESULTS_FILE}",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
    if not source.is_file():
        print(f"vsnap-qual report: {source} does not exist", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        results = assemble_file(source) if source.suffix == ".jsonl" else load_results(source)
    except (OSError, ValueError) as exc:
        print(f"vsnap-qual report: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    out_dir: Path = args.out or source.parent
    paths = render_reports(results, out_dir, log_root=source.parent)
    print(f"{paths.verdict.upper()}: wrote {paths.report_html}, {paths.summary_md}, {paths.results_json}")
    return 0


def _compare_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("old", type=Path, help="the earlier run's results.json (or its report directory)")
    parser.add_argument("new", type=Path, help="the later run's results.json (or its report directory)")
    parser.add_argument("--markdown", action="store_true", help="print Markdown instead of plain text")


def _load_for_compare(path: Path) -> Mapping[str, Any]:
    from vsnap_qual.report.assemble import EVIDENCE_FILE, RESULTS_FILE, assemble_file, load_results

    if path.is_dir():
        if (path / RESULTS_FILE).is_file():
            return load_results(path / RESULTS_FILE)
        if (path / EVIDENCE_FILE).is_file():
            return assemble_file(path / EVIDENCE_FILE)
        raise ValueError(f"{path} holds neither {RESULTS_FILE} nor {EVIDENCE_FILE}")
    if not path.is_file():
        raise ValueError(f"{path} does not exist")
    return assemble_file(path) if path.suffix == ".jsonl" else load_results(path)


def _run_compare(args: argparse.Namespace) -> int:
    from vsnap_qual.report.compare_runs import diff_runs, format_markdown, format_text
    from vsnap_qual.report.redact import Redactor

    try:
        old, new = _load_for_compare(args.old), _load_for_compare(args.new)
    except (OSError, ValueError) as exc:
        print(f"vsnap-qual compare: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    diff = diff_runs(old, new)
    text = format_markdown(diff) if args.markdown else format_text(diff)
    sys.stdout.write(Redactor.from_environment().text(text))
    return 0


#: name → subcommand; ``build_parser`` adds them in this order.
def _doctor_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "Takes the --vsnap-* options of the pytest plugin (docs/options.md) and VSNAP_* variables."


def _run_doctor(args: argparse.Namespace) -> int:
    from vsnap_qual import doctor

    return doctor.main(list(getattr(args, "passthrough", [])))


SUBCOMMANDS: dict[str, Subcommand] = {
    "report": Subcommand("re-render report.html, summary.md and results.json", _report_arguments, _run_report),
    "compare": Subcommand("show what changed between two runs", _compare_arguments, _run_compare),
    "doctor": Subcommand(
        "check the host and the image (--vsnap-* options, as for pytest)", _doctor_arguments, _run_doctor
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """The ``vsnap-qual`` argument parser with one subparser per entry of ``SUBCOMMANDS``."""
    parser = argparse.ArgumentParser(prog="vsnap-qual", description="vLLM snapshot qualification: reports and tools")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, subcommand in SUBCOMMANDS.items():
        sub = subparsers.add_parser(name, help=subcommand.help, description=subcommand.help)
        subcommand.add_arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``vsnap-qual`` console script; returns the exit status."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and args.command != "doctor":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.passthrough = rest
    return SUBCOMMANDS[args.command].run(args)


if __name__ == "__main__":
    raise SystemExit(main())
