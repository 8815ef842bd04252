"""Mutants of real vLLM (issue 44): does the qualification catch a broken change to real vLLM 0.32.0's snapshot code?

Each mutant of ``docker/vllm-cpu/mutants/mutants.toml`` is a small change a contributor could make by mistake, as a
unified diff against the overlay checkout's HEAD (``docker/vllm-cpu/overlay-checkout.sh 0.32.0``), with the step that
must catch it and the words of the finding. For each mutant this makes a fresh clone of the overlay checkout, applies
the patch as one commit on top of its HEAD, runs the harness on it exactly as a user checks a change::

    pytest suites/ @suites/profiles/vllm-cpu.args <[runner].args> --vsnap-overlay=<clone> --vsnap-overlay-ref=HEAD~1 \\
        <the mutant's selection> --vsnap-report-dir=<out>/<id>/report

reads the run's ``results.json`` and says what the harness made of it (:func:`classify`):

- **caught**: the expected step failed, its message holding every expected word, which the control's did not;
- **caught elsewhere**: another step failed that did not fail in the control (or the expected step failed in other
  words): named with its words;
- **survived**: every step the control passed passed, and the expected step ran;
- **not reached**: the expected step did not run (skipped, not applicable or not selected) and nothing else failed;
- **no result**: the run wrote no ``results.json``.

The **control** is the union of the mutants' selections run on the unmutated overlay checkout (in one run, or in
several, merged: a step failing in any of them fails in the control), so that a step
that fails anyway (real vLLM 0.32's own findings: the create's ``sem.mp-*``, ``restore-after-stop``, ``fresh-box``)
is never counted as a catch. After each run it looks for what the run left: containers of its session, files in the
host's ``/dev/shm`` that the run's evidence names, processes naming the run's paths; it removes them and says so.

Runs into the same ``--out`` add up: a run reads the ``mutants.json`` already there, keeps every control run and
every mutant's row it holds, runs a control only for the chosen mutants whose expected step no control ran yet
(``--new-control``: for all of them, after the harness changed since the controls there; ``--control-only``: that
and nothing else), and records each chosen mutant's run in its row, the run it replaces
(a re-run after a harness fix) kept in the row's ``earlier``. So the set can be run one harness run at a time (one
lock hold each, on a shared machine), the control reused; ``--fresh`` forgets what was there.

Output (``--out``, default ``reports/mutate-vllm-cpu``): ``mutants.md`` (the table), ``mutants.json``, and per run its
report directory and ``pytest.log``. A Python program rather than a shell script: the classifier is a pure function
that ``tests/unit/test_mutants.py`` tests, and the runner reads ``results.json`` and writes the table itself.

    make mutate-vllm-cpu                                    # the controls and every mutant (about 80 min on 2 cores:
                                                            # a lifecycle mutant 2-4 min, a fault one about 2)
    .venv/bin/python bench/mutate_vllm_cpu.py --mutants 01,12 --out reports/mutants-two
    .venv/bin/python bench/mutate_vllm_cpu.py --mutants 08,09 --control-only   # their control, one run
    .venv/bin/python bench/mutate_vllm_cpu.py --mutants 08                     # then each, one run each
    .venv/bin/python bench/mutate_vllm_cpu.py --dry-run     # the plan: each run's command, nothing started
    .venv/bin/python bench/mutate_vllm_cpu.py --export evidence/real-vllm/DATE-mutants-SHA  # what to commit
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parents[1]
MUTANTS_DIR = ROOT / "docker" / "vllm-cpu" / "mutants"
MANIFEST = MUTANTS_DIR / "mutants.toml"
SCHEMA = "vsnap-qual/mutants@2"
SHM = Path("/dev/shm")

Outcome = Literal["caught", "caught elsewhere", "survived", "not reached", "no result"]
OUTCOMES: tuple[Outcome, ...] = ("caught", "caught elsewhere", "survived", "not reached", "no result")
#: the outcomes a mutant may be predicted to have (a prediction is about the harness, not about the run)
PREDICTIONS = ("caught", "survived")
_STEP_LABEL = re.compile(r"^(?P<runner>[a-z0-9]+)/(?P<arm>head|base)/(?P<step>[a-z0-9:-]+)$")
#: a selection expression that only or-s names together (``test_create or wake-raise``)
_PLAIN_OR = re.compile(r"[\w\[\]-]+(?: or [\w\[\]-]+)*")
_SHM_PATH = re.compile(r"/dev/shm/[A-Za-z0-9_.:+-]+")


class ManifestError(ValueError):
    """``mutants.toml`` is malformed; the message names the mutant and the field."""


# ---- the manifest -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Mutant:
    """One mutant: its patch, what it breaks, and the finding the harness must produce."""

    id: str
    files: tuple[str, ...]
    area: str
    breaks: str
    why: str
    step: str  # runner/arm/step that must fail
    words: tuple[str, ...]  # every one of them in that step's failure message
    select: tuple[str, ...]  # pytest selection arguments (-k EXPR, -m EXPR)
    predicted: str  # "caught" or "survived"
    gap: str = ""  # for a predicted survivor: what the harness does not check

    @property
    def patch(self) -> Path:
        return MUTANTS_DIR / f"{self.id}.patch"

    @property
    def number(self) -> str:
        return self.id.split("-", 1)[0]


@dataclass(frozen=True)
class Manifest:
    overlay: str
    profile: str
    args: tuple[str, ...]
    mutants: tuple[Mutant, ...]


def _toml(text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):  # tomllib; the harness's venv is 3.11
        import tomllib

        return tomllib.loads(text)
    raise ManifestError("reading mutants.toml needs Python 3.11 or later (tomllib)")


def _strings(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ManifestError(f"{where}: a non-empty list of non-empty strings")
    return tuple(value)


def _text(entry: Mapping[str, object], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ManifestError(f"{where}: {key} is missing or empty")
    return value


def parse_manifest(data: Mapping[str, Any]) -> Manifest:
    """The manifest from its parsed TOML; :class:`ManifestError` names what is wrong (nothing is looked up on disk)."""
    runner = data.get("runner")
    if not isinstance(runner, dict):
        raise ManifestError("[runner] is missing")
    entries = data.get("mutant")
    if not isinstance(entries, list) or not entries:
        raise ManifestError("no [[mutant]] entries")
    mutants = []
    for index, entry in enumerate(entries):
        where = f"mutant #{index + 1}"
        if not isinstance(entry, dict):
            raise ManifestError(f"{where}: not a table")
        mutant_id = _text(entry, "id", where)
        where = f"mutant {mutant_id}"
        if not re.fullmatch(r"[0-9]{2}-[a-z0-9-]+", mutant_id):
            raise ManifestError(f"{where}: id must be NN-name (two digits, lower-case words)")
        step = _text(entry, "step", where)
        if not _STEP_LABEL.match(step):
            raise ManifestError(f"{where}: step {step!r} is not runner/arm/step")
        select = _strings(entry.get("select"), f"{where}: select")
        selection_terms(select, where)
        predicted = _text(entry, "predicted", where)
        if predicted not in PREDICTIONS:
            raise ManifestError(f"{where}: predicted {predicted!r} is not one of {', '.join(PREDICTIONS)}")
        gap = entry.get("gap", "")
        if predicted == "survived" and not (isinstance(gap, str) and gap.strip()):
            raise ManifestError(f"{where}: a predicted survivor must name the harness's gap (gap)")
        unknown = set(entry) - {"id", "files", "area", "breaks", "why", "step", "words", "select", "predicted", "gap"}
        if unknown:
            raise ManifestError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        mutants.append(
            Mutant(
                id=mutant_id, files=_strings(entry.get("files"), f"{where}: files"), area=_text(entry, "area", where),
                breaks=_text(entry, "breaks", where), why=_text(entry, "why", where), step=step,
                words=_strings(entry.get("words"), f"{where}: words"), select=select, predicted=predicted,
                gap=str(gap),
            )
        )  # fmt: skip
    ids = [m.id for m in mutants]
    numbers = [m.number for m in mutants]
    if len(set(ids)) != len(ids) or len(set(numbers)) != len(numbers):
        raise ManifestError(f"mutant ids or numbers repeat: {ids}")
    return Manifest(
        overlay=_text(runner, "overlay", "[runner]"),
        profile=_text(runner, "profile", "[runner]"),
        args=_strings(runner.get("args"), "[runner]: args"),
        mutants=tuple(mutants),
    )


def load_manifest(path: Path = MANIFEST) -> Manifest:
    return parse_manifest(_toml(path.read_text()))


# ---- selections ---------------------------------------------------------------------------------------------------
def selection_terms(select: Sequence[str], where: str = "selection") -> dict[str, str]:
    """A selection's ``-k`` and ``-m`` expressions (each at most once; nothing else is a selection)."""
    terms: dict[str, str] = {}
    items = list(select)
    while items:
        flag = items.pop(0)
        if flag not in ("-k", "-m") or not items or flag in terms:
            raise ManifestError(f"{where}: select must be -k EXPR and/or -m EXPR, each once: {list(select)}")
        terms[flag] = items.pop(0)
    return terms


