"""The mutants of real vLLM (``docker/vllm-cpu/mutants``, ``bench/mutate_vllm_cpu.py``), with no Docker and no
checkout: every patch is a well-formed unified diff of the files its manifest entry names, every entry names a real
step of the procedure and the words of a finding, its selection reaches exactly that step and its prerequisites, and
the classifier says caught / caught elsewhere / survived / not reached right. That each patch applies to the overlay
checkout's HEAD is ``tests/real/test_mutant_patches.py`` (it needs the checkout: ``make test-real`` builds it)."""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from bench.mutate_vllm_cpu import (
    MUTANTS_DIR,
    ManifestError,
    Mutant,
    StepResult,
    classify,
    load_manifest,
    markdown,
    merge_controls,
    merge_doc,
    mutant_row,
    parse_manifest,
    record_run,
    selection_terms,
    to_control,
    uncovered,
    union_selection,
)
from vsnap_qual import procedure
from vsnap_qual.contract import RUNNERS
from vsnap_qual.faults.catalogue import BUILTIN_FAULTS, FAULTS_BY_ID

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = load_manifest()
MUTANTS = {m.id: m for m in MANIFEST.mutants}
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
#: what a step reads of another step beyond its procedure prerequisites: the weight-tamper kind compares with the
#: lane's ordinary reference (``bench/README.md``, "what a fault chain needs of its lifecycle chain"), and inspect
#: compares the manifest's oracle with the ordinary engine's answer when there is one (``steps.inspect_expectations``)
READS = {"fault:weight-tampered": (procedure.ORDINARY,), procedure.INSPECT: (procedure.ORDINARY,)}


def patch_files(text: str) -> list[str]:
    """The files a unified diff changes, after checking its structure: one ``diff --git`` header per file, ``---`` /
    ``+++`` naming the same existing file (no file added or removed: an overlay replaces an image file), and every
    hunk's line counts matching its body."""
    lines = text.splitlines()
    files: list[str] = []
    i = 0
    while i < len(lines):
        header = re.fullmatch(r"diff --git a/(\S+) b/(\S+)", lines[i])
        assert header and header.group(1) == header.group(2), f"line {i + 1}: not a diff --git header: {lines[i]!r}"
        name = header.group(1)
        i += 1
        if lines[i].startswith("index "):
            i += 1
        assert lines[i] == f"--- a/{name}" and lines[i + 1] == f"+++ b/{name}", (name, lines[i : i + 2])
        i += 2
        hunks = 0
        while i < len(lines) and not lines[i].startswith("diff --git "):
            hunk = _HUNK.match(lines[i])
            assert hunk, f"{name}: line {i + 1} is not a hunk header: {lines[i]!r}"
            old = int(hunk.group(2) or 1)
            new = int(hunk.group(4) or 1)
            i += 1
            while (old or new) and i < len(lines):
                mark = lines[i][:1]
                assert mark in (" ", "-", "+"), f"{name}: hunk body line {i + 1}: {lines[i]!r}"
                old -= mark in (" ", "-")
                new -= mark in (" ", "+")
                i += 1
            assert old == 0 and new == 0, f"{name}: a hunk's line counts do not match its body"
            hunks += 1
        assert hunks, f"{name}: no hunk"
        files.append(name)
    return files


