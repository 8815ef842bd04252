"""Neutral defaults: `pytest suites/ --vsnap-image=X ...` for a real image inherits no reference-engine value.

The reference engine's settings live in a profile selected explicitly (`suites/profiles/reference.args`, passed
by `make qualify`), never in the suites' ini file.
"""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
from pathlib import Path

from vsnap_qual import options

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "suites" / "profiles" / "reference.args"

DUMP_PLUGIN = """
import json, os
import pytest
from vsnap_qual.plugin import process_of

@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    with open(os.environ["VSNAP_TEST_DUMP"], "w") as out:
        json.dump(process_of(session.config).qual.public_options(), out)
    pytest.exit("configuration dumped", returncode=0)
"""


def test_the_suites_ini_sets_no_vsnap_value() -> None:
    ini = configparser.ConfigParser()
    ini.read(ROOT / "suites" / "pytest.ini")
    section = ini["pytest"]
    assert [key for key in section if key.startswith("vsnap")] == []
    assert "--vsnap" not in section.get("addopts", "") and "@" not in section.get("addopts", "")


def _resolved(tmp_path: Path, *args: str) -> dict[str, object]:
    """The configuration the plugin builds for `pytest suites/ ARGS`, run from the checkout as the README says."""
    (tmp_path / "vsnap_dump_plugin.py").write_text(DUMP_PLUGIN)
    dump = tmp_path / "resolved.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VSNAP_"))}
    env.update(PYTHONPATH=str(tmp_path), VSNAP_TEST_DUMP=str(dump))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "suites/", "-p", "vsnap_dump_plugin", "-p", "no:cacheprovider",
         f"--vsnap-report-dir={tmp_path / 'report'}", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert dump.exists(), done.stdout[-2000:] + done.stderr[-2000:]
    return dict(json.loads(dump.read_text()))


def test_a_real_image_gets_the_documented_defaults(tmp_path: Path) -> None:
    resolved = _resolved(tmp_path, "--vsnap-image=vllm/vllm-openai:v0.33.0", "--vsnap-model=Qwen/Qwen3-0.6B",
                         f"--vsnap-revision={'c' * 40}")  # fmt: skip
    defaults = {spec.dest: spec.default for spec in options.OPTIONS}
    assert resolved["image"] == "vllm/vllm-openai:v0.33.0" and resolved["model"] == "Qwen/Qwen3-0.6B"
    assert resolved["fault_timeout"] == float(defaults["vsnap_fault_timeout"]) == 300
    assert resolved["privileges"] == defaults["vsnap_privileges"] == "privileged"
    assert resolved["dtype"] == defaults["vsnap_dtype"]
    assert resolved["max_model_len"] == int(defaults["vsnap_max_model_len"])


def test_the_reference_profile_is_selected_explicitly_and_can_be_overridden(tmp_path: Path) -> None:
    assert "--vsnap-image=vsnap-reference:head" in PROFILE.read_text().splitlines()
    resolved = _resolved(tmp_path, "@suites/profiles/reference.args", "--vsnap-privileges=privileged")
    assert resolved["image"] == "vsnap-reference:head" and resolved["model"] == "vsnap/tiny-qwen3"
    assert resolved["fault_timeout"] == 20
    assert resolved["privileges"] == "privileged"  # after the profile on the command line: overrides it


def test_make_qualify_selects_the_reference_profile() -> None:
    done = subprocess.run(["make", "-n", "qualify"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    pytest_lines = [line for line in done.stdout.splitlines() if " -m pytest suites/" in line]
    assert len(pytest_lines) == 1 and "@suites/profiles/reference.args" in pytest_lines[0], done.stdout[-2000:]
