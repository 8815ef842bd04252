"""--vsnap-runtime=host: which options go together, refused before anything starts (pure, no Docker)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from vsnap_qual import options
from vsnap_qual.config import QualConfig
from vsnap_qual.run.configure import build_config

BASE = ["--vsnap-model=vsnap/tiny-qwen3", "--vsnap-revision=" + "a" * 40]


def _config(tmp_path: Path, *argv: str) -> QualConfig:
    parsed = options.parse_standalone([*BASE, *argv], env={})
    return build_config(parsed, tmp_path)


def test_host_runtime_qualifies_a_python_and_needs_no_image(tmp_path: Path) -> None:
    base = tmp_path / "base" / "bin" / "python"  # another environment's Python (the same one would be refused)
    base.parent.mkdir(parents=True)
    base.symlink_to(sys.executable)
    config = _config(tmp_path, "--vsnap-runtime=host", f"--vsnap-base-python={base}")
    assert config.runtime == "host"
    assert config.image == str(Path(sys.executable).absolute()), "default: the harness's own Python"
    assert config.base_image == str(base)
    assert str(config.host_root) == "/var/tmp/vsnap-lanes"


def test_host_runtime_refuses_images(tmp_path: Path) -> None:
    with pytest.raises(pytest.UsageError, match="--vsnap-image cannot be used with --vsnap-runtime=host"):
        _config(tmp_path, "--vsnap-runtime=host", "--vsnap-image=vllm/vllm-openai:nightly")


def test_python_options_need_the_host_runtime(tmp_path: Path) -> None:
    with pytest.raises(pytest.UsageError, match="need --vsnap-runtime=host"):
        _config(tmp_path, "--vsnap-image=x", f"--vsnap-python={sys.executable}")


def test_bad_runtime_and_python_values_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(options.OptionError, match="'docker'.*'host'"):
        options.parse_standalone(["--vsnap-runtime=slurm"], env={})
    with pytest.raises(options.OptionError, match="not an executable file"):
        options.parse_standalone([f"--vsnap-python={tmp_path}"], env={})


def test_docker_stays_the_default(tmp_path: Path) -> None:
    config = _config(tmp_path, "--vsnap-image=vsnap-reference:head")
    assert config.runtime == "docker" and config.image == "vsnap-reference:head"


def test_the_host_lanes_holder_is_found_without_an_installed_harness() -> None:
    """The holder runs as ``python -m vsnap_qual.runtimes.host_holder`` under the lane's Python, which on a GPU host
    has no vsnap-qual installed (the tier runs the harness from a copy): its PYTHONPATH must hold this package. (The
    runtime moving into ``runtimes/`` once pointed it one directory too deep: every lane of the H200's tier failed
    to start, while CPU runs, whose Python has the harness installed, passed.)"""
    from pathlib import Path

    from vsnap_qual.runtimes.host import holder_pythonpath

    assert (Path(holder_pythonpath()) / "vsnap_qual" / "runtimes" / "host_holder.py").is_file()
