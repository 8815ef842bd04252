"""The matrix's wall time over 1, 2, 4, 8 and 16 machines under the shard assignment (issue 46 item 6), from one
finished run's step times: each lane's seconds as measured, each shard's the sum of its lanes' (a shard runs its
lanes one after another), the matrix's the longest shard's (the critical path). It says where the matrix stops
scaling: one lane column (both arms of a runner travel together) is the floor.

Run: ``.venv/bin/python bench/shard_scaling.py RUN [--models M] [--machines 1,2,4,8,16] [--measured K=SECONDS ...]``
RUN is a ``results.json`` (``.gz`` too). ``--models M`` repeats the run's columns M times (the issue's 36-lane
matrix: 3 models × 2 runners × 2 arms × 3 variants from a run of 2 runners × 2 arms × 3+ variants), each model's
lane taking the measured lane's seconds: an extrapolation, said in the table. ``--variants V`` keeps the plain
columns and V-1 of the run's variants; where the run has fewer, the missing variant columns take the plain column's
lane seconds (also an extrapolation, said). ``--measured 1=634 --measured 2=402`` puts measured walls (a run of 1 and
of 2 shards on this machine) beside the computed ones.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

from vsnap_qual.run import shards


def load(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    return dict(json.loads(gzip.decompress(data) if path.suffix == ".gz" else data))


def lanes_of(
    results: dict[str, Any], models: int, variants: int | None
) -> tuple[list[tuple[str, str]], dict[str, float]]:
    """The matrix's lanes ((name, column)) and each lane's seconds: the run's, each column repeated per model."""
    seconds = shards.lane_seconds(results["steps"])
    columns = list(dict.fromkeys(str(r) for r in results["runners"]))
    copies: dict[str, str] = {}  # an extrapolated variant column → the plain column whose lane seconds it takes
    if variants is not None:
        kept = list(dict.fromkeys(c.split("+", 1)[1] for c in columns if "+" in c))[: max(0, variants - 1)]
        columns = [c for c in columns if "+" not in c or c.split("+", 1)[1] in kept]
        plain = [c for c in columns if "+" not in c]
        for extra in range(len(kept) + 2, variants + 1):
            copies.update({f"{runner}+x{extra}": runner for runner in plain})
        columns += list(copies)
    lanes: list[tuple[str, str]] = []
    times: dict[str, float] = {}
    for model in range(1, models + 1):
        for column in columns:
            runner, _, variant = copies.get(column, column).partition("+")
            for arm in results["arms"]:
                measured = f"{runner}-{arm}" + (f"-{variant}" if variant else "")
                if measured not in seconds:
                    continue
                own = f"{runner}-{arm}" + (f"-{column.partition('+')[2]}" if "+" in column else "")
                name = own if models == 1 else f"m{model}-{own}"
                lanes.append((name, column if models == 1 else f"m{model}/{column}"))
                times[name] = seconds[measured]
    return lanes, times


def extrapolated(lanes: list[tuple[str, str]], models: int) -> int:
    """How many of the lanes no run measured: a second or later model's, or a variant column the run lacked."""
    return sum(1 for name, column in lanes if (models > 1 and not name.startswith("m1-")) or "+x" in column)


def table(
    lanes: list[tuple[str, str]], times: dict[str, float], machines: list[int], measured: dict[int, float]
) -> str:
    total = sum(times.values())
    units = shards.units(lanes)
    floor = max(sum(times[lane] for lane in unit.lanes) for unit in units)
    rows = [
        "| machines | shards with lanes | longest shard (wall) | speed-up | efficiency | measured wall |",
        "|---|---|---|---|---|---|",
    ]
    for n in machines:
        plan = shards.plan(shards.ShardId(1, n, "bench"), lanes, times, "the run")
        wall = max(plan.loads.values())
        busy = sum(1 for load in plan.loads.values() if load > 0)
        seen = f"{measured[n] / 60:.1f} min" if n in measured else ""
        rows.append(f"| {n} | {busy} | {wall / 60:.1f} min | {total / wall:.2f}× | {total / wall / n:.0%} | {seen} |")
    stops = next((n for n in machines if n >= len(units)), None)
    rows.append("")
    rows.append(
        f"{len(lanes)} lanes in {len(units)} columns, {total / 60:.1f} min of lane time one after another; "
        f"the floor is the longest column, {floor / 60:.1f} min: the matrix stops scaling at {len(units)} machines"
        + (f" (from {stops} on, a machine more gains nothing)" if stops else "")
        + "."
    )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--models", type=int, default=1)
    parser.add_argument("--variants", type=int, default=None, help="columns per runner: plain + this many - 1")
    parser.add_argument("--machines", default="1,2,4,8,16")
    parser.add_argument("--measured", action="append", default=[], metavar="K=SECONDS")
    args = parser.parse_args(argv)
    results = load(args.run)
    lanes, times = lanes_of(results, args.models, args.variants)
    measured = {int(k): float(v) for k, v in (m.split("=", 1) for m in args.measured)}
    print(f"from the step times of {args.run} (run {results['run']['run_id']})")
    if args.models > 1:
        print(f"its columns repeated for {args.models} models, each lane the measured lane's seconds (extrapolated)")
    if any("+x" in column for _, column in lanes):
        print("variant columns the run lacks (+x<N>) take the plain column's lane seconds (extrapolated)")
    guessed = extrapolated(lanes, args.models)
    print(f"{len(lanes) - guessed} lanes measured, {guessed} extrapolated")
    print(table(lanes, times, [int(m) for m in args.machines.split(",")], measured))
    return 0


if __name__ == "__main__":
    sys.exit(main())
