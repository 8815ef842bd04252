#!/usr/bin/env python3
"""The house in figures: the structure of the ``vsnap_qual`` package, measured from its code with ``ast``.

    python scripts/house_figures.py                 # this checkout's working tree
    python scripts/house_figures.py --ref 5330513   # the package at a git revision (read through ``git archive``)
    python scripts/house_figures.py --summary       # only the one-row table docs/design.md keeps
    python scripts/house_figures.py --json          # every figure, for tests and diffs

Nothing is imported from the package it measures, so any tree can be read, also one that does not import. The
rules, the same for every tree:

Rooms and arrows
    A room is a module of ``vsnap_qual/``; the in-engine code (``vsnap_qual/probe/``, ``vsnap_qual/smoke/``) is not
    part of the house and is left out. A package's ``__init__.py`` is a room of its own, named after the package
    (``vsnap_qual.report``). An arrow is an import from one room of another, wherever the import statement stands
    (a function's lazy import is an arrow too); two statements importing the same room draw one arrow.
    ``from x import y`` is an arrow to ``x.y`` when that is a module, else to ``x``. Importing a submodule draws no
    arrow to its package's ``__init__`` (Python runs it, but the importer uses nothing of it); an import of
    in-engine code or of another distribution draws none. An arrow is type-only when every import drawing it
    stands under ``if TYPE_CHECKING:``; the arrows at run time are the others.

Circles, floors, arrows up
    A circle is a strongly connected component of more than one room, type-only arrows included; "at run time"
    counts those of the run-time arrows alone. A room's floor is 1 + the longest chain of run-time arrows below it
    (a room that imports no room at run time is on floor 1; the rooms of a run-time circle share a floor); the
    floors are the highest floor. An arrow runs up when it points to a room on the same or a higher floor: a
    type-only import of a room above, or an arrow inside a run-time circle (run-time arrows between floors always
    point down, by this layering).

Module counts
    The modules at the package root are ``vsnap_qual/*.py``, ``__init__.py`` included; a subpackage's modules are
    the ``.py`` files of its own directory; lines are physical lines.

``dict[str, Any]``
    Every expression ``dict[str, Any]``, ``Dict[str, Any]`` or ``Mapping[str, Any]`` in the rooms (an annotation,
    an alias, a ``cast``), counted apart; a quoted annotation is read as the expression it holds. Comments,
    docstrings and other strings do not count.

Wide interfaces
    A ``Protocol``'s members are the distinct names of its methods, properties and annotated attributes, with those
    of the package's protocols it extends; a protocol that extends others is listed with them (``composes``), and
    one that declares no member of its own is a composition: the summary says how many it composes and the widest
    of them. A class's methods are its ``def``s (properties and dunders included),
    its fields its annotated attributes. A TypedDict's fields include those of the package's TypedDicts it extends.

Canary hops
    The hand-overs a restored engine's canary takes from its measurement (the function that turns the engine's
    HTTP answer into a canary) to the HTML page. A station is a function that holds the canary (or the record or
    table holding it) and passes it to another function, record or file, and the template that prints it; a
    function that only forwards an object it never opens (``assemble_path``, ``write_reports``, ``render_html``)
    and a helper that hands the canary back converted to the station that called it (``CanaryOutput.as_dict``,
    ``parse.record``, the redactor) are not stations. A hop is one hand-over between two stations; the figure is
    the number of hops. The recorder's step (which puts the step's results, never opened, into the record it hands
    the store) and ``read_evidence`` (which hands the evidence file's lines back as JSON objects) are such a
    forwarder and such a helper; so are the report's helpers that hand rows or blocks back to the view that called
    them. The chains declared for the code up to 0c0a835 listed some of those as stations (11 hops): they are
    kept as declared, for what ``--ref`` printed then; by these rules each of them is 7 hops, the one station more
    than the newest being the comparison frames' record (``frames.Comparisons.canary``, gone with the frame).
    The chain is declared below (:data:`CANARY_CHAINS`) and every hop is checked against the
    code: each station exists and the hand-over is there (a call, a key written and read, a file). A chain that
    no longer matches the code makes the script exit 1 naming the broken hop: whoever moves the canary's path
    declares the new chain (a new :class:`CanaryChain` appended, the old one given ``last``, the last commit
    whose code it describes), so a stale figure cannot be printed.

Fault kinds
    The files and places a built-in kind spans (``--kind``, default ``kill``): a place is an identifier with the
    kind's name (or its plural) as a word (its injector ``KillInjector``, its module ``kills``, ``kill_seed``,
    ``KILL_ID``, ``_kill_fields``) or a string of its data (the kind's name, or a string beginning with
    ``kill-``/``kill_``: its fault ids, evidence fields, option); where the name is a verb about processes
    (``os.kill(...)``, :data:`VERBS`) it is not the kind. The files are those with a place, and the kind's own
    modules (``kills.py``, ``faults/kinds/kill.py``). And whether ``vsnap_qual/faults/kinds/`` exists, and its
    modules.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict

PACKAGE = "vsnap_qual"
#: in-engine code, stdlib only and run by vLLM: not a room of the house
IN_ENGINE = ("probe", "smoke")
CHECKOUT = Path(__file__).resolve().parents[1]
#: the spellings of a string-keyed map of anything, counted apart
ANY_MAPS = ("dict", "Dict", "Mapping")
TOP_LINES = 10
TOP_CLASSES = 10
WIDE_TYPEDDICT = 20  # TypedDicts with more fields than this are listed


# ------------------------------------------------------------------------------------------------ reading a tree


@dataclass(frozen=True)
class Module:
    """One room: its dotted name (a package's ``__init__`` is the package's name), its path from the tree's root."""

    name: str
    path: str
    is_package: bool
    tree: ast.Module
    lines: int

    @property
    def package(self) -> str:
        """The package its relative imports start from."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


@dataclass(frozen=True)
class Tree:
    """The rooms of one tree, and every module name the tree has (in-engine code included), so that an import of
    in-engine code is not taken for one of its package."""

    root: Path
    modules: dict[str, Module]
    known: frozenset[str]


def _dotted(relative: Path) -> str:
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def read_tree(root: Path) -> Tree:
    """Parse every room of ``root/vsnap_qual`` (``SyntaxError`` names the file)."""
    package_dir = root / PACKAGE
    if not package_dir.is_dir():
        raise FileNotFoundError(f"{package_dir}: no {PACKAGE} package there")
    modules: dict[str, Module] = {}
    known: set[str] = set()
    for path in sorted(package_dir.rglob("*")):
        relative = path.relative_to(root)
        if path.is_dir():
            known.add(".".join(relative.parts))
            continue
        if path.suffix != ".py":
            continue
        name = _dotted(relative)
        known.add(name)
        if len(relative.parts) > 2 and relative.parts[1] in IN_ENGINE:
            continue
        text = path.read_text(encoding="utf-8")
        modules[name] = Module(
            name=name,
            path=relative.as_posix(),
            is_package=path.name == "__init__.py",
            tree=ast.parse(text, filename=str(relative)),
            lines=len(text.splitlines()),
        )
    return Tree(root, modules, frozenset(known))


# ------------------------------------------------------------------------------------------------ the import graph


@dataclass(frozen=True, order=True)
class Arrow:
    """An import of one room by another; ``type_only`` when every import drawing it is under TYPE_CHECKING."""

    source: str
    target: str
    type_only: bool


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST, type_only: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement under ``node``, and whether it stands under ``if TYPE_CHECKING:`` (its ``else``
    runs)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node, type_only
        return
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        for statement in node.body:
            yield from _imports(statement, True)
        for statement in node.orelse:
            yield from _imports(statement, type_only)
        return
    for child in ast.iter_child_nodes(node):
        yield from _imports(child, type_only)


def _targets(tree: Tree, module: Module, statement: ast.Import | ast.ImportFrom) -> Iterator[tuple[ast.alias, str]]:
    """The rooms one import statement draws arrows to, each with the name imported that draws it."""
    rooms = tree.modules
    if isinstance(statement, ast.Import):
        for alias in statement.names:
            if alias.name in rooms:
                yield alias, alias.name
        return
    base = statement.module or ""
    if statement.level:
        parts = module.package.split(".")
        parts = parts[: len(parts) - (statement.level - 1)]
        base = ".".join([*parts, base] if base else parts)
    for alias in statement.names:
        submodule = f"{base}.{alias.name}"
        if submodule in rooms:
            yield alias, submodule
        elif submodule in tree.known:
            continue  # in-engine code, not a room
        elif base in rooms:
            yield alias, base


def arrows(tree: Tree) -> list[Arrow]:
    """Every arrow between rooms, sorted; type-only when no import drawing it runs."""
    runs: dict[tuple[str, str], bool] = {}
    for module in tree.modules.values():
        for statement, type_only in _imports(module.tree):
            for _, target in _targets(tree, module, statement):
                if target != module.name:
                    key = (module.name, target)
                    runs[key] = runs.get(key, False) or not type_only
    return sorted(Arrow(source, target, not run) for (source, target), run in runs.items())


def components(nodes: Sequence[str], edges: Sequence[tuple[str, str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan), each sorted, in reverse topological order."""
    successors: dict[str, list[str]] = {n: [] for n in nodes}
    for source, target in edges:
        successors[source].append(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in successors[node]:
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * len(nodes) + 100))
    try:
        for node in nodes:
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return found


