"""The qualification suites' own hooks: the lifecycle runs before the injected failures (a user sees the first
lifecycle answer before a dozen faults), whatever the files' collection order."""

from __future__ import annotations

import pytest

# Collecting these suites is what makes vsnap-qual active in a session (vsnap_qual.plugin.active): the plugin,
# installed in an environment, stays invisible to every other project's tests.
VSNAP_SUITES = True


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Lifecycle items first, faults after; the order within each stays as collected (a stable sort)."""
    items[:] = sorted(items, key=lambda item: item.get_closest_marker("fault") is not None)