def union_selection(selections: Iterable[Sequence[str]]) -> list[str]:
    """One selection that runs every step each of these selects (the control's): for each of ``-k`` and ``-m``,
    the expressions or-ed together where every selection has one, left out where one selection has none."""
    parts = [selection_terms(s) for s in selections]
    out: list[str] = []
    for flag in ("-k", "-m"):
        if parts and all(flag in p for p in parts):
            exprs = list(dict.fromkeys(p[flag] for p in parts))
            if all(_PLAIN_OR.fullmatch(e) for e in exprs):  # plain "a or b": one list of names, each once
                out += [flag, " or ".join(dict.fromkeys(t for e in exprs for t in e.split(" or ")))]
            else:
                out += [flag, exprs[0] if len(exprs) == 1 else " or ".join(f"({e})" for e in exprs)]
    return out


# ---- what a run said, and the classification --------------------------------------------------------------------
@dataclass(frozen=True)
class StepResult:
    """One step of a run as ``results.json`` records it."""

    label: str  # runner/arm/step
    outcome: str  # passed | failed | skipped
    message: str


def steps_of(results: Mapping[str, Any]) -> dict[str, StepResult]:
    """The steps of a ``results.json``, by ``runner/arm/step`` (the label every view uses)."""
    out = {}
    for step in results.get("steps") or []:
        label = f"{step.get('runner')}/{step.get('arm')}/{step.get('step')}"
        out[label] = StepResult(label, str(step.get("outcome")), str(step.get("message") or ""))
    return out


