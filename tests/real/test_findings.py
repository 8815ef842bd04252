"""Each upstream finding of docs/findings/ still reproduces against the real vLLM image: its reproduce.sh (plain
``docker run`` and vLLM's own CLI, no harness) exits 0. Exit 1 (it no longer reproduces: vLLM or the environment
changed, update the finding) and exit 2 (it could not run, e.g. the image is missing) both fail: the tier never passes
without having run real vLLM. Marked ``real`` by tests/real/conftest.py; serial, one container tree at a time."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.real.realtier import IMAGE

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "docs" / "findings").glob("*/reproduce.sh"))
#: on demand (`make findings`), not in `make test-real`: five real-vLLM create/restore cycles would take .ci/run past
#: its 90 minutes
pytestmark = pytest.mark.findings

#: the longest reproducer (03: an ordinary serve, a create, a restore) took about 7 minutes on 2 loaded cores
TIMEOUT_S = 1800


def test_there_are_reproducers() -> None:
    assert SCRIPTS, "docs/findings/ has no reproduce.sh"


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.parent.name for s in SCRIPTS])
def test_the_finding_reproduces(script: Path) -> None:
    image = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, text=True, check=False)
    if image.returncode:
        pytest.fail(f"image {IMAGE} is not built; run `make vllm-cpu` ({image.stderr.strip()[:200]})")
    env = dict(os.environ, VSNAP_FINDINGS_IMAGE=IMAGE)
    done = subprocess.run(
        ["bash", str(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    output = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, f"{script.parent.name}/reproduce.sh exited {done.returncode}:\n{output}"
    assert done.stdout.rstrip().splitlines()[-1].startswith("REPRODUCED:"), output
