"""The checkout's own pytest runs test this checkout.

When pytest's rootdir is this checkout (``pytest tests/``, ``make test``, ``.ci/run``; the suites have their own
root, ``suites/pytest.ini``), two jobs:

- the ``vsnap_qual`` under test is this checkout's. The checkout goes first on ``sys.path``; a ``vsnap_qual``
  already imported from anywhere else (a stale non-editable install that the pytest11 entry point loaded before
  this file) stops the run with the fix, instead of testing other code;
- SIGTERM (CI cancel, ``timeout``) becomes KeyboardInterrupt, so the containers and processes the harness's own
  tests started are removed by their finalizers. (The plugin does this only in sessions where it is active: in
  these runs it is not, and an installed plugin must leave other projects' signal handling alone.)
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _sigterm_to_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _sigterm_to_interrupt)
    import vsnap_qual

    found = Path(vsnap_qual.__file__).resolve().parent
    if found != ROOT / "vsnap_qual":
        raise pytest.UsageError(
            f"the harness's own tests would test vsnap_qual from {found}, not this checkout ({ROOT / 'vsnap_qual'}); "
            "install this checkout editable (`make install`) or uninstall the other copy"
        )
