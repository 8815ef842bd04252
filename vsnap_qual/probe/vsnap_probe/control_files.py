"""The lane's control directory (``$VSNAP_CONTROL_DIR``, ``/vsnap/control`` in a box), laid out once for both
sides: the probe inside the engine imports it as ``vsnap_probe.control_files``, the harness as
``vsnap_qual.probe.vsnap_probe.control_files``. Standard library only, and nothing of ``vsnap_probe``: this file
must import alike under both names.

| file | written by | read by |
|---|---|---|
| ``overlay.json`` ``{"modules": [...]}`` | harness, at lane start | probe: which modules to report |
| ``probe/loaded-<pid>.json`` | probe, once per engine process | harness: which processes loaded the probe |
| ``probe/imports-<pid>.json`` | probe, when the overlaid modules present change | harness: overlay verification |
| ``faults/armed.json`` ``{"point", "stall_s"}`` | harness, before a faulted command | probe, at call time |
| ``faults/fired-<point>-<pid>.json`` | probe, as a hook acts | harness: the fault fired |
| ``faults/listen-<port>`` | the harness's listener scan in the box | harness: HTTP was bound |
| ``faults/identity-seen`` | the recording shell of an identity-drift fault | harness: the drift reached it |
| ``logs/…`` | the engine's output (``vllm serve``) | harness: evidence |
"""

from __future__ import annotations

import json

OVERLAY = "overlay.json"
PROBE_DIR = "probe"
FAULTS_DIR = "faults"
LOGS_DIR = "logs"
SUBDIRS = (PROBE_DIR, FAULTS_DIR, LOGS_DIR)

ARMED = f"{FAULTS_DIR}/armed.json"
FIRED_GLOB = f"{FAULTS_DIR}/fired-*.json"
LOADED_GLOB = f"{PROBE_DIR}/loaded-*.json"
IMPORTS_GLOB = f"{PROBE_DIR}/imports-*.json"
IDENTITY_SEEN = f"{FAULTS_DIR}/identity-seen"


def fired(point: str, pid: int) -> str:
    """Where a hook records that it acted (written before it acts)."""
    return f"{FAULTS_DIR}/fired-{point}-{pid}.json"


def loaded(pid: int) -> str:
    return f"{PROBE_DIR}/loaded-{pid}.json"


def imports(pid: int) -> str:
    return f"{PROBE_DIR}/imports-{pid}.json"


def listen_marker(port: int) -> str:
    """Written by the in-box listener scan once a socket listens on ``port``."""
    return f"{FAULTS_DIR}/listen-{port}"


def pid_of(name: str) -> int | None:
    """The PID in a ``loaded-<pid>.json`` / ``imports-<pid>.json`` / ``fired-<point>-<pid>.json`` name."""
    stem = name.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    tail = stem.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else None


def armed_payload(point: str, stall_s: float | None = None) -> dict[str, object]:
    """What the harness writes to :data:`ARMED` to arm a hook point."""
    return {"point": point, "stall_s": stall_s}


def overlay_payload(modules: list[str]) -> str:
    return json.dumps({"modules": list(modules)})
