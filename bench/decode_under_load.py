"""The decode-speed check on a busy machine: does the machine's slowdown (``vsnap_qual.engine.decode_speed``)
account for other work on the machine, and only for that?

One reference engine serves in a container; its fixed generation is timed (``decode_speed.measure``, the harness's
own code, with the Docker box's CPU sample and the calibration timed in the box) while co-tenants run beside it:
0..N busy processes on the host (the other work of a shared CI machine), a container that compresses random data
to its disk (CPU, memory bus and writes in another cgroup, the shape of a ``docker build`` installing packages),
and busy processes inside the engine's own box (an engine that contends with itself, e.g. a restored tree with a
thread spinning that the ordinary engine did not have: no other work explains that). Each set is judged against
the first quiet set of the clean engine as the ordinary one: measured slowdown, the two estimates of the machine's
(run queue, calibration), the machine's, the judged slowdown. With ``--slow`` the same sets are timed again on the
engine of ``tests/broken``'s ``decodes-slowly-after-wake`` variant with its slowdown always on (each decode step
sleeps twice its time: 3x slower), which must stay over the tolerance on a quiet machine and a loaded one.

What it should show: other work raises the measured slowdown and the machine's with it, so the clean engine's
judged one stays near 1 and the slow engine's near 3; the engine's own spinning moves neither estimate.

Run: ``python bench/decode_under_load.py [--rounds 1] [--hogs 0,2] [--slow] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
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
#: the marker of tests/broken's injected lines (tests/broken/variants.py)
MARK = "# vsnap-qual broken variant"


def _hog(stop: Any) -> None:
    while not stop.is_set():
        for _ in range(100_000):
            pass


def _sample(name: str) -> CpuSample | None:
    out = subprocess.run(["docker", "exec", name, "sh", "-c", _CPU_SAMPLE], capture_output=True, text=True)
    return parse_cpu_sample(out.stdout) if out.returncode == 0 else None


#: the engine core's module in the image, and the decode step that tests/broken's decodes-slowly-after-wake slows
CORE = "/usr/local/lib/python3.13/dist-packages/vllm/v1/engine/core.py"
STEP = "            logits = self._pass(ids, lora_name, planned if step == 0 else None, prompt)\n"


def _slow_core(into: Path) -> Path:
    """The image's engine core with the slow variant's decode step, always slow (no wake-up in this bench)."""
    source = subprocess.run(["docker", "run", "--rm", "--entrypoint", "cat", IMAGE, CORE],
                            check=True, capture_output=True, text=True).stdout  # fmt: skip
    assert source.count(STEP) == 1, "the engine core's decode step changed: update bench/decode_under_load.py"
    slowed = (
        f"            _t0 = __import__('time').perf_counter()  {MARK}\n{STEP}"
        "            __import__('time').sleep(2 * (__import__('time').perf_counter() - _t0))\n"
    )
    into.write_text(source.replace(STEP, slowed))
    return into


def _serve(name: str, port: int, core: Path | None = None) -> None:
    mount = ["-v", f"{core}:{CORE}:ro"] if core is not None else []
    subprocess.run(
        ["docker", "run", "-d", "--rm", "--name", name, "--network=host", "--label", "ai.vsnap.test=bench-decode",
         *mount,
         "-e", "HF_HUB_OFFLINE=1", "-e", "VLLM_NO_USAGE_STATS=1", "--entrypoint", "vllm", IMAGE, "serve",
         MODEL, "--revision", REVISION, "--tokenizer-revision", REVISION, "--dtype", "float16",
         "--max-model-len", "512", "--host", "127.0.0.1", "--port", str(port)],
        check=True, capture_output=True,
    )  # fmt: skip
    wait_health(port)


def _calibrate(name: str) -> tuple[float, float, float] | None:
    out = subprocess.run(["docker", "exec", name, "sh", "-c", decode_speed.CALIBRATION], capture_output=True, text=True)
    return decode_speed.parse_calibration(out.stdout)


def _measure(name: str, port: int, runs: int) -> DecodeSpeed:
    def generate() -> int:
        answer = client.completion(port, MODEL, VLLM_CANARY_PROMPT, max_tokens=decode_speed.TOKENS)
        return len(answer.token_ids)

    return decode_speed.measure(generate, runs, sample=lambda: _sample(name), calibrate=lambda: _calibrate(name))


class CoTenant:
    """Work beside the engine for one set: ``count`` busy host processes, or a container compressing random data
    to its disk (``container``), or ``count`` busy processes in the engine's own box (``box``)."""

    def __init__(self, kind: str, count: int, box: str) -> None:
        self.kind, self.count, self.box = kind, count, box
        self.stop = multiprocessing.Event()
        self.procs: list[multiprocessing.Process] = []
        self.name = f"{box}-cotenant"

    def __enter__(self) -> CoTenant:
        if self.kind == "host":
            self.procs = [
                multiprocessing.Process(target=_hog, args=(self.stop,), daemon=True) for _ in range(self.count)
            ]
            for proc in self.procs:
                proc.start()
        elif self.kind == "container":
            work = "while :; do head -c 64M /dev/urandom | gzip -6 > /tmp/x.gz; sync; done"
            for n in range(self.count):
                subprocess.run(["docker", "run", "-d", "--rm", "--name", f"{self.name}-{n}", "--label",
                                "ai.vsnap.test=bench-decode", "--entrypoint", "sh", IMAGE, "-c", work],
                               check=True, capture_output=True)  # fmt: skip
        elif self.kind == "box":
            spin = "echo $$ >> /tmp/box-hogs; while :; do :; done"
            for _ in range(self.count):
                subprocess.run(["docker", "exec", "-d", self.box, "sh", "-c", spin], check=True)
        time.sleep(1.0 if self.count else 0)
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for proc in self.procs:
            proc.join(5)
        if self.kind == "container":
            for n in range(self.count):
                subprocess.run(["docker", "rm", "-f", f"{self.name}-{n}"], capture_output=True)
        elif self.kind == "box":
            subprocess.run(["docker", "exec", self.box, "sh", "-c", "kill $(cat /tmp/box-hogs); rm /tmp/box-hogs"])


