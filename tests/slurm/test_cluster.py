"""The real Slurm cluster (scripts/slurm-up.sh, no fakes) does what vsnap-qual's Slurm jobs rely on: an array job's
tasks each see their index, the count and the lowest index; a job ``--dependency=afterany`` on the array runs only
once every task has ended, failed ones included; ``scancel`` of a running job leaves none of its processes."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tests.slurm.host_processes import with_environment_marker
from tests.slurm.slurm_cluster import JobRecord, SlurmCluster

pytestmark = pytest.mark.slurm


def _job_script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/bash\nset -eu\n" + body)
    return path


def _tasks(records: Sequence[JobRecord]) -> dict[str, JobRecord]:
    """An array job's records by task index, once split (a pending range such as "1-3" is not a task yet)."""
    return {r.array_task: r for r in records if r.array_task is not None and r.array_task.isdigit()}


def _all_tasks_ended(count: int) -> Callable[[Sequence[JobRecord]], bool]:
    def ended(records: Sequence[JobRecord]) -> bool:
        tasks = _tasks(records)
        return len(tasks) == count and all(r.terminal for r in tasks.values())

    return ended


# Each task writes its file whole (rename) as its last act, so a file seen means that task's work is done.
TASK_WRITES_ITS_FILE = """\
printf '%s %s %s\\n' "$SLURM_ARRAY_TASK_ID" "$SLURM_ARRAY_TASK_COUNT" "$SLURM_ARRAY_TASK_MIN" \\
  >"$OUT/.task-$SLURM_ARRAY_TASK_ID"
mv "$OUT/.task-$SLURM_ARRAY_TASK_ID" "$OUT/task-$SLURM_ARRAY_TASK_ID"
"""


def test_array_tasks_each_see_their_index_the_count_and_the_lowest_index(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """``sbatch --array=0-3``: four tasks run, each with SLURM_ARRAY_TASK_ID (its own), SLURM_ARRAY_TASK_COUNT (4)
    and SLURM_ARRAY_TASK_MIN (0), the variables a shard reads its K/N from."""
    out = tmp_path / "shared"
    out.mkdir()
    script = _job_script(tmp_path / "task.sh", TASK_WRITES_ITS_FILE)
    array_id = slurm_cluster.sbatch(script, "--array=0-3", label="array", workdir=tmp_path, extra_env={"OUT": str(out)})

    records = slurm_cluster.wait(array_id, "all 4 tasks ended", _all_tasks_ended(4))

    states = {index: r.state for index, r in _tasks(records).items()}
    assert states == dict.fromkeys(["0", "1", "2", "3"], "COMPLETED")
    seen = {path.name: path.read_text().split() for path in out.iterdir()}
    assert seen == {f"task-{i}": [str(i), "4", "0"] for i in range(4)}


def test_a_job_after_the_array_runs_once_every_task_has_ended_failed_ones_too(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """A merge-like job ``--dependency=afterany:<array>`` waits while tasks run (the scheduler holds it for its
    dependency, not for lack of CPUs), then runs although one task failed, and sees all four tasks' files."""
    out = tmp_path / "shared"
    out.mkdir()
    gate = tmp_path / "gate"
    # The tasks wait for the test's go (bounded: 120 s) so that the dependent job is looked at while they run.
    task = _job_script(
        tmp_path / "task.sh",
        f"""\
for _ in $(seq 1 1200); do [[ -e {gate} ]] && break; sleep 0.1; done
[[ -e {gate} ]] || exit 2
{TASK_WRITES_ITS_FILE}
[[ "$SLURM_ARRAY_TASK_ID" != 3 ]] || exit 3  # a failed shard: the merge must run all the same
""",
    )
    merge = _job_script(tmp_path / "merge.sh", f"ls {out} >{tmp_path}/merge-saw\n")
    array_id = slurm_cluster.sbatch(task, "--array=0-3", label="gated", workdir=tmp_path, extra_env={"OUT": str(out)})
    merge_id = slurm_cluster.sbatch(merge, f"--dependency=afterany:{array_id}", label="merge", workdir=tmp_path)

    slurm_cluster.wait(
        array_id, "a task running", lambda records: any(r.state == "RUNNING" for r in records), timeout_s=60
    )
    (held,) = slurm_cluster.records(merge_id)
    assert (held.state, held.reason) == ("PENDING", "Dependency"), f"while tasks run: {held.fields.get('Dependency')}"
    gate.touch()

    def never(records: Sequence[JobRecord]) -> str | None:
        return (
            "its dependency can never be satisfied"
            if any(r.reason == "DependencyNeverSatisfied" for r in records)
            else None
        )

    (merged,) = slurm_cluster.wait(merge_id, "ended", lambda records: all(r.terminal for r in records), never=never)
    tasks = _tasks(slurm_cluster.records(array_id))
    assert {i: r.state for i, r in tasks.items()} == {
        "0": "COMPLETED",
        "1": "COMPLETED",
        "2": "COMPLETED",
        "3": "FAILED",
    }
    assert merged.state == "COMPLETED", merged.fields
    assert (tmp_path / "merge-saw").read_text().split() == [f"task-{i}" for i in range(4)]
    # The scheduler's own clock agrees (whole seconds): the merge started when the last task had ended.
    last_end = max(r.fields["EndTime"] for r in tasks.values())
    assert merged.fields["StartTime"] >= last_end, (merged.fields["StartTime"], last_end)


def test_scancel_of_a_running_job_leaves_none_of_its_processes(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """A running job (a shell and its child) is scancel'ed: the scheduler records it CANCELLED (``scontrol show
    job``; ``sacct`` needs slurmdbd, which this cluster has not) and once it is no longer completing, no process with
    the job's marker in its environment is left on the host."""
    marker = f"VSNAP_SLURM_TEST_MARKER={uuid.uuid4().hex}"
    script = _job_script(tmp_path / "long.sh", "sleep 600 &\nwait\n")
    key, value = marker.split("=", 1)
    job_id = slurm_cluster.sbatch(script, label="long", workdir=tmp_path, extra_env={key: value})

    slurm_cluster.wait(job_id, "running", lambda records: [r.state for r in records] == ["RUNNING"], timeout_s=60)
    # The scheduler says RUNNING a moment before slurmstepd has forked the script: wait for both of its processes.
    slurm_cluster.wait(
        job_id,
        "running its shell and child",
        lambda records: len(with_environment_marker(marker)) >= 2,
        never=lambda records: None if [r.state for r in records] == ["RUNNING"] else "it left RUNNING",
        timeout_s=60,
    )

    slurm_cluster.command("scancel", job_id)
    (cancelled,) = slurm_cluster.wait(job_id, "CANCELLED", lambda records: [r.state for r in records] == ["CANCELLED"])

    assert cancelled.state == "CANCELLED"
    left = with_environment_marker(marker)
    assert not left, "processes of the cancelled job are left:\n" + "\n".join(map(str, left))
