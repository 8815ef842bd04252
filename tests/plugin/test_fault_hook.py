"""A fault added from a conftest through the ``pytest_vsnap_add_faults`` hook (``docs/adding-a-fault.md``'s example, as
written there) becomes a step of every lane: collected as a suite test, required by the session's coverage. The
built-in table is not changed by it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from vsnap_qual.faults import BUILTIN_FAULTS

ROOT = Path(__file__).resolve().parents[2]
PREFLIGHT = """
from vsnap_qual.plugin import session as controller
from vsnap_qual.run.preflight_result import PreflightResult

controller.run_preflight = lambda qual, runtime: PreflightResult(gpus="none")


def pytest_collection_finish(session):  # --co writes nothing: the session record is read where it is kept
    import json
    from vsnap_qual.plugin import process_of

    print("VSNAP-SESSION " + json.dumps(process_of(session.config).session_record))
"""


def _doc_example() -> str:
    text = (ROOT / "docs" / "adding-a-fault.md").read_text()
    return text.split("```python\n", 1)[1].split("```", 1)[0]


def test_a_conftests_fault_is_collected_and_required_in_every_lane(tmp_path: Path) -> None:
    suites = tmp_path / "suites"
    suites.mkdir()
    for name in ("conftest.py", "test_faults.py", "__init__.py"):
        (suites / name).write_text((ROOT / "suites" / name).read_text())
    (suites / "conftest.py").write_text((suites / "conftest.py").read_text() + "\n" + _doc_example())
    (tmp_path / "preflight_stub.py").write_text(PREFLIGHT)
    report = tmp_path / "report"
    done = subprocess.run(
        [
            sys.executable, "-m", "pytest", str(suites), "--co", "-q", "-s", "-p", "preflight_stub",
            "-p", "no:cacheprovider",
            "--vsnap-runtime=host", f"--vsnap-python={sys.executable}", "--vsnap-model=org/m",
            "--vsnap-revision=" + "a" * 40, f"--vsnap-report-dir={report}", f"--vsnap-host-root={tmp_path / 'lanes'}",
        ],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])},
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    collected = [line for line in done.stdout.splitlines() if "::test_fault[" in line]
    assert any(line.endswith("[v1-head-lock-held]") for line in collected), output[-3000:]
    assert len([line for line in collected if line.endswith("-lock-held]")]) == 2  # both runners' head lanes
    assert len(collected) == 2 * (len(BUILTIN_FAULTS) + 1), "the built-in faults and the added one, per lane"
    session = next(
        json.loads(line.removeprefix("VSNAP-SESSION ")) for line in done.stdout.splitlines()
        if line.startswith("VSNAP-SESSION ")
    )  # fmt: skip
    assert not report.exists(), "--co wrote into the report directory"
    assert session["coverage"]["faults"][-1] == "lock-held"
    assert "v2/head/fault:lock-held" in session["coverage"]["required"]
