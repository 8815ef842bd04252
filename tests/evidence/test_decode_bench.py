"""The recorded decode-under-load sets (``bench/data/*-decode-under-load-*.json``) judged by the current rule back
what bench/README.md says of issue 44 item 6: the clean engine beside a co-tenant passes where the run-queue rule
alone false-alarmed, the engine spinning beside itself and the slow engine are caught on a quiet and a loaded
machine."""

from __future__ import annotations

import json
from pathlib import Path

from vsnap_qual.engine import decode_speed
from vsnap_qual.model import DecodeSpeed

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "bench" / "data" / "2026-12-07-decode-under-load-3958d0a.json"
TOLERANCE = 1.75


def _sets() -> dict[str, DecodeSpeed]:
    rows = json.loads(DATA.read_text())
    return {row["set"]: row["speed"] for row in rows}


def test_the_clean_engine_beside_any_co_tenant_passes_and_the_slow_and_spinning_ones_fail() -> None:
    sets = _sets()
    quiet = sets["clean, quiet"]
    readme = (ROOT / "bench" / "README.md").read_text()
    for label, speed in sets.items():
        judged = decode_speed.judge(quiet, speed, TOLERANCE)
        before = judged["measured_slowdown"] / decode_speed.queued_slowdown(quiet, speed)
        slow = label.startswith("slow") or "in the engine's box" in label
        assert judged["ok"] is (not slow), (label, judged)
        assert f"| {judged['measured_slowdown']:.2f}× |" in readme and f"| {judged['slowdown']:.2f}" in readme, label
        if "container" in label and not slow:
            assert before > TOLERANCE and judged["slowdown"] < TOLERANCE  # the false alarm, and no more
            assert f"**{before:.2f}: a false alarm**" in readme
    spinning = sets["clean, round 1, 2 busy processes in the engine's box"]
    assert decode_speed.calibrated_slowdown(quiet, spinning) is None  # its own CPU per token, not the machine's