@dataclass(frozen=True)
class Finding:
    """A failed step and the words of its failure, as the table shows them."""

    step: str
    words: str


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    #: the failures that decided it: the expected step (caught), the other steps (caught elsewhere)
    found: tuple[Finding, ...] = ()
    #: why, in a sentence
    detail: str = ""


def excerpt(message: str, words: Sequence[str] = (), width: int = 240) -> str:
    """The failure's words for the table: around the first expected word when it is there, else the message's start
    (its first line, without the exception name the recorder puts before it)."""
    text = " ".join(message.split())
    text = re.sub(r"^(?:StepFailed|AssertionError|[A-Za-z_]+Error): ", "", text)
    at = min((i for i in (text.find(w) for w in words) if i >= 0), default=-1)
    if at < 0:
        return text[:width] + ("…" if len(text) > width else "")
    start = max(0, at - width // 3)
    return ("…" if start else "") + text[start : start + width] + ("…" if start + width < len(text) else "")


def _holds(step: StepResult | None, words: Sequence[str]) -> bool:
    return step is not None and step.outcome == "failed" and all(w in step.message for w in words)


def classify(
    step: str,
    words: Sequence[str],
    run: Mapping[str, StepResult] | None,
    control: Mapping[str, StepResult] | None,
) -> Verdict:
    """What the harness made of one mutant: ``run`` the mutant run's steps (None: it wrote no results), ``control``
    the same selection's steps on the unmutated checkout (None: no control; then every failure counts)."""
    if run is None:
        return Verdict("no result", detail="the run wrote no results.json")
    control = control or {}
    expected = run.get(step)
    if _holds(expected, words) and not _holds(control.get(step), words):
        assert expected is not None
        return Verdict("caught", (Finding(step, excerpt(expected.message, words)),), "the expected step, in its words")
    # a step failed where the control's did not: the harness saw something (the expected step among them when it
    # failed in other words than the prediction's). A step failing in the control too is never counted: its
    # message's details (PIDs, names, times) differ from run to run, so "other words" cannot be told from them
    new = [
        s
        for label, s in run.items()
        if s.outcome == "failed" and (control.get(label) is None or control[label].outcome != "failed")
    ]
    if new:
        where = ", ".join(s.label for s in new)
        return Verdict(
            "caught elsewhere",
            tuple(Finding(s.label, excerpt(s.message, words)) for s in new),
            (f"{step} failed, not in the expected words; " if expected in new else "")
            + f"failed where the control did not: {where}",
        )
    if expected is not None and expected.outcome == "failed":  # as the control's: not a catch
        same = "in the same words" if _holds(expected, words) else "without the expected words"
        return Verdict(
            "survived",
            (Finding(step, excerpt(expected.message, words)),),
            f"{step} fails in the control too, and here {same}: nothing the mutant changed was seen",
        )
    if expected is None or expected.outcome != "passed":
        why = "not in the run" if expected is None else f"{expected.outcome}: {excerpt(expected.message)}"
        return Verdict("not reached", detail=f"{step} did not run ({why})")
    return Verdict("survived", detail="every step the control passed passed")


# ---- running ------------------------------------------------------------------------------------------------------
@dataclass
class Leaks:
    """What a run left that it should not have: each was removed by this program after it was recorded."""

    containers: list[str] = field(default_factory=list)
    shm: list[str] = field(default_factory=list)
    processes: list[str] = field(default_factory=list)
    #: /dev/shm names new since the run began that its evidence does not name (another job's, on a shared host)
    shm_not_ours: list[str] = field(default_factory=list)

    @property
    def any(self) -> bool:
        return bool(self.containers or self.shm or self.processes)


@dataclass
class RunRecord:
    """One harness run: the control's or a mutant's."""

    name: str
    report: str  # relative to the output folder
    argv: list[str]
    seconds: float = 0.0
    exit_code: int | None = None
    run_id: str | None = None
    headline: str | None = None
    leaks: Leaks = field(default_factory=Leaks)
    #: the harness commit the run was made with (a mutant re-run after a harness fix is run with another)
    harness: dict[str, Any] = field(default_factory=dict)


def harness_argv(manifest: Manifest, checkout: Path, select: Sequence[str], report: Path) -> list[str]:
    """The run's command, as a user checks a change: the profile, the runner's arguments, the overlay, the selection."""
    return [
        sys.executable, "-m", "pytest", "suites/", manifest.profile, *manifest.args,
        f"--vsnap-overlay={checkout}", "--vsnap-overlay-ref=HEAD~1", *select,
        f"--vsnap-report-dir={report}", "-p", "no:cacheprovider",
    ]  # fmt: skip


def _git(checkout: Path, *args: str) -> str:
    ident = ["-c", "user.name=vsnap-qual", "-c", "user.email=vsnap-qual@localhost", "-c", "commit.gpgsign=false"]
    done = subprocess.run(["git", "-C", str(checkout), *ident, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {checkout}: {done.stderr.strip()[:500]}")
    return done.stdout


def mutant_checkout(overlay: Path, mutant: Mutant, where: Path) -> Path:
    """A fresh clone of the overlay checkout with the mutant's patch as one commit on top of its HEAD; the files
    that commit changes must be exactly the manifest's (the harness overlays ``git diff HEAD~1``)."""
    if where.exists():
        shutil.rmtree(where)
    where.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "clone", "-q", str(overlay), str(where)], check=True)
    _git(where, "apply", "--index", str(mutant.patch))
    _git(where, "commit", "-q", "-m", f"vsnap-qual mutant {mutant.id}\n\n{mutant.breaks}")
    changed = sorted(_git(where, "diff", "--name-only", "HEAD~1", "HEAD").split())
    if changed != sorted(mutant.files):
        raise RuntimeError(f"mutant {mutant.id} changes {changed}, the manifest says {sorted(mutant.files)}")
    return where


def _shm_names() -> set[str]:
    try:
        return {p.name for p in SHM.iterdir()}
    except OSError:
        return set()


def _named_shm(results: object) -> set[str]:
    """Every /dev/shm name the run's results mention (its artifacts' outside files, link remaps, leftovers)."""
    return {m.rsplit("/", 1)[-1] for m in _SHM_PATH.findall(json.dumps(results))} if results else set()


def look_for_leaks(record: RunRecord, owner: str, shm_before: set[str], results: object, paths: Sequence[str]) -> Leaks:
    """After a run: its session's or owner's containers, /dev/shm files its evidence names that are still there,
    processes whose command line names its paths. Each found is removed here (it is the run's), and recorded."""
    leaks = Leaks()
    filters = [f"label=ai.vsnap.owner={owner}"]
    if record.run_id:
        filters.append(f"label=ai.vsnap.session={record.run_id}")
    seen: set[str] = set()
    for label in filters:
        listed = subprocess.run(
            ["docker", "ps", "-aq", "--filter", label], capture_output=True, text=True, check=False
        ).stdout.split()
        seen.update(listed)
    for cid in sorted(seen):
        leaks.containers.append(cid)
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True, check=False)
    new = _shm_names() - shm_before
    ours = _named_shm(results)
    for name in sorted(new):
        if name in ours:
            leaks.shm.append(f"/dev/shm/{name}")
            (SHM / name).unlink(missing_ok=True)
        else:
            leaks.shm_not_ours.append(f"/dev/shm/{name}")
    me = os.getpid()
    listing = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, check=False).stdout
    for line in listing.splitlines():
        pid, _, args = line.strip().partition(" ")
        if pid.isdigit() and int(pid) != me and "ps -eo" not in args and any(p in args for p in paths):
            leaks.processes.append(f"{pid} {args[:200]}")
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)
    return leaks