def floors(nodes: Sequence[str], edges: Sequence[tuple[str, str]]) -> dict[str, int]:
    """Each node's floor: 1 + the longest chain of ``edges`` below it; a circle's members share its floor."""
    groups = components(nodes, edges)  # reverse topological: a component's successors come before it
    group_of = {member: i for i, group in enumerate(groups) for member in group}
    floor_of_group: list[int] = []
    for i in range(len(groups)):
        # a successor group has a lower index (reverse topological order): its floor is known
        below = [floor_of_group[group_of[t]] for s, t in edges if group_of[s] == i and group_of[t] != i]
        floor_of_group.append(1 + max(below, default=0))
    return {member: floor_of_group[group_of[member]] for member in nodes}


def import_graph(tree: Tree) -> dict[str, Any]:
    """Rooms, arrows, circles, floors and arrows up of ``tree``."""
    rooms = sorted(tree.modules)
    drawn = arrows(tree)
    every = [(a.source, a.target) for a in drawn]
    at_run_time = [(a.source, a.target) for a in drawn if not a.type_only]
    circles = [c for c in components(rooms, every) if len(c) > 1]
    run_time_circles = [c for c in components(rooms, at_run_time) if len(c) > 1]
    floor = floors(rooms, at_run_time)
    up = [a for a in drawn if floor[a.target] >= floor[a.source]]
    return {
        "rooms": len(rooms),
        "arrows": len(drawn),
        "arrows_at_run_time": len(at_run_time),
        "type_only_arrows": len(drawn) - len(at_run_time),
        "circles": [
            {
                "rooms": circle,
                "arrows": [
                    {"from": a.source, "to": a.target, "type_only": a.type_only}
                    for a in drawn
                    if a.source in circle and a.target in circle
                ],
                "at_run_time": any(set(circle) >= set(c) for c in run_time_circles),
            }
            for circle in sorted(circles, key=lambda c: (-len(c), c))
        ],
        "circles_at_run_time": len(run_time_circles),
        "floors": max(floor.values(), default=0),
        "floor": dict(sorted(floor.items())),
        "arrows_up": [
            {"from": a.source, "to": a.target, "type_only": a.type_only, "floors": [floor[a.source], floor[a.target]]}
            for a in up
        ],
    }


# ------------------------------------------------------------------------------------------------ module counts


def module_counts(tree: Tree) -> dict[str, Any]:
    """Modules at the root and per subpackage; lines per module, the largest first."""
    packages: dict[str, list[Module]] = {}
    for module in tree.modules.values():
        packages.setdefault(str(Path(module.path).parent).replace("/", "."), []).append(module)
    by_size = sorted(tree.modules.values(), key=lambda m: (-m.lines, m.path))
    return {
        "root_modules": len(packages.get(PACKAGE, [])),
        "packages": {
            name: {"modules": len(found), "lines": sum(m.lines for m in found)}
            for name, found in sorted(packages.items())
        },
        "lines": sum(m.lines for m in tree.modules.values()),
        "largest": [{"module": m.path, "lines": m.lines} for m in by_size[:TOP_LINES]],
        "excluded": [f"{PACKAGE}/{part}/" for part in IN_ENGINE],
    }


