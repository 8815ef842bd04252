#!/usr/bin/env bash
# GPU proof of the criu kit, on a bare GPU host (no Docker, no network; root; python3 with torch+CUDA):
#   unpack the kit tarball (docker/criu/export.sh) into a scratch prefix; start a torch process holding a tensor on
#   the GPU (own session, stdio on files); our cuda-checkpoint --toggle it there and back; `criu dump -L <kit>/lib/criu`
#   so CRIU's CUDA plugin runs our cuda-checkpoint (lock + checkpoint); reap it; `criu restore` (same PID; the plugin
#   restores + unlocks); the process checks its tensor and computes anew. Facts, timings and log excerpts go to OUT.
# Usage: scripts/gpu-criu-check.sh [KIT_TARBALL] [OUT_DIR]
#   defaults: build/criu-kit/vsnap-criu-kit.tar.gz and $OUT (the device tool's) or ./gpu-criu-out
# Exit 0 only when every step held; the JSON says which step failed otherwise.
set -euo pipefail

tarball="${1:-build/criu-kit/vsnap-criu-kit.tar.gz}"
out="${2:-${OUT:-gpu-criu-out}}"
log() { echo "gpu-criu-check: $*" >&2; }
[[ -f "$tarball" ]] || { log "no kit tarball at $tarball (bash docker/criu/export.sh build/criu-kit)"; exit 2; }
[[ "$(id -u)" == 0 ]] || { log "needs root (criu dump/restore)"; exit 2; }
mkdir -p "$out"
out="$(cd "$out" && pwd)"
scratch="$(mktemp -d /tmp/vsnap-gpu-criu.XXXXXX)"
tar -C "$scratch" -xzf "$tarball"
kit="$scratch/vsnap-criu"
export PATH="$kit/sbin:$kit/bin:$PATH"

cat >"$scratch/check.py" <<'PY'
import json, os, re, shutil, signal, subprocess, sys, time

kit, out, scratch = sys.argv[1], sys.argv[2], sys.argv[3]
ev = {"steps": [], "ok": False}
work = os.path.join(scratch, "work")
os.makedirs(work)
images = os.path.join(scratch, "images")
os.makedirs(images)


def sh(cmd, timeout=120):
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout.strip(), p.stderr.strip(), round(time.monotonic() - t, 3)


def step(name, ok, **facts):
    ev["steps"].append({"step": name, "ok": bool(ok), **facts})
    print(f"{'ok  ' if ok else 'FAIL'} {name} {json.dumps(facts)[:300]}", flush=True)
    if not ok:
        finish(1)


def finish(code):
    ev["ok"] = code == 0
    with open(os.path.join(out, "gpu-criu-evidence.json"), "w") as f:
        json.dump(ev, f, indent=1)
    for name in ("dump.log", "restore.log"):
        src = os.path.join(images, name)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(out, name))
    for name in ("child.out",):
        src = os.path.join(work, name)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(out, name))
    if child_pid[0]:
        try:
            os.kill(child_pid[0], signal.SIGKILL)
        except ProcessLookupError:
            pass
    sys.exit(code)


child_pid = [0]