def run_harness(
    manifest: Manifest, name: str, checkout: Path, select: Sequence[str], out: Path, timeout: float
) -> tuple[RunRecord, dict[str, Any] | None]:
    """One harness run into ``out/<name>/report``; its record and its results (None when it wrote none)."""
    folder = out / name
    report = folder / "report"
    if report.exists():
        shutil.rmtree(report)
    folder.mkdir(parents=True, exist_ok=True)
    argv = harness_argv(manifest, checkout, select, report)
    record = RunRecord(name=name, report=str(report.relative_to(out)), argv=argv, harness=_harness_commit())
    print(f"[{_now()}] {name}: $ {shlex.join(argv)}", flush=True)
    shm_before = _shm_names()
    started = time.monotonic()
    with (folder / "pytest.log").open("w") as log:
        # this checkout's harness, whatever an installed one says (the suites' own rootdir loads no conftest of ours)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        child = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            record.exit_code = child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # the harness stops on SIGINT as on Ctrl-C: its lanes removed, its evidence closed (INTERRUPTED)
            os.killpg(child.pid, signal.SIGINT)
            try:
                record.exit_code = child.wait(timeout=300)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                record.exit_code = child.wait()
    record.seconds = round(time.monotonic() - started, 1)
    results_path = report / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else None
    if results is not None:
        record.run_id = (results.get("run") or {}).get("run_id")
        record.headline = (results.get("verdict") or {}).get("headline")
    owner = f"{socket.gethostname()}:{child.pid}"
    record.leaks = look_for_leaks(record, owner, shm_before, results, [str(checkout), str(report)])
    print(
        f"[{_now()}] {name}: exit {record.exit_code} in {record.seconds:.0f} s, {record.headline or 'no results.json'}"
        + ("; LEFT " + json.dumps(asdict(record.leaks)) if record.leaks.any else ""),
        flush=True,
    )
    return record, results


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%H:%M:%S")


