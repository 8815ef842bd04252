"""Shared fixtures for the harness's own tests."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]


@pytest.fixture(scope="session")
def docker_client():
    """A client for the real local Docker engine (the integration tests never fake it)."""
    from vsnap_qual import runtime

    try:
        return runtime.connect()
    except runtime.RuntimeFailure as exc:
        pytest.fail(f"Docker engine needed by this test is unreachable: {exc}")
