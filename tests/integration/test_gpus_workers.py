"""`-n N` reaches the configuration preflight judges the GPUs by (QualConfig.workers, concurrent_runners),
through the real plugin and xdist (collect-only: preflight runs, no lane starts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.suite_helpers import REFERENCE_HEAD

#: a test of one lane's step (its lane is parametrized: what the GPU assignment reads)
SUITE = """
import pytest

@pytest.mark.vsnap_step("ordinary")
def test_uses_a_lane(vsnap_step):
    pass
"""
CONFTEST = """
def pytest_collection_finish(session):
    from vsnap_qual.plugin import process_of
    qual = process_of(session.config).qual
    print(f"VSNAP-WORKERS {qual.workers} CONCURRENT {qual.concurrent_runners}")
"""


@pytest.mark.parametrize(("xdist", "shown"), [([], "0 CONCURRENT 1"), (["-n", "2"], "2 CONCURRENT 2")])
def test_worker_count_reaches_the_gpu_assignment(
    pytester: pytest.Pytester, reference_images: None, tmp_path: Path, xdist: list[str], shown: str
) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess(
        "-p",
        "vsnap_qual",
        "-p",
        "xdist",
        *xdist,
        "--collect-only",
        "-s",
        f"--vsnap-image={REFERENCE_HEAD}",
        "--vsnap-model=vsnap/tiny-qwen3",  # the model the image holds (preflight asks it: issue 47)
        "--vsnap-revision=7f3a9c2e5b1d4086a2e4c6b8d0f1a3c5e7092b4d",
        "--vsnap-gpus=none",
        f"--vsnap-report-dir={tmp_path / 'r'}",
    )
    assert f"VSNAP-WORKERS {shown}" in result.stdout.str(), result.stdout.str()[-2000:] + result.stderr.str()
