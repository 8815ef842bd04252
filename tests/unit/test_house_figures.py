"""scripts/house_figures.py: the structure figures of docs/design.md are computed by rules that hold on small
packages written here, and the script runs on this checkout with its declared canary chain matching the code."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "house_figures.py"


@pytest.fixture(scope="module")
def house() -> ModuleType:
    """The script as a module (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location("house_figures", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def write_package(root: Path, files: dict[str, str]) -> Path:
    """Write ``vsnap_qual/<path>`` for each file (dedented) under ``root``; every package gets an ``__init__``."""
    for relative, text in files.items():
        path = root / "vsnap_qual" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    for directory in [root / "vsnap_qual", *(root / "vsnap_qual").rglob("*")]:
        if directory.is_dir() and not (directory / "__init__.py").exists():
            (directory / "__init__.py").write_text("")
    return root


def test_a_circle_closed_by_a_type_only_import_is_found_and_the_layering_names_its_arrow_up(
    house: ModuleType, tmp_path: Path
) -> None:
    write_package(
        tmp_path,
        {
            "lane.py": "from vsnap_qual import faults\n",
            "faults.py": """\
                from typing import TYPE_CHECKING
                from vsnap_qual.box import Box
                if TYPE_CHECKING:
                    from vsnap_qual.lane import LaneRun
            """,
            "box.py": "import json\nfrom vsnap_qual.probe.vsnap_probe import control_files\n",
            "probe/vsnap_probe/control_files.py": "from vsnap_qual import lane\n",  # in-engine: no room
        },
    )
    graph = house.import_graph(house.read_tree(tmp_path))

    assert graph["rooms"] == 4  # vsnap_qual (the root __init__), lane, faults, box; no module of probe/
    assert graph["circles"] == [
        {
            "rooms": ["vsnap_qual.faults", "vsnap_qual.lane"],
            "arrows": [
                {"from": "vsnap_qual.faults", "to": "vsnap_qual.lane", "type_only": True},
                {"from": "vsnap_qual.lane", "to": "vsnap_qual.faults", "type_only": False},
            ],
            "at_run_time": False,
        }
    ]
    assert graph["circles_at_run_time"] == 0
    assert (graph["arrows"], graph["arrows_at_run_time"], graph["type_only_arrows"]) == (3, 2, 1)
    assert graph["floor"] == {"vsnap_qual": 1, "vsnap_qual.box": 1, "vsnap_qual.faults": 2, "vsnap_qual.lane": 3}
    assert graph["floors"] == 3
    assert graph["arrows_up"] == [
        {"from": "vsnap_qual.faults", "to": "vsnap_qual.lane", "type_only": True, "floors": [2, 3]}
    ]


def test_a_run_time_circle_is_one_floor_and_its_arrows_run_up(house: ModuleType, tmp_path: Path) -> None:
    write_package(
        tmp_path,
        {
            "a.py": "def f():\n    from vsnap_qual import b\n",  # a lazy import is an arrow at run time
            "b.py": "from . import a\n",
            "report/__init__.py": "from vsnap_qual.report import html\n",
            "report/html.py": "from ..a import f\n",
        },
    )
    graph = house.import_graph(house.read_tree(tmp_path))

    assert [c["rooms"] for c in graph["circles"]] == [["vsnap_qual.a", "vsnap_qual.b"]]
    assert graph["circles"][0]["at_run_time"] is True and graph["circles_at_run_time"] == 1
    assert graph["floor"]["vsnap_qual.a"] == graph["floor"]["vsnap_qual.b"] == 1
    assert graph["floor"]["vsnap_qual.report.html"] == 2 and graph["floor"]["vsnap_qual.report"] == 3
    assert {(a["from"], a["to"]) for a in graph["arrows_up"]} == {
        ("vsnap_qual.a", "vsnap_qual.b"),
        ("vsnap_qual.b", "vsnap_qual.a"),
    }


def test_dict_str_any_is_counted_in_code_and_never_in_a_comment_or_a_string(house: ModuleType, tmp_path: Path) -> None:
    write_package(
        tmp_path,
        {
            "model.py": '''\
                """Records are dict[str, Any] on the wire."""
                from collections.abc import Mapping
                from typing import Any, Dict
                import typing

                Raw = dict[str, Any]  # an alias; dict[str, Any] in this comment does not count
                Loose = Mapping[str, typing.Any]

                def load(text: "Dict[str, Any]", other: dict[str, int]) -> list[dict[str, Any]]:
                    said = "dict[str, Any]"
                    return [{}]
            ''',
        },
    )
    found = house.any_maps(house.read_tree(tmp_path))

    assert found == {
        "dict[str, Any]": 2,
        "Dict[str, Any]": 1,
        "Mapping[str, Any]": 1,
        "modules": {"vsnap_qual/model.py": 4},
    }


def test_protocol_members_class_methods_and_wide_typed_dicts(house: ModuleType, tmp_path: Path) -> None:
    fields = "\n".join(f"    f{i}: int" for i in range(19))
    write_package(
        tmp_path,
        {
            "box.py": """\
                from typing import Protocol
                class Commands(Protocol):
                    def sh(self, script: str) -> str: ...
                class Box(Commands, Protocol):
                    name: str
                    @property
                    def endpoint(self) -> str: ...
                    def exec(self) -> None: ...
                class Local:
                    size: int
                    def a(self) -> None: ...
                    def b(self) -> None: ...
            """,
            "model.py": f"from typing import TypedDict\nclass Base(TypedDict):\n    kind: str\n    time: str\n"
            f"class Step(Base, total=False):\n{fields}\nSmall = TypedDict('Small', {{'a': int}})\n",
        },
    )
    found = house.interfaces(house.read_tree(tmp_path))

    assert found["protocols"] == [
        {
            "name": "vsnap_qual.box.Box", "members": 4, "methods": 2, "properties": 1, "attributes": 1, "own": 3,
            "composes": ["vsnap_qual.box.Commands"],
        },
        {
            "name": "vsnap_qual.box.Commands", "members": 1, "methods": 1, "properties": 0, "attributes": 0, "own": 1,
            "composes": [],
        },
    ]  # fmt: skip
    assert found["largest_classes"] == [{"name": "vsnap_qual.box.Local", "methods": 2, "fields": 1}]
    assert found["wide_typed_dicts"] == [{"name": "vsnap_qual.model.Step", "fields": 21}]


def test_a_protocol_that_only_composes_others_counts_their_members_and_says_it_composes_them(
    house: ModuleType, tmp_path: Path
) -> None:
    write_package(
        tmp_path,
        {
            "box.py": """\
                from typing import Protocol
                class Files(Protocol):
                    def read(self) -> bytes: ...
                    def write(self) -> None: ...
                class Commands(Protocol):
                    def sh(self) -> str: ...
                class Box(Files, Commands, Protocol):
                    \"\"\"Both.\"\"\"
            """,
        },
    )
    found = house.interfaces(house.read_tree(tmp_path))

    box = found["protocols"][0]
    assert (box["name"], box["members"], box["own"]) == ("vsnap_qual.box.Box", 3, 0)
    assert box["composes"] == ["vsnap_qual.box.Files", "vsnap_qual.box.Commands"]
    assert house._protocol_width(box, found["protocols"]) == "`Box` 3 (2 composed, each ≤ 2)"
    assert house._protocol_width(found["protocols"][1], found["protocols"]) == "`Files` 2"


def test_a_fault_kinds_places_are_its_names_and_data_not_the_verb(house: ModuleType, tmp_path: Path) -> None:
    write_package(
        tmp_path,
        {
            "kills.py": "import os\ndef draw(pid: int) -> None:\n    os.kill(pid, 9)\n",
            "faults.py": "from vsnap_qual import kills\nclass KillInjector:\n    kind = 'kill'\n",
            "report/frames.py": "def row(r):\n    return r.get('kill_phase'), '--kill-after=10', 'kill -9'\n",
            "host.py": "import os\ndef stop(pid):\n    os.kill(pid, 9)\n",
        },
    )
    found = house.fault_kind(house.read_tree(tmp_path), "kill")

    assert found["per_file"] == {
        "vsnap_qual/faults.py": {"places": 3, "names": ["'kill'", "KillInjector", "kills"]},
        "vsnap_qual/report/frames.py": {"places": 1, "names": ["'kill_phase'"]},
        "vsnap_qual/kills.py": {"places": 0, "names": []},
    }
    assert (found["files"], found["places"], found["kinds_package"]) == (3, 4, False)

    write_package(tmp_path, {"faults/kinds/kill.py": "", "faults/kinds/hook.py": ""})
    moved = house.fault_kind(house.read_tree(tmp_path), "kill")
    assert moved["kinds_package"] is True and moved["kind_modules"] == ["hook", "kill"]
    assert "vsnap_qual/faults/kinds/kill.py" in moved["own_modules"]


CHAIN_FILES = {
    "engine.py": "def completion(port):\n    return {'text': 'x'}\n",
    "steps.py": "from vsnap_qual import engine\ndef restore(rec):\n    rec.results['canary'] = engine.completion(1)\n",
    "report.py": "def canary_frame(step):\n    return step['results'].get('canary')\n",
    "templates/page.j2": "{% for c in canary %}{{ c }}{% endfor %}\n",
}


def small_chain(house: ModuleType) -> object:
    """The canary of :data:`CHAIN_FILES`: measured, written into a record, read by the report, shown."""
    check, hop = house.Check, house.Hop
    restore, frame, page = (
        "vsnap_qual/steps.py:restore",
        "vsnap_qual/report.py:canary_frame",
        "vsnap_qual/templates/page.j2",
    )
    return house.CanaryChain(
        start="vsnap_qual/engine.py:completion",
        hops=(
            hop(restore, "returned", (check(restore, "calls", "completion"),)),
            hop(frame, "record", (check(restore, "writes", "canary"), check(frame, "reads", "canary"))),
            hop(page, "view", (check(page, "names", "canary"),)),
        ),
    )


def test_a_canary_chain_that_matches_the_code_counts_its_hops(house: ModuleType, tmp_path: Path) -> None:
    write_package(tmp_path, CHAIN_FILES)
    found = house.canary_hops(tmp_path, small_chain(house))

    assert found["verified"] is True and found["broken"] == []
    assert found["hops"] == 3
    assert found["stations"][0] == "vsnap_qual/engine.py:completion"


@pytest.mark.parametrize(
    ("changed", "broken"),
    [
        (
            {"steps.py": "from vsnap_qual import engine\ndef restore(rec):\n    rec.results['canary'] = None\n"},
            "hop 1 (vsnap_qual/engine.py:completion -> vsnap_qual/steps.py:restore): "
            "vsnap_qual/steps.py:restore calls 'completion' does not hold",
        ),
        (
            {"report.py": "def canary_frame(step):\n    return step['results'].get('canaries')\n"},
            "hop 2 (vsnap_qual/steps.py:restore -> vsnap_qual/report.py:canary_frame): "
            "vsnap_qual/report.py:canary_frame reads 'canary' does not hold",
        ),
        (
            {"report.py": "def frame(step):\n    return step['results'].get('canary')\n"},
            "hop 2 (vsnap_qual/steps.py:restore -> vsnap_qual/report.py:canary_frame): "
            "vsnap_qual/report.py:canary_frame is not in the code",
        ),
        (
            {"templates/page.j2": "<p>canary</p>{{ digests }}\n"},  # the word as text is no use of the view's key
            "hop 3 (vsnap_qual/report.py:canary_frame -> vsnap_qual/templates/page.j2): "
            "vsnap_qual/templates/page.j2 names 'canary' does not hold",
        ),
    ],
)
def test_a_canary_chain_that_no_longer_matches_the_code_names_the_broken_hop(
    house: ModuleType, tmp_path: Path, changed: dict[str, str], broken: str
) -> None:
    write_package(tmp_path, {**CHAIN_FILES, **changed})

    found = house.canary_hops(tmp_path, small_chain(house))

    assert found["verified"] is False
    assert found["broken"] == [broken]


def test_a_station_moved_is_named_even_where_the_hand_over_still_reads_the_same(
    house: ModuleType, tmp_path: Path
) -> None:
    """The recorder still calls a ``write``, but the store's ``write`` the chain names is gone."""
    chain = house.CanaryChain(
        start="vsnap_qual/recorder.py:step",
        hops=(house.Hop("vsnap_qual/evidence.py:Store.write", "argument",
                        (house.Check("vsnap_qual/recorder.py:step", "calls", "write"),)),),
    )  # fmt: skip
    files = {"recorder.py": "def step(store):\n    store.write({})\n"}
    write_package(tmp_path, {**files, "evidence.py": "class Store:\n    def write(self, record): ...\n"})
    assert house.canary_hops(tmp_path, chain)["verified"] is True

    write_package(tmp_path, {**files, "evidence.py": "class Writer:\n    def write(self, record): ...\n"})
    assert house.canary_hops(tmp_path, chain)["broken"] == [
        "hop 1 (vsnap_qual/recorder.py:step -> vsnap_qual/evidence.py:Store.write): "
        "vsnap_qual/evidence.py:Store.write is not in the code"
    ]


def test_the_script_exits_1_naming_the_broken_hop(
    house: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_package(tmp_path, {**CHAIN_FILES, "report.py": "def canary_frame(step):\n    return None\n"})
    monkeypatch.setattr(house, "CANARY_CHAINS", (small_chain(house),))

    assert house.main(["--root", str(tmp_path), "--summary"]) == 1
    out, err = capsys.readouterr()
    assert "3 (chain broken)" in out
    assert "hop 2 (vsnap_qual/steps.py:restore -> vsnap_qual/report.py:canary_frame)" in err


def test_ref_reads_the_package_at_a_revision_not_the_working_tree(house: ModuleType, tmp_path: Path) -> None:
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    write_package(tmp_path, {"a.py": "from vsnap_qual import b\n", "b.py": ""})
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "two rooms"], check=True)
    write_package(tmp_path, {"c.py": "from vsnap_qual import a\n"})  # not committed

    committed = subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(tmp_path), "--ref", "HEAD", "--json"],
        capture_output=True,
        text=True,
    )
    working = subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(tmp_path), "--json"], capture_output=True, text=True
    )

    assert json.loads(committed.stdout)["graph"]["rooms"] == 3
    assert json.loads(working.stdout)["graph"]["rooms"] == 4
    assert committed.returncode == working.returncode == 1  # this tree has none of the declared canary chain


