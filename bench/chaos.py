"""The chaos run (issue 29): the random-kill faults, N times per lane, each with its own draw, then the figures
(``vsnap_qual/report/chaos.py``: per command, signal and phase reached, how many runs left something behind, how many
leaked past the harness's sweep, what became of each artifact, and the seed that replays each failed step).

Run:

    .venv/bin/python bench/chaos.py reports/<run>/results.json        # the figures of a finished run
    .venv/bin/python bench/chaos.py --run 50 --report-dir reports/chaos [-- pytest args]

``--run N`` qualifies the reference image's head arm (``suites/profiles/reference.args``, both runners, ``-n 2``)
with only the fault artifact and the four kill faults, each ``--vsnap-chaos=N`` times per lane; pytest args after
``--`` are added (another image, ``--vsnap-kill-seed`` to replay, ``--vsnap-runners``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from vsnap_qual.report.chaos import main as figures_main

ROOT = Path(__file__).resolve().parents[1]
#: the fault lane's artifact and the kill kind's faults, repeats included (``kill-create.7``)
SELECT = "fault_artifact or kill-create or kill-restore or term-create or term-restore"


def run(n: int, report_dir: Path, extra: list[str]) -> int:
    argv = [
        sys.executable, "-m", "pytest", "suites/", "@suites/profiles/reference.args", "-n", "2", "-m", "fault",
        "-k", SELECT, f"--vsnap-chaos={n}", f"--vsnap-report-dir={report_dir}", "-p", "no:cacheprovider", *extra,
    ]  # fmt: skip
    print("$", " ".join(argv), flush=True)
    return subprocess.call(argv, cwd=ROOT)


def main() -> int:
    if "--run" not in sys.argv[1:]:
        return figures_main()
    own, _, extra = " ".join(sys.argv[1:]).partition(" -- ")
    parser = argparse.ArgumentParser()
    parser.add_argument("--run", type=int, required=True, help="how many times each kill fault runs per lane")
    parser.add_argument("--report-dir", type=Path, default=ROOT / "reports" / "chaos")
    args = parser.parse_args(own.split())
    if args.report_dir.exists():
        sys.exit(f"{args.report_dir} exists: remove it or give another --report-dir")
    code = run(args.run, args.report_dir, extra.split() if extra else [])
    results = args.report_dir / "results.json"
    if not results.exists():
        print(f"pytest exited {code} and wrote no {results}", file=sys.stderr)
        return code or 1
    shown = figures_main([str(results)])
    return code or shown


if __name__ == "__main__":
    sys.exit(main())
