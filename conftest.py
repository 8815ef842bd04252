"""The checkout's own pytest runs test this checkout.

One job: when pytest's rootdir is this checkout (``pytest tests/``, ``make test``, ``.ci/run``; the suites have
their own root, ``suites/pytest.ini``), the ``vsnap_qual`` under test is this checkout's. The checkout goes first
on ``sys.path``; a ``vsnap_qual`` already imported from anywhere else (a stale non-editable install that the
pytest11 entry point loaded before this file) stops the run with the fix, instead of testing other code.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def pytest_configure(config: pytest.Config) -> None:
    import vsnap_qual

    found = Path(vsnap_qual.__file__).resolve().parent
    if found != ROOT / "vsnap_qual":
        raise pytest.UsageError(
            f"the harness's own tests would test vsnap_qual from {found}, not this checkout ({ROOT / 'vsnap_qual'}); "
            "install this checkout editable (`make install`) or uninstall the other copy"
        )
