"""``vsnap-qual doctor --help`` lists the options the doctor takes (the pytest plugin's, each with its variable and
default), and the options given reach the doctor's checks as given."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vsnap_qual import cli, options
from vsnap_qual.cli import doctor


def test_doctor_help_lists_every_option_with_its_variable() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "vsnap_qual.cli", "doctor", "--help"], capture_output=True, text=True, timeout=60,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    for spec in options.OPTIONS:
        assert f"{spec.cli}" in text and f"[env {spec.env}; default: {spec.default or 'unset'}]" in text, spec.cli
    assert "docs/options.md" not in text, "the wheel ships no docs/: the help must stand alone"


def test_the_options_given_reach_the_doctor_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def main(argv: list[str]) -> int:
        seen.append(argv)
        return 0

    monkeypatch.setattr(doctor, "main", main)
    assert cli.main(["doctor", "--vsnap-image=img:1", "--vsnap-cpu-smoke", "--vsnap-runners", "v1", "--bogus"]) == 0
    assert sorted(seen[0]) == sorted(["--vsnap-image=img:1", "--vsnap-cpu-smoke", "--vsnap-runners=v1", "--bogus"])


def test_an_off_switch_reaches_the_doctor_as_the_off_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--no-vsnap-cpu-smoke`` is passed on as itself (not as ``--vsnap-cpu-smoke``), and beats the variable."""
    seen: list[list[str]] = []

    def main(argv: list[str]) -> int:
        seen.append(argv)
        return 0

    monkeypatch.setattr(doctor, "main", main)
    assert cli.main(["doctor", "--vsnap-image=img:1", "--no-vsnap-cpu-smoke"]) == 0
    assert sorted(seen[0]) == ["--no-vsnap-cpu-smoke", "--vsnap-image=img:1"]
    parsed = options.parse_standalone(seen[0], env={"VSNAP_CPU_SMOKE": "1"})
    assert parsed["vsnap_cpu_smoke"] is False
    done = subprocess.run(
        [sys.executable, "-m", "vsnap_qual.cli", "doctor", "--help"], capture_output=True, text=True, timeout=60,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert "--no-vsnap-cpu-smoke turn --vsnap-cpu-smoke off" in " ".join(done.stdout.split())
