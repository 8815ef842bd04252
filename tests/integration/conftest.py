"""Fixtures of the Docker integration tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.integration.suite_helpers import REFERENCE_BASE, REFERENCE_HEAD

if TYPE_CHECKING:
    from docker.client import DockerClient


@pytest.fixture(scope="session")
def reference_images(docker_client: DockerClient) -> None:
    """The reference engine images must exist (`make reference` builds them; `make test` does first)."""
    import docker.errors

    missing: list[str] = []
    for ref in (REFERENCE_HEAD, REFERENCE_BASE):
        try:
            docker_client.images.get(ref)
        except docker.errors.ImageNotFound:
            missing.append(ref)
    if missing:
        pytest.fail(f"images {missing} are missing: run `make reference` (make test does) before these tests")
