"""Run every benchmark in bench/ in turn and print their figures (``make bench``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    status = 0
    for script in sorted(HERE.glob("bench_*.py")):
        print(f"=== {script.name}", flush=True)
        status |= subprocess.run([sys.executable, str(script)], cwd=HERE.parent).returncode
    return status


if __name__ == "__main__":
    raise SystemExit(main())