# ------------------------------------------------------------------------------------------------ dict[str, Any]


def _name(node: ast.expr) -> str | None:
    """The last name of ``x`` or ``a.b.x``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _any_map(node: ast.AST) -> str | None:
    """The spelling (``dict``, ``Dict``, ``Mapping``) when ``node`` is ``<spelling>[str, Any]``."""
    if not isinstance(node, ast.Subscript) or _name(node.value) not in ANY_MAPS:
        return None
    key_value = node.slice
    if not isinstance(key_value, ast.Tuple) or len(key_value.elts) != 2:
        return None
    key, value = key_value.elts
    if _name(key) == "str" and _name(value) == "Any":
        return _name(node.value)
    return None


def _annotations(tree: ast.AST) -> Iterator[ast.expr]:
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            yield node.annotation
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            yield node.returns
        elif isinstance(node, ast.AnnAssign):
            yield node.annotation


def any_maps_of(tree: ast.AST) -> Counter[str]:
    """The ``<map>[str, Any]`` expressions of one parsed module, by spelling; a quoted annotation is read as the
    expression it holds, any other string is not code."""
    found: Counter[str] = Counter()
    for node in ast.walk(tree):
        spelling = _any_map(node)
        if spelling:
            found[spelling] += 1
    for annotation in _annotations(tree):
        for node in ast.walk(annotation):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                try:
                    quoted = ast.parse(node.value, mode="eval")
                except SyntaxError:
                    continue
                found += any_maps_of(quoted)
    return found


def any_maps(tree: Tree) -> dict[str, Any]:
    """``dict[str, Any]`` and its two cousins in the rooms, counted apart, and the modules holding most."""
    total: Counter[str] = Counter()
    per_module: dict[str, int] = {}
    for module in tree.modules.values():
        found = any_maps_of(module.tree)
        total += found
        if found:
            per_module[module.path] = sum(found.values())
    return {
        **{f"{spelling}[str, Any]": total[spelling] for spelling in ANY_MAPS},
        "modules": dict(sorted(per_module.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


# ------------------------------------------------------------------------------------------------ wide interfaces


@dataclass
class ClassInfo:
    """One class of the package: what it declares itself, and its bases as written."""

    module: str
    name: str
    bases: list[ast.expr]
    methods: set[str] = field(default_factory=set)
    properties: set[str] = field(default_factory=set)
    attributes: set[str] = field(default_factory=set)
    keys: int | None = None  # a functional TypedDict's fields

    @property
    def label(self) -> str:
        return f"{self.module}.{self.name}"


def _is_property(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for decorator in function.decorator_list:
        name = _name(decorator)
        if name in ("property", "cached_property", "setter", "deleter", "getter"):
            return True
    return False


def _classes_of(module: Module) -> Iterator[ClassInfo]:
    for node in ast.walk(module.tree):
        if isinstance(node, ast.ClassDef):
            info = ClassInfo(module.name, node.name, list(node.bases))
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    (info.properties if _is_property(item) else info.methods).add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    info.attributes.add(item.target.id)
            info.methods -= info.properties  # a property's setter is the property
            yield info
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)
            and _name(node.value.func) == "TypedDict"
            and len(node.value.args) >= 2
            and isinstance(node.value.args[1], ast.Dict)
        ):
            typed = ClassInfo(module.name, node.targets[0].id, [node.value.func])
            typed.keys = len(node.value.args[1].keys)
            yield typed


class ClassIndex:
    """Every class of the rooms, its bases resolved inside the package by the names its module imports."""

    def __init__(self, tree: Tree) -> None:
        self.classes = [c for m in tree.modules.values() for c in _classes_of(m)]
        self._by_module: dict[tuple[str, str], ClassInfo] = {(c.module, c.name): c for c in self.classes}
        self._imported: dict[str, dict[str, tuple[str, str]]] = {}  # module -> local name -> (module, name)
        for module in tree.modules.values():
            names: dict[str, tuple[str, str]] = {}
            for statement, _ in _imports(module.tree):
                if isinstance(statement, ast.ImportFrom):
                    for alias, target in _targets(tree, module, statement):
                        local = alias.asname or alias.name
                        names[local] = (target, "") if target.endswith(f".{alias.name}") else (target, alias.name)
            self._imported[module.name] = names

    def resolve(self, module: str, base: ast.expr) -> ClassInfo | None:
        """The package's class a base expression names, if it is one."""
        if isinstance(base, ast.Subscript):
            base = base.value
        if isinstance(base, ast.Name):
            if (module, base.id) in self._by_module:
                return self._by_module[(module, base.id)]
            source, name = self._imported.get(module, {}).get(base.id, ("", ""))
            return self._by_module.get((source, name)) if name else None
        if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
            source, name = self._imported.get(module, {}).get(base.value.id, ("", ""))
            return self._by_module.get((source, base.attr)) if source and not name else None
        return None

    def ancestors(self, info: ClassInfo) -> list[ClassInfo]:
        """The class and the package's classes it extends, each once."""
        seen: list[ClassInfo] = []
        todo = [info]
        while todo:
            current = todo.pop()
            if any(current is s for s in seen):
                continue
            seen.append(current)
            todo += [b for b in (self.resolve(current.module, e) for e in current.bases) if b is not None]
        return seen

    def is_a(self, info: ClassInfo, kind: str) -> bool:
        """Whether ``info`` or a package class it extends names ``kind`` (``Protocol``, ``TypedDict``) as a base."""
        return any(
            _name(b.value if isinstance(b, ast.Subscript) else b) == kind for a in self.ancestors(info) for b in a.bases
        )


class ProtocolWidth(TypedDict):
    name: str
    members: int
    methods: int
    properties: int
    attributes: int
    own: int  # the members it declares itself
    composes: list[str]  # the package's protocols it extends, as written


class ClassWidth(TypedDict):
    name: str
    methods: int  # properties included
    fields: int


