"""Every mutant of real vLLM applies to the overlay checkout's HEAD (``docker/vllm-cpu/mutants``): as the runner
applies it (``bench/mutate_vllm_cpu.mutant_checkout``: a fresh clone, the patch as one commit on top of HEAD, the
files ``git diff HEAD~1`` names exactly the manifest's), and each changed file still compiles. The checkout is
``make test-real``'s prerequisite (``build/vllm-overlay-0.32.0``, ``docker/vllm-cpu/overlay-checkout.sh``); without it
this fails, never skips. The rest of the mutants' rules need no checkout: ``tests/unit/test_mutants.py``."""

from __future__ import annotations

import py_compile
import subprocess
from pathlib import Path

import pytest

from bench.mutate_vllm_cpu import Mutant, load_manifest, mutant_checkout
from tests.real.realtier import REPO

MANIFEST = load_manifest()
OVERLAY = REPO / MANIFEST.overlay


@pytest.fixture(scope="module")
def overlay() -> Path:
    if not (OVERLAY / ".git").is_dir():
        pytest.fail(f"no overlay checkout at {OVERLAY}: bash docker/vllm-cpu/overlay-checkout.sh 0.32.0")
    status = subprocess.run(["git", "-C", str(OVERLAY), "status", "--porcelain"], capture_output=True, text=True)
    assert status.returncode == 0 and not status.stdout.strip(), f"{OVERLAY} is not clean: {status.stdout[:300]}"
    return OVERLAY


@pytest.mark.parametrize("mutant", MANIFEST.mutants, ids=lambda m: m.id)
def test_each_mutant_applies_to_the_checkouts_head_as_one_commit(mutant: Mutant, overlay: Path, tmp_path: Path) -> None:
    head = subprocess.run(["git", "-C", str(overlay), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    clone = mutant_checkout(overlay, mutant, tmp_path / "checkout")  # raises when it does not apply, or changes more
    parent = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD~1"], capture_output=True, text=True).stdout
    assert parent == head, "the mutant is one commit on top of the checkout's HEAD"
    for name in mutant.files:
        py_compile.compile(str(clone / name), cfile=str(tmp_path / "compiled.pyc"), doraise=True)
