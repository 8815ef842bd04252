"""Inactive means invisible: installed in an environment, vsnap-qual changes no other project's pytest run.

The plugin comes in through its pytest11 entry point (this venv has the package installed), exactly as in a user's
environment where vsnap-qual happens to be installed; ``VSNAP_*`` variables exported must change nothing there.
Active (the suites collected), the same variables are read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

UNRELATED_TEST = """
import json, signal

def test_reports_its_environment(request):
    handler = signal.getsignal(signal.SIGTERM)
    with open("observed.json", "w") as out:
        json.dump({
            "sigterm_default": handler == signal.SIG_DFL,
            "sigterm": repr(handler),
            "vsnap_loaded": request.config.pluginmanager.has_plugin("vsnap_qual"),
            "markers": [m for m in request.config.getini("markers") if "vsnap" in m or m.startswith("fault")],
        }, out)
"""

# exported as a CI job or a user's shell might; each would change (or stop) a run that read it
EXPORTED = {
    "VSNAP_IMAGE": "vllm/vllm-openai:nightly",
    "VSNAP_RUNTIME": "host",
    "VSNAP_DTYPE": "int8",  # a bad value: read, it is a usage error (exit 4)
    "VSNAP_REVISION": "main",
}


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VSNAP_")) and k != "PYTHONPATH"}
    return {**env, **extra}


def _pytest(cwd: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_an_unrelated_project_is_untouched_with_vsnap_variables_exported(tmp_path: Path) -> None:
    project = tmp_path / "unrelated"
    project.mkdir()
    (project / "test_unrelated.py").write_text(UNRELATED_TEST)
    done = _pytest(project, "-q", env=_clean_env(**EXPORTED))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    observed = json.loads((project / "observed.json").read_text())
    assert observed["vsnap_loaded"], "the entry point did not load the plugin: this test proves nothing"
    assert observed["sigterm_default"], f"SIGTERM disposition changed: {observed['sigterm']}"
    assert observed["markers"] == [], observed["markers"]
    assert "vsnap" not in output.lower(), output[-3000:]


def test_the_suites_collected_activate_it_and_then_the_environment_is_read(tmp_path: Path) -> None:
    """The other side of the rule: ``pytest suites/`` (no ini, no --vsnap-* option) is active, so the exported
    variables are read (a bad one is refused, naming where it came from) and a missing image is named."""
    base = ["-c", os.devnull, f"--rootdir={ROOT}", str(ROOT / "suites"), "--co", "-q"]
    bare = _pytest(tmp_path, *base, env=_clean_env())
    assert bare.returncode == 4, bare.stdout[-2000:] + bare.stderr[-2000:]
    assert "--vsnap-image" in bare.stderr, bare.stderr[-2000:]
    exported = _pytest(tmp_path, *base, env=_clean_env(**EXPORTED))
    assert exported.returncode == 4, exported.stdout[-2000:] + exported.stderr[-2000:]
    assert "(value from environment VSNAP_" in exported.stderr, exported.stderr[-2000:]
