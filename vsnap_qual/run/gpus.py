"""Which GPUs each runner lane gets (``--vsnap-gpus``). The assignment is pure; the host's GPU list comes from
``nvidia-smi`` (:func:`host_gpus`).

xdist gives all lanes of one runner (head arm, then base arm) to one worker, and a lane's steps stop their engine
before the next starts, so the unit that needs a GPU of its own is the runner: under ``-n N`` up to
``min(N, runners)`` runner lanes hold an engine at the same time. Values:

- ``none``: no GPU for any lane.
- ``auto``: with GPUs, each runner lane its own GPU (runner *i* gets the *i*-th GPU, in turn when there are fewer
  GPUs than runners and the lanes run one after another); without GPUs, none; with GPUs it cannot list, every lane
  all GPUs as long as only one lane runs at a time.
- ``all``: every lane all GPUs; only when one runner lane runs at a time.
- GPU UUIDs (``GPU-…``, comma-separated): runner lanes take them in turn.

Two runner lanes that would run at once on the same GPU are refused before anything starts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence


class GpuError(ValueError):
    """The GPUs asked for cannot be given to the lanes; the message names the option and the fix."""


def parse_listing(csv: str) -> list[tuple[str, str]]:
    """``nvidia-smi --query-gpu=index,uuid --format=csv,noheader`` rows as (index, uuid)."""
    rows = []
    for line in csv.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].startswith("GPU-"):
            rows.append((parts[0], parts[1]))
    return rows


def restrict(listing: Sequence[tuple[str, str]], cuda_visible: str | None) -> list[str] | None:
    """The UUIDs of ``listing`` that ``CUDA_VISIBLE_DEVICES`` leaves visible (indices or UUIDs, as CUDA reads
    them; a batch scheduler's allocation), in its order. None when it names devices this cannot map (MIG)."""
    if cuda_visible is None:
        return [uuid for _, uuid in listing]
    chosen: list[str] = []
    for entry in (e.strip() for e in cuda_visible.split(",")):
        if not entry or entry.startswith("-"):
            break  # CUDA stops at the first invalid entry; "" and "-1" hide every GPU
        if entry.isdigit():
            found = [uuid for index, uuid in listing if index == entry]
        elif entry.startswith("GPU-"):
            found = [uuid for _, uuid in listing if uuid.startswith(entry)]
        else:
            return None
        if len(found) != 1:
            break
        chosen.append(found[0])
    return list(dict.fromkeys(chosen))


def host_gpus(env: Mapping[str, str] | None = None, honour_cuda_visible: bool = False) -> list[str] | None:
    """The UUIDs of this host's GPUs, from ``nvidia-smi`` (None when it is missing or fails). With
    ``honour_cuda_visible`` (the host runtime: lanes inherit this process's allocation) only those that
    ``CUDA_VISIBLE_DEVICES`` leaves visible."""
    env = os.environ if env is None else env
    smi = shutil.which("nvidia-smi", path=env.get("PATH"))
    if smi is None:
        return None
    try:
        done = subprocess.run(
            [smi, "--query-gpu=index,uuid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    listing = parse_listing(done.stdout)
    return restrict(listing, env.get("CUDA_VISIBLE_DEVICES")) if honour_cuda_visible else [u for _, u in listing]


def _concurrency(concurrent: int, runners: Sequence[str]) -> str:
    return f"-n {concurrent} runs {concurrent} runner lanes at once ({', '.join(runners[:concurrent])})"


FIX_SERIAL = "drop -n (lanes then run one after another), or qualify one runner at a time with --vsnap-runners"


def assign(
    requested: str,
    runners: Sequence[str],
    concurrent: int,
    present: bool,
    available: Sequence[str] | None,
) -> dict[str, str]:
    """Each runner's GPUs: ``none``, ``all`` or one GPU UUID.

    ``requested`` is ``--vsnap-gpus`` as parsed; ``concurrent`` how many runner lanes run at once; ``present``
    whether lanes can be given GPUs at all (Docker's NVIDIA runtime, the host's device nodes: the caller refuses
    explicit GPUs without it); ``available`` the GPUs found on the host, None when they could not be listed."""
    runners = list(runners)
    if requested == "none" or (requested == "auto" and not present):
        return dict.fromkeys(runners, "none")
    if requested == "all" or (requested == "auto" and available is None):
        if concurrent > 1:
            why = (
                "--vsnap-gpus=all gives every lane all GPUs"
                if requested == "all"
                else "--vsnap-gpus=auto cannot list this host's GPUs (nvidia-smi missing or failing), so every lane "
                "would get all GPUs"
            )
            raise GpuError(
                f"{why}, but {_concurrency(concurrent, runners)}: they would share a GPU. Name one GPU per runner "
                f"lane (--vsnap-gpus=GPU-<uuid>,GPU-<uuid>, from `nvidia-smi -L`), or {FIX_SERIAL}"
            )
        return dict.fromkeys(runners, "all")
    if requested == "auto":
        gpus = list(available or [])
        if not gpus:
            return dict.fromkeys(runners, "none")
        source = "this host has"
    else:
        gpus = requested.split(",")
        unknown = [g for g in gpus if available is not None and g not in available]
        if unknown:
            raise GpuError(
                f"--vsnap-gpus: {', '.join(unknown)} is not a GPU of this host (visible: "
                f"{', '.join(available or []) or 'none'}); copy the UUIDs from `nvidia-smi -L`"
            )
        source = f"--vsnap-gpus={requested} names"
    if concurrent > len(gpus):
        plural = "GPU" if len(gpus) == 1 else "GPUs"
        raise GpuError(
            f"{_concurrency(concurrent, runners)} but {source} {len(gpus)} {plural} ({', '.join(gpus)}): each runner "
            f"lane running at once needs a GPU of its own (snapshots of two engines on one GPU interfere). "
            f"{FIX_SERIAL[0].upper()}{FIX_SERIAL[1:]}" + ("" if requested == "auto" else ", or name more GPUs")
        )
    return {runner: gpus[i % len(gpus)] for i, runner in enumerate(runners)}


def describe(per_runner: Mapping[str, str]) -> str:
    """One line for the evidence and the terminal: ``v1: GPU-…, v2: GPU-…`` or the shared value."""
    values = set(per_runner.values())
    if len(values) == 1:
        return next(iter(values))
    return ", ".join(f"{runner}: {gpu}" for runner, gpu in per_runner.items())
