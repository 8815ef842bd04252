"""vsnap-qual's own pytest hooks, added with ``pytest_addhooks`` (as pytest-benchmark adds its own)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from vsnap_qual.faults import FaultCatalogue


@pytest.hookspec
def pytest_vsnap_add_faults(catalogue: FaultCatalogue) -> None:
    """Add fault points to the session's catalogue, from a ``conftest.py`` or a plugin: a kind of one's own, one
    module's ``Kind`` (its injector and its faults, each a ``procedure.Fault``: id, title, kind, head and base
    expectations, parameters), or single faults (with, for a kind of their own, its injector)::

        def pytest_vsnap_add_faults(catalogue):
            catalogue.add_kind(KIND)  # KIND = faults.Kind("lock", HoldLockFile(), faults=(Fault(...),))
            catalogue.add(Fault("wake-raise-2", "...", "hook", head=Expect(1, False, None, None),
                                params=HookParams("wake-raise")))

    Called once per process (xdist workers too), before the suites are collected; every added fault appears in
    the coverage, the report and ``summary.md`` like a built-in one (``docs/adding-a-fault.md``).
    """