class TypedDictWidth(TypedDict):
    name: str
    fields: int


def interfaces(tree: Tree) -> dict[str, Any]:
    """Members of every Protocol, methods of the largest classes, fields of the wide TypedDicts: widest first."""
    index = ClassIndex(tree)
    protocols: list[ProtocolWidth] = []
    typed_dicts: list[TypedDictWidth] = []
    others: list[ClassWidth] = []
    for info in index.classes:
        own_protocol = any(_name(b.value if isinstance(b, ast.Subscript) else b) == "Protocol" for b in info.bases)
        if index.is_a(info, "TypedDict"):
            fields = sum(a.keys if a.keys is not None else len(a.attributes) for a in index.ancestors(info))
            typed_dicts.append(TypedDictWidth(name=info.label, fields=fields))
        elif own_protocol:
            lineage = [a for a in index.ancestors(info) if a is info or index.is_a(a, "Protocol")]
            methods = set[str]().union(*(a.methods for a in lineage))
            properties = set[str]().union(*(a.properties for a in lineage))
            attributes = set[str]().union(*(a.attributes for a in lineage)) - methods - properties
            own = info.methods | info.properties | info.attributes
            bases = [index.resolve(info.module, b) for b in info.bases]
            protocols.append(
                ProtocolWidth(
                    name=info.label,
                    members=len(methods | properties | attributes),
                    methods=len(methods),
                    properties=len(properties),
                    attributes=len(attributes),
                    own=len(own),
                    composes=[b.label for b in bases if b is not None and index.is_a(b, "Protocol")],
                )
            )
        else:
            others.append(
                ClassWidth(
                    name=info.label,
                    methods=len(info.methods | info.properties),
                    fields=len(info.attributes - info.methods - info.properties),
                )
            )
    return {
        "protocols": sorted(protocols, key=lambda p: (-p["members"], p["name"])),
        "largest_classes": sorted(others, key=lambda c: (-c["methods"], -c["fields"], c["name"]))[:TOP_CLASSES],
        "wide_typed_dicts": sorted(
            (t for t in typed_dicts if t["fields"] > WIDE_TYPEDDICT), key=lambda t: (-t["fields"], t["name"])
        ),
    }


# ------------------------------------------------------------------------------------------------ canary hops


@dataclass(frozen=True)
class Check:
    """One fact of the code a hop rests on: the function (``path:Qual.name``) or template (``path``) ``where``
    ``calls``, ``writes`` (a subscript or attribute stored, a dict literal's key, a keyword argument), ``reads``
    (a subscript or attribute loaded, ``.get``/``.pop``), ``names`` (a name or a string equal to it; in a template,
    a name its tags use) or, for a class, ``declares`` ``what``."""

    where: str
    does: Literal["calls", "writes", "reads", "names", "declares"]
    what: str

    def __str__(self) -> str:
        return f"{self.where} {self.does} {self.what!r}"


@dataclass(frozen=True)
class Hop:
    """One hand-over: the station ``to`` takes the canary from the previous station, ``by`` what, and the code
    shows it in ``checks``."""

    to: str
    by: str
    checks: tuple[Check, ...]


@dataclass(frozen=True)
class CanaryChain:
    """The stations a restored engine's canary passes from its measurement (``start``) to the HTML page.

    ``last``: the last commit whose code this chain describes (None: the current code). ``--ref REV`` takes the
    oldest chain whose ``last`` REV is or precedes; the working tree and any later revision take the newest."""

    start: str
    hops: tuple[Hop, ...]
    last: str | None = None


def _calls(where: str, what: str) -> Check:
    return Check(where, "calls", what)


ENGINE = "vsnap_qual/engine/client.py:completion"
LANE_API = "vsnap_qual/lane/engine_api.py:LaneEngineApi.canaries"
RESTORE = "vsnap_qual/steps.py:restore"
RECORDER = "vsnap_qual/recorder.py:StepRecorder.step"
STORE = "vsnap_qual/evidence.py:EvidenceStore.write"
READER = "vsnap_qual/evidence.py:read_evidence"
ASSEMBLE = "vsnap_qual/report/assemble.py:assemble"
CANARY_FRAME = "vsnap_qual/report/frames.py:canary_frame"
COMPARE_ALL = "vsnap_qual/report/frames.py:compare_all"
HTML_CANARY = "vsnap_qual/report/html.py:_canary"
BUILD_VIEW = "vsnap_qual/report/html.py:build_view"
TEMPLATE = "vsnap_qual/report/templates/report.html.j2"
ASSEMBLE_PATH = "vsnap_qual/report/assemble.py:assemble_path"
CANARY_ROWS = "vsnap_qual/report/canary.py:canary_rows"

