"""The plugin's wiring, through pytester: registration, help, header, inactivity, exit code 5 handling."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from vsnap_qual import options

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).with_name("golden_help.txt")


def _vsnap_help(text: str) -> str:
    """The vsnap group of `pytest --help`, with the terminal's wrapping undone."""
    block = text.split("vsnap-qual: vLLM snapshot qualification:", 1)[1]
    block = block.split("\n\n", 1)[0]
    return " ".join(block.split())


def test_help_lists_every_option_as_the_golden_file_says(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    result = pytester.runpytest_subprocess("--help")
    text = _vsnap_help(result.stdout.str())
    for spec in options.OPTIONS:
        assert spec.cli in text and spec.env in text, spec.cli
    assert text == GOLDEN.read_text().strip(), (
        "the --help text changed; if intended, regenerate tests/plugin/golden_help.txt"
    )


def test_plugin_loads_with_autoload_disabled_and_can_be_disabled(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile("def test_ok():\n    pass\n")
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    loaded = pytester.runpytest_subprocess("-p", "vsnap_qual", "--co", "-q", "--vsnap-runners=v1")
    # loaded: the option is known and, given, activates the plugin, which then names what is missing
    assert loaded.ret == 4 and "--vsnap-image" in loaded.stderr.str(), loaded.stderr.str()
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    disabled = pytester.runpytest_subprocess("-p", "no:vsnap_qual", "--vsnap-runners=v1")
    assert disabled.ret == 4 and "unrecognized arguments: --vsnap-runners" in disabled.stderr.str()


def test_inactive_it_prints_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_ok():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:xdist")
    assert result.ret == 0
    shown = [line for line in result.stdout.lines + result.stderr.lines if "vsnap" in line.lower()]
    assert [line for line in shown if not line.startswith("plugins:")] == [], shown  # pytest's own plugin list


def test_a_suite_without_configuration_says_which_options_to_set(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_lane(vsnap_config):\n    pass\n")
    result = pytester.runpytest_subprocess()
    assert "pass --vsnap-image" in result.stdout.str()
    assert result.ret == 1


def test_missing_model_and_revision_are_named(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--vsnap-image=x:y")
    assert result.ret == 4
    assert "--vsnap-model, --vsnap-revision must be set" in result.stderr.str()


def test_run_pytest_script_turns_no_tests_into_a_failure(tmp_path: Path) -> None:
    (tmp_path / "test_none.py").write_text("# no tests here\n")
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "run-pytest.sh"), str(tmp_path), "-p", "no:cacheprovider"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 1 and "collected no tests" in done.stderr
