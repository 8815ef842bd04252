"""A client of the tests' one-node Slurm cluster (scripts/slurm-up.sh): submit batch jobs, read the scheduler's
own job records, wait on them with a deadline, cancel what a test session submitted.

The job records come from ``scontrol show job``: without slurmdbd (this cluster has no accounting storage), ``sacct``
answers "Slurm accounting storage is disabled"; slurmctld keeps a finished job's record for MinJobAge (300 s).
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Job states from which a job does not move on (slurm.h's job_states, as scontrol names them).
TERMINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)
POLL_S = 0.2
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9/:]*)=(\S*)")


@dataclass(frozen=True)
class JobRecord:
    """One job, or one task of an array job, as slurmctld knows it (one line of ``scontrol show job -o``)."""

    fields: Mapping[str, str]

    @property
    def job_id(self) -> str:
        return self.fields["JobId"]

    @property
    def name(self) -> str:
        return self.fields.get("JobName", "")

    @property
    def array_task(self) -> str | None:
        """This record's task of an array job: one index ("2"), or a range of tasks not yet split ("1-3")."""
        return self.fields.get("ArrayTaskId")

    @property
    def state(self) -> str:
        return self.fields["JobState"]

    @property
    def reason(self) -> str:
        return self.fields.get("Reason", "")

    @property
    def exit_code(self) -> str:
        return self.fields.get("ExitCode", "")

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


def parse_records(text: str) -> list[JobRecord]:
    """The records of ``scontrol show job -o`` output, one a line."""
    return [JobRecord(dict(_FIELD.findall(line))) for line in text.splitlines() if line.strip()]


class SchedulerWaitError(AssertionError):
    """A wait on the scheduler ended without what it waited for: the deadline passed or a state showed it never
    would come. Holds the last records seen."""


@dataclass
class SlurmCluster:
    """What a test needs to use the cluster: the environment that reaches it (``SLURM_CONF``), the default partition,
    and the job name prefix of this test session (the fixture cancels every job carrying it at teardown)."""

    env: Mapping[str, str]
    partition: str
    job_prefix: str
    conf: Path
    submitted: list[str] = field(default_factory=list)

    def job_name(self, label: str) -> str:
        """A job name of this session: the fixture's teardown cancels jobs by this prefix."""
        return f"{self.job_prefix}{label}"

    def command(self, *args: str, check: bool = True, env: Mapping[str, str] | None = None) -> str:
        """Run a Slurm client command against this cluster; its stdout. A failure names the command and its stderr."""
        done = subprocess.run(
            list(args), env=dict(env or self.env), capture_output=True, text=True, timeout=60, check=False
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed (exit {done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def sbatch(
        self, script: Path, *options: str, label: str, workdir: Path, extra_env: Mapping[str, str] | None = None
    ) -> str:
        """Submit ``script`` as a batch job named for this session, its output files in ``workdir``; the job id."""
        env = {**self.env, **(extra_env or {})}
        out = self.command(
            "sbatch",
            "--parsable",
            f"--job-name={self.job_name(label)}",
            f"--partition={self.partition}",
            f"--chdir={workdir}",
            f"--output={workdir}/%x-%A_%a.out",
            *options,
            str(script),
            env=env,
        )
        job_id = out.strip().split(";")[0]
        assert job_id.isdigit(), f"sbatch answered {out!r}, not a job id"
        self.submitted.append(job_id)
        return job_id

    def records(self, job_id: str) -> list[JobRecord]:
        """The scheduler's records of a job (all tasks of an array job); none once slurmctld has forgotten it."""
        done = subprocess.run(
            ["scontrol", "show", "job", "-o", job_id],
            env=dict(self.env),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            if "Invalid job id" in done.stderr:
                return []
            raise AssertionError(f"scontrol show job {job_id} failed: {done.stderr.strip()}")
        return parse_records(done.stdout)

    def wait(
        self,
        job_id: str,
        what: str,
        reached: Callable[[Sequence[JobRecord]], bool],
        *,
        never: Callable[[Sequence[JobRecord]], str | None] = lambda records: None,
        timeout_s: float = 120.0,
    ) -> list[JobRecord]:
        """Poll the job's records until ``reached`` holds; fail at the deadline, or at once when ``never`` names a
        reason why it cannot come. The records that reached it."""
        deadline = time.monotonic() + timeout_s
        records: list[JobRecord] = []
        while True:
            records = self.records(job_id)
            if reached(records):
                return records
            why = never(records)
            if why is not None:
                raise SchedulerWaitError(f"job {job_id}: {what} will not happen: {why}\n{_describe(records)}")
            if time.monotonic() >= deadline:
                raise SchedulerWaitError(f"job {job_id}: not {what} within {timeout_s:.0f} s\n{_describe(records)}")
            time.sleep(POLL_S)

    def jobs_with_prefix(self, prefix: str) -> dict[str, str]:
        """Jobs in the queue (any state squeue shows) whose name starts with ``prefix``: job id → name."""
        out = self.command("squeue", "-h", "-o", "%F|%j")  # %F: the array job's id for each of its tasks
        found: dict[str, str] = {}
        for line in out.splitlines():
            job_id, _, name = line.partition("|")
            if name.startswith(prefix):
                found[job_id.strip()] = name
        return found

    def cancel_and_wait(self, job_ids: Sequence[str], timeout_s: float = 60.0) -> None:
        """scancel these jobs and wait until none is in the queue any more (COMPLETING included: their processes are
        gone only when slurmd has said so)."""
        if not job_ids:
            return
        self.command("scancel", *job_ids)
        deadline = time.monotonic() + timeout_s
        while True:
            queued = {line.strip() for line in self.command("squeue", "-h", "-o", "%F").splitlines()}
            left = sorted(set(job_ids) & queued)
            if not left:
                return
            if time.monotonic() >= deadline:
                raise SchedulerWaitError(f"jobs {left} still in the queue {timeout_s:.0f} s after scancel")
            time.sleep(POLL_S)


def _describe(records: Sequence[JobRecord]) -> str:
    if not records:
        return "  (no record: slurmctld does not know the job)"
    return "\n".join(
        f"  {r.job_id} task={r.array_task} state={r.state} reason={r.reason} exit={r.exit_code}" for r in records
    )
