"""Is the thread binding a restore loses what makes a restored real vLLM engine decode slower?
(``docs/real-vllm-differences.md`` §8.)

vLLM's CPU backend binds its worker process to its OpenMP cores (on a 2-CPU box: ``core ids=[0]``, every thread of
``VLLM::Worker`` on CPU 0, the other CPU left to the API server and the engine core); after ``vllm snapshot
restore`` every thread may run on every CPU (CRIU's images carry no CPU mask). This experiment swaps the binding
and nothing else: real vLLM's CPU build in a lane-like container (``vsnap-vllm-cpu:VERSION``, every capability
but SYS_RESOURCE, host PID namespace, private IPC, the CPU smoke platform and vsnap-qual's probe on
``PYTHONPATH`` as a smoke-mode lane has them), one ordinary ``vllm serve`` and ``--restores`` restores of one
``vllm snapshot create`` (the whole restored tree SIGKILLed between them). Each engine is timed in two states,
alternating, ``--rounds`` times each, by the harness's own decode-speed measure (``decode_speed.measure``: the fixed
greedy generation, one warm-up and ``--runs`` timed runs, the box's CPU sample around them):

- ``bound``: the worker process's threads on the CPUs the ordinary worker had when it started;
- ``free``: the worker's threads on every CPU of the box, as a restore leaves them.

The ordinary engine starts bound, the restored ones start free (``taskset -a -cp`` moves every thread of the
worker). If the lost binding is the cause, the restored engine bound decodes near the ordinary engine bound, and
the ordinary engine free is the slower one. If not, the restored engine is slower in both states.

Run (the image built by ``make vllm-cpu``; about 15 minutes on 2 cores):
``python bench/affinity_after_restore.py [--version 0.32.0] [--rounds 3] [--restores 2] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_reference import all_caps_flags, docker, free_port, wait_health  # noqa: E402
from decode_under_load import _sample as box_sample  # noqa: E402

from vsnap_qual.contract import VLLM_CANARY_PROMPT  # noqa: E402
from vsnap_qual.engine import client, decode_speed  # noqa: E402
from vsnap_qual.model import DecodeSpeed  # noqa: E402

MODEL = "vsnap/tiny-qwen3"
REVISION = "b04193068dc9e2d037b36de7fec6ef00cdea53c5"
ENGINE = f"{MODEL} --revision {REVISION} --tokenizer-revision {REVISION} --dtype float32 --max-model-len 512"
ARTIFACT = "/vsnap/work/snap"
#: the worker's threads (one line per process of the box: PID, command line head, each thread's allowed CPUs)
_WORKER = (
    'me=$(cat /proc/self/cgroup); for d in /proc/[0-9]*; do [ "$(cat $d/cgroup 2>/dev/null)" = "$me" ] || continue; '
    'case "$(tr "\\0" " " < $d/cmdline 2>/dev/null)" in VLLM::Worker*) '
    'echo "${d##*/} $(grep Cpus_allowed_list $d/status | cut -f2)";; esac; done'
)


def xs(box: str, script: str, timeout: float = 900) -> str:
    done = subprocess.run(["docker", "exec", box, "sh", "-c", script], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{script[:120]!r} exited {done.returncode}: {(done.stdout + done.stderr)[-800:]}")
    return done.stdout


def worker(box: str) -> tuple[int, str]:
    """The engine's worker process and the CPUs its main thread may run on."""
    lines = [line.split() for line in xs(box, _WORKER).splitlines() if line.strip()]
    if len(lines) != 1:
        raise RuntimeError(f"expected one VLLM::Worker in {box}, found {lines}")
    return int(lines[0][0]), lines[0][1]


def move(box: str, pid: int, cpus: str) -> None:
    """Every thread of ``pid`` onto ``cpus``; fails unless each thread then has exactly that mask."""
    xs(box, f"taskset -a -cp {cpus} {pid} >/dev/null")
    masks = set(xs(box, f"for t in /proc/{pid}/task/*; do grep Cpus_allowed_list $t/status | cut -f2; done").split())
    if masks != {cpus}:
        raise RuntimeError(f"worker {pid}'s threads are on {masks} after taskset -a -cp {cpus}")


def timed(box: str, port: int, model: str, runs: int) -> DecodeSpeed:
    def generate() -> int:
        return len(client.completion(port, model, VLLM_CANARY_PROMPT, max_tokens=decode_speed.TOKENS).token_ids)

    return decode_speed.measure(generate, runs, sample=lambda: box_sample(box))


def row(which: str, state: str, speed: DecodeSpeed) -> dict[str, Any]:
    cpu: dict[str, Any] = dict(speed.get("cpu") or {})
    tokens = speed["tokens"] * len(speed["runs_tps"]) * speed.get("generations_per_run", 1)
    return {
        "engine": which,
        "state": state,
        "tps": speed["median_tps"],
        "engine_cpu_s_per_1k_tokens": round(1000 * cpu["engine_cpu_s"] / tokens, 3) if cpu else None,
        "stretch": cpu.get("stretch"),
        "others_load": cpu.get("others_load"),
        "allowed": decode_speed.affinity(speed),
        "speed": speed,
    }