#: The hops from the step's record to the HTML page (the report's side of every chain since 5330513).
_RECORDED_TO_HTML: tuple[Hop, ...] = (
    Hop(
        RECORDER,
        "record: restore writes rec.results['canary'] (model.StepResults) into the StepEvidence "
        "the recorder's step yields; the step reads evidence.results when it ends",
        (
            Check(RESTORE, "writes", "canary"),
            Check(RESTORE, "reads", "results"),
            Check("vsnap_qual/model.py:StepResults", "declares", "canary"),
            Check(RECORDER, "reads", "results"),
        ),
    ),
    Hop(
        STORE,
        "argument: the step hands model.StepRecord(results=...) to the evidence store",
        (Check(RECORDER, "writes", "results"), _calls(RECORDER, "write")),
    ),
    Hop(
        READER,
        "file: one JSON line of evidence.jsonl, read back when the session ends",
        (
            _calls(STORE, "_line"),
            _calls("vsnap_qual/evidence.py:EvidenceStore._line", "dumps"),
            _calls(READER, "loads"),
        ),
    ),
    Hop(
        ASSEMBLE,
        "returned to report.assemble.assemble_path, which hands Evidence.records to assemble "
        "(each line checked by parse.record, kept as RunEvidence.steps)",
        (
            _calls("vsnap_qual/report/assemble.py:assemble_path", "read_evidence"),
            _calls("vsnap_qual/report/assemble.py:assemble_path", "assemble"),
            Check(ASSEMBLE, "reads", "records"),
            _calls(ASSEMBLE, "record"),
            Check(ASSEMBLE, "writes", "steps"),
        ),
    ),
    Hop(
        CANARY_FRAME,
        "argument: assemble hands the RunEvidence to frames.compare_all, which hands it on; "
        "canary_frame reads each restore's results['canary']",
        (
            _calls(ASSEMBLE, "compare_all"),
            _calls(COMPARE_ALL, "canary_frame"),
            Check(CANARY_FRAME, "reads", "results"),
            Check(CANARY_FRAME, "reads", "canary"),
        ),
    ),
    Hop(
        COMPARE_ALL,
        "returned: the canary table (a DataFrame of CanaryRow)",
        (_calls(COMPARE_ALL, "canary_frame"),),
    ),
    Hop(
        HTML_CANARY,
        "record: compare_all keeps it as Comparisons.canary, carried by assemble's Assembled "
        "through write_reports, render_reports and render_html to build_view; html._canary reads it",
        (
            Check(COMPARE_ALL, "writes", "canary"),
            Check("vsnap_qual/report/frames.py:Comparisons", "declares", "canary"),
            Check(HTML_CANARY, "reads", "canary"),
        ),
    ),
    Hop(BUILD_VIEW, "returned: the runner's CanaryBlocks", (_calls(BUILD_VIEW, "_canary"),)),
    Hop(
        TEMPLATE,
        "record: build_view writes ReportView.canary; render_html renders the template with it",
        (
            Check(BUILD_VIEW, "writes", "canary"),
            _calls("vsnap_qual/report/html.py:render_html", "build_view"),
            Check("vsnap_qual/report/html.py:_template", "names", "report.html.j2"),
            Check(TEMPLATE, "names", "canary"),
        ),
    ),
)

#: Each read from the code it describes (the first from 5330513, the base of issue 43); oldest first.
CANARY_CHAINS: tuple[CanaryChain, ...] = (
    CanaryChain(
        start="vsnap_qual/engine.py:completion",
        hops=(
            Hop(
                "vsnap_qual/lane.py:LaneRun.canaries",
                "returned: LaneRun.canaries asks engine.completion for each prompt of the canary plan",
                (_calls("vsnap_qual/lane.py:LaneRun.canaries", "completion"),),
            ),
            Hop(
                RESTORE,
                "returned: steps.restore asks the lane through the LaneTools protocol",
                (_calls(RESTORE, "canaries"), Check("vsnap_qual/steps.py:LaneTools", "declares", "canaries")),
            ),
            *_RECORDED_TO_HTML,
        ),
        last="b18151af2141ace3407e7c2577a81b85156cfbac",
    ),
    CanaryChain(
        start=ENGINE,
        hops=(
            Hop(
                "vsnap_qual/lane.py:LaneRun.canaries",
                "returned: LaneRun.canaries asks engine.client.completion for each prompt of the canary plan",
                (_calls("vsnap_qual/lane.py:LaneRun.canaries", "completion"),),
            ),
            Hop(
                RESTORE,
                "returned: steps.restore asks the lane through the LaneTools protocol",
                (_calls(RESTORE, "canaries"), Check("vsnap_qual/steps.py:LaneTools", "declares", "canaries")),
            ),
            *_RECORDED_TO_HTML,
        ),
        last="1b1de2bce2778a9310b8bd4c13d436b28aba69f7",
    ),
    CanaryChain(
        start=ENGINE,
        hops=(
            Hop(
                LANE_API,
                "returned: the lane's engine API asks engine.client.completion for each prompt of the canary plan",
                (_calls(LANE_API, "completion"),),
            ),
            Hop(
                RESTORE,
                "returned: steps.restore asks the lane's engine API (lane.api, the EngineApi protocol)",
                (_calls(RESTORE, "canaries"), Check("vsnap_qual/lane/protocols.py:EngineApi", "declares", "canaries")),
            ),
            *_RECORDED_TO_HTML,
        ),
        last="0c0a8351df415da0589869d42831e1a278382584",
    ),
    CanaryChain(
        start=ENGINE,
        hops=(
            Hop(
                LANE_API,
                "returned: the lane's engine API asks engine.client.completion for each prompt of the canary plan",
                (_calls(LANE_API, "completion"),),
            ),
            Hop(
                RESTORE,
                "returned: steps.restore asks the lane's engine API (lane.api, the EngineApi protocol) and judges "
                "each canary against the ordinary reference (checks.compare_canary: a helper handing the comparison "
                "back)",
                (
                    _calls(RESTORE, "canaries"),
                    Check("vsnap_qual/lane/protocols.py:EngineApi", "declares", "canaries"),
                    _calls(RESTORE, "compare_canary"),
                ),
            ),
            Hop(
                STORE,
                "record: steps.restore builds its model.RestoreResults (canary, canary_compare) and hands it to the "
                "step's record in one place (rec.results); the recorder's step forwards the results, never opened, "
                "in StepRecord(results=...) to the evidence store",
                (
                    _calls(RESTORE, "RestoreResults"),
                    Check(RESTORE, "writes", "canary_compare"),
                    Check("vsnap_qual/model.py:RestoreResults", "declares", "canary_compare"),
                    Check(RECORDER, "reads", "results"),
                    Check(RECORDER, "writes", "results"),
                    _calls(RECORDER, "write"),
                ),
            ),
            Hop(
                ASSEMBLE,
                "file: one JSON line of evidence.jsonl, read back when the session ends (read_evidence hands the "
                "lines back as JSON objects to assemble_path, which forwards them); assemble checks each record "
                "against its step's results type (parse.record) and keeps it as RunEvidence.steps",
                (
                    _calls(STORE, "_line"),
                    _calls("vsnap_qual/evidence.py:EvidenceStore._line", "dumps"),
                    _calls(READER, "loads"),
                    _calls(ASSEMBLE_PATH, "read_evidence"),
                    _calls(ASSEMBLE_PATH, "assemble"),
                    Check(ASSEMBLE, "reads", "records"),
                    _calls(ASSEMBLE, "record"),
                    _calls("vsnap_qual/report/parse.py:_object", "_step_results"),
                    Check(ASSEMBLE, "writes", "steps"),
                ),
            ),
            Hop(
                BUILD_VIEW,
                "forwarded: the Results, by assemble_path, write_reports, render_reports and render_html (none opens "
                "a step record), to build_view; its canary view (html._canary, through report.canary.canary_rows: "
                "helpers handing rows and blocks back) is each canary step's recorded canaries beside its own "
                "recorded judgement (canary_compare): no table, no comparison made again",
                (
                    _calls("vsnap_qual/report/__init__.py:write_reports", "render_reports"),
                    _calls("vsnap_qual/report/__init__.py:render_reports", "render_html"),
                    _calls("vsnap_qual/report/html.py:render_html", "build_view"),
                    _calls(BUILD_VIEW, "_canary"),
                    _calls(HTML_CANARY, "canary_rows"),
                    Check(CANARY_ROWS, "reads", "canary_compare"),
                    Check(CANARY_ROWS, "names", "CANARY_STEPS"),
                ),
            ),
            Hop(
                TEMPLATE,
                "record: build_view writes ReportView.canary; render_html renders the template with it",
                (
                    Check(BUILD_VIEW, "writes", "canary"),
                    Check("vsnap_qual/report/html.py:_template", "names", "report.html.j2"),
                    Check(TEMPLATE, "names", "canary"),
                ),
            ),
        ),
    ),
)