# ---- the table ----------------------------------------------------------------------------------------------------
def mutant_row(mutant: Mutant, record: RunRecord | None, verdict: Verdict | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": mutant.id, "files": list(mutant.files), "area": mutant.area, "breaks": mutant.breaks, "why": mutant.why,
        "step": mutant.step, "words": list(mutant.words), "select": list(mutant.select), "predicted": mutant.predicted,
    }  # fmt: skip
    if mutant.gap:
        row["gap"] = mutant.gap
    if record is not None:
        row.update(
            report=record.report, argv=record.argv, seconds=record.seconds, exit_code=record.exit_code,
            run_id=record.run_id, headline=record.headline, leaks=asdict(record.leaks), harness=record.harness,
        )  # fmt: skip
    if verdict is not None:
        row.update(
            outcome=verdict.outcome, detail=verdict.detail, found=[asdict(f) for f in verdict.found],
            met_prediction=verdict.outcome == mutant.predicted,
        )  # fmt: skip
    return row


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(doc: Mapping[str, Any]) -> str:
    """``mutants.md``: how it was run, the control, and one row per mutant."""
    lines = [
        "# Mutants of real vLLM 0.32.0 through the qualification (`make mutate-vllm-cpu`)",
        "",
        f"Generated {doc['generated']} by `bench/mutate_vllm_cpu.py` (harness commit {doc['harness']['commit']}"
        + (", with uncommitted changes" if doc["harness"].get("dirty") else "")
        + f"); overlay checkout `{doc['overlay']['path']}` at {doc['overlay']['head']}"
        + "".join(
            f" (earlier runs: `{o['path']}` at {o['head']}, the same image's checkout made before)"
            for o in doc.get("earlier_overlays") or []
        )
        + ". Each mutant is its patch as "
        "one commit on a fresh clone of that checkout, run with `--vsnap-overlay-ref=HEAD~1` and "
        f"`{' '.join(doc['profile_args'])}`. Outcomes: caught (the expected step, in its words), caught elsewhere, "
        "survived, not reached, no result (`bench/mutate_vllm_cpu.py`'s docstring).",
        "",
    ]
    for control in doc.get("controls") or []:
        failed = "; ".join(f"`{f['step']}`: {f['words']}" for f in control.get("failed", [])) or "none"
        made_for = f" for {', '.join(control['for'])}" if control.get("for") else ""
        lines += [
            f"**Control `{control['name']}`**{made_for} (the unmutated checkout, the union of the selections "
            f"`{' '.join(control['select'])}`): {control.get('headline') or 'no results.json'}, exit "
            f"{control.get('exit_code')}, {control.get('seconds', 0):.0f} s"
            + (f", harness {control['harness']['commit']}" if control.get("harness") else "")
            + f". Failed steps (not counted as catches): {_cell(failed)}."
            + _cell(leak_words(control.get("leaks"))),
            "",
        ]
    counts: dict[str, int] = {}
    for row in doc["mutants"]:
        if "outcome" in row:
            counts[row["outcome"]] = counts.get(row["outcome"], 0) + 1
    ran = sum(counts.values())
    lines += [
        f"**{ran} of {len(doc['mutants'])} mutants run**: "
        + (", ".join(f"{n} {o}" for o, n in counts.items()) or "none")
        + f"; {sum(1 for r in doc['mutants'] if r.get('met_prediction'))} as predicted.",
        "",
        "| mutant | file | what it breaks | expected step: words | predicted | outcome | actual step: words | time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in doc["mutants"]:
        expected = f"`{row['step']}`: " + "; ".join(f"“{w}”" for w in row["words"])
        actual = "; ".join(f"`{f['step']}`: {f['words']}" for f in row.get("found", [])) or row.get("detail", "")
        actual += leak_words(row.get("leaks"))
        outcome = row.get("outcome", "not run")
        if row.get("outcome") and not row.get("met_prediction"):
            outcome += " (not as predicted)"
        predicted = row["predicted"] + (f" (gap: {row['gap']})" if row.get("gap") else "")
        seconds = f"{row['seconds']:.0f} s" if "seconds" in row else ""
        if row.get("harness"):
            seconds += f" (harness {row['harness']['commit']}{', dirty' if row['harness'].get('dirty') else ''})"
        for before in row.get("earlier", []):
            actual += f" Earlier run (harness {before.get('harness', {}).get('commit', '?')}): {before.get('outcome')}"
            actual += f", {before.get('detail', '')}."
        lines.append(
            "| "
            + " | ".join(
                _cell(c)
                for c in (
                    f"`{row['id']}`",
                    ", ".join(f"`{f}`" for f in row["files"]),
                    row["breaks"],
                    expected,
                    predicted,
                    outcome,
                    actual,
                    seconds,
                )
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


def leak_words(leaks: Mapping[str, Any] | None) -> str:
    """What a run left, for the table ("" for nothing): what was the run's (removed here), and what appeared in the
    host's /dev/shm during it that its evidence does not name (left in place: on a shared host it may be another
    job's, and an artifact of theirs may need it)."""
    if not leaks:
        return ""
    ours = [*leaks.get("containers", []), *leaks.get("shm", []), *leaks.get("processes", [])]
    said = f" Left behind by the run, removed by the runner: {', '.join(ours)}." if ours else ""
    if leaks.get("shm_not_ours"):
        said += f" New in /dev/shm during the run, not named by it (left in place): {', '.join(leaks['shm_not_ours'])}."
    return said


def _harness_commit() -> dict[str, Any]:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True)  # fmt: skip
    return {"commit": head.stdout.strip() or "unknown", "dirty": bool(dirty.stdout.strip())}


def write(out: Path, doc: Mapping[str, Any]) -> None:
    (out / "mutants.json").write_text(json.dumps(doc, indent=2) + "\n")
    (out / "mutants.md").write_text(markdown(doc))


def choose(manifest: Manifest, wanted: str | None) -> list[Mutant]:
    """The mutants ``--mutants 01,04`` names (by number or id), in the manifest's order; all of them by default."""
    if not wanted:
        return list(manifest.mutants)
    names = {w.strip() for w in wanted.split(",") if w.strip()}
    chosen = [m for m in manifest.mutants if m.number in names or m.id in names]
    unknown = names - {m.number for m in chosen} - {m.id for m in chosen}
    if unknown:
        raise SystemExit(f"no such mutant: {', '.join(sorted(unknown))} (docker/vllm-cpu/mutants/mutants.toml)")
    return chosen


def read_results(report: Path) -> dict[str, Any] | None:
    """A run's ``results.json`` in its report folder, or the ``results.json.gz`` kept of it in committed evidence."""
    plain, packed = report / "results.json", report / "results.json.gz"
    if plain.exists():
        return json.loads(plain.read_text())  # type: ignore[no-any-return]
    if packed.exists():
        return json.loads(gzip.decompress(packed.read_bytes()))  # type: ignore[no-any-return]
    return None


def merge_controls(parts: Iterable[Mapping[str, StepResult]]) -> dict[str, StepResult]:
    """One control from several control runs (each the union of some mutants' selections, run one at a time): every
    step any of them ran, a step that failed in one of them counted as failing in the control (a step one of them
    skipped, its prerequisite failed, is the other's)."""
    merged: dict[str, StepResult] = {}
    for part in parts:
        for label, step in part.items():
            before = merged.get(label)
            if before is None or before.outcome == "skipped" or (step.outcome, before.outcome) == ("failed", "passed"):
                merged[label] = step
    return merged


def uncovered(mutants: Iterable[Mutant], control: Mapping[str, StepResult]) -> list[Mutant]:
    """The mutants whose expected step the control runs so far did not run (their control is still to be run):
    a step a control skipped (its prerequisite failed) was not run."""
    return [m for m in mutants if m.step not in control or control[m.step].outcome == "skipped"]


def to_control(mutants: Iterable[Mutant], control: Mapping[str, StepResult], again: bool = False) -> list[Mutant]:
    """The mutants a control is to be run for now: those whose expected step no control ran yet (:func:`uncovered`),
    or with ``again`` (``--new-control``, after the harness changed since the controls there) every one of them:
    a control counts for the harness it ran with, and a step failing in any control run still counts as failing."""
    return list(mutants) if again else uncovered(mutants, control)


def _static_row(mutant: Mutant) -> dict[str, Any]:
    return mutant_row(mutant, None, None)


#: the fields of a row that a run wrote (the rest is the manifest's)
_RUN_FIELDS = ("report", "argv", "seconds", "exit_code", "run_id", "headline", "leaks", "harness", "outcome", "detail",
               "found", "met_prediction")  # fmt: skip


def merge_doc(manifest: Manifest, old: Mapping[str, Any] | None) -> dict[str, Any]:
    """The table so far: a row for every mutant of the manifest (its fields as the manifest says now), with what an
    earlier run into the same folder recorded of it (its run, its verdict, and the runs before that in ``earlier``),
    and the control runs made so far. A run of schema @1 (one ``control``) is read as one control run."""
    rows = {r["id"]: r for r in (old or {}).get("mutants", [])}
    mutants = []
    for mutant in manifest.mutants:
        row = _static_row(mutant)
        before = rows.get(mutant.id, {})
        row.update({k: before[k] for k in (*_RUN_FIELDS, "earlier") if k in before})
        mutants.append(row)
    controls = list((old or {}).get("controls") or [])
    if old and old.get("control"):
        controls.append(old["control"])
    return {"schema": SCHEMA, "controls": controls, "mutants": mutants}


def record_run(row: dict[str, Any], fresh: Mapping[str, Any]) -> None:
    """A mutant's new run into its row; the run it replaces (a rerun after a harness fix) kept in ``earlier``."""
    if "outcome" in row or "report" in row:
        earlier = {k: row[k] for k in _RUN_FIELDS if k in row and k not in ("argv", "leaks")}
        row.setdefault("earlier", []).append(earlier)
    for key in _RUN_FIELDS:
        row.pop(key, None)
    row.update({k: fresh[k] for k in _RUN_FIELDS if k in fresh})


def _links_from(folder: Path, text: str) -> str:
    """A summary's links into this repository's ``docs/`` (a known finding's link, written relative to the
    repository root) made relative to ``folder``, where the copy lies, when that is inside the repository."""
    folder = folder.resolve()
    if ROOT not in folder.parents:
        return text
    return text.replace("](docs/", f"]({os.path.relpath(ROOT, folder)}/docs/")


def export(out: Path, where: Path) -> list[Path]:
    """The table and what each of its runs wrote that a reader needs, small enough to commit: ``mutants.md``,
    ``mutants.json``, and per run its report's ``summary.md`` (its links into ``docs/`` made relative to where it
    lies) and ``results.json`` gzipped (as ``results.json.gz``, which :func:`read_results` reads), at the same
    relative paths; not the logs. The files written."""
    doc = json.loads((out / "mutants.json").read_text())
    reports = [c["report"] for c in doc.get("controls") or []] + [r["report"] for r in doc["mutants"] if "report" in r]
    where.mkdir(parents=True, exist_ok=True)
    written = []
    for name in ("mutants.md", "mutants.json"):
        shutil.copyfile(out / name, where / name)
        written.append(where / name)
    for report in reports:
        target = where / report
        target.mkdir(parents=True, exist_ok=True)
        if (out / report / "summary.md").exists():
            (target / "summary.md").write_text(_links_from(target, (out / report / "summary.md").read_text()))
            written.append(target / "summary.md")
        results = read_results(out / report)
        if results is not None:
            packed = gzip.compress(json.dumps(results, indent=1).encode(), mtime=0)
            (target / "results.json.gz").write_bytes(packed)
            written.append(target / "results.json.gz")
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "mutate-vllm-cpu", help="output folder")
    parser.add_argument("--mutants", help="comma-separated numbers or ids (default: all)")
    parser.add_argument("--overlay", type=Path, help="the overlay checkout (default: the manifest's)")
    parser.add_argument("--no-control", action="store_true", help="no control run: every failure counts")
    parser.add_argument(
        "--control-only", action="store_true",
        help="run only the control the chosen mutants still lack (a run of its own, e.g. under its own lock hold)",
    )  # fmt: skip
    parser.add_argument(
        "--new-control", action="store_true",
        help="run the chosen mutants' control again although earlier controls in --out ran their steps (the harness "
        "changed since them); every control run still counts",
    )  # fmt: skip
    parser.add_argument(
        "--overlay-rebuilt", action="store_true",
        help="the overlay checkout was made again from the same image (a new HEAD commit): keep the runs in --out, "
        "which name the head they ran on",
    )  # fmt: skip
    parser.add_argument("--fresh", action="store_true", help="forget what an earlier run into --out recorded")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds one harness run may take")
    parser.add_argument("--keep-checkouts", action="store_true", help="keep each mutant's clone")
    parser.add_argument("--dry-run", action="store_true", help="print each run's command; start nothing")
    parser.add_argument(
        "--export", type=Path, metavar="DIR",
        help="copy the table and each run's summary.md and results.json (gzipped) from --out to DIR; run nothing",
    )  # fmt: skip
    opts = parser.parse_args(argv)
    if opts.export:
        written = export(opts.out.resolve(), opts.export.resolve())
        print(f"{len(written)} files, {sum(p.stat().st_size for p in written):,} bytes in {opts.export}")
        return 0
    manifest = load_manifest()
    overlay = (opts.overlay or ROOT / manifest.overlay).resolve()
    if not (overlay / ".git").is_dir():
        raise SystemExit(f"no overlay checkout at {overlay}: bash docker/vllm-cpu/overlay-checkout.sh 0.32.0")
    if _git(overlay, "status", "--porcelain").strip():
        raise SystemExit(f"the overlay checkout {overlay} has uncommitted changes: the mutants apply to its HEAD")
    mutants = choose(manifest, opts.mutants)
    out: Path = opts.out.resolve()
    old_path = out / "mutants.json"
    old = None if opts.fresh or not old_path.exists() else json.loads(old_path.read_text())
    if old is not None and old.get("schema") not in (SCHEMA, "vsnap-qual/mutants@1"):
        raise SystemExit(f"{old_path} is of schema {old.get('schema')!r}, not {SCHEMA}: --fresh, or another --out")
    doc = merge_doc(manifest, old)
    head = _git(overlay, "rev-parse", "--short", "HEAD").strip()
    before = list((old or {}).get("earlier_overlays") or [])
    if old is not None and old.get("overlay", {}).get("head") not in (None, head):
        if not opts.overlay_rebuilt:
            raise SystemExit(
                f"{old_path} was run on overlay {old['overlay']['head']}, this checkout is at {head}: --fresh, or "
                "--overlay-rebuilt where it is the same image's checkout made again (overlay-checkout.sh)"
            )
        before.append(old["overlay"])
    # every control run so far, read back from its report folder: a mutant run later is classified against them all
    control: dict[str, StepResult] | None = None
    if not opts.no_control:
        parts = []
        for ctl in doc["controls"]:
            results = read_results(out / ctl["report"])
            if results is None:
                raise SystemExit(f"control {ctl['name']}: no results in {out / ctl['report']} (--fresh to start over)")
            parts.append(steps_of(results))
        control = merge_controls(parts)
    missing = [] if opts.no_control else to_control(mutants, control or {}, again=opts.new_control)
    control_select = union_selection(m.select for m in missing) if missing else []
    name = "control" if not doc["controls"] else f"control-{len(doc['controls']) + 1}"
    if opts.dry_run:
        if missing:
            print(f"{name}:", shlex.join(harness_argv(manifest, overlay, control_select, out / name / "report")))
        for m in [] if opts.control_only else mutants:
            clone = out / m.id / "checkout"
            print(f"{m.id}:", shlex.join(harness_argv(manifest, clone, m.select, out / m.id / "report")))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    doc.update(
        generated=datetime.now(timezone.utc).isoformat(timespec="seconds"), harness=_harness_commit(),
        overlay={"path": str(overlay), "head": head}, profile_args=[manifest.profile, *manifest.args],
    )  # fmt: skip
    if before:
        doc["earlier_overlays"] = before
    keys = ("schema", "generated", "harness", "overlay", "earlier_overlays", "profile_args", "controls", "mutants")
    doc = {k: doc[k] for k in keys if k in doc}
    if missing:
        record, results = run_harness(manifest, name, overlay, control_select, out, opts.timeout)
        steps = steps_of(results) if results is not None else None
        doc["controls"].append(
            {
                **asdict(record),
                "select": control_select,
                "for": [m.id for m in missing],
                "failed": [
                    {"step": s.label, "words": excerpt(s.message)}
                    for s in (steps or {}).values()
                    if s.outcome == "failed"
                ],
            }  # fmt: skip
        )
        write(out, doc)
        if steps is None:
            raise SystemExit(f"the control wrote no results.json: see {out / name / 'pytest.log'}")
        control = merge_controls([control or {}, steps])
        if not_run := uncovered(missing, control):
            raise SystemExit(f"the control did not run {', '.join(m.step for m in not_run)}: see {out / name}")
    if opts.control_only:
        write(out, doc)
        print(f"{out / 'mutants.md'}")
        return 0
    by_id = {row["id"]: row for row in doc["mutants"]}
    for mutant in mutants:
        clone = mutant_checkout(overlay, mutant, out / mutant.id / "checkout")
        try:
            record, results = run_harness(manifest, mutant.id, clone, mutant.select, out, opts.timeout)
        finally:
            if not opts.keep_checkouts:
                shutil.rmtree(clone, ignore_errors=True)
        verdict = classify(mutant.step, mutant.words, steps_of(results) if results is not None else None, control)
        record_run(by_id[mutant.id], mutant_row(mutant, record, verdict))
        write(out, doc)
        print(f"[{_now()}] {mutant.id}: {verdict.outcome} ({verdict.detail})", flush=True)
    print(f"{out / 'mutants.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
