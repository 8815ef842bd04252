"""The suites ship inside the wheel (``vsnap_qual.suites``, source: the top-level ``suites/``), so a ``pip install``
user runs ``pytest --pyargs vsnap_qual.suites``: built with pip from this tree, installed into a fresh venv, where
an unrelated project's run is left alone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITE_FILES = {"__init__.py", "conftest.py", "test_lifecycle.py", "test_faults.py"}

# Preflight would look for vLLM, CRIU and root; the test is about what is collected, from where.
USER_CONFTEST = """
import json, os
from vsnap_qual.plugin import session as controller
from vsnap_qual.run.preflight_result import PreflightResult

controller.run_preflight = lambda qual, runtime: PreflightResult(gpus="none")

def pytest_collection_finish(session):
    with open(os.environ["VSNAP_TEST_DUMP"], "w") as out:
        json.dump(sorted({str(item.path) for item in session.items}), out)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for tree in ("vsnap_qual", "suites"):
        shutil.copytree(ROOT / tree, source / tree, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), "."],
        cwd=source, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (found,) = out.glob("vsnap_qual-*.whl")
    return found


def test_the_wheel_holds_the_suites_and_no_checkout_profile(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    suites = {n.removeprefix("vsnap_qual/suites/") for n in names if n.startswith("vsnap_qual/suites/")}
    assert suites == SUITE_FILES, sorted(suites)
    assert "vsnap_qual/py.typed" in names
    assert not [n for n in names if "profiles" in n or n.endswith("pytest.ini")]  # checkout-only
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Classifier: Framework :: Pytest" in metadata and "Requires-Dist: pytest>=8.2" in metadata
    assert "<9" not in metadata.split("Requires-Dist: pytest", 1)[1].splitlines()[0]  # no ceiling


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A fresh venv with the wheel installed: its python and its site-packages."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = Path(subprocess.check_output([str(python), "-c", where], text=True).strip())
    # the dependencies (pytest, xdist, docker, ...) from this venv, which adds no vsnap_qual of its own to the path
    (purelib / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python, purelib


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VSNAP_")) and k != "PYTHONPATH"}
    return {**env, **extra}


def test_a_fresh_install_leaves_an_unrelated_project_alone(installed: tuple[Path, Path], tmp_path: Path) -> None:
    python, purelib = installed
    project = tmp_path / "unrelated"
    project.mkdir()
    (project / "test_it.py").write_text(
        "import json, signal\n"
        "def test_it(request):\n"
        "    json.dump({'default': signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,\n"
        "               'plugin': request.config.pluginmanager.get_plugin('vsnap_qual').__file__},\n"
        "              open('observed.json', 'w'))\n"
    )
    done = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=project, capture_output=True, text=True,
        env=_clean_env(VSNAP_IMAGE="vllm/vllm-openai:nightly", VSNAP_REVISION="main"), timeout=300,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    observed = json.loads((project / "observed.json").read_text())
    assert Path(observed["plugin"]).is_relative_to(purelib), observed  # the installed copy, by its entry point
    assert observed["default"] and "vsnap" not in output.lower(), output[-3000:]


def test_a_pip_user_collects_the_installed_suites_with_pyargs(installed: tuple[Path, Path], tmp_path: Path) -> None:
    python, purelib = installed
    user = tmp_path / "user"
    user.mkdir()
    (user / "conftest.py").write_text(USER_CONFTEST)
    dump = tmp_path / "collected.json"
    env = _clean_env()
    done = subprocess.run(
        [str(python), "-m", "pytest", "--pyargs", "vsnap_qual.suites", "--co", "-q", "-p", "no:cacheprovider",
         "--vsnap-runtime=host", "--vsnap-model=org/m", f"--vsnap-revision={'0' * 40}", "--vsnap-runners=v1",
         f"--vsnap-host-root={tmp_path / 'lanes'}", f"--vsnap-report-dir={tmp_path / 'report'}"],
        cwd=user, env={**env, "VSNAP_TEST_DUMP": str(dump)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert dump.exists(), output[-3000:]
    paths = json.loads(dump.read_text())
    suites = purelib / "vsnap_qual" / "suites"
    assert {Path(p).name for p in paths} == {"test_lifecycle.py", "test_faults.py"}, paths
    assert all(Path(p).parent == suites for p in paths), paths
    assert "test_create[v1-head]" in done.stdout, output[-3000:]


def _package_dirs() -> set[str]:
    """Every directory under vsnap_qual/ Python could import as a package (data-only ones too)."""
    found = {"vsnap_qual"}
    for path in (ROOT / "vsnap_qual").rglob("*"):
        parts = path.relative_to(ROOT).parts
        if path.is_dir() and all(part.isidentifier() and part != "__pycache__" for part in parts):
            found.add(".".join(parts))
    return found


def test_every_package_directory_is_in_the_packages_configuration() -> None:
    if sys.version_info < (3, 11):  # tomllib; the harness's own venv is 3.11 (mypy reads at 3.10, the lowest)
        pytest.skip("reading pyproject.toml needs tomllib (Python 3.11 or later)")
    else:
        import tomllib

        configured = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
        assert configured == _package_dirs() | {"vsnap_qual.suites"}


def test_the_editable_install_make_install_runs_prints_no_build_warning(tmp_path: Path) -> None:
    """`make qualify`'s first command installs the harness editable: setuptools printed 92 lines of "Package would be
    ignored" for data directories missing from `packages`. Built here as pip builds it, with the Makefile's filter of
    setuptools' informational editable-install notice (and only that)."""
    import re

    notices = re.search(r'^PIP_NOTICES := PYTHONWARNINGS="([^"]*)"$', (ROOT / "Makefile").read_text(), re.M)
    assert notices is not None
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for tree in ("vsnap_qual", "suites"):
        shutil.copytree(ROOT / tree, source / tree, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "dist"
    out.mkdir()
    code = "import sys, setuptools.build_meta as b; b.build_editable(sys.argv[1])"
    done = subprocess.run(
        [sys.executable, "-c", code, str(out)], cwd=source, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONWARNINGS": notices.group(1)},
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "Warning" not in output and "would be ignored" not in output, output[-3000:]
