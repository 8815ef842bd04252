"""The image's GPU identity shim (``/usr/local/bin/nvidia-smi``, the only simulated part): what vLLM 0.32.0 asks.

vLLM's ``vllm/snapshot/runtime.py`` calls ``nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader,
nounits`` (inventory: the CUDA holders) and ``nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,
noheader,nounits --id=<uuid>`` (identity, split on ``,`` into exactly 3 fields). The shim finds vLLM's workers by
the process title vLLM sets (``VLLM::Worker``), so processes titled that way are listed and others are not.
"""

from __future__ import annotations

import time

from tests.real.realtier import RealContainer

UUID = "GPU-73696d75-6c61-7465-6400-000000000000"
APPS = ["nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader,nounits"]
# A process that titles itself the way vLLM's set_process_title does (setproctitle, from vLLM's own venv).
TITLED = "import setproctitle, sys, time; setproctitle.setproctitle(sys.argv[1]); time.sleep(120)"


def test_gpu_identity_is_one_simulated_gpu_in_vllms_three_fields(real: RealContainer) -> None:
    res = real.run(
        ["nvidia-smi", "--query-gpu=name,uuid,driver_version", "--format=csv,noheader,nounits", f"--id={UUID}"]
    )
    assert res.exit_code == 0, res.output
    name, uuid, driver = (x.strip() for x in res.stdout.strip().split(",", 2))
    assert "simulated" in name and uuid == UUID and "simulated" in driver
    assert res.stdout.count("\n") == 1
    other = real.run(
        ["nvidia-smi", "--query-gpu=name", "--format=csv", "--id=GPU-00000000-0000-0000-0000-000000000000"]
    )
    assert other.exit_code == 6 and "No devices were found" in other.stdout
    bad = real.run(["nvidia-smi", "--query-gpu=fan.speed", "--format=csv"])
    assert bad.exit_code == 2 and "fan.speed" in bad.stderr


def test_compute_apps_are_exactly_the_processes_titled_as_vllm_workers(real: RealContainer) -> None:
    marker = f"{time.monotonic_ns()}"
    real.spawn(f"exec python3 -c '{TITLED}' VLLM::Worker & echo $! > /tmp/w-{marker}; wait")
    real.spawn(f"exec python3 -c '{TITLED}' VLLM::EngineCore & echo $! > /tmp/e-{marker}; wait")
    try:
        deadline = time.monotonic() + 60
        worker = engine = None
        while time.monotonic() < deadline:
            titles = real.run(["sh", "-c", f"for f in /tmp/w-{marker} /tmp/e-{marker}; do cat $f; done"], 10).stdout
            pids = titles.split()
            if len(pids) == 2:
                worker, engine = map(int, pids)
                cmd = real.run(["sh", "-c", f"tr '\\0' ' ' < /proc/{worker}/cmdline"], 10).stdout
                if cmd.startswith("VLLM::Worker"):
                    break
            time.sleep(0.5)
        assert worker and engine, "test processes did not start"
        res = real.run(APPS)
        assert res.exit_code == 0, res.output
        rows: dict[str, str] = {}
        for line in res.stdout.splitlines():
            pid, _, uuid = line.partition(",")
            rows[pid.strip()] = uuid.strip()
        assert rows.get(str(worker)) == UUID
        assert str(engine) not in rows
    finally:
        real.run(["sh", "-c", f"kill $(cat /tmp/w-{marker} /tmp/e-{marker}) 2>/dev/null; rm -f /tmp/*-{marker}"], 10)
