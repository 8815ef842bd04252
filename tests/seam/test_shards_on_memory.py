"""Shards through the whole plugin (issue 46), on the in-memory runtime (``tests/seam/memory_runtime.py``): each
shard runs its share of the matrix's lanes and says so in its header, an empty shard says so and exits 0, a bad
shard value is one usage error before anything starts, and ``vsnap-qual merge`` of the shards gives the one-run
verdict, coverage and steps. (The same on the real Slurm cluster with Docker: ``tests/slurm``.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent
REVISION = "0123456789abcdef0123456789abcdef01234567"
SELECTION = ["-m", "not fault", "-k", "ordinary or agrees or create or inspect or restore_1"]


def _run(tmp_path: Path, name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "BUILDKITE_PARALLEL", "JOB_COMPL"))}
    return subprocess.run(
        [
            sys.executable, "-m", "pytest", str(ROOT / "suites"), "-p", "memory_runtime", "-p", "no:cacheprovider",
            "--vsnap-runtime=memory", "--vsnap-image=memory:head", "--vsnap-base-image=memory:base",
            "--vsnap-model=org/tiny", f"--vsnap-revision={REVISION}", "--vsnap-expect=base",
            "--vsnap-base-expect=base", "--vsnap-soak=0.5", "--vsnap-observe=1", "--vsnap-decode-runs=0",
            "--vsnap-cleanup-grace=1", f"--vsnap-report-dir={tmp_path / name}", *SELECTION, *args,
        ],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**clean, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]), **(env or {})},
    )  # fmt: skip


def _results(directory: Path) -> dict[str, Any]:
    return dict(json.loads((directory / "results.json").read_text()))


def test_shards_run_their_lanes_and_merge_into_the_one_run(tmp_path: Path) -> None:
    one = _run(tmp_path, "one")
    assert one.returncode == 0, (one.stdout + one.stderr)[-4000:]
    slurm = {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "1"}
    first = _run(tmp_path, "shard-1", "--vsnap-shard=1/3")
    second = _run(tmp_path, "shard-2", env={"BUILDKITE_PARALLEL_JOB": "1", "BUILDKITE_PARALLEL_JOB_COUNT": "3"})
    third = _run(tmp_path, "shard-3", env=slurm)
    for done in (first, second, third):
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "shard 1/3 (from --vsnap-shard): lanes v1-head, v1-base of 4" in first.stdout
    assert "shard 2/3 (from BUILDKITE_PARALLEL_JOB=1, BUILDKITE_PARALLEL_JOB_COUNT=3): lanes v2-head, v2-base" in (
        second.stdout
    )
    assert "shard 3/3 (from SLURM_ARRAY_TASK_ID=3, SLURM_ARRAY_TASK_COUNT=3, SLURM_ARRAY_TASK_MIN=1): lanes none" in (
        third.stdout
    )
    assert "holds no lane: nothing to run" in third.stdout
    shard_1 = _results(tmp_path / "shard-1")
    assert {s["lane"] for s in shard_1["steps"]} == {"v1-head", "v1-base"}
    assert shard_1["verdict"]["status"] == "pass"
    shard = shard_1["run"]["shard"]
    assert (shard["k"], shard["n"], shard["lanes"]) == (1, 3, ["v1-head", "v1-base"])
    assert shard["matrix_id"] == _results(tmp_path / "shard-2")["run"]["shard"]["matrix_id"]

    merged = subprocess.run(
        [sys.executable, "-m", "vsnap_qual.cli", "merge", *(str(tmp_path / f"shard-{k}") for k in (1, 2, 3)),
         "--out", str(tmp_path / "merged")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert merged.returncode == 0, merged.stdout + merged.stderr
    whole, together = _results(tmp_path / "one"), _results(tmp_path / "merged")
    assert together["verdict"]["headline"] == whole["verdict"]["headline"]
    assert together["verdict"]["coverage"]["required"] == whole["verdict"]["coverage"]["required"]
    for key in ("passed", "failed", "not_reached", "left_out"):
        assert sorted(together["verdict"]["coverage"][key]) == sorted(whole["verdict"]["coverage"][key]), key
    assert sorted((s["lane"], s["step"], s["outcome"]) for s in together["steps"]) == sorted(
        (s["lane"], s["step"], s["outcome"]) for s in whole["steps"]
    )
    assert [(c["id"], c["status"]) for c in together["verdict"]["checks"]] == [
        (c["id"], c["status"]) for c in whole["verdict"]["checks"]
    ]


def test_bad_shard_input_is_one_usage_error_before_anything_starts(tmp_path: Path) -> None:
    for args, env, said in (
        (["--vsnap-shard=4/3"], {}, "--vsnap-shard: '4/3': K counts from 1 to N"),
        (["--vsnap-shard=1/2"], {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "2"}, "disagrees with"),
    ):
        done = _run(tmp_path, "refused", *args, env=env)
        assert done.returncode == 4, done.stdout + done.stderr
        assert said in done.stderr, done.stderr
        assert not (tmp_path / "refused").exists()
