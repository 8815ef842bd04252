"""Shared fixtures for the harness's own tests."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pytest

if TYPE_CHECKING:
    from docker.client import DockerClient

pytest_plugins = ["pytester"]


def pytest_configure(config: pytest.Config) -> None:
    """Import the report's numeric libraries before any test runs; take SIGINT back where it came in ignored.

    pytester's in-process runs (``runpytest_inprocess``) restore ``sys.modules`` afterwards, dropping what the inner
    run imported. A run that wrote a report imported pandas and numpy; numpy's C extension cannot load twice in one
    process, so every later import of numpy (pandas, torch) raised "cannot load module more than once per process":
    CI's one-process ``make test`` failed 118 tests after tests/plugin/test_bad_input_table.py. Modules imported
    before the snapshot stay (tests/unit/test_inprocess_modules.py)."""
    del config
    import numpy  # noqa: F401
    import pandas  # noqa: F401

    # A test command started in the background by a non-interactive shell (`cmd &`, nohup) inherits SIGINT ignored,
    # and an ignored signal stays ignored across exec: every suite the tests start would then ignore the SIGINT (the
    # user's Ctrl-C) that tests/integration/test_hardening.py and tests/plugin/test_non_runs.py send it. A handled
    # signal is reset to its default in the child, so the tests' own process takes Python's usual handler back.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class VsnapRefused(Protocol):
    """The ``vsnap_refused`` fixture's check (tests name it in their signatures, imported under ``TYPE_CHECKING``)."""

    def __call__(self, name: str, args: list[str], env: dict[str, str], fragment: str, *, revision: str) -> str: ...


@pytest.fixture(scope="session")
def docker_client() -> DockerClient:
    """A client for the real local Docker engine (the integration tests never fake it). Containers of test or
    suite processes that were SIGKILLed (their owner is gone) are removed before the first test that needs it."""
    from vsnap_qual.box import RuntimeFailure
    from vsnap_qual.runtimes import docker

    try:
        client = docker.connect()
    except RuntimeFailure as exc:
        pytest.fail(f"Docker engine needed by this test is unreachable: {exc}")
    docker.sweep(client)
    return client


@pytest.fixture
def vsnap_refused(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> VsnapRefused:
    """Run the plugin on a tiny suite with one bad input (``args``, exported ``env``) and check that it is refused
    as bad usage with one clear message holding ``fragment`` (no traceback, no git's own ``fatal:``)."""

    def refused(name: str, args: list[str], env: dict[str, str], fragment: str, *, revision: str) -> str:
        with monkeypatch.context() as m:
            for key, value in env.items():
                m.setenv(key, value)
            result = pytester.runpytest_subprocess(
                "-p",
                "vsnap_qual",
                "--vsnap-model=org/m",
                f"--vsnap-revision={revision}",
                f"--vsnap-report-dir={tmp_path / name}",
                *args,
            )
        text = result.stdout.str() + result.stderr.str()
        assert result.ret == pytest.ExitCode.USAGE_ERROR, f"{name}: exit {result.ret}\n{text[-2000:]}"
        assert fragment in text, f"{name}: message lacks {fragment!r}:\n{text[-2000:]}"
        assert "Traceback" not in text and "fatal:" not in text, f"{name}: not one clear message:\n{text[-2000:]}"
        return text

    return refused
