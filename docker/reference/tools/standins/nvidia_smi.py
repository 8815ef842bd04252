#!/usr/bin/python3
"""nvidia-smi stand-in of the vsnap reference image: reports the simulated GPU (/etc/vsnap-reference/gpu.json)
and the processes registered as its compute apps by the reference engine."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from vllm._vsnapref.device import HOLDERS_DIR, MiB, device_info


def holders() -> list[dict[str, object]]:
    rows = []
    if HOLDERS_DIR.is_dir():
        for entry in sorted(HOLDERS_DIR.iterdir(), key=lambda path: path.name):
            if not entry.name.isdigit():
                continue
            try:
                state = (Path("/proc") / entry.name / "stat").read_text()
                record = json.loads(entry.read_text())
            except (OSError, ValueError):
                continue
            fields = state[state.rfind(")") + 2 :].split()
            if fields[0] == "Z" or record.get("start_time") not in (None, int(fields[19])):
                continue  # exited, or a later process reusing the holder's PID
            rows.append(record)
    return rows


def main() -> int:
    info = device_info()
    arguments = sys.argv[1:]
    options = dict(item.split("=", 1) for item in arguments if item.startswith("--") and "=" in item)
    noheader = "noheader" in options.get("--format", "")
    wanted = options.get("--id")
    if wanted is not None and wanted not in (info.uuid, "0"):
        print(f"No devices were found matching the id: {wanted}", file=sys.stderr)
        return 6
    apps = holders()
    used = sum(int(app["used_bytes"]) for app in apps) // MiB  # type: ignore[call-overload]
    if "--query-gpu" in options:
        values = {
            "name": info.name,
            "uuid": info.uuid,
            "driver_version": info.driver_version,
            "index": "0",
            "mig.mode.current": "[N/A]",
            "memory.total": str(info.memory_total_bytes // MiB),
            "memory.used": str(used),
            "memory.free": str(info.memory_total_bytes // MiB - used),
            "pci.bus_id": "00000000:00:00.0",
            "compute_mode": "Default",
        }
        fields = options["--query-gpu"].split(",")
        if not noheader:
            print(", ".join(fields))
        print(", ".join(values.get(field, "[N/A]") for field in fields))
        return 0
    if "--query-compute-apps" in options:
        fields = options["--query-compute-apps"].split(",")
        if not noheader:
            print(", ".join(fields))
        for app in apps:
            values = {
                "pid": str(app["pid"]),
                "gpu_uuid": info.uuid,
                "used_memory": str(int(app["used_bytes"]) // MiB),
                "process_name": "python3",
            }
            print(", ".join(values.get(field, "[N/A]") for field in fields))
        return 0
    if "-L" in arguments or "--list-gpus" in arguments:
        print(f"GPU 0: {info.name} (UUID: {info.uuid})")
        return 0
    print(
        f"vsnap reference nvidia-smi stand-in   Driver Version: {info.driver_version}   CUDA Version: "
        f"{info.cuda_version}"
    )
    print(f"GPU 0: {info.name} ({info.uuid})  {used}MiB / {info.memory_total_bytes // MiB}MiB")
    for app in apps:
        print(f"  pid {app['pid']}  {int(app['used_bytes']) // MiB}MiB")  # type: ignore[call-overload]
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