def _definitions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """Every function and class by its qualified name (nested in classes and functions alike)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            qualified = f"{prefix}{node.name}"
            yield qualified, node
            yield from _definitions(node, f"{qualified}.")
        else:
            yield from _definitions(node, prefix)


def _find(root: Path, where: str, cache: dict[str, ast.Module]) -> ast.AST | str | None:
    """The definition ``path:Qual.name`` names, a template's text for a plain path, None when it is not there."""
    path, _, qualified = where.partition(":")
    file = root / path
    if not file.is_file():
        return None
    if not qualified:
        return file.read_text(encoding="utf-8")
    if path not in cache:
        cache[path] = ast.parse(file.read_text(encoding="utf-8"), filename=path)
    return next((node for name, node in _definitions(cache[path]) if name == qualified), None)


_TEMPLATE_TAG = re.compile(r"\{\{(.*?)\}\}|\{%(.*?)%\}", re.DOTALL)


def _holds(found: ast.AST | str, check: Check) -> bool:
    """Whether the definition (or template text) ``found`` shows ``check``."""
    what = check.what
    if isinstance(found, str):  # a template: the names its tags use
        names = {n for m in _TEMPLATE_TAG.finditer(found) for n in re.findall(r"[A-Za-z_]\w*", "".join(m.groups("")))}
        return check.does == "names" and what in names
    if check.does == "declares":
        return isinstance(found, ast.ClassDef) and any(
            (isinstance(i, (ast.FunctionDef, ast.AsyncFunctionDef)) and i.name == what)
            or (isinstance(i, ast.AnnAssign) and isinstance(i.target, ast.Name) and i.target.id == what)
            for i in found.body
        )
    for node in ast.walk(found):
        if check.does == "calls" and isinstance(node, ast.Call) and _name(node.func) == what:
            return True
        if check.does == "names" and (
            (isinstance(node, (ast.Name, ast.Attribute)) and _name(node) == what)
            or (isinstance(node, ast.Constant) and node.value == what)
        ):
            return True
        if check.does == "writes" and (
            (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and _constant(node.slice) == what)
            or (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and node.attr == what)
            or (isinstance(node, ast.Dict) and any(_constant(k) == what for k in node.keys if k is not None))
            or (isinstance(node, ast.keyword) and node.arg == what)
        ):
            return True
        if check.does == "reads" and (
            (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _constant(node.slice) == what)
            or (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and node.attr == what)
            or (
                isinstance(node, ast.Call)
                and _name(node.func) in ("get", "pop", "setdefault")
                and bool(node.args)
                and _constant(node.args[0]) == what
            )
        ):
            return True
    return False


def _constant(node: ast.AST) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def verify_chain(root: Path, chain: CanaryChain) -> list[str]:
    """What does not match the code, hop by hop (empty: every hop holds)."""
    cache: dict[str, ast.Module] = {}
    problems = []
    if _find(root, chain.start, cache) is None:
        problems.append(f"the measurement {chain.start}: not in the code")
    previous = chain.start
    for number, hop in enumerate(chain.hops, 1):
        said = f"hop {number} ({previous} -> {hop.to})"
        if _find(root, hop.to, cache) is None:
            problems.append(f"{said}: {hop.to} is not in the code")
        for check in hop.checks:
            found = _find(root, check.where, cache)
            if found is None:
                problems.append(f"{said}: {check.where} is not in the code")
            elif not _holds(found, check):
                problems.append(f"{said}: {check} does not hold")
        previous = hop.to
    return list(dict.fromkeys(problems))  # a station missing is said once per hop


def canary_hops(root: Path, chain: CanaryChain) -> dict[str, Any]:
    """The chain's stations, its hops and what of it does not match the code."""
    problems = verify_chain(root, chain)
    return {
        "hops": len(chain.hops),
        "stations": [chain.start, *(h.to for h in chain.hops)],
        "by": [h.by for h in chain.hops],
        "chain_last": chain.last,
        "verified": not problems,
        "broken": problems,
    }


def chain_for(repository: Path, ref: str | None, chains: Sequence[CanaryChain] | None = None) -> CanaryChain:
    """The declared chain (of :data:`CANARY_CHAINS`) of a revision: the oldest whose ``last`` it is or precedes;
    else, and for the working tree, the newest."""
    chains = CANARY_CHAINS if chains is None else chains
    if ref is not None:
        for chain in chains:
            if chain.last is not None and _is_ancestor(repository, ref, chain.last):
                return chain
    return chains[-1]


def _is_ancestor(repository: Path, ref: str, last: str) -> bool:
    found = subprocess.run(
        ["git", "-C", str(repository), "merge-base", "--is-ancestor", ref, last], capture_output=True, check=False
    )
    return found.returncode == 0


# ------------------------------------------------------------------------------------------------ fault kinds