def test_a_revision_takes_the_chain_declared_for_its_code(house: ModuleType, tmp_path: Path) -> None:
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    commits = []
    for message in ("old path", "new path"):
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", message], check=True)
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        commits.append(head.stdout.strip())
    old = house.CanaryChain(start="vsnap_qual/a.py:old", hops=(), last=commits[0])
    new = house.CanaryChain(start="vsnap_qual/a.py:new", hops=())

    assert house.chain_for(tmp_path, commits[0], (old, new)) is old
    assert house.chain_for(tmp_path, commits[1], (old, new)) is new
    assert house.chain_for(tmp_path, None, (old, new)) is new  # the working tree: the current code's chain


def test_the_script_runs_on_this_checkout_and_its_canary_chain_matches_the_code() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--json"], capture_output=True, text=True, cwd=ROOT)

    assert done.returncode == 0, (
        "the canary chain declared in scripts/house_figures.py (CANARY_CHAINS) no longer matches the code: "
        f"declare the canary's new path there\n{done.stderr}"
    )
    found = json.loads(done.stdout)
    assert set(found) == {"tree", "graph", "modules", "dict_str_any", "interfaces", "canary", "fault_kind"}
    assert {"rooms", "arrows", "arrows_at_run_time", "circles", "circles_at_run_time", "floors", "arrows_up"} <= set(
        found["graph"]
    )
    assert {"root_modules", "packages", "lines", "largest"} <= set(found["modules"])
    assert {"dict[str, Any]", "Dict[str, Any]", "Mapping[str, Any]"} <= set(found["dict_str_any"])
    assert {"protocols", "largest_classes", "wide_typed_dicts"} <= set(found["interfaces"])
    assert found["canary"]["verified"] is True and found["canary"]["hops"] == len(found["canary"]["stations"]) - 1
    assert {"files", "places", "per_file", "kinds_package", "kind_modules"} <= set(found["fault_kind"])
    assert found["graph"]["rooms"] == sum(p["modules"] for p in found["modules"]["packages"].values())
