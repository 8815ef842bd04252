"""The ``vsnap-qual`` command: ``report`` re-renders a run, ``compare`` diffs two runs, ``history`` trends many.

Each subcommand is one entry in ``SUBCOMMANDS``: a function that adds its arguments to its subparser and a
handler that returns the exit status. Adding a subcommand (``doctor``) is adding one entry.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from vsnap_qual import __version__, model, options
from vsnap_qual.cli import nightly

#: Exit status when an input cannot be read (the same as argparse's own usage errors).
EXIT_BAD_INPUT = 2
#: ``vsnap-qual report``: the exit status for each recorded verdict status (2 is bad input or usage).
EXIT_BY_VERDICT = {"pass": 0, "fail": 1, "partial": 3, "incomplete": 4, "interrupted": 4}
#: ``vsnap-qual report --exit=pytest``: pytest's own exit status for the same verdict (a killed run, which pytest
#: never got to exit from, as a stopped one), and pytest's usage error for bad input.
EXIT_AS_PYTEST = {"pass": 0, "fail": 1, "partial": 1, "incomplete": 2, "interrupted": 2}
EXIT_PYTEST_USAGE = 4
#: ``vsnap-qual compare``: the new run regressed at the ``--fail-on`` level.
EXIT_REGRESSION = 1

#: the fix said with every run that cannot be read
SOURCE_FIX = "give a run's results.json (or .json.gz), its evidence.jsonl, or its report directory"

REPORT_EPILOG = (
    "Exit status: the run's recorded verdict (never judged again): 0 PASS (also a narrowed PASS), 1 FAIL, "
    "3 PARTIAL, 4 INCOMPLETE (a killed run) or INTERRUPTED (a stopped run); 2 when SOURCE cannot be read or the "
    "arguments are wrong. With --exit=pytest, pytest's status for the same verdict: 0 PASS, 1 FAIL or PARTIAL, "
    "2 INTERRUPTED or INCOMPLETE, 4 unreadable input."
)
COMPARE_EPILOG = (
    "Exit status: 0 when NEW did not regress from OLD at the --fail-on level, 1 when it did (each regression "
    "is listed on stderr), 2 when a run cannot be read or the arguments are wrong. --fail-on levels include the "
    "ones before them: verdict (the default: the new verdict is worse, e.g. PASS -> FAIL or PARTIAL), check (also "
    "a validation check, by id, that held and no longer does, or a step that passed and no longer does), "
    "figure (also any change of digests, canaries or KV capacity; timings never count), never (always 0)."
)


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
    parser.add_argument(
        "--vsnap-known-findings",
        dest="known_findings",
        metavar="FILE",
        default=None,
        help="judge the run again with this known-findings file (as the pytest option of the same name)",
    )
    parser.add_argument(
        "--exit",
        choices=("verdict", "pytest"),
        default="verdict",
        help="exit status: the verdict's own (default) or pytest's for the same verdict (see below)",
    )
    parser.epilog = REPORT_EPILOG


def _run_report(args: argparse.Namespace) -> int:
    verdict = _report(args)
    pytest_like = args.exit == "pytest"
    if verdict is None:
        return EXIT_PYTEST_USAGE if pytest_like else EXIT_BAD_INPUT
    codes = EXIT_AS_PYTEST if pytest_like else EXIT_BY_VERDICT
    return codes.get(verdict, codes["incomplete"])


def _report(args: argparse.Namespace) -> str | None:
    """Re-render the run (and judge it again with a known-findings file); its verdict, None for bad input (said)."""
    from vsnap_qual.report import render_reports
    from vsnap_qual.report.assemble import EVIDENCE_FILE, RESULTS_FILE, assemble_path, load_results

    source: Path = args.source
    if args.out is not None and (problem := _out_problem(args.out)):  # said before anything is read or written
        print(f"vsnap-qual report: --out {problem}; choose a writable directory", file=sys.stderr)
        return None
    entries = None
    if args.known_findings is not None:  # read and checked before anything is read or written
        from vsnap_qual.report.known import KnownFindingsError, read_file

        try:
            entries = read_file(Path(args.known_findings))
        except KnownFindingsError as exc:
            print(
                f"vsnap-qual report: --vsnap-known-findings: {exc}; give a known-findings TOML file (id, words, link, "
                "expires: docs/known-findings.md)",
                file=sys.stderr,
            )
            return None
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
            return None
    if not source.is_file():
        print(f"vsnap-qual report: {source} does not exist", file=sys.stderr)
        return None
    try:
        if source.suffix == ".jsonl":
            assembled = assemble_path(source)  # judged from its comparisons: the views reuse them
            results, comparisons = assembled.results, assembled.comparisons
        else:
            results, comparisons = load_results(source), None
    except (OSError, ValueError) as exc:
        print(f"vsnap-qual report: {exc}; {SOURCE_FIX}", file=sys.stderr)
        return None
    if entries is not None:
        from vsnap_qual.report.verdict import with_known_findings

        results = with_known_findings(results, entries, comparisons)
    out_dir: Path = args.out or source.parent
    try:
        paths = render_reports(results, out_dir, log_root=source.parent, comparisons=comparisons)
    except OSError as exc:
        where = "--out " if args.out is not None else "beside SOURCE: "
        print(
            f"vsnap-qual report: {where}{out_dir}: {exc.strerror or exc}; give a writable directory with --out",
            file=sys.stderr,
        )
        return None
    print(f"{paths.verdict.upper()}: wrote {paths.report_html}, {paths.summary_md}, {paths.results_json}")
    return paths.verdict


def _out_problem(out: Path) -> str | None:
    """Why ``--out`` cannot take the reports (a file, a read-only directory), or None."""
    from vsnap_qual.run.preflight import writable_dir_problem

    return writable_dir_problem(out)


def _compare_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("old", type=Path, help="the earlier run's results.json (or its report directory)")
    parser.add_argument("new", type=Path, help="the later run's results.json (or its report directory)")
    parser.add_argument("--markdown", action="store_true", help="print Markdown instead of plain text")
    from vsnap_qual.report.compare_runs import FAIL_ON, FAIL_ON_DEFAULT

    parser.add_argument(
        "--fail-on",
        choices=[*FAIL_ON, "never"],
        default=FAIL_ON_DEFAULT,
        help=f"what counts as a regression (exit 1); default {FAIL_ON_DEFAULT}",
    )
    parser.epilog = COMPARE_EPILOG


def _load_for_compare(path: Path) -> model.Results:
    results = _read_for_compare(path)
    if not (results.get("run") or {}).get("run_id"):
        raise ValueError(f"{path} is not a run's results: it names no run id")
    return results


def _read_for_compare(path: Path) -> model.Results:
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
    from vsnap_qual.redact import Redactor
    from vsnap_qual.report.compare_runs import diff_runs, format_markdown, format_text, regressions

    try:
        old, new = _load_for_compare(args.old), _load_for_compare(args.new)
    except (OSError, ValueError) as exc:
        print(f"vsnap-qual compare: {exc}; {SOURCE_FIX}", file=sys.stderr)
        return EXIT_BAD_INPUT
    diff = diff_runs(old, new)
    text = format_markdown(diff) if args.markdown else format_text(diff)
    redactor = Redactor.from_environment()
    sys.stdout.write(redactor.text(text))
    if args.fail_on == "never":
        return 0
    found = regressions(diff, args.fail_on)
    for line in found:
        print(redactor.text(f"vsnap-qual compare: regression (--fail-on={args.fail_on}): {line}"), file=sys.stderr)
    return EXIT_REGRESSION if found else 0


HISTORY_EPILOG = (
    "Exit status: 0 (with --gate: the newest run's figures held against its baseline), 1 when --gate found a "
    "figure worse than the median of the last --window compatible passed runs by more than --tolerance, 2 when no "
    "run can be read or the arguments are wrong. Writes history.html and history.md under --out."
)


def _history_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="runs: results.json[.gz] files or "
                        "directories holding them (searched through)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("reports/history"), help="where to write (reports/history)")
    parser.add_argument("--gate", action="store_true", help="fail when the newest run's figures are worse than "
                        "the median of the last --window compatible passed runs")  # fmt: skip
    parser.add_argument(
        "--window", type=options.parse_positive_int, default=7, help="compatible passed runs in the gate's median (7)"
    )
    parser.add_argument("--tolerance", type=options.parse_tolerance, default=0.25,
                        help="how much worse than the median a figure may be, a fraction (0.25)")  # fmt: skip
    parser.epilog = HISTORY_EPILOG


def _run_history(args: argparse.Namespace) -> int:
    from vsnap_qual.report import history

    if problem := _out_problem(args.out):
        print(f"vsnap-qual history: --out {problem}; choose a writable directory", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        runs = history.read_runs(args.dirs)
    except (OSError, ValueError) as exc:
        print(f"vsnap-qual history: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    result = history.gate(runs, window=args.window, tolerance=args.tolerance) if args.gate else None
    try:
        written = history.write(runs, args.out, gate_result=result, tolerance=args.tolerance, window=args.window)
    except OSError as exc:
        print(
            f"vsnap-qual history: --out {args.out}: {exc.strerror or exc}; choose a writable directory", file=sys.stderr
        )
        return EXIT_BAD_INPUT
    print(f"{len(runs)} run(s): wrote {', '.join(map(str, written))}")
    if result is None:
        return 0
    for failure in result.failures:
        print(f"vsnap-qual history: gate: worse: {failure}", file=sys.stderr)
    newest = result.run.run_id if result.run else "?"
    print(f"gate: {'FAIL' if result.failures else 'pass'} for {newest} ({len(result.compared)} figure(s) compared)")
    return EXIT_REGRESSION if result.failures else 0


def _merge_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "shards",
        type=Path,
        nargs="*",
        metavar="SHARD",
        help="a shard's report directory, or a .tar.gz of one (none at all, with --shards: every shard is missing)",
    )
    parser.add_argument("--out", type=Path, required=True, help="where to write the merged report")
    parser.add_argument(
        "--shards", dest="count", type=int, default=None, metavar="N",
        help="how many shards the matrix was split into (default: as the shards record it)",
    )  # fmt: skip
    parser.add_argument("--annotate", action="store_true", help="make summary.md the Buildkite annotation")
    parser.add_argument("--github-step-summary", action="store_true", help="append summary.md to $GITHUB_STEP_SUMMARY")
    parser.epilog = (
        "One verdict from the shards of one matrix (docs/scheduling.md): a shard missing, given twice, of another "
        "matrix or stopped before its end makes it INCOMPLETE, naming the lanes that shard owned. Exit status as "
        "for report: 0 PASS, 1 FAIL, 3 PARTIAL, 4 INCOMPLETE; 2 when the arguments are wrong."
    )


def _run_merge(args: argparse.Namespace) -> int:
    from vsnap_qual.cli.merge import merge_command

    if problem := _out_problem(args.out):
        print(f"vsnap-qual merge: --out {problem}; choose a writable directory", file=sys.stderr)
        return EXIT_BAD_INPUT
    verdict = merge_command(args.shards, args.out, args.count, annotate=args.annotate, github=args.github_step_summary)
    return EXIT_BAD_INPUT if verdict is None else EXIT_BY_VERDICT.get(verdict, EXIT_BY_VERDICT["incomplete"])


#: name → subcommand; ``build_parser`` adds them in this order.
def _doctor_arguments(parser: argparse.ArgumentParser) -> None:
    from vsnap_qual import options

    group = parser.add_argument_group("the pytest plugin's options (the doctor checks what they ask for)")
    for spec in options.OPTIONS:
        if spec.flag:
            group.add_argument(
                spec.cli, dest=spec.dest, action="store_const", const="true", help=spec.help_line(ini=False)
            )
            group.add_argument(spec.no_cli, dest=spec.dest, action="store_const", const="false", help=spec.no_help)
        else:
            group.add_argument(spec.cli, dest=spec.dest, metavar=spec.name.split("-")[-1].upper(),
                               help=spec.help_line(ini=False))  # fmt: skip
    parser.epilog = (
        "Each option falls back to its VSNAP_* variable, then its default, as in the pytest plugin. Exit status: 0 "
        "when every required check passed, 1 when one failed, 2 for a bad option."
    )


def _run_doctor(args: argparse.Namespace) -> int:
    from vsnap_qual import options
    from vsnap_qual.cli import doctor

    given = [
        spec.given_as(value) for spec in options.OPTIONS if (value := getattr(args, spec.dest, None)) is not None
    ]  # the options as given, parsed and checked once, by the doctor (unknown arguments reach it too)
    return doctor.main([*given, *getattr(args, "passthrough", [])])


SUBCOMMANDS: dict[str, Subcommand] = {
    "report": Subcommand("re-render report.html, summary.md and results.json", _report_arguments, _run_report),
    "compare": Subcommand("show what changed between two runs", _compare_arguments, _run_compare),
    "doctor": Subcommand(
        "check the host and the image (--vsnap-* options, as for pytest)", _doctor_arguments, _run_doctor
    ),
    "nightly-tag": Subcommand(nightly.HELP, nightly.add_arguments, nightly.run),
    "history": Subcommand("trends across runs, and a gate against recent passes", _history_arguments, _run_history),
    "merge": Subcommand("one report and verdict from the shards of a matrix", _merge_arguments, _run_merge),
}


def build_parser() -> argparse.ArgumentParser:
    """The ``vsnap-qual`` argument parser with one subparser per entry of ``SUBCOMMANDS``."""
    parser = argparse.ArgumentParser(
        prog="vsnap-qual", description="vLLM snapshot qualification: reports and tools", allow_abbrev=False
    )  # no abbreviations, as pytest: `doctor --vsnap-imag=` is refused, not read as --vsnap-image
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, subcommand in SUBCOMMANDS.items():
        sub = subparsers.add_parser(name, help=subcommand.help, description=subcommand.help, allow_abbrev=False)
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
