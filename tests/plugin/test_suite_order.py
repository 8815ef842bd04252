"""The suites run the lifecycle before the injected failures (collection order), so the first lifecycle answer
comes before a dozen faults (suites/conftest.py; the reference profile gives the suites a target)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_lifecycle_item_is_collected_before_any_fault_item(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "suites/",
            "@suites/profiles/reference.args",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--vsnap-report-dir={tmp_path / 'report'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    items = [line for line in done.stdout.splitlines() if "::" in line]
    assert done.returncode == 0 and items, done.stdout[-2000:] + done.stderr[-2000:]
    kinds = ["fault" if line.startswith("test_faults.py") else "lifecycle" for line in items]
    assert "fault" in kinds and "lifecycle" in kinds
    assert kinds == sorted(kinds, key=lambda k: k == "fault"), items


def _collect_suites(suites: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(suites),
            "@suites/profiles/reference.args",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--vsnap-report-dir={tmp_path / 'report'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_lifecycle_suite_out_of_the_procedures_order_is_an_error_naming_the_test(tmp_path: Path) -> None:
    """The lifecycle suite's test order is the procedure's (``procedure.LIFECYCLE``), held to it as it is collected:
    two tests swapped make the suite a collection error that names the one out of order, and nothing starts."""
    suites = tmp_path / "suites"
    shutil.copytree(ROOT / "suites", suites, ignore=shutil.ignore_patterns("__pycache__"))
    lifecycle = suites / "test_lifecycle.py"
    text = lifecycle.read_text()
    create, inspect = _test_block(text, "CREATE"), _test_block(text, "INSPECT")
    lifecycle.write_text(text.replace(create + inspect, inspect + create))  # inspect before create

    done = _collect_suites(suites, tmp_path)

    said = done.stdout + done.stderr
    assert done.returncode == 2 and "Interrupted: 1 error during collection" in said, said[-3000:]
    assert "usage error: test_lifecycle.py::TestLifecycle::test_create[v1-head] runs step 'create' after" in said
    assert "TestLifecycle::test_inspect[v1-head] ('inspect')" in said and "LIFECYCLE: ordinary, vs-head" in said
    assert not (tmp_path / "report").exists(), "nothing starts, nothing is written"
    lifecycle.write_text(text)  # in the table's order again: it collects
    assert _collect_suites(suites, tmp_path).returncode == 0


def _test_block(text: str, step: str) -> str:
    """The suite's test of ``procedure.<step>``: its mark, its definition and its body, up to the next test's mark."""
    start = text.index(f"    @pytest.mark.vsnap_step(procedure.{step})")
    return text[start : text.index("    @pytest.mark.vsnap_step(", start + 1)]
