"""vsnap-qual's in-container probe.

Mounted read-only at ``/vsnap/probe`` with ``PYTHONPATH=/vsnap/probe``; the ``vsnap_probe-0.1.dist-info`` next
to this package registers ``vsnap_probe.plugin:register`` in the ``vllm.general_plugins`` entry-point group,
so vLLM calls it once in every engine process. Imports nothing but the standard library at module level; torch
and vllm are imported lazily, only where they are needed, and only in processes that already loaded them.

- ``vsnap_probe.digest.DigestExtension``: ``--worker-extension-cls``; ``vsnap_param_digests`` via
  /collective_rpc.
- ``vsnap_probe.overlay_report``: which overlaid modules each process imported (path + sha256).
- ``vsnap_probe.faults``: fault points armed through ``$VSNAP_CONTROL_DIR/faults/armed.json``.
"""

from __future__ import annotations

__version__ = "0.1"

import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CONTROL_ENV = "VSNAP_CONTROL_DIR"


def control_dir() -> Path | None:
    """The per-lane control directory (``$VSNAP_CONTROL_DIR``), or None when the probe runs outside the
    harness."""
    value = os.environ.get(CONTROL_ENV, "").strip()
    return Path(value) if value else None


def utc_now() -> str:
    """UTC ISO-8601 with microseconds."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1e6):06d}Z"


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write JSON to ``path`` atomically (temp file in the same directory, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, sort_keys=True, default=repr)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def process_cmdline(pid: int | None = None) -> list[str]:
    """argv of a process from /proc (reflects a changed process title), else this interpreter's sys.argv."""
    try:
        raw = Path(f"/proc/{pid or os.getpid()}/cmdline").read_bytes()
    except OSError:
        return list(sys.argv)
    parts = [p.decode("utf-8", "replace") for p in raw.split(b"\0")]
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def warn(message: str) -> None:
    """Report a probe problem on stderr; the probe never raises into the engine except for an armed fault."""
    # stderr may be closed or /dev/null (the snapshot child detaches its streams).
    with contextlib.suppress(Exception):
        sys.stderr.write(f"vsnap_probe[{os.getpid()}]: {message}\n")
        sys.stderr.flush()