#: identifiers where the kind's name is a verb about processes, not the kind (a teardown's ``_kill_all``, the sweep
#: of a fault's leftover processes); a call of a function named the kind itself (``os.kill``, ``process.kill()``)
#: is the verb too
VERBS: Mapping[str, frozenset[str]] = {"kill": frozenset({"killpg", "_kill_all", "kill_leftovers"})}


def _words(identifier: str) -> list[str]:
    """``KillInjector`` -> kill, injector; ``_kill_fields`` -> kill, fields; ``KILL_ID`` -> kill, id."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", identifier)
    return [w.lower() for w in re.split(r"[^A-Za-z0-9]+", spaced) if w]


def _identifiers(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.alias):
        return [node.name.rpartition(".")[2], *([node.asname] if node.asname else [])]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.keyword) and node.arg:
        return [node.arg]
    return []


def kind_names_of(tree: ast.AST, kind: str) -> Counter[str]:
    """The places of one parsed module that name the fault kind ``kind``, by what names it: an identifier with
    the kind's name (or its plural) as a word, or a string of its data (the name itself, or beginning with
    ``<kind>-``/``<kind>_``: its fault ids, evidence fields, option); the verbs (:data:`VERBS`) are not the kind."""
    found: Counter[str] = Counter()
    verbs = VERBS.get(kind, frozenset())
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call) and _name(n.func) == kind}
    for node in ast.walk(tree):
        if id(node) in called:
            continue
        for identifier in _identifiers(node):
            if identifier not in verbs and {kind, f"{kind}s"} & set(_words(identifier)):
                found[identifier] += 1
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and (node.value == kind or node.value.startswith((f"{kind}-", f"{kind}_")))
        ):
            found[repr(node.value)] += 1
    return found


def fault_kind(tree: Tree, kind: str) -> dict[str, Any]:
    """The files and places the built-in ``kind`` spans, and the state of ``faults/kinds/``."""
    own = sorted(m.path for m in tree.modules.values() if Path(m.path).stem in (kind, f"{kind}s"))
    per_file: dict[str, dict[str, Any]] = {}
    for module in tree.modules.values():
        names = kind_names_of(module.tree, kind)
        if names or module.path in own:
            per_file[module.path] = {"places": sum(names.values()), "names": sorted(names)}
    kinds_dir = tree.root / PACKAGE / "faults" / "kinds"
    kind_modules = sorted(
        Path(m.path).stem
        for m in tree.modules.values()
        if Path(m.path).parent == Path(PACKAGE, "faults", "kinds") and not m.is_package
    )
    return {
        "kind": kind,
        "own_modules": own,
        "files": len(per_file),
        "places": sum(f["places"] for f in per_file.values()),
        "per_file": dict(sorted(per_file.items(), key=lambda kv: (-kv[1]["places"], kv[0]))),
        "kinds_package": kinds_dir.is_dir(),
        "kind_modules": kind_modules,
    }


# ------------------------------------------------------------------------------------------------ the figures


def figures(root: Path, chain: CanaryChain, kind: str = "kill") -> dict[str, Any]:
    """Every figure of the tree at ``root``."""
    tree = read_tree(root)
    return {
        "graph": import_graph(tree),
        "modules": module_counts(tree),
        "dict_str_any": any_maps(tree),
        "interfaces": interfaces(tree),
        "canary": canary_hops(root, chain),
        "fault_kind": fault_kind(tree, kind),
    }


SUMMARY_COLUMNS = (
    "tree", "rooms", "arrows (run time)", "circles (run time)", "floors", "arrows up", "root modules",
    "`dict[str, Any]`", "widest protocols", "widest class: methods", "widest TypedDict", "canary hops",
    "fault kind: files / places",
    "`faults/kinds/`",
)  # fmt: skip


def summary_row(label: str, found: Mapping[str, Any]) -> list[str]:
    """The one-row summary docs/design.md keeps, in :data:`SUMMARY_COLUMNS`' order."""
    graph, interface = found["graph"], found["interfaces"]
    widest = ", ".join(_protocol_width(p, interface["protocols"]) for p in interface["protocols"][:3]) or "none"
    typed = interface["wide_typed_dicts"]
    canary = found["canary"]
    kinds = found["fault_kind"]
    return [
        label,
        str(graph["rooms"]),
        f"{graph['arrows']} ({graph['arrows_at_run_time']})",
        f"{len(graph['circles'])} ({graph['circles_at_run_time']})",
        str(graph["floors"]),
        str(len(graph["arrows_up"])),
        str(found["modules"]["root_modules"]),
        str(found["dict_str_any"]["dict[str, Any]"]),
        widest,
        ", ".join(f"`{_short(c['name'])}` {c['methods']}" for c in interface["largest_classes"][:1]) or "none",
        f"`{_short(typed[0]['name'])}` {typed[0]['fields']}" if typed else "none over 20",
        str(canary["hops"]) if canary["verified"] else f"{canary['hops']} (chain broken)",
        f"{kinds['kind']}: {kinds['files']} / {kinds['places']}",
        f"{len(kinds['kind_modules'])} module{'' if len(kinds['kind_modules']) == 1 else 's'}"
        if kinds["kinds_package"]
        else "absent",
    ]


def _protocol_width(protocol: ProtocolWidth, protocols: Sequence[ProtocolWidth]) -> str:
    """```Box` 40``; a composition (no member of its own): ```Box` 40 (7 composed, each ≤ 12)``."""
    said = f"`{_short(protocol['name'])}` {protocol['members']}"
    if protocol["composes"] and not protocol["own"]:
        parts = [p["members"] for p in protocols if p["name"] in protocol["composes"]]
        said += f" ({len(protocol['composes'])} composed, each ≤ {max(parts, default=0)})"
    return said


def _short(label: str) -> str:
    return label.rpartition(".")[2]


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(str(c) for c in row) + " |" for row in rows),
    ]