@pytest.mark.parametrize("mutant", MANIFEST.mutants, ids=lambda m: m.id)
def test_each_patch_is_a_diff_of_the_files_its_entry_names(mutant: Mutant) -> None:
    text = mutant.patch.read_text()
    changed = patch_files(text)
    assert changed == sorted(changed) and sorted(mutant.files) == changed, (mutant.files, changed)
    for name in changed:  # what the harness overlays: vllm/**.py files of the image (overlay.changed_files)
        assert name.startswith("vllm/") and name.endswith(".py"), name
    added = [ln[1:] for ln in text.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    removed = [ln[1:] for ln in text.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    assert added != removed, "a patch that changes nothing"
    assert all("vsnap" not in line.lower() for line in added), "a mutant is vLLM's code as a contributor writes it"


def test_every_patch_in_the_folder_has_its_entry_and_every_entry_its_patch() -> None:
    patches = sorted(p.stem for p in MUTANTS_DIR.glob("*.patch"))
    assert patches == sorted(MUTANTS), (patches, sorted(MUTANTS))
    assert len(MANIFEST.mutants) >= 8
    assert [m.number for m in MANIFEST.mutants] == [f"{n:02d}" for n in range(1, len(MANIFEST.mutants) + 1)]


@pytest.mark.parametrize("mutant", MANIFEST.mutants, ids=lambda m: m.id)
def test_each_entry_names_a_real_step_on_the_overlaid_arm_and_a_finding(mutant: Mutant) -> None:
    runner, arm, name = mutant.step.split("/", 2)
    assert runner in RUNNERS and arm == "head", mutant.step  # the overlay goes on the head arm only
    step = procedure.step(name)  # KeyError: not a step of the procedure
    if procedure.is_fault_step(name):
        assert name.removeprefix(procedure.FAULT_PREFIX) in FAULTS_BY_ID, name
    assert step.applies(arm, overlaid=True, unit=True), mutant.step
    assert mutant.words and all(len(w) >= 8 for w in mutant.words), mutant.words
    assert all("\n" not in text.strip() for text in (mutant.area, mutant.breaks, mutant.why))
    assert len(mutant.breaks) > 40 and len(mutant.why) > 40, "one line each on what it breaks and why it is realistic"
    assert mutant.predicted in ("caught", "survived")
    assert bool(mutant.gap) == (mutant.predicted == "survived"), "a predicted survivor names the harness's gap"


# ---- the selections: each reaches its step and its prerequisites, and nothing else --------------------------------
def _suite_steps() -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """step name -> (test function, class, markers) of every test of the suites, read from their source: the
    ``@pytest.mark.vsnap_step(procedure.X)`` each test carries."""
    found: dict[str, tuple[str, str, tuple[str, ...]]] = {}
    for path in sorted((ROOT / "suites").glob("test_*.py")):
        tree = ast.parse(path.read_text())
        module_marks = tuple(
            n.value.attr
            for n in ast.walk(tree)
            if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets)
            and isinstance(n.value, ast.Attribute)
        )
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
                for deco in fn.decorator_list:
                    if (
                        isinstance(deco, ast.Call)
                        and isinstance(deco.func, ast.Attribute)
                        and deco.func.attr == "vsnap_step"
                        and isinstance(deco.args[0], ast.Attribute)
                    ):
                        name = getattr(procedure, deco.args[0].attr)
                        found[name] = (fn.name, cls.name, ("vsnap_step", *module_marks))
    return found


SUITE = _suite_steps()


def _keywords(step: str, runner: str = "v1", arm: str = "head") -> set[str]:
    """What pytest's ``-k`` matches a step's test item against: its name, its class and module, its markers."""
    if procedure.is_fault_step(step):
        function, cls, marks = SUITE[procedure.FAULT_PREFIX]
        item = f"{function}[{runner}-{arm}-{step.removeprefix(procedure.FAULT_PREFIX)}]"
    else:
        function, cls, marks = SUITE[step]
        item = f"{function}[{runner}-{arm}]"
    module = "test_faults.py" if procedure.is_fault_step(step) or step == procedure.FAULT_ARTIFACT else ""
    return {item, cls, module or "test_lifecycle.py", "suites", *marks}


def _selected(expression: str, step: str) -> bool:
    """pytest's ``-k`` for a plain ``a or b`` expression: a name matches a keyword it is a substring of, any case."""
    assert re.fullmatch(r"[\w\[\]-]+(?: or [\w\[\]-]+)*", expression), f"not a plain or-expression: {expression}"
    words = {k.lower() for k in _keywords(step)}
    return any(term.lower() in word for term in expression.split(" or ") for word in words)


def _closure(step: str) -> set[str]:
    need = {step}
    table = procedure.step(step)
    for name in (*table.requires, *table.delivered, *READS.get(step, ())):
        need |= _closure(name)
    return need


def _candidates() -> list[str]:
    """Every step a V1 head lane with an overlay and a unit command runs."""
    steps = [*procedure.LIFECYCLE, procedure.FAULT_ARTIFACT_STEP, *(procedure.step(f.step) for f in BUILTIN_FAULTS)]
    return [s.name for s in steps if s.applies("head", True, True)]


def test_the_suites_are_read_right() -> None:
    assert SUITE[procedure.CREATE][0] == "test_create" and SUITE[procedure.FAULT_ARTIFACT][0] == "test_fault_artifact"
    assert _selected("test_create", procedure.CREATE) and not _selected("test_create", "fault:create-partial-sleep")
    assert _selected("fault", "fault:wake-raise") and _selected("fault", procedure.FAULT_ARTIFACT)  # the marker
    assert not _selected("fault", procedure.ORDINARY)


@pytest.mark.parametrize("mutant", MANIFEST.mutants, ids=lambda m: m.id)
def test_each_selection_reaches_its_step_and_prerequisites_and_nothing_else(mutant: Mutant) -> None:
    terms = selection_terms(mutant.select)
    assert set(terms) == {"-k"}, "the selections are -k expressions (a plain or of test names)"
    step = mutant.step.split("/", 2)[2]
    selected = {s for s in _candidates() if _selected(terms["-k"], s)}
    assert selected == _closure(step), (sorted(selected), sorted(_closure(step)))


def test_the_controls_selection_is_the_union_of_the_mutants() -> None:
    union = union_selection(m.select for m in MANIFEST.mutants)
    assert union[0] == "-k"
    every = set().union(*(_closure(m.step.split("/", 2)[2]) for m in MANIFEST.mutants))
    assert {s for s in _candidates() if _selected(union[1], s)} == every
    assert union_selection([["-k", "a or b"], ["-k", "b or c"]]) == ["-k", "a or b or c"]
    assert union_selection([["-k", "a and not b"], ["-k", "c"]]) == ["-k", "(a and not b) or (c)"]
    # a selection with no -m runs every mark: the union has none either
    assert union_selection([["-k", "a", "-m", "fault"], ["-k", "b"]]) == ["-k", "a or b"]
    assert union_selection([["-m", "fault"], ["-m", "not fault"]]) == ["-m", "(fault) or (not fault)"]


# ---- the manifest's own rules -------------------------------------------------------------------------------------
def _entry(**change: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": "01-x", "files": ["vllm/snapshot/runtime.py"], "area": "cleanup and leftovers",
        "breaks": "what it breaks, in a sentence", "why": "why a contributor would write it",
        "step": "v1/head/create", "words": ["cleanup after create"], "select": ["-k", "test_create"],
        "predicted": "caught",
    }  # fmt: skip
    entry.update(change)
    return {k: v for k, v in entry.items() if v is not None}


def _parse(*entries: Mapping[str, Any]) -> None:
    parse_manifest({"runner": {"overlay": "build/x", "profile": "@p", "args": ["--a"]}, "mutant": list(entries)})


def test_the_manifest_refuses_an_incomplete_entry() -> None:
    _parse(_entry())
    for change, said in (
        ({"words": []}, "words"),
        ({"step": "create"}, "runner/arm/step"),
        ({"select": ["--deselect", "x"]}, "select must be"),
        ({"predicted": "survived"}, "gap"),
        ({"predicted": "maybe"}, "predicted"),
        ({"breaks": " "}, "breaks"),
        ({"extra": 1}, "unknown field"),
        ({"id": "x"}, "NN-name"),
    ):
        with pytest.raises(ManifestError, match=said):
            _parse(_entry(**change))
    with pytest.raises(ManifestError, match="repeat"):
        _parse(_entry(), _entry(id="01-y"))


# ---- the classifier -----------------------------------------------------------------------------------------------
def _steps(*rows: tuple[str, str, str]) -> dict[str, StepResult]:
    return {label: StepResult(label, outcome, message) for label, outcome, message in rows}


CREATE, INSPECT, RESTORE = "v1/head/create", "v1/head/inspect", "v1/head/restore-1"
LEAK = "StepFailed: vllm snapshot create left in /dev/shm what no process holds: /dev/shm/sem.mp-abc"
CONTROL = _steps((CREATE, "failed", LEAK), (INSPECT, "passed", ""), (RESTORE, "passed", ""))


def test_caught_is_the_expected_step_in_its_words_which_the_control_does_not_say() -> None:
    run = _steps((CREATE, "failed", LEAK), (INSPECT, "passed", ""), (RESTORE, "failed", "StepFailed: KV capacity of x"))
    verdict = classify(RESTORE, ["KV capacity"], run, CONTROL)
    assert verdict.outcome == "caught" and verdict.found[0].step == RESTORE and "KV capacity" in verdict.found[0].words
    # the create failing in both runs, whatever its words, is never the mutant's catch
    both = _steps((CREATE, "failed", "StepFailed: cleanup after create incomplete | " + LEAK), (INSPECT, "passed", ""))
    assert classify(CREATE, ["cleanup after create incomplete"], both, CONTROL).outcome == "caught"
    assert classify(CREATE, ["left in /dev/shm"], both, CONTROL).outcome == "survived"  # the control says it too
    # every word, not one of them
    assert classify(RESTORE, ["KV capacity", "by 50"], run, CONTROL).outcome == "caught elsewhere"


def test_caught_elsewhere_names_each_step_that_failed_where_the_control_did_not() -> None:
    broken = "StepFailed: inspect checks failed: x"
    run = _steps((CREATE, "failed", LEAK), (INSPECT, "failed", broken), (RESTORE, "skipped", ""))
    verdict = classify(RESTORE, ["KV capacity"], run, CONTROL)
    assert verdict.outcome == "caught elsewhere" and [f.step for f in verdict.found] == [INSPECT]
    assert "inspect checks failed" in verdict.found[0].words and INSPECT in verdict.detail
    # the expected step failing in other words counts as seen, not as the predicted finding
    died = "StepFailed: restored server died"
    other = _steps((CREATE, "failed", LEAK), (INSPECT, "passed", ""), (RESTORE, "failed", died))
    verdict = classify(RESTORE, ["KV capacity"], other, CONTROL)
    assert verdict.outcome == "caught elsewhere" and verdict.found[0].step == RESTORE
    assert "not in the expected words" in verdict.detail
    # without a control every failure counts
    assert classify(INSPECT, ["x"], _steps((CREATE, "failed", LEAK)), None).outcome == "caught elsewhere"


def test_survived_is_every_step_as_the_control_and_the_expected_step_run() -> None:
    run = _steps((CREATE, "failed", LEAK.replace("abc", "def")), (INSPECT, "passed", ""), (RESTORE, "passed", ""))
    verdict = classify(INSPECT, ["artifact_bytes"], run, CONTROL)
    assert verdict.outcome == "survived" and not verdict.found
    verdict = classify(CREATE, ["link remap left"], run, CONTROL)  # fails, as in the control, without the words
    assert verdict.outcome == "survived" and "without the expected words" in verdict.detail


def test_not_reached_and_no_result() -> None:
    skipped = _steps((CREATE, "failed", LEAK), (INSPECT, "passed", ""), (RESTORE, "skipped", "not applicable: x"))
    verdict = classify(RESTORE, ["KV capacity"], skipped, CONTROL)
    assert verdict.outcome == "not reached" and "not applicable" in verdict.detail
    assert classify("v1/head/fault:wake-raise", ["x"], CONTROL, CONTROL).outcome == "not reached"
    assert classify(RESTORE, ["x"], None, CONTROL).outcome == "no result"


def test_the_table_has_a_row_per_mutant_with_its_outcome() -> None:
    first, second = MANIFEST.mutants[:2]
    verdict = classify(CREATE, list(first.words), _steps((CREATE, "failed", " ".join(first.words))), CONTROL)
    doc: dict[str, Any] = {
        "generated": "2026-12-08T00:00:00+00:00", "harness": {"commit": "abc1234", "dirty": False},
        "overlay": {"path": "build/vllm-overlay-0.32.0", "head": "bf5ed64"}, "profile_args": ["@p"],
        "controls": [], "mutants": [mutant_row(first, None, verdict), mutant_row(second, None, None)],
    }  # fmt: skip
    text = markdown(doc)
    rows = [ln for ln in text.splitlines() if ln.startswith(f"| `{first.id}`") or ln.startswith(f"| `{second.id}`")]
    assert len(rows) == 2 and "| caught |" in rows[0] and "| not run |" in rows[1], rows
    assert "**1 of 2 mutants run**: 1 caught; 1 as predicted." in text
    # what a run left: the run's own (removed by the runner), and what it does not name (left in place)
    doc["mutants"][0]["leaks"] = {"containers": [], "shm": ["/dev/shm/link_remap.7"], "processes": [],
                                  "shm_not_ours": ["/dev/shm/sem.mp-x"]}  # fmt: skip
    row = next(ln for ln in markdown(doc).splitlines() if ln.startswith(f"| `{first.id}`"))
    assert "removed by the runner: /dev/shm/link_remap.7" in row and "(left in place): /dev/shm/sem.mp-x" in row


# ---- runs one at a time, merged into one table ------------------------------------------------------------------
def test_controls_run_apart_merge_into_one_where_a_failure_in_any_counts() -> None:
    lifecycle = _steps((CREATE, "failed", LEAK), (INSPECT, "passed", ""), (RESTORE, "passed", ""))
    faults = _steps((CREATE, "passed", ""), ("v1/head/fault:wake-raise", "passed", ""))
    merged = merge_controls([lifecycle, faults])  # the create passed in the later one: it still counts as failed
    assert set(merged) == {CREATE, INSPECT, RESTORE, "v1/head/fault:wake-raise"}
    assert merged[CREATE].outcome == "failed"  # failed in one control: a failure of the mutant there is no catch
    assert classify(CREATE, ["left in /dev/shm"], lifecycle, merged).outcome == "survived"
    # a mutant whose expected step no control ran yet is the one a control must still be run for
    wake = MUTANTS["12-restore-error-exits-zero"]
    kv = MUTANTS["04-kv-pool-sized-by-model-len"]
    assert uncovered([wake, kv], lifecycle) == [wake] and uncovered([wake, kv], merged) == []
    # a control whose fault artifact failed (a create timed out) skipped the faults: they are still to be run
    timed_out = _steps(("v1/head/fault-artifact", "failed", "x"), ("v1/head/fault:wake-raise", "skipped", "x"))
    assert uncovered([wake], timed_out) == [wake]
    assert merge_controls([timed_out, faults])["v1/head/fault:wake-raise"].outcome == "passed"


def test_a_new_control_is_run_for_every_chosen_mutant_only_when_asked() -> None:
    """After the harness changed, ``--new-control`` runs the chosen mutants' control although earlier ones ran their
    steps; without it only the mutants no control covers get one."""
    wake = MUTANTS["12-restore-error-exits-zero"]
    kv = MUTANTS["04-kv-pool-sized-by-model-len"]
    covered = _steps((CREATE, "passed", ""), (RESTORE, "passed", ""), ("v1/head/fault:wake-raise", "passed", ""))
    assert to_control([wake, kv], covered) == []
    assert to_control([wake, kv], covered, again=True) == [wake, kv]
    assert to_control([wake, kv], _steps((RESTORE, "passed", ""))) == [wake]


def test_a_rerun_replaces_its_row_and_keeps_the_earlier_run_and_other_rows_stay() -> None:
    first, second = MANIFEST.mutants[:2]
    run = _steps((CREATE, "failed", LEAK), (INSPECT, "passed", ""))
    old_control = {"name": "control", "report": "control/report", "select": ["-k", "test_create"], "failed": []}
    old = {
        "schema": "vsnap-qual/mutants@1", "control": old_control,
        "mutants": [mutant_row(first, None, classify(first.step, first.words, run, CONTROL))],
    }  # fmt: skip
    doc = merge_doc(MANIFEST, old)
    assert doc["controls"] == [old_control]  # the one control of schema @1 is the first control run
    rows = {r["id"]: r for r in doc["mutants"]}
    assert [r["id"] for r in doc["mutants"]] == [m.id for m in MANIFEST.mutants]  # every mutant, in order
    assert rows[first.id]["outcome"] == "survived" and "outcome" not in rows[second.id]
    caught = _steps((CREATE, "failed", " ".join(first.words)), (INSPECT, "passed", ""))
    record_run(rows[first.id], mutant_row(first, None, classify(first.step, first.words, caught, CONTROL)))
    assert rows[first.id]["outcome"] == "caught" and rows[first.id]["met_prediction"]
    assert [e["outcome"] for e in rows[first.id]["earlier"]] == ["survived"]
    text = markdown({**doc, "generated": "g", "harness": {"commit": "c"}, "overlay": {"path": "p", "head": "h"},
                     "profile_args": ["@p"]})  # fmt: skip
    row = next(ln for ln in text.splitlines() if ln.startswith(f"| `{first.id}`"))
    assert "| caught |" in row and "Earlier run (harness ?): survived" in row
    assert "**Control `control`**" in text and "**1 of 15 mutants run**: 1 caught" in text
    # runs made on an earlier checkout of the same image (--overlay-rebuilt) keep their rows; the table names it
    again = {**doc, "generated": "g", "harness": {"commit": "c"}, "overlay": {"path": "p2", "head": "h2"},
             "earlier_overlays": [{"path": "p", "head": "h"}], "profile_args": ["@p"]}  # fmt: skip
    assert "`p2` at h2 (earlier runs: `p` at h, the same image's checkout made before)" in markdown(again)