def alternate(
    box: str, port: int, model: str, which: str, start: str, cpus: dict[str, str], args: Any
) -> list[dict[str, Any]]:
    """``args.rounds`` sets in each state, starting in ``start`` (the state the engine is in), alternating."""
    pid, _ = worker(box)
    other = "free" if start == "bound" else "bound"
    rows: list[dict[str, Any]] = []
    for _ in range(args.rounds):
        for state in (start, other):
            move(box, pid, cpus[state])
            rows.append(row(which, state, timed(box, port, model, args.runs)))
            print(f"{which:12s} {state:6s} {rows[-1]['tps']:8.1f} tok/s", file=sys.stderr, flush=True)
    return rows


def served_model(port: int) -> str:
    import requests

    return str(requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=30).json()["data"][0]["id"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="0.32.0", help="vsnap-vllm-cpu image tag")
    parser.add_argument("--rounds", type=int, default=3, help="sets per state and engine")
    parser.add_argument("--restores", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5, help="timed runs per set (--vsnap-decode-runs)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    box = f"vsnap-bench-affinity-{os.getpid()}"
    flags = [flag for flag in all_caps_flags() if flag != "--ipc=host"] + ["--ipc=private", "--shm-size=2g"]
    rows: list[dict[str, Any]] = []
    facts: dict[str, Any] = {"image": f"vsnap-vllm-cpu:{args.version}", "started": time.strftime("%FT%TZ")}
    facts["image_id"] = docker("image", "inspect", "--format", "{{.Id}}", facts["image"]).strip()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    facts["harness"] = head.stdout.strip() or None
    docker(
        "run", "-d", "--name", box, "--label", "ai.vsnap.test=bench-affinity", *flags, "--init", "--user", "0",
        "-v", f"{ROOT}/vsnap_qual/probe:/vsnap/probe:ro", "-v", f"{ROOT}/vsnap_qual/smoke:/vsnap/smoke:ro",
        "-e", "VLLM_USE_V2_MODEL_RUNNER=0", "-e", "VLLM_SERVER_DEV_MODE=1", "-e", "HF_HUB_OFFLINE=1",
        "-e", "VLLM_NO_USAGE_STATS=1", "-e", "PYTHONPATH=/vsnap/probe:/vsnap/smoke",
        "--entrypoint", "sleep", facts["image"], "infinity",
    )  # fmt: skip
    try:
        xs(box, "mkdir -p -m 0700 /vsnap/work")
        everything = xs(box, "grep Cpus_allowed_list /proc/self/status | cut -f2").strip()
        port = free_port()
        serve = (
            f"echo $$ > /tmp/serve.pid; exec vllm serve {ENGINE} --host 127.0.0.1 --port {port} > /tmp/serve.log 2>&1"
        )
        docker("exec", "-d", box, "sh", "-c", serve)
        wait_health(port, 600)
        model = served_model(port)
        _, bound = worker(box)
        cpus = {"bound": bound, "free": everything}
        facts["cpus"] = cpus
        rows += alternate(box, port, model, "ordinary", "bound", cpus, args)
        xs(box, "kill -TERM $(cat /tmp/serve.pid); while kill -0 $(cat /tmp/serve.pid) 2>/dev/null; do sleep 0.2; done")
        xs(box, f"vllm snapshot create {ENGINE} --snapshot-dir {ARTIFACT} > /tmp/create.log 2>&1")
        for k in range(args.restores):
            port = free_port()
            xs(box, f"vllm snapshot restore {ARTIFACT} --host 127.0.0.1 --port {port} > /tmp/restore.log 2>&1")
            wait_health(port, 300)
            _, restored = worker(box)
            facts.setdefault("restored_worker_cpus", []).append(restored)
            rows += alternate(box, port, model, f"restore-{k + 1}", "free", cpus, args)
            tree = xs(
                box, f'python3 -c \'import json;print(*json.load(open("{ARTIFACT}/manifest.json"))["process_tree"])\''
            )
            tree = tree.strip()
            xs(box, f"kill -KILL {tree}; for p in {tree}; do while [ -d /proc/$p ]; do sleep 0.1; done; done")
    finally:
        subprocess.run(["docker", "rm", "-f", box], capture_output=True)
    print(f"{'engine':12s} {'state':6s} {'tok/s':>8s} {'CPU s/1k tok':>12s} {'stretch':>8s} {'others':>7s}  allowed")
    for r in rows:
        print(
            f"{r['engine']:12s} {r['state']:6s} {r['tps']:8.1f} {r['engine_cpu_s_per_1k_tokens'] or 0:12.3f} "
            f"{r['stretch'] or 0:8.3f} {r['others_load'] or 0:7.2f}  {r['allowed']}"
        )
    print("\nmedian tok/s per engine and state:")
    for which in dict.fromkeys(r["engine"] for r in rows):
        for state in ("bound", "free"):
            tps = [r["tps"] for r in rows if r["engine"] == which and r["state"] == state]
            print(f"  {which:12s} {state:6s} {statistics.median(tps):8.1f}  ({', '.join(f'{t:.0f}' for t in tps)})")
    if args.json:
        args.json.write_text(json.dumps({"facts": facts, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