def markdown(label: str, found: Mapping[str, Any]) -> str:
    """The figures as Markdown: the summary row, then each figure's detail."""
    graph, modules, maps = found["graph"], found["modules"], found["dict_str_any"]
    interface, canary, kinds = found["interfaces"], found["canary"], found["fault_kind"]
    out = [f"# The house in figures: `{PACKAGE}` at {label}", "", *_table(SUMMARY_COLUMNS, [summary_row(label, found)])]
    out += ["", "## Import graph", ""]
    out += [
        f"{graph['rooms']} rooms, {graph['arrows']} arrows ({graph['arrows_at_run_time']} at run time, "
        f"{graph['type_only_arrows']} type-only), {graph['floors']} floors, {len(graph['arrows_up'])} arrows up, "
        f"{len(graph['circles'])} circles ({graph['circles_at_run_time']} at run time).",
        "",
    ]
    for number, circle in enumerate(graph["circles"], 1):
        closing = "at run time" if circle["at_run_time"] else "only through type-only imports"
        out.append(f"- circle {number} ({len(circle['rooms'])} rooms, closes {closing}): {', '.join(circle['rooms'])}")
        out += [f"  - {a['from']} -> {a['to']}{' (type-only)' if a['type_only'] else ''}" for a in circle["arrows"]]
    out += ["", "Arrows up (to the same or a higher floor):", ""]
    out += [
        f"- {a['from']} (floor {a['floors'][0]}) -> {a['to']} (floor {a['floors'][1]})"
        f"{' (type-only)' if a['type_only'] else ''}"
        for a in graph["arrows_up"]
    ] or ["- none"]
    out += ["", "## Modules", ""]
    out += [
        f"{modules['root_modules']} at the package root, {modules['lines']} lines "
        f"({', '.join(modules['excluded'])} left out).",
        "",
    ]
    out += _table(
        ("package", "modules", "lines"), [(k, v["modules"], v["lines"]) for k, v in modules["packages"].items()]
    )
    out += ["", *_table(("largest module", "lines"), [(m["module"], m["lines"]) for m in modules["largest"]])]
    spellings = ", ".join(f"`{k}` {v}" for k, v in maps.items() if k != "modules")
    out += [
        "",
        "## `dict[str, Any]`",
        "",
        f"{spellings}; by module: " + ", ".join(f"{k} {v}" for k, v in maps["modules"].items()),
    ]
    out += ["", "## Wide interfaces", ""]
    out += _table(
        ("Protocol", "members", "methods", "properties", "attributes", "own", "composes"),
        [
            (
                p["name"],
                p["members"],
                p["methods"],
                p["properties"],
                p["attributes"],
                p["own"],
                ", ".join(_short(c) for c in p["composes"]) or "-",
            )
            for p in interface["protocols"]
        ],
    )
    out += [
        "",
        *_table(
            ("class", "methods", "fields"),
            [(c["name"], c["methods"], c["fields"]) for c in interface["largest_classes"]],
        ),
    ]
    out += [
        "",
        *_table(
            (f"TypedDict over {WIDE_TYPEDDICT} fields", "fields"),
            [(t["name"], t["fields"]) for t in interface["wide_typed_dicts"]],
        ),
    ]
    out += ["", f"## Canary: {canary['hops']} hops from measurement to HTML", "", f"0. `{canary['stations'][0]}`"]
    out += [f"{n}. `{s}`: {by}" for n, (s, by) in enumerate(zip(canary["stations"][1:], canary["by"], strict=True), 1)]
    if not canary["verified"]:
        out += ["", "**The declared chain does not match the code:**", "", *(f"- {p}" for p in canary["broken"])]
    out += ["", f"## Fault kind `{kinds['kind']}`", ""]
    out += [
        f"{kinds['files']} files, {kinds['places']} places (its own modules: "
        f"{', '.join(kinds['own_modules']) or 'none'}):",
        "",
        *(f"- {path} {f['places']}: {', '.join(f['names'])}" for path, f in kinds["per_file"].items()),
        "",
        f"`{PACKAGE}/faults/kinds/`: "
        + (
            f"{len(kinds['kind_modules'])} modules ({', '.join(kinds['kind_modules'])})"
            if kinds["kinds_package"]
            else "absent"
        ),
    ]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------------ trees at a revision


def _git(repository: Path, *args: str) -> bytes:
    done = subprocess.run(["git", "-C", str(repository), *args], capture_output=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def extract(repository: Path, ref: str, into: Path) -> str:
    """Write the package at ``ref`` under ``into`` (``git archive``); returns the revision's short hash."""
    commit = _git(repository, "rev-parse", "--short", f"{ref}^{{commit}}").decode().strip()
    archive = _git(repository, "archive", "--format=tar", commit, PACKAGE)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            relative = Path(member.name)
            if not member.isfile() or relative.is_absolute() or ".." in relative.parts:
                continue  # the package's own files only: no link, nothing outside ``into``
            source = tar.extractfile(member)
            if source is not None:
                (into / relative).parent.mkdir(parents=True, exist_ok=True)
                (into / relative).write_bytes(source.read())
    return commit


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, default=CHECKOUT, help="the checkout (default: this script's)")
    parser.add_argument("--ref", help="measure the package at this git revision instead of the working tree")
    parser.add_argument("--kind", default="kill", help="the fault kind whose span is counted (default: kill)")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="every figure as JSON")
    output.add_argument("--summary", action="store_true", help="only the one-row summary table")
    args = parser.parse_args(argv)
    chain = chain_for(args.root, args.ref)
    with tempfile.TemporaryDirectory(prefix="house-figures-") as scratch:
        if args.ref:
            label = extract(args.root, args.ref, Path(scratch))
            root = Path(scratch)
        else:
            head = subprocess.run(
                ["git", "-C", str(args.root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
            )
            label = f"the working tree of {head.stdout.strip()}" if head.returncode == 0 else str(args.root)
            root = args.root
        found = figures(root, chain, args.kind)
    if args.json:
        print(json.dumps({"tree": label, **found}, indent=1))
    elif args.summary:
        print("\n".join(_table(SUMMARY_COLUMNS, [summary_row(label, found)])))
    else:
        print(markdown(label, found), end="")
    if not found["canary"]["verified"]:
        print(
            "house_figures: the declared canary chain does not match the code; declare the new one in "
            "scripts/house_figures.py (CANARY_CHAINS):\n  " + "\n  ".join(found["canary"]["broken"]),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
