"""The engine check (issue 47, ``vsnap_qual.run.engine_check``) run for real by a Python, as a runtime runs it in
the arm's own: the model an offline engine would load from its own Hugging Face cache, and the overlay compiled by
the Python that will import it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from vsnap_qual.run import engine_check
from vsnap_qual.run.preflight_result import PreflightError

REV = "a" * 40


def _ask(tmp_path: Path, model: str | None, files: Sequence[tuple[str, str]] = ()) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "XDG_"))}
    env["HF_HOME"] = str(tmp_path / "hf")
    done = subprocess.run(
        [sys.executable, "-c", engine_check.SCRIPT, engine_check.request(model, files)],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    return done.stdout


def _refusal(stdout: str, model: str | None) -> str:
    with pytest.raises(PreflightError) as caught:
        engine_check.refuse(stdout, option="--vsnap-image", engine="image x", model=model, revisions=(REV, REV))
    return str(caught.value)


def _snapshot(tmp_path: Path, revision: str) -> None:
    snap = tmp_path / "hf" / "hub" / "models--org--m" / "snapshots" / revision
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")


def test_a_model_the_cache_lacks_is_refused_naming_the_model_cache_option(tmp_path: Path) -> None:
    said = _refusal(_ask(tmp_path, "org/m"), "org/m")
    assert said.startswith("--vsnap-model: image x does not hold org/m in its Hugging Face cache"), said
    assert str(tmp_path / "hf" / "hub") in said and "--vsnap-model-cache=<HF_HOME>" in said


def test_another_revision_is_refused_naming_the_revisions_it_holds(tmp_path: Path) -> None:
    _snapshot(tmp_path, "b" * 40)
    said = _refusal(_ask(tmp_path, "org/m"), "org/m")
    assert said.startswith("--vsnap-revision: image x holds org/m") and f"cached: {'b' * 40}" in said, said


def test_the_model_at_its_revision_passes(tmp_path: Path) -> None:
    _snapshot(tmp_path, REV)
    engine_check.refuse(_ask(tmp_path, "org/m"), option="--vsnap-image", engine="e", model="org/m", revisions=(REV,))


def test_an_overlaid_file_is_compiled_by_the_python_that_runs_the_check(tmp_path: Path) -> None:
    bad, good = tmp_path / "bad.py", tmp_path / "good.py"
    bad.write_text("def serve(:\n    pass\n")
    good.write_text("x = 1\n")
    stdout = _ask(tmp_path, None, [(str(good), "vllm/good.py"), (str(bad), "vllm/snapshot/server.py")])
    said = _refusal(stdout, None)
    python = ".".join(map(str, sys.version_info[:3]))
    assert said.startswith(f"--vsnap-overlay: vllm/snapshot/server.py does not compile in the engine's own Python "
                           f"{python} (image x; line 1"), said  # fmt: skip
    assert "good.py" not in said and "fix it or leave it out of the overlay" in said
