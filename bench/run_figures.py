"""The figures of one finished run, from its ``results.json``: ``vsnap_qual/timing/run_figures.py`` (its docstring says
which), as a command.

Run: ``.venv/bin/python bench/run_figures.py reports/<run>/results.json``.
"""

from __future__ import annotations

import sys

from vsnap_qual.timing.run_figures import main

if __name__ == "__main__":
    sys.exit(main())
