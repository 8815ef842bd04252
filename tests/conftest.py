"""Shared fixtures for the harness's own tests."""

from __future__ import annotations

import contextlib

import pytest

pytest_plugins = ["pytester"]


@pytest.fixture(scope="session", autouse=True)
def _sweep_leftovers_of_killed_sessions():
    """Containers of test or suite processes that were SIGKILLed (their owner is gone) go before anything runs."""
    from vsnap_qual import runtime

    with contextlib.suppress(runtime.RuntimeFailure):  # tests that need Docker say so themselves
        runtime.sweep(runtime.connect(timeout=5))


@pytest.fixture(scope="session")
def docker_client():
    """A client for the real local Docker engine (the integration tests never fake it)."""
    from vsnap_qual import runtime

    try:
        return runtime.connect()
    except runtime.RuntimeFailure as exc:
        pytest.fail(f"Docker engine needed by this test is unreachable: {exc}")