def _row(label: str, speed: DecodeSpeed, quiet: DecodeSpeed) -> dict[str, Any]:
    judged = decode_speed.judge(quiet, speed, 1.75)
    cpu: dict[str, Any] = dict(speed.get("cpu") or {})
    calibration: dict[str, Any] = dict(speed.get("calibration") or {})
    return {
        "set": label,
        "loadavg": os.getloadavg()[0],
        "tps": speed["median_tps"],
        "stretch": cpu.get("stretch"),
        "others_load": cpu.get("others_load"),
        "cpu_ms_per_token": round(1000 * (decode_speed.cpu_per_token(speed) or 0), 3),
        "calibration_s": calibration.get("median_s"),
        "calibration_ran_s": calibration.get("ran_s"),
        "calibration_wait_s": calibration.get("wait_s"),
        "measured": judged.get("measured_slowdown"),
        "queued": decode_speed.queued_slowdown(quiet, speed),
        "calibrated": judged.get("calibrated_slowdown"),
        "machine": judged.get("machine_slowdown"),
        "judged": judged.get("slowdown"),
        "ok": judged.get("ok"),
        "speed": speed,
    }


def _sets(args: argparse.Namespace, engine: str) -> list[tuple[str, str, int]]:
    """(label, co-tenant kind, count) of the sets timed on one engine."""
    sets = [(f"{engine}, quiet", "host", 0)]
    for round_ in range(args.rounds):
        sets += [(f"{engine}, round {round_ + 1}, {n} busy host processes", "host", n) for n in args.hogs if n]
        sets += [(f"{engine}, round {round_ + 1}, a container compressing to disk", "container", 1)]
        if engine == "clean" and args.box_hogs:
            sets += [(f"{engine}, round {round_ + 1}, {args.box_hogs} busy processes in the engine's box", "box",
                      args.box_hogs)]  # fmt: skip
    return sets


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--hogs", default="0,2", help="busy host processes per set, comma-separated")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per set (--vsnap-decode-runs)")
    parser.add_argument("--box-hogs", type=int, default=2, help="busy processes in the engine's own box")
    parser.add_argument("--slow", action="store_true", help="time the slow variant's engine too")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout's TERM still removes the containers
    args.hogs = [int(x) for x in args.hogs.split(",")]
    rows: list[dict[str, Any]] = []
    quiet: DecodeSpeed | None = None
    engines = [("clean", None)] + (
        [("slow", Path(f"/tmp/vsnap-bench-slow-core-{os.getpid()}.py"))] if args.slow else []
    )
    for engine, core in engines:
        name, port = f"vsnap-bench-decode-{engine}-{os.getpid()}", 18431
        try:
            _serve(name, port, _slow_core(core) if core is not None else None)
            for label, kind, count in _sets(args, engine):
                with CoTenant(kind, count, name):
                    speed = _measure(name, port, args.runs)
                quiet = quiet or speed  # the clean engine's quiet set: the ordinary one
                rows.append(_row(label, speed, quiet))
                print(f"{label}: {rows[-1]['judged']}", flush=True)
        finally:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True)
            if core is not None:
                core.unlink(missing_ok=True)
    head = f"{'set':62s} {'load1':>5s} {'tok/s':>7s} {'stretch':>7s} {'others':>6s} {'ms/t':>5s} {'cal s':>6s}"
    print(head + f" {'meas.':>6s} {'queue':>6s} {'calib':>6s} {'mach.':>6s} {'judged':>6s} {'ok':>5s}")
    for row in rows:
        print(
            f"{row['set']:62s} {row['loadavg']:5.1f} {row['tps']:7.1f} {row['stretch'] or 0:7.3f} "
            f"{row['others_load'] or 0:6.2f} {row['cpu_ms_per_token']:5.1f} {row['calibration_s'] or 0:6.3f} "
            f"{row['measured'] or 0:6.2f} {row['queued'] or 0:6.2f} {row['calibrated'] or 0:6.2f} "
            f"{row['machine'] or 0:6.2f} {row['judged'] or 0:6.2f} {row['ok']!s:>5s}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
