"""What each ``--vsnap-privileges`` mode grants a lane container, and which modes this host can grant.

Pure logic (no Docker): the runtime turns :func:`container_settings` into docker SDK arguments, the doctor
explains the modes with :func:`host_allows`. Real CRIU needs, inside a container, about every capability
(CAP_SYS_ADMIN, CAP_SYS_PTRACE, CAP_CHECKPOINT_RESTORE or its SYS_ADMIN fallback, CAP_NET_ADMIN for sockets, ...)
and no seccomp filter; ``--privileged`` grants that, but Docker refuses it ("unable to apply caps") on hosts whose
capability bounding set lacks a capability (this project's machines lack CAP_SYS_RESOURCE). ``all-caps`` grants
``ALL`` minus what the host's bounding set lacks, with seccomp, AppArmor and the masked ``/proc`` paths unconfined.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# Linux capability numbers (include/uapi/linux/capability.h) → the names Docker accepts (without CAP_).
CAPABILITIES: tuple[str, ...] = (
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
    "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
    "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
    "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
    "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF",
    "CHECKPOINT_RESTORE",
)  # fmt: skip

UNCONFINED = ("seccomp=unconfined", "apparmor=unconfined")

#: ``--vsnap-privileges`` modes and what each grants a lane container.
MODES: dict[str, str] = {
    "privileged": "privileged, host pid/ipc/network, as the upstream e2e (CRIU needs it)",
    "all-caps": (
        "every capability the host can grant, seccomp/AppArmor unconfined, host pid/ipc/network "
        "(real CRIU on hosts that refuse --privileged)"
    ),
    "all-caps-own-pid": "as all-caps, but the container's own PID namespace (host ipc/network)",
    "host-namespaces": "host pid/ipc/network without --privileged (hosts that refuse privileged containers)",
    "isolated": "own namespaces, not privileged; ports published on 127.0.0.1",
}


@dataclass(frozen=True)
class ContainerSettings:
    """The namespace and privilege part of a lane container (docker SDK argument names)."""

    privileged: bool = False
    cap_add: tuple[str, ...] = ()
    cap_drop: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()
    host_pid: bool = False
    host_ipc: bool = False
    host_network: bool = False
    unmask_proc: bool = False  # `--security-opt systempaths=unconfined`: empty MaskedPaths and ReadonlyPaths
    notes: tuple[str, ...] = field(default=())

    @property
    def own_pid_namespace(self) -> bool:
        return not self.host_pid


def bounding_set(status_text: str) -> int | None:
    """The ``CapBnd`` mask from a ``/proc/<pid>/status`` text (None when absent)."""
    for line in status_text.splitlines():
        if line.startswith("CapBnd:"):
            return int(line.split()[1], 16)
    return None


def missing_capabilities(mask: int | None) -> tuple[str, ...]:
    """Named capabilities absent from a bounding-set mask (none when the mask is unknown)."""
    if mask is None:
        return ()
    return tuple(name for bit, name in enumerate(CAPABILITIES) if not mask >> bit & 1)


def local_missing_capabilities(status: Path = Path("/proc/self/status")) -> tuple[str, ...]:
    """What this host's bounding set lacks (the Docker daemon runs with the same set on a local host)."""
    try:
        return missing_capabilities(bounding_set(status.read_text()))
    except OSError:
        return ()


def container_settings(mode: str, missing: tuple[str, ...] = ()) -> ContainerSettings:
    """What ``--vsnap-privileges=mode`` grants, given the capabilities the host lacks."""
    if mode == "privileged":
        return ContainerSettings(privileged=True, host_pid=True, host_ipc=True, host_network=True)
    if mode in ("all-caps", "all-caps-own-pid"):
        notes = (f"not granted (absent from the host's bounding set): {', '.join(missing)}",) if missing else ()
        return ContainerSettings(
            cap_add=("ALL",),
            cap_drop=missing,
            security_opt=UNCONFINED,
            unmask_proc=True,
            host_pid=mode == "all-caps",
            host_ipc=True,
            host_network=True,
            notes=notes,
        )
    if mode == "host-namespaces":
        return ContainerSettings(host_pid=True, host_ipc=True, host_network=True)
    if mode == "isolated":
        return ContainerSettings()
    raise ValueError(f"unknown privileges mode {mode!r}")


def host_allows(mode: str, missing: tuple[str, ...]) -> tuple[bool, str]:
    """Whether this host can start a container in ``mode``, and why (for the doctor)."""
    if mode == "privileged" and missing:
        return False, f"Docker refuses --privileged here: the host's bounding set lacks {', '.join(missing)}"
    settings = container_settings(mode, missing)
    if settings.privileged:
        return True, "every capability is in the host's bounding set"
    if settings.cap_add:
        granted = f"all but {', '.join(missing)}" if missing else "all"
        return True, f"capabilities: {granted}; seccomp, AppArmor and /proc paths unconfined"
    return True, "no extra capabilities (enough for serving, not for CRIU)"


def criu_capable(mode: str) -> bool:
    """Whether a mode grants what real CRIU needs inside the container."""
    return mode in ("privileged", "all-caps", "all-caps-own-pid")
