"""vsnap-qual's own pytest hooks, added with ``pytest_addhooks`` (as pytest-benchmark adds its own)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from vsnap_qual.faults import FaultCatalogue


@pytest.hookspec
def pytest_vsnap_add_faults(catalogue: FaultCatalogue) -> None:
    """Add fault points to the session's catalogue, from a ``conftest.py`` or a plugin: each one entry
    (``procedure.Fault``: id, title, kind, head and base expectations) and, for a kind of its own, its injector::

        def pytest_vsnap_add_faults(catalogue):
            catalogue.add(Fault("lock-held", "a stale restore lock file", "lock", head=Expect(1, False, None, True)),
                          injector=HoldLockFile())

    Called once per process (xdist workers too), before the suites are collected; every added fault appears in
    the coverage, the report and ``summary.md`` like a built-in one (``docs/adding-a-fault.md``).
    """
