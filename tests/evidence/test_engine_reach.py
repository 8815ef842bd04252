"""The kinds that run once per image and arm (``vsnap_qual/faults/once.py``'s ``ONCE_KINDS``) are exactly those
whose every fault step, on every lane of every committed full run, ended before any engine process started by its
own record; and docs/procedure.md's table is what ``bench/engine_reach.py`` prints from those runs."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

from vsnap_qual.faults import once

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("engine_reach", ROOT / "bench" / "engine_reach.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["engine_reach"] = module
    spec.loader.exec_module(module)
    return module


def test_the_once_kinds_are_those_the_committed_runs_show() -> None:
    bench = _bench()
    runs, shown = bench.table([ROOT / p for p in once.EVIDENCE])
    assert set(shown) == set(once.ONCE_KINDS), shown
    # every run named is a full run with faults on its lanes: V1 and V2 on the GPU, both on CPU, real vLLM
    lanes = {lane for cells in runs.values() for lane in (c.lane for c in cells)}
    assert {"v1-head", "v1-base", "v2-head", "v2-base"} <= lanes
    for kind in once.ONCE_KINDS:
        ran_on = {c.lane for cells in runs.values() for c in cells if c.kind == kind}
        assert {"v1-head", "v1-base", "v2-head", "v2-base"} <= ran_on, (kind, ran_on)
    # a kind that starts an engine is never among them, whatever run shows it
    for kind in ("hook", "signal", "create", "port", "image", "weights", "kill"):
        assert kind not in shown


def test_the_procedure_page_keeps_the_table_the_bench_prints() -> None:
    bench = _bench()
    runs, _ = bench.table([ROOT / p for p in once.EVIDENCE])
    page = (ROOT / "docs" / "procedure.md").read_text()
    found = re.search(r"<!-- engine-reach table: [^>]*-->\n(.*?)\n<!-- end of the engine-reach table -->", page, re.S)
    assert found is not None, "docs/procedure.md has no engine-reach table"
    assert found.group(1) == once.reach_markdown(runs)
