"""The decode-speed check on a busy machine: does the machine's slowdown (``vsnap_qual.engine.decode_speed``)
account for other work on the CPUs, and only for that?

One reference engine serves in a container; its fixed generation is timed (``decode_speed.measure``, the harness's
own code, with the Docker box's CPU sample) while 0..N busy processes run on the host beside it (the other work of
a shared CI machine), and while busy processes run inside the engine's own box (an engine that contends with
itself, e.g. a restored tree with a thread spinning that the ordinary engine did not have: no other work explains
that). Each set is judged against the first quiet set as the ordinary
one: measured slowdown, machine slowdown, judged slowdown. What it should show: other work raises the measured
slowdown and the machine's with it, so the judged one stays near 1; nothing else moves the machine's.

Run: ``python bench/decode_under_load.py [--rounds 2] [--hogs 0,1,2,3] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_reference import wait_health  # noqa: E402

from vsnap_qual.contract import VLLM_CANARY_PROMPT  # noqa: E402
from vsnap_qual.engine import client, decode_speed  # noqa: E402
from vsnap_qual.model import CpuSample, DecodeSpeed  # noqa: E402
from vsnap_qual.runtimes.procfs import parse_cpu_sample  # noqa: E402
from vsnap_qual.runtimes.shell import _CPU_SAMPLE  # noqa: E402

REVISION = "7f3a9c2e5b1d4086a2e4c6b8d0f1a3c5e7092b4d"
MODEL = "vsnap/tiny-qwen3"
IMAGE = "vsnap-reference:head"


def _hog(stop: Any) -> None:
    while not stop.is_set():
        for _ in range(100_000):
            pass


def _sample(name: str) -> CpuSample | None:
    out = subprocess.run(["docker", "exec", name, "sh", "-c", _CPU_SAMPLE], capture_output=True, text=True)
    return parse_cpu_sample(out.stdout) if out.returncode == 0 else None


def _serve(name: str, port: int) -> None:
    subprocess.run(
        ["docker", "run", "-d", "--rm", "--name", name, "--network=host", "--label", "ai.vsnap.test=bench-decode",
         "-e", "HF_HUB_OFFLINE=1", "-e", "VLLM_NO_USAGE_STATS=1", "--entrypoint", "vllm", IMAGE, "serve",
         MODEL, "--revision", REVISION, "--tokenizer-revision", REVISION, "--dtype", "float16",
         "--max-model-len", "512", "--host", "127.0.0.1", "--port", str(port)],
        check=True, capture_output=True,
    )  # fmt: skip
    wait_health(port)


def _measure(name: str, port: int, runs: int) -> DecodeSpeed:
    def generate() -> int:
        answer = client.completion(port, MODEL, VLLM_CANARY_PROMPT, max_tokens=decode_speed.TOKENS)
        return len(answer.token_ids)

    return decode_speed.measure(generate, runs, sample=lambda: _sample(name))


def _row(label: str, speed: DecodeSpeed, quiet: DecodeSpeed) -> dict[str, Any]:
    judged = decode_speed.judge(quiet, speed, 1.75)
    cpu: dict[str, Any] = dict(speed.get("cpu") or {})
    return {
        "set": label,
        "tps": speed["median_tps"],
        "stretch": cpu.get("stretch"),
        "others_load": cpu.get("others_load"),
        "measured": judged.get("measured_slowdown"),
        "machine": judged.get("machine_slowdown"),
        "judged": judged.get("slowdown"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--hogs", default="0,1,2,3", help="busy host processes per set, comma-separated")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per set (--vsnap-decode-runs)")
    parser.add_argument("--box-hogs", type=int, default=2, help="busy processes in the engine's own box")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    hogs = [int(x) for x in args.hogs.split(",")]
    rows: list[dict[str, Any]] = []
    name, port = f"vsnap-bench-decode-{os.getpid()}", 18431
    try:
        _serve(name, port)
        quiet = _measure(name, port, args.runs)
        rows.append(_row("quiet (the ordinary set)", quiet, quiet))
        for round_ in range(args.rounds):
            for count in hogs:
                stop = multiprocessing.Event()
                procs = [multiprocessing.Process(target=_hog, args=(stop,), daemon=True) for _ in range(count)]
                for proc in procs:
                    proc.start()
                time.sleep(0.5 if count else 0)
                try:
                    rows.append(
                        _row(f"round {round_ + 1}, {count} busy host processes", _measure(name, port, args.runs), quiet)
                    )
                finally:
                    stop.set()
                    for proc in procs:
                        proc.join(5)
        for round_ in range(args.rounds):
            spin = "echo $$ >> /tmp/box-hogs; while :; do :; done"
            for _ in range(args.box_hogs):
                subprocess.run(["docker", "exec", "-d", name, "sh", "-c", spin], check=True)
            time.sleep(0.5)
            try:
                label = f"round {round_ + 1}, {args.box_hogs} busy processes in the engine's box"
                rows.append(_row(label, _measure(name, port, args.runs), quiet))
            finally:
                subprocess.run(["docker", "exec", name, "sh", "-c", "kill $(cat /tmp/box-hogs); rm /tmp/box-hogs"])
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    print(f"{'set':58s} {'tok/s':>8s} {'stretch':>8s} {'others':>7s} {'measured':>9s} {'machine':>8s} {'judged':>7s}")
    for row in rows:
        print(
            f"{row['set']:58s} {row['tps']:8.1f} {row['stretch'] or 0:8.3f} {row['others_load'] or 0:7.2f} "
            f"{row['measured'] or 0:9.2f} {row['machine'] or 0:8.2f} {row['judged'] or 0:7.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
