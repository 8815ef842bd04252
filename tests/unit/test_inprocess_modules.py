"""An in-process pytester run that imports the report's libraries leaves numpy importable for the tests after it.

pytester restores ``sys.modules`` after ``runpytest_inprocess``; numpy's C extension cannot load twice in a process.
tests/conftest.py imports numpy and pandas first, so the snapshot keeps them (CI's one-process ``make test`` once
failed 118 tests after the bad-input table's in-process runs)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_numpy_survives_an_in_process_run_that_imports_pandas(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_inner="def test_inner():\n    import pandas\n    assert pandas.DataFrame({'a': [1]}).shape == (1, 1)\n"
    )
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert "numpy" in sys.modules and "pandas" in sys.modules
    import numpy

    assert int(numpy.arange(3).sum()) == 3


def test_without_the_preload_the_second_import_fails() -> None:
    """The failure the preload prevents, shown in a fresh interpreter: numpy imported, dropped, imported again."""
    code = (
        "import sys\n"
        "import numpy\n"
        "for name in [m for m in sys.modules if m == 'numpy' or m.startswith('numpy.')]:\n"
        "    del sys.modules[name]\n"
        "try:\n"
        "    import numpy\n"
        "except ImportError as exc:\n"
        "    print('refused:', exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert "cannot load module more than once per process" in out.stdout
