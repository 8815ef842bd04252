"""Real ``vllm snapshot create | inspect | restore`` of vLLM 0.32.0 (CPU) with real CRIU 4.2.1 (issue 15).

Unmodified vLLM 0.32.0 stops ``snapshot create`` on a CPU inside vLLM (``Sleep mode is not supported on current
platform.``, vllm/config/model.py:657; test_real_cli.py asserts it verbatim). To see what the rest of real vLLM's
lifecycle does, this module runs it with ONE labelled deviation: ``vsnap_qual/smoke`` (the CPU smoke platform:
vLLM's own ``CpuPlatform`` with ``is_sleep_mode_available() -> True``), activated through vLLM's
``vllm.platform_plugins`` entry point; no vLLM file is changed. What passes here is real vLLM past its own stop,
not a qualified lifecycle.

One module-scoped container of ``vsnap-vllm-cpu`` with the privileges real CRIU needs on this kind of host
(``all-caps``: every capability the host's bounding set allows, seccomp/apparmor unconfined, host
pid/ipc/network). The tests run in file order on one artifact: create, inspect, restore (the canary equal to
vLLM's own oracle), vLLM's own refusals before any mutation (busy PID, environment drift, missing plugin), a
container restart and a second restore, a truncated image, a recovery failure after memory wake, and last what a
clean shutdown of a restored engine leaves for the next restore.

Besides the platform plugin, the only simulated part is the image's ``nvidia-smi`` (the GPU identity shim,
docker/vllm-cpu/README.md); vLLM, CRIU and the CUDA plugin are the real ones.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.real.realtier import (
    CONTROL,
    IMAGE,
    PROBE_ROOT,
    Exec,
    RealContainer,
    Served,
    connect_docker,
    free_port,
    http,
)

ARTIFACT = "/vsnap/work/snap"
SLEEP_PLATFORM = Path(__file__).resolve().parents[2] / "vsnap_qual" / "smoke"
# vLLM's multiprocessing.shared_memory segments and semaphores the captured tree maps by path (not in the artifact).
SHM_NAMES = (
    "import re, sys; data = open(sys.argv[1], 'rb').read(); "
    "names = re.findall(rb'/dev/shm/(?:psm_[0-9a-f]+|sem[.]mp-[a-z0-9_]+)', data); "
    "print(' '.join(sorted({m.decode() for m in names})))"
)
SHIM_NAME = "vsnap simulated GPU (CPU host; no device)"
SHIM_UUID = "GPU-73696d75-6c61-7465-6400-000000000000"
SHIM_DRIVER = "0.0.0-simulated"
# What real CRIU needs here: --privileged is refused by this host ("unable to apply caps": no CAP_SYS_RESOURCE in
# its bounding set), so every other capability, and no seccomp/apparmor confinement.
ALL_CAPS: dict[str, Any] = {
    "cap_add": ["ALL"],
    "cap_drop": ["SYS_RESOURCE"],
    # "systempaths=unconfined" is a docker CLI option; the Engine API (20.10) refuses it in SecurityOpt ("invalid
    # --security-opt 2") and docker-py has no MaskedPaths. CRIU does not need it here (host PID namespace: restore
    # uses clone3 set_tid, not /proc/sys/kernel/ns_last_pid).
    "security_opt": ["seccomp=unconfined", "apparmor=unconfined"],
    "pid_mode": "host",
    "ipc_mode": "host",
    "network_mode": "host",
}


def last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


@pytest.fixture(scope="module")
def snap(
    real: RealContainer, server_slot: dict[str, Served], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """The all-caps lane container and the state the ordered tests share (figures, the manifest, the port)."""
    if "served" in server_slot:  # serial heavy work on 2 shared cores
        server_slot.pop("served").stop()
    work = tmp_path_factory.mktemp("snapshot-real")
    control = work / "control"
    (control / "probe").mkdir(parents=True)
    (control / "faults").mkdir()
    client = connect_docker()
    container = client.containers.run(
        IMAGE,
        ["sleep", "infinity"],
        detach=True,
        user="0",
        labels={"ai.vsnap.test": "real-tier"},
        volumes={
            str(PROBE_ROOT): {"bind": "/vsnap/probe", "mode": "ro"},
            str(control): {"bind": CONTROL, "mode": "rw"},
            str(SLEEP_PLATFORM): {"bind": "/vsnap/smoke", "mode": "ro"},
        },
        **ALL_CAPS,
    )
    env = dict(real.env)
    env["PYTHONPATH"] = "/vsnap/probe:/vsnap/smoke"
    box = RealContainer(
        container=container,
        control=control,
        overlay_host=real.overlay_host,
        overlay_sha256=real.overlay_sha256,
        image_sha256=real.image_sha256,
        labels=real.labels,
        env=env,
    )
    # vLLM's create makes only the artifact directory itself (parents=False under an existing private parent).
    assert box.run(["mkdir", "-p", "-m", "0700", "/vsnap/work"], timeout_s=30).exit_code == 0
    state: dict[str, Any] = {"box": box, "timings": {}, "shm": []}
    try:
        yield state
    finally:
        with contextlib.suppress(Exception):
            stop_tree(box, state.get("manifest"))
        with contextlib.suppress(Exception):
            # Ours only: the segments this artifact's images name (host IPC: /dev/shm is the host's).
            box.run(["rm", "-f", *state["shm"]], timeout_s=30) if state["shm"] else None
        with contextlib.suppress(Exception):
            box.run(["rm", "-rf", "/vsnap/work"], timeout_s=120)
        with contextlib.suppress(Exception):
            container.remove(force=True)
        timings = state["timings"]
        if timings:
            print("\nreal snapshot timings (s):", json.dumps(timings, sort_keys=True))


def box_of(snap: dict[str, Any]) -> RealContainer:
    box: RealContainer = snap["box"]
    return box


def alive(box: RealContainer, pids: list[int]) -> list[int]:
    """PIDs of ``pids`` that exist (host PID namespace: the container sees the host's PIDs)."""
    if not pids:
        return []
    res = box.run(["sh", "-c", " ".join(f"test -d /proc/{p} && echo {p};" for p in pids)], timeout_s=30)
    return [int(x) for x in res.stdout.split()]


def stop_tree(box: RealContainer, manifest: dict[str, Any] | None) -> None:
    """SIGTERM the restored root (vLLM's API server takes the engine core and worker down), then wait for all."""
    if not manifest:
        return
    tree = list(manifest["process_tree"])
    if not alive(box, tree):
        return
    box.run(["kill", "-TERM", str(tree[0])], timeout_s=10)
    deadline = time.monotonic() + 90
    while alive(box, tree) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = alive(box, tree)
    if left:
        box.run(["kill", "-KILL", *map(str, left)], timeout_s=10)
    assert not left, f"restored tree did not stop on SIGTERM: {left}"


def snapshot(box: RealContainer, *argv: str, timeout_s: float = 600, **env: str) -> Exec:
    return box.run(["vllm", "snapshot", *argv], timeout_s=timeout_s, env=box.lane_env(**env))


def canary(box: RealContainer, port: int, model: str) -> dict[str, Any]:
    status, body = http(
        "POST",
        f"http://127.0.0.1:{port}/v1/completions",
        {
            "model": model,
            "prompt": "The capital of France is",
            "max_tokens": 1,
            "min_tokens": 1,
            "temperature": 0,
            "seed": 0,
            "logprobs": 0,
            "return_token_ids": True,
        },
    )
    assert status == 200, body
    choice = body["choices"][0]
    return {
        "token_ids": choice["token_ids"],
        "text": choice["text"],
        "logprob": choice["logprobs"]["token_logprobs"][0],
    }


def assert_canary_is_the_oracle(got: dict[str, Any], manifest: dict[str, Any]) -> None:
    assert got["token_ids"] == manifest["oracle_token_ids"]
    assert got["text"] == manifest["oracle_text"]
    assert math.isclose(got["logprob"], manifest["oracle_sampled_token_logprob"], rel_tol=0.0, abs_tol=1e-6)


def listening(box: RealContainer, port: int) -> bool:
    needle = f":{port:04X} "
    res = box.run(["sh", "-c", "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null"], timeout_s=30)
    return any(needle in row and row.split()[3] == "0A" for row in res.stdout.splitlines()[1:] if len(row.split()) > 3)


def restore(snap: dict[str, Any], label: str, **env: str) -> tuple[Exec, int]:
    box = box_of(snap)
    port = free_port()
    argv = ["vllm", "snapshot", "restore", ARTIFACT, "--host", "127.0.0.1", "--port", str(port)]
    res = box.run(argv, timeout_s=600, env=box.lane_env(**env))
    snap["timings"][label] = round(res.seconds, 1)
    return res, port


# --- the lifecycle --------------------------------------------------------------------------------------------


def test_create_with_real_criu(snap: dict[str, Any]) -> None:
    box = box_of(snap)
    version = box.run(["criu", "--version"], timeout_s=30)
    assert version.exit_code == 0 and version.stdout.startswith("Version: 4.2.1"), version.output
    res = snapshot(box, "create", *box.engine_args(), "--snapshot-dir", ARTIFACT, timeout_s=900)
    snap["timings"]["create"] = round(res.seconds, 1)
    assert res.exit_code == 0, res.output[-6000:]
    manifest = json.loads(box.run(["cat", f"{ARTIFACT}/manifest.json"], timeout_s=30).stdout)
    snap["manifest"] = manifest
    # vLLM's controller verified that CRIU's dump left no process of the tree behind; see it from outside too.
    assert alive(box, list(manifest["process_tree"])) == []
    listing = box.run(["sh", "-c", f"stat -c '%a %U' {ARTIFACT}; ls {ARTIFACT}; ls {ARTIFACT}/images | wc -l"], 30)
    mode, names, images = (
        listing.stdout.split("\n", 1)[0],
        listing.stdout.split()[2:-1],
        int(listing.stdout.split()[-1]),
    )
    assert mode == "700 root"
    assert {"manifest.json", "images", "child.log", "child.log.snapshot-size", "ignored-nvidia-fds.tsv"} <= set(names)
    assert images > 10
    # What the artifact does not carry: the POSIX shared memory vLLM's processes map (the shm message queues of the
    # engine core and the worker), named by path in CRIU's files.img and left in /dev/shm by the dump.
    names = box.run(["python3", "-c", SHM_NAMES, f"{ARTIFACT}/images/files.img"], timeout_s=30).stdout.split()
    snap["shm"] = names
    psm = [n for n in names if n.startswith("/dev/shm/psm_")]
    assert psm, names
    assert box.run(["ls", *psm], timeout_s=30).exit_code == 0  # (a sem.mp-* name is an unlinked semaphore)


def test_inspect_prints_the_manifest_vllm_wrote(snap: dict[str, Any]) -> None:
    box = box_of(snap)
    manifest = snap.get("manifest")
    assert manifest, "create did not produce a manifest"
    res = snapshot(box, "inspect", ARTIFACT, timeout_s=240)
    assert res.exit_code == 0, res.output[-3000:]
    printed = json.loads(res.stdout)
    assert printed == manifest
    assert printed["schema_version"] == 1
    assert printed["boundary"] == "post-engine-init-reloadable-state-released"
    # The simulated GPU is the only simulated part, and the manifest says so in its own fields.
    assert (printed["gpu_name"], printed["gpu_uuid"], printed["driver_version"]) == (SHIM_NAME, SHIM_UUID, SHIM_DRIVER)
    assert printed["criu_version"] == "Version: 4.2.1"
    assert printed["vllm_version"] == "0.32.0+cpu"
    assert printed["torch_version"] == "2.13.0+cpu" and printed["cuda_runtime"] == ""
    assert printed["model"] == box.model and printed["model_revision"] == box.revision
    assert printed["engine_argv"][-1] == "--enable-sleep-mode"
    assert dict(printed["environment"]).keys() >= {"VLLM_USE_V2_MODEL_RUNNER", "VLLM_WORKER_MULTIPROC_METHOD"}
    assert any(k == "snapshot_plugin_sha256:cuda_plugin.so" for k, _ in printed["environment"])
    # The CUDA holder vLLM's inventory found is the worker the probe saw load in the create child: the shim
    # listed exactly vLLM's worker process (found by its process title), nothing else of the tree.
    workers = {int(r["pid"]) for r in box.probe_files("loaded") if r["role"] == "worker"}
    assert printed["cuda_holders"] and set(printed["cuda_holders"]) <= workers
    assert set(printed["cuda_holders"]) < set(printed["process_tree"])
    assert printed["process_tree"][0] not in printed["cuda_holders"]
    assert len(printed["oracle_token_ids"]) == 1 and math.isfinite(printed["oracle_sampled_token_logprob"])


def test_restore_serves_the_captured_engine(snap: dict[str, Any]) -> None:
    box, manifest = box_of(snap), snap.get("manifest")
    assert manifest, "create did not produce a manifest"
    res, port = restore(snap, "restore")
    assert res.exit_code == 0, res.output[-6000:]
    snap["port"] = port
    tree = list(manifest["process_tree"])
    # The same PIDs, alive again, and the HTTP listener on the port restore was given.
    assert sorted(alive(box, tree)) == sorted(tree)
    assert listening(box, port)
    t0 = time.monotonic()
    got = canary(box, port, manifest["served_model_name"])
    snap["timings"]["first_canary_after_restore"] = round(time.monotonic() - t0, 2)
    assert_canary_is_the_oracle(got, manifest)
    assert canary(box, port, manifest["served_model_name"]) == got


def test_restore_refuses_a_busy_pid_before_any_mutation(snap: dict[str, Any]) -> None:
    box, manifest = box_of(snap), snap.get("manifest")
    assert manifest and snap.get("port"), "no restored engine to collide with"
    before = box.run(["sh", "-c", f"cd {ARTIFACT} && find . -type f | sort | xargs sha256sum"], 300).stdout
    res, port = restore(snap, "restore_busy_pid")
    assert res.exit_code == 1, res.output[-3000:]
    assert last_line(res.stderr) == (
        f"vllm.snapshot.runtime.SnapshotRestoreError: captured PID is already occupied: {manifest['process_tree'][0]}"
    )
    assert not listening(box, port)
    after = box.run(["sh", "-c", f"cd {ARTIFACT} && find . -type f | sort | xargs sha256sum"], 300).stdout
    assert after == before
    # The engine restored earlier is untouched.
    assert_canary_is_the_oracle(canary(box, snap["port"], manifest["served_model_name"]), manifest)


def test_restore_refuses_environment_drift(snap: dict[str, Any]) -> None:
    res, port = restore(snap, "restore_env_drift", VLLM_VSNAP_DRIFT="1")
    assert res.exit_code == 1, res.output[-3000:]
    assert last_line(res.stderr) == "vllm.snapshot.manifest.SnapshotCompatibilityError: snapshot mismatch: environment"
    assert not listening(box_of(snap), port)


@pytest.mark.parametrize(
    ("plugin_dir", "message"),
    [
        ("", "RuntimeError: CRIU_CUDA_PLUGIN_DIR is required"),
        ("/opt/vsnap-criu/bin", "RuntimeError: CRIU CUDA plugin not found in /opt/vsnap-criu/bin"),
    ],
)
def test_restore_refuses_a_missing_cuda_plugin(snap: dict[str, Any], plugin_dir: str, message: str) -> None:
    box = box_of(snap)
    # An empty value is what vLLM reads as unset (os.environ.get(..., "") then `if plugin_dir`).
    res = snapshot(box, "restore", ARTIFACT, "--port", str(free_port()), timeout_s=240, CRIU_CUDA_PLUGIN_DIR=plugin_dir)
    assert res.exit_code == 1, res.output[-3000:]
    assert last_line(res.stderr) == message


def test_restore_again_after_a_container_restart(snap: dict[str, Any]) -> None:
    """The restored engine is left running: the restart itself ends it (Docker kills the container's processes)."""
    box, manifest = box_of(snap), snap.get("manifest")
    assert manifest, "create did not produce a manifest"
    tree = list(manifest["process_tree"])
    t0 = time.monotonic()
    box.container.restart(timeout=30)
    snap["timings"]["container_restart"] = round(time.monotonic() - t0, 1)
    box.container.reload()
    assert box.container.status == "running"
    deadline = time.monotonic() + 30
    while alive(box, tree) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert alive(box, tree) == [], "the container restart did not end the restored tree"
    res, port = restore(snap, "restore_after_container_restart")
    assert res.exit_code == 0, res.output[-6000:]
    assert sorted(alive(box, tree)) == sorted(tree)
    assert_canary_is_the_oracle(canary(box, port, manifest["served_model_name"]), manifest)
    box.container.restart(timeout=30)  # ends it the same way, leaving the shared memory for the next tests
    box.container.reload()
    deadline = time.monotonic() + 30
    while alive(box, tree) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert alive(box, tree) == []


# --- faults judged with the released (base) expectations ------------------------------------------------------


def test_truncated_image_fails_restore_and_leaves_nothing(snap: dict[str, Any]) -> None:
    """A truncated CRIU pages image: vLLM's own failure (CRIU's), exit 1, no listener, nothing left running."""
    box, manifest = box_of(snap), snap.get("manifest")
    assert manifest, "create did not produce a manifest"
    biggest = box.run(["sh", "-c", f"ls -S {ARTIFACT}/images | head -1"], 30).stdout.strip()
    assert biggest.startswith("pages-"), biggest
    image, saved = f"{ARTIFACT}/images/{biggest}", f"/vsnap/work/{biggest}.saved"
    assert box.run(["sh", "-c", f"cp -p {image} {saved} && truncate -s 4096 {image}"], 300).exit_code == 0
    try:
        res, port = restore(snap, "restore_truncated_image")
    finally:
        assert box.run(["mv", saved, image], timeout_s=60).exit_code == 0
    assert res.exit_code == 1, res.output[-6000:]
    assert "criu" in last_line(res.stderr) and "returned non-zero exit status" in last_line(res.stderr)
    # vLLM logs CRIU's restore.log tail through its logger, on stdout: "CRIU restore.log (tail):".
    assert "CRIU restore.log (tail):" in res.stdout and "Restoring FAILED." in res.stdout
    assert "Can't read mapping page" in res.stdout
    assert not listening(box, port)
    assert alive(box, list(manifest["process_tree"])) == []


def test_recovery_failure_after_memory_wake(snap: dict[str, Any]) -> None:
    """``wake-raise``: the restored worker's ``wake_up(tags=["kv_cache"])`` raises after release.

    As released (0.32.0, base expectation): exit 1, no HTTP listener, nothing of the tree left running.
    """
    box, manifest = box_of(snap), snap.get("manifest")
    assert manifest, "create did not produce a manifest"
    faults = box.control / "faults"
    for old in faults.glob("fired-*.json"):
        old.unlink()
    (faults / "armed.json").write_text(json.dumps({"point": "wake-raise", "stall_s": None}))
    try:
        res, port = restore(snap, "restore_wake_raise")
    finally:
        (faults / "armed.json").unlink(missing_ok=True)
    fired = [json.loads(p.read_text()) for p in faults.glob("fired-wake-raise-*.json")]
    assert fired, "the wake-raise hook did not fire in the restored worker"
    assert {r["pid"] for r in fired} <= set(manifest["cuda_holders"])
    assert res.exit_code == 1, res.output[-6000:]
    assert "restored process exited before binding HTTP" in res.stderr, res.stderr[-3000:]
    assert not listening(box, port)
    assert alive(box, list(manifest["process_tree"])) == []


def test_after_a_clean_shutdown_the_artifact_no_longer_restores(snap: dict[str, Any]) -> None:
    """vLLM's clean shutdown unlinks its /dev/shm segments; the artifact names them but does not carry them.

    Last: afterwards the artifact is unusable. The engine that the wake failure above stopped went through vLLM's
    shutdown; if its segments survived, restore once more and stop that engine with SIGTERM.
    """
    box, manifest = box_of(snap), snap.get("manifest")
    assert manifest, "create did not produce a manifest"
    psm = [n for n in snap["shm"] if "/psm_" in n]
    if box.run(["ls", *psm], timeout_s=30).exit_code == 0:
        res, port = restore(snap, "restore_before_clean_stop")
        assert res.exit_code == 0, res.output[-6000:]
        stop_tree(box, manifest)
    assert box.run(["ls", *psm], timeout_s=30).exit_code != 0, "vLLM's shutdown left its shared memory"
    res, port = restore(snap, "restore_after_clean_stop")
    assert res.exit_code == 1, res.output[-6000:]
    missing = [n for n in psm if f"Can't open file {n.lstrip('/')} on restore: No such file or directory" in res.stdout]
    assert missing, res.output[-3000:]
    assert "Restoring FAILED." in res.stdout
    assert not listening(box, port)
    assert alive(box, list(manifest["process_tree"])) == []


def test_image_labels_name_the_only_simulated_part(snap: dict[str, Any]) -> None:
    labels = box_of(snap).labels
    assert "nvidia-smi" in labels["ai.vsnap.simulated"] and "GPU identity shim" in labels["ai.vsnap.simulated"]
    assert labels["ai.vsnap.criu-kit-image-id"].startswith("sha256:")
