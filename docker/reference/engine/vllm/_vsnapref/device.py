"""The engine's device: a real CUDA device when torch sees one (memory from the driver, allocations are real
device tensors), else the simulated accelerator (identity and memory size from the image's config file,
allocations counted per process, and a holder registry that the image's simulated `nvidia-smi` reads)."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

CONFIG_PATH = Path(os.environ.get("VSNAP_REF_GPU_CONFIG", "/etc/vsnap-reference/gpu.json"))
HOLDERS_DIR = Path(os.environ.get("VSNAP_REF_GPU_HOLDERS", "/run/vsnap-reference/gpu"))
MiB = 1 << 20
GiB = 1 << 30


class OutOfMemoryError(RuntimeError):
    """The simulated device cannot hold the requested allocation (torch.cuda.OutOfMemoryError's text)."""


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    uuid: str
    driver_version: str
    memory_total_bytes: int
    cuda_version: str


def device_info() -> DeviceInfo:
    data = json.loads(CONFIG_PATH.read_text()) if CONFIG_PATH.is_file() else {}
    return DeviceInfo(
        name=str(data.get("name", "vsnap reference simulated GPU")),
        uuid=str(data.get("uuid", "GPU-00000000-7673-6e61-7072-656600000000")),
        driver_version=str(data.get("driver_version", "vsnapref-1.0")),
        memory_total_bytes=int(float(data.get("memory_total_mib", 64)) * MiB),
        cuda_version=str(data.get("cuda_version", "12.8")),
    )


def process_start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat: tells a holder from a later process that reused its PID."""
    try:
        text = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return None
    return int(text[text.rfind(")") + 2 :].split()[19])


class SimulatedDevice:
    """Counts this process's device allocations by tag against the configured capacity. Tensors live in host
    memory (``torch_device`` is the CPU); the simulated device only sizes the KV cache."""

    simulated = True

    def __init__(self) -> None:
        import torch

        self.torch_device = torch.device("cpu")
        self.info = device_info()
        self.allocations: dict[str, int] = {}
        self.context_bytes = 0

    @property
    def total(self) -> int:
        return self.info.memory_total_bytes

    @property
    def used(self) -> int:
        return self.context_bytes + sum(self.allocations.values())

    @property
    def free(self) -> int:
        return self.total - self.used

    def allocate(self, tag: str, nbytes: int) -> None:
        previous = self.allocations.get(tag, 0)
        if nbytes - previous > self.free:
            raise OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {(nbytes - previous) / MiB:.2f} MiB. GPU 0 "
                "has a total "
                f"capacity of {self.total / MiB:.2f} MiB of which {self.free / MiB:.2f} MiB is free."
            )
        self.allocations[tag] = nbytes
        self._publish()

    def release(self, tag: str) -> int:
        freed = self.allocations.pop(tag, 0)
        self._publish()
        return freed

    def register_holder(self, context_bytes: int) -> None:
        """Become a compute process on the device (what `nvidia-smi --query-compute-apps` lists)."""
        self.context_bytes = context_bytes
        self._publish()

    def _publish(self) -> None:
        try:
            HOLDERS_DIR.mkdir(parents=True, exist_ok=True)
            record = {
                "pid": os.getpid(),
                "start_time": process_start_time(os.getpid()),
                "uuid": self.info.uuid,
                "used_bytes": self.used,
            }
            temporary = HOLDERS_DIR / f".{os.getpid()}.tmp"
            temporary.write_text(json.dumps(record))
            os.replace(temporary, HOLDERS_DIR / str(os.getpid()))
        except OSError:
            pass

    def unregister_holder(self) -> None:
        with contextlib.suppress(OSError):
            (HOLDERS_DIR / str(os.getpid())).unlink()

    def empty_cache(self) -> None:
        """Nothing is cached on a simulated device."""


class CudaDevice:
    """A real CUDA device (index 0 of what the process sees). Capacity and free memory come from the driver
    (``torch.cuda.mem_get_info``); ``allocate``/``release`` only label what the tensors really hold, and the
    driver (not this class) raises out-of-memory. The real ``nvidia-smi`` lists this process as a compute app."""

    simulated = False

    def __init__(self, index: int = 0) -> None:
        import torch

        self.torch = torch
        self.torch_device = torch.device("cuda", index)
        torch.cuda.set_device(self.torch_device)
        properties = torch.cuda.get_device_properties(self.torch_device)
        free, total = torch.cuda.mem_get_info(self.torch_device)
        uuid = str(getattr(properties, "uuid", "") or "")
        self.info = DeviceInfo(
            name=str(properties.name),
            uuid=uuid if uuid.startswith("GPU-") or not uuid else f"GPU-{uuid}",
            driver_version="",
            memory_total_bytes=int(total),
            cuda_version=str(torch.version.cuda or ""),
        )
        self.allocations: dict[str, int] = {}
        self.context_bytes = 0
        self._baseline_used = int(total) - int(free)

    @property
    def total(self) -> int:
        return self.info.memory_total_bytes

    @property
    def used(self) -> int:
        """Device memory this process holds: its CUDA context plus what torch's allocator reserved."""
        return self.context_bytes + int(self.torch.cuda.memory_reserved(self.torch_device))

    @property
    def free(self) -> int:
        return int(self.torch.cuda.mem_get_info(self.torch_device)[0])

    def allocate(self, tag: str, nbytes: int) -> None:
        self.allocations[tag] = nbytes

    def release(self, tag: str) -> int:
        freed = self.allocations.pop(tag, 0)
        self.empty_cache()
        return freed

    def register_holder(self, context_bytes: int) -> None:
        """The context already exists (``mem_get_info`` created it); its size is what the driver reports in use
        beyond torch's allocator (other processes' memory included, which only makes the KV estimate safer)."""
        del context_bytes
        self.torch.cuda.synchronize(self.torch_device)
        free, total = self.torch.cuda.mem_get_info(self.torch_device)
        self.context_bytes = max(0, int(total) - int(free) - int(self.torch.cuda.memory_reserved()))

    def unregister_holder(self) -> None:
        self.empty_cache()

    def empty_cache(self) -> None:
        """Return freed blocks to the driver, so that sleep really frees device memory."""
        self.torch.cuda.synchronize(self.torch_device)
        self.torch.cuda.empty_cache()


Device = SimulatedDevice | CudaDevice


def make_device() -> Device:
    """A CUDA device when torch sees one, else the simulated device."""
    import torch

    if torch.cuda.is_available():
        return CudaDevice()
    return SimulatedDevice()