def gpu_apps():
    rc, so, _, _ = sh(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"])
    apps = {}
    for line in so.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            apps[int(parts[0])] = parts[1]
    return apps


def cc(*args):
    rc, so, se, dt = sh(["cuda-checkpoint", *args])
    return rc, (so + ("\n" + se if se else "")).strip(), dt


# ---- facts ------------------------------------------------------------------------------------------------------
rc, so, _, _ = sh(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
ev["gpu"] = so
ev["kernel"] = os.uname().release
ev["python"] = sys.version.split()[0]
ev["glibc"] = sh(["getconf", "GNU_LIBC_VERSION"])[1]
ev["kit_version"] = dict(l.split("=", 1) for l in open(os.path.join(kit, "VERSION")).read().splitlines() if "=" in l)
env = dict(os.environ, VSNAP_CRIU_WRAPPER_DEBUG="1")
p = subprocess.run(["criu", "--version"], capture_output=True, text=True, env=env)
ev["criu_version"] = p.stdout.strip().splitlines()[0]
ev["criu_loader"] = p.stderr.strip()
step("criu --version is 4.2.1", "4.2.1" in ev["criu_version"], version=ev["criu_version"], loader=ev["criu_loader"])
rc, so, se, dt = sh(["criu", "check"])
step("criu check", rc == 0 and "Looks good." in so + se, output=(so + " " + se)[-300:])
rc, text, dt = cc("--help")
step("cuda-checkpoint --help lists --action", rc == 0 and "--action" in text, seconds=dt)
ev["nvidia_driver_gpus_dir"] = os.path.isdir("/proc/driver/nvidia/gpus")

# ---- a torch process with a tensor on the GPU -------------------------------------------------------------------
child = r'''
import os, sys, time, torch
work = sys.argv[1]
x = torch.arange(16 * 1024 * 1024, dtype=torch.float32, device="cuda")  # 64 MiB
torch.cuda.synchronize()
before = float(x.double().sum().item())
with open(os.path.join(work, "ready.tmp"), "w") as f:
    f.write(f"{os.getpid()} {before!r}\n")
os.rename(os.path.join(work, "ready.tmp"), os.path.join(work, "ready"))
while not os.path.exists(os.path.join(work, "go")):
    time.sleep(0.05)
after = float(x.double().sum().item())
y = (x * 2).double().sum().item()
with open(os.path.join(work, "result.tmp"), "w") as f:
    f.write(f"{os.getpid()} {after!r} {float(y)!r}\n")
os.rename(os.path.join(work, "result.tmp"), os.path.join(work, "result"))
'''
t0 = time.monotonic()
with open(os.path.join(work, "child.out"), "w") as co:
    proc = subprocess.Popen([sys.executable, "-c", child, work], stdin=subprocess.DEVNULL, stdout=co, stderr=co,
                            start_new_session=True, cwd=work)
child_pid[0] = proc.pid
deadline = time.monotonic() + 120
while not os.path.exists(os.path.join(work, "ready")):
    if proc.poll() is not None or time.monotonic() > deadline:
        step("child holds a tensor on the GPU", False, exit=proc.poll(), output=open(os.path.join(work, "child.out")).read()[-1500:])
    time.sleep(0.1)
pid_s, before_s = open(os.path.join(work, "ready")).read().split()
pid, before = int(pid_s), float(before_s)
apps = gpu_apps()
step("child holds a tensor on the GPU", pid == proc.pid and pid in apps, pid=pid, start_seconds=round(time.monotonic() - t0, 2),
     gpu_mib=apps.get(pid), checksum=before)
rc, state, dt = cc("--get-state", "--pid", str(pid))
step("cuda-checkpoint --get-state: running", rc == 0 and state == "running", output=state, seconds=dt)
rc, tid, dt = cc("--get-restore-tid", "--pid", str(pid))
step("cuda-checkpoint --get-restore-tid", rc == 0 and tid.isdigit(), output=tid, seconds=dt)
rc, state, dt = cc("--get-state", "--pid", tid)
step("cuda-checkpoint --get-state of the restore TID (as the plugin asks)", rc == 0 and state == "running", output=state, seconds=dt)
rc, text, dt = cc("--get-restore-tid", "--pid", str(os.getpid()))
step("cuda-checkpoint --get-restore-tid of a process without CUDA fails", rc != 0, rc=rc, output=text[-200:], seconds=dt)

# ---- --toggle there and back -------------------------------------------------------------------------------------
rc, text, dt = cc("--toggle", "--pid", str(pid))
rc2, state, _ = cc("--get-state", "--pid", str(pid))
apps = gpu_apps()
step("cuda-checkpoint --toggle: running -> checkpointed (GPU memory released)", rc == 0 and state == "checkpointed" and pid not in apps,
     seconds=dt, state=state, gpu_apps=apps, output=text)
rc, text, dt = cc("--toggle", "--pid", str(pid))
rc2, state, _ = cc("--get-state", "--pid", str(pid))
apps = gpu_apps()
step("cuda-checkpoint --toggle: checkpointed -> running", rc == 0 and state == "running" and pid in apps,
     seconds=dt, state=state, gpu_mib=apps.get(pid), output=text)

# ---- criu dump through the CUDA plugin ---------------------------------------------------------------------------
dump = ["criu", "dump", "-L", os.path.join(kit, "lib", "criu"), "--tree", str(pid), "--images-dir", images,
        "--shell-job", "--file-locks", "--link-remap", "--log-file", "dump.log", "-v4"]
ev["dump_command"] = " ".join(dump)
rc, so, se, dt = sh(dump, timeout=300)
proc.wait(timeout=30)  # the parent reaps the dumped child, or the restore cannot take its PID
dlog = open(os.path.join(images, "dump.log"), errors="replace").read()
plugin_lines = [l for l in dlog.splitlines() if "cuda_plugin" in l]
size = sum(os.path.getsize(os.path.join(images, f)) for f in os.listdir(images))
step("criu dump (CRIU's CUDA plugin locks and checkpoints through our cuda-checkpoint)",
     rc == 0 and "Dumping finished successfully" in dlog and any("Checkpointing CUDA devices on pid" in l for l in plugin_lines)
     and not os.path.exists(f"/proc/{pid}"),
     rc=rc, seconds=dt, images_mib=round(size / 2**20, 1), plugin=plugin_lines[-12:], stderr=se[-300:])
apps = gpu_apps()
step("after the dump the GPU lists no memory for the PID", pid not in apps, gpu_apps=apps)

# ---- criu restore ------------------------------------------------------------------------------------------------
restore = ["criu", "restore", "-L", os.path.join(kit, "lib", "criu"), "--images-dir", images, "--shell-job",
           "--file-locks", "--link-remap", "--restore-detached", "--log-file", "restore.log", "-v4"]
ev["restore_command"] = " ".join(restore)
rc, so, se, dt = sh(restore, timeout=300)
rlog = open(os.path.join(images, "restore.log"), errors="replace").read()
plugin_lines = [l for l in rlog.splitlines() if "cuda_plugin" in l]
step("criu restore (same PID; the plugin restores and unlocks)",
     rc == 0 and os.path.exists(f"/proc/{pid}") and any("resuming devices on pid" in l for l in plugin_lines),
     rc=rc, seconds=dt, plugin=plugin_lines[-12:], stderr=se[-300:])
rc, state, dt = cc("--get-state", "--pid", str(pid))
apps = gpu_apps()
step("restored process is running on the GPU again", rc == 0 and state == "running" and pid in apps, state=state,
     gpu_mib=apps.get(pid))
open(os.path.join(work, "go"), "w").close()
deadline = time.monotonic() + 60
while not os.path.exists(os.path.join(work, "result")):
    if time.monotonic() > deadline:
        step("restored process verifies its tensor", False, output=open(os.path.join(work, "child.out")).read()[-1500:])
    time.sleep(0.05)
rpid, after, doubled = open(os.path.join(work, "result")).read().split()
step("restored process verifies its tensor", int(rpid) == pid and float(after) == before and float(doubled) == 2 * before,
     pid=int(rpid), before=before, after=float(after), doubled=float(doubled))
deadline = time.monotonic() + 30
while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
    time.sleep(0.05)
child_pid[0] = 0 if not os.path.exists(f"/proc/{pid}") else pid
finish(0)
PY

set +e
python3 "$scratch/check.py" "$kit" "$out" "$scratch" 2>&1 | tee "$out/gpu-criu-check.txt"
rc=${PIPESTATUS[0]}
set -e
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
rm -rf "$scratch"
log "exit $rc; evidence in $out"
exit "$rc"
