"""Which snapshot-path modules each vLLM process imports, and from which file: the evidence behind the overlay
checkout's choice of file (docker/vllm-cpu/overlay-checkout.sh).

Usage: python3 docker/vllm-cpu/overlay-imports.py CHECKOUT OUTDIR [VERSION]

One lane-like container of vsnap-vllm-cpu:VERSION (all-caps, --init, host pid and network, private IPC with a 2 GiB
/dev/shm), with vsnap-qual's probe at /vsnap/probe (a vllm.general_plugins entry point: one imports-<pid>.json per
process listing the watched modules it imported, with path and sha256), the CPU smoke platform at /vsnap/smoke, and
the checkout's changed vllm/ files (git diff --name-only HEAD~1 HEAD) bound read-only over the image's, as the
harness's --vsnap-overlay does. It runs an ordinary `vllm serve`, then `vllm snapshot create` and `restore`, and
writes OUTDIR/overlay-imports.json and a table (OUTDIR/overlay-imports.md): per process (role, pid) and watched
module, the file and whether its sha256 equals the checkout's.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SITE = "/opt/vllm/lib/python3.11/site-packages"
MODEL, REV = "vsnap/tiny-qwen3", "b04193068dc9e2d037b36de7fec6ef00cdea53c5"
WATCHED = [
    "vllm.config.model",
    "vllm.snapshot.types",
    "vllm.snapshot.manifest",
    "vllm.snapshot.runtime",
    "vllm.snapshot.controller",
    "vllm.snapshot.server",
    "vllm.entrypoints.cli.snapshot",
]
ENGINE = [MODEL, "--revision", REV, "--tokenizer-revision", REV, "--dtype", "float32", "--max-model-len", "512"]


def sh(*argv: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def records(control: Path) -> dict[int, dict[str, Any]]:
    return {
        int(json.loads(p.read_text())["pid"]): json.loads(p.read_text()) for p in control.glob("probe/imports-*.json")
    }


def main(checkout: Path, out: Path, version: str) -> int:
    out.mkdir(parents=True, exist_ok=True)
    changed = sh("git", "-C", str(checkout), "diff", "--name-only", "HEAD~1", "HEAD", "--", "vllm/*.py").stdout.split()
    expected = {f: hashlib.sha256((checkout / f).read_bytes()).hexdigest() for f in changed}
    work = Path(tempfile.mkdtemp(prefix="vsnap-h1-imports-"))
    control = work / "control"
    (control / "probe").mkdir(parents=True)
    (control / "overlay.json").write_text(json.dumps({"modules": WATCHED}))
    name = f"vsnap-h1-imports-{version.replace('.', '')}"
    mounts = [
        f"-v={REPO / 'vsnap_qual/probe'}:/vsnap/probe:ro",
        f"-v={REPO / 'vsnap_qual/smoke'}:/vsnap/smoke:ro",
        f"-v={control}:/vsnap/control",
        *(f"-v={checkout / f}:{SITE}/{f}:ro" for f in changed),
    ]
    env = {
        "VLLM_USE_V2_MODEL_RUNNER": "0",
        "VLLM_SERVER_DEV_MODE": "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": "/vsnap/probe:/vsnap/smoke",
        "VSNAP_CONTROL_DIR": "/vsnap/control",
    }
    sh("docker", "rm", "-f", name, check=False)
    sh(
        "docker", "run", "-d", "--name", name, "--label", "ai.vsnap.owner=vsnap-h1", "--init", "--user", "0",
        "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE", "--security-opt", "seccomp=unconfined",
        "--security-opt", "apparmor=unconfined", "--pid=host", "--network=host", "--ipc=private", "--shm-size=2g",
        *mounts, *(f"-e={k}={v}" for k, v in env.items()), f"vsnap-vllm-cpu:{version}", "sleep", "infinity",
    )  # fmt: skip
    result: dict[str, Any] = {"version": version, "checkout": str(checkout), "overlaid": expected, "phases": {}}

    def x(script: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        return sh("docker", "exec", name, "sh", "-c", script, check=False, timeout=timeout)

    try:
        # 1. an ordinary vllm serve
        port = free_port()
        x(f"vllm serve {' '.join(ENGINE)} --host 127.0.0.1 --port {port} > /vsnap/control/serve.log 2>&1 &")
        deadline = time.time() + 600
        while x(f"curl -sf http://127.0.0.1:{port}/health").returncode != 0:
            if time.time() > deadline:
                raise SystemExit("serve did not become ready")
            time.sleep(2)
        time.sleep(2)  # one more poll of the probe's watcher
        result["phases"]["ordinary serve"] = records(control)
        serve_log = (control / "serve.log").read_text(errors="replace")
        result["serve_mark_lines"] = [ln for ln in serve_log.splitlines() if "vsnap-qual overlay" in ln]
        root = next(p for p, r in records(control).items() if r["role"] == "api_server")
        x(f"kill -TERM {root}; sleep 5")
        for p in (control / "probe").glob("*.json"):
            p.unlink()
        # 2. the snapshot tree: create, then restore
        artifact = "/vsnap/work/snap"
        made = x(f"mkdir -p -m 0700 /vsnap/work && vllm snapshot create {' '.join(ENGINE)} --enforce-eager "
                 f"--snapshot-dir {artifact}", timeout=1200)  # fmt: skip
        result["create_exit"] = made.returncode
        if made.returncode != 0:
            raise SystemExit(f"create failed: {made.stderr[-2000:]}")
        created = records(control)
        port = free_port()
        restored = x(f"vllm snapshot restore {artifact} --host 127.0.0.1 --port {port}")
        result["restore_exit"] = restored.returncode
        manifest = json.loads(x(f"cat {artifact}/manifest.json").stdout)
        result["process_tree"] = manifest["process_tree"]
        alive = x(" ; ".join(f"test -d /proc/{p} && echo {p}" for p in manifest["process_tree"])).stdout.split()
        result["restored_alive"] = [int(p) for p in alive]
        time.sleep(2)
        result["phases"]["snapshot tree (create child = restored tree, same PIDs)"] = {
            pid: rec for pid, rec in created.items() if pid in manifest["process_tree"]
        }
        result["child_log_mark_lines"] = [
            ln for ln in x(f"cat {artifact}/child.log").stdout.splitlines() if "vsnap-qual overlay" in ln
        ]
        x(f"kill -KILL {' '.join(map(str, manifest['process_tree']))}")
    finally:
        sh("docker", "rm", "-f", name, check=False)
        shutil.rmtree(work, ignore_errors=True)

    lines = [f"# Overlay imports: vLLM {version}, overlaid {', '.join(changed)}", ""]
    for phase, recs in result["phases"].items():
        lines += [f"## {phase}", "", "| role | pid | " + " | ".join(WATCHED) + " |", "|---" * (len(WATCHED) + 2) + "|"]
        for pid, rec in sorted(recs.items(), key=lambda kv: kv[1]["role"]):
            cells = []
            for module in WATCHED:
                got = rec["modules"].get(module)
                if got is None:
                    cells.append("—")
                    continue
                rel = got["path"].split("site-packages/", 1)[-1]
                cells.append(f"`{got['sha256'][:12]}`" + (" = checkout" if expected.get(rel) == got["sha256"] else ""))
            lines.append(f"| {rec['role']} | {pid} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += [
        "Log lines of the overlaid file (ordinary serve):",
        "",
        *[f"    {ln}" for ln in result["serve_mark_lines"]],
    ]
    lines += ["", "In the artifact's child.log (create):", "", *[f"    {ln}" for ln in result["child_log_mark_lines"]]]
    lines += ["", f"restore exit {result['restore_exit']}; restored tree alive: {result['restored_alive']}"]
    (out / "overlay-imports.json").write_text(json.dumps(result, indent=1, sort_keys=True, default=str))
    (out / "overlay-imports.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1]).resolve(), Path(sys.argv[2]), sys.argv[3] if len(sys.argv) == 4 else "0.32.0"))
