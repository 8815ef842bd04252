"""The top-level conftest.py's jobs: the checkout's own test runs test this checkout's vsnap_qual, and a SIGTERM
there still runs the finalizers that remove what the tests started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _collect(env_path: str | None, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if env_path:
        env["PYTHONPATH"] = env_path
    # the pytest console script (not `python -m`): the checkout is not on sys.path by accident
    script = Path(sys.executable).with_name("pytest")
    return subprocess.run(
        [str(script), "--co", "-q", "-p", "no:cacheprovider", "tests/unit/test_checks.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_vsnap_qual_imported_from_elsewhere_stops_the_run_with_the_fix(tmp_path: Path) -> None:
    other = tmp_path / "vsnap_qual"
    other.mkdir()
    (other / "__init__.py").write_text('__version__ = "0.0.0-another-copy"\n')
    (other / "plugin.py").write_text("")
    done = _collect(str(tmp_path), tmp_path)
    text = done.stdout + done.stderr
    assert done.returncode == 4, text[-2000:]
    assert f"would test vsnap_qual from {other}, not this checkout" in text and "make install" in text


def test_this_checkout_collects(tmp_path: Path) -> None:
    done = _collect(None, tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]


def test_sigterm_is_an_interrupt_in_the_checkouts_own_runs() -> None:
    """This very session is one (rootdir: the checkout): its finalizers must run on SIGTERM."""
    handler = signal.getsignal(signal.SIGTERM)
    assert callable(handler) and getattr(handler, "__module__", "") == "conftest", handler
    try:
        handler(signal.SIGTERM, None)
    except KeyboardInterrupt as exc:
        assert "signal 15" in str(exc)
    else:
        raise AssertionError("the SIGTERM handler did not interrupt")
