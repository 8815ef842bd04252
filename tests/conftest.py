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


@pytest.fixture
def vsnap_refused(pytester, monkeypatch, tmp_path):
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
