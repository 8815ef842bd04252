"""``python -m vsnap_qual.cli``: the ``vsnap-qual`` command, as the console script runs it."""

from __future__ import annotations

from vsnap_qual.cli import main

raise SystemExit(main())
