"""Known findings: failures already recorded upstream, listed in a file (``--vsnap-known-findings``), that a run
shows as KNOWN with their link instead of failing on them (docs/known-findings.md).

The file is TOML, one ``[[finding]]`` table per entry::

    [[finding]]
    title = "the artifact is not self-contained"    # the finding in a few words (optional)
    id = "step:restore-after-stop"                  # step:<step name> (on any lane) or check:<check id>
    words = "the artifact is not self-contained: its restore needs /dev/shm/psm_"
    link = "https://..."                            # where it is recorded
    expires = 2027-03-31                            # the last day (the run's date) it applies

Matching (:func:`match`), on the run's failures (:func:`failures`): a failed step ``<lane>/<arm>/<step>`` is
known when an entry of id ``step:<step>`` has its words in the step message's first line; a failed check when an
entry of id ``check:<id>`` has its words in its result or details, or when each item it failed on is a failed
step that is known. Words compare with digits and hex IDs aside (a PID, a segment's name) and spaces collapsed.
An entry past its date, one whose id failed in other words, and one whose id did not fail are said so; their
failures, and every failure no entry explains, fail the verdict.
"""

from __future__ import annotations

import datetime as dt
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from vsnap_qual import model, vllm_words
from vsnap_qual.procedure import FAULT_PREFIX

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomllib's origin, tomli (a dependency there)
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

__all__ = ["Failure", "KnownFindingsError", "Matched", "failures", "match", "normalise", "read_file"]

_ID = re.compile(r"^(step|check):[A-Za-z0-9][A-Za-z0-9_.:+-]*$")
_KEYS = {"id", "words", "link", "expires", "title"}
_VARYING = re.compile(r"[0-9a-f]{6,}|\d+")
FORMAT_HELP = (
    'one [[finding]] table per entry: id = "step:<step>" or "check:<check id>", words = "<the failure\'s exact '
    'words>", link = "<where it is recorded>", expires = YYYY-MM-DD, and optionally title (docs/known-findings.md)'
)


class KnownFindingsError(ValueError):
    """A known-findings file that cannot be used, with what is wrong and where."""


def _fail(path: Path, where: str, what: str) -> KnownFindingsError:
    return KnownFindingsError(f"{path}: {where}{what}; write {FORMAT_HELP}")


def read_file(path: Path) -> tuple[model.KnownFinding, ...]:
    """The entries of a known-findings file, checked; raises :class:`KnownFindingsError` naming the first problem."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise KnownFindingsError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise KnownFindingsError(f"{path} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise _fail(path, "", f"is not TOML ({exc})") from None
    unknown = sorted(set(data) - {"finding"})
    if unknown:
        raise _fail(path, "", f"has top-level key(s) {', '.join(unknown)}")
    tables = data.get("finding")
    if not isinstance(tables, list) or not tables:
        raise _fail(path, "", "holds no [[finding]] entry")
    entries: list[model.KnownFinding] = []
    seen: set[tuple[str, str]] = set()
    for n, table in enumerate(tables, 1):
        entry = _entry(path, f"finding {n}: ", table)
        key = (entry["id"], normalise(entry["words"]))
        if key in seen:
            raise _fail(path, f"finding {n}: ", f"repeats the id {entry['id']!r} with the same words")
        seen.add(key)
        entries.append(entry)
    return tuple(entries)


def _entry(path: Path, where: str, table: object) -> model.KnownFinding:
    if not isinstance(table, dict):
        raise _fail(path, where, "is not a table")
    extra = sorted(set(table) - _KEYS)
    if extra:
        raise _fail(path, where, f"has unknown key(s) {', '.join(extra)}")
    missing = [k for k in ("id", "words", "link", "expires") if k not in table]
    if missing:
        raise _fail(path, where, f"lacks {', '.join(missing)}")
    texts = {k: table[k] for k in ("id", "words", "link", "title") if k in table}
    for key, value in texts.items():
        if not isinstance(value, str) or not value.strip():
            raise _fail(path, where, f"{key} must be a non-empty string")
    ident, words, link = table["id"].strip(), table["words"].strip(), table["link"].strip()
    if not _ID.match(ident):
        raise _fail(path, where, f"id {ident!r} is neither step:<step name> nor check:<check id>")
    if any(c.isspace() for c in link):
        raise _fail(path, where, f"link {link!r} is not a URL or a path (it holds spaces)")
    if not normalise(words).strip("# "):
        raise _fail(path, where, f"words {words!r} hold nothing but numbers and IDs (they would match anything)")
    expires = table["expires"]
    if isinstance(expires, str):
        try:
            expires = dt.date.fromisoformat(expires.strip())
        except ValueError:
            raise _fail(path, where, f"expires {table['expires']!r} is not a date (YYYY-MM-DD)") from None
    if isinstance(expires, dt.datetime) or not isinstance(expires, dt.date):
        raise _fail(path, where, f"expires {expires!r} is not a date (YYYY-MM-DD)")
    return model.KnownFinding(
        id=ident, words=words, link=link, expires=expires.isoformat(), title=str(table.get("title", "")).strip()
    )


def normalise(text: str) -> str:
    """Words as compared: digits and hex IDs as ``#``, runs of spaces as one."""
    return " ".join(_VARYING.sub("#", text).split())


@dataclass(frozen=True)
class Failure:
    """One failure of a run: ``label`` (a step's ``lane/arm/step``, or ``check:<id>``), the id entries name it by
    (``step:<step>``, ``check:<id>``), its words, and, for a check, the step labels of the items it failed on."""

    label: str
    id: str
    words: str
    steps: tuple[str, ...] = ()


def step_words(message: str) -> str:
    """A failed step's words: its message's first line, vLLM's long command cut as everywhere (``vllm_words``)."""
    return vllm_words.short_command((message or "no message recorded").splitlines()[0])


def failures(failed: Mapping[str, str], checks: Iterable[model.Check]) -> list[Failure]:
    """The run's failures: each failed step (``label`` → its message) and each failed check."""
    out = [Failure(label, "step:" + label.rsplit("/", 1)[-1], step_words(message)) for label, message in failed.items()]
    for check in checks:
        if check["status"] != "FAIL":
            continue
        prefix = check["id"] + "."
        steps = []
        for item in check["items"]:
            if item["ok"] is not False:
                continue
            parts = item["id"].removeprefix(prefix).split(".", 2)
            # the item's step: by its name (lifecycle.v1.head.create), or by its fault's (faults.v1.head.wake-raise)
            named = ["/".join(parts), "/".join([*parts[:2], FAULT_PREFIX + parts[-1]])] if len(parts) == 3 else []
            step = next((label for label in named if item["id"].startswith(prefix) and label in failed), "")
            steps.append(step)  # "": an item that is no failed step: the check needs an entry of its own
        words = "; ".join([check["result"], *check["details"]])
        out.append(Failure(f"check:{check['id']}", f"check:{check['id']}", words, tuple(steps)))
    return out


@dataclass(frozen=True)
class Matched:
    """What :func:`match` found: each failure a current entry explains (label → link), and each entry's outcome."""

    known: dict[str, str]
    outcomes: list[model.KnownOutcome]


def _said(entry: model.KnownFinding, state: model.KnownState, labels: Sequence[str], other: str = "") -> str:
    name = entry["title"] or entry["id"]
    shown = ", ".join(labels[:6]) + (f" and {len(labels) - 6} more" if len(labels) > 6 else "")
    if state == "known":
        return f"KNOWN {name} ({entry['link']}, until {entry['expires']}): {shown}"
    if state == "expired":
        return (
            f"EXPIRED known finding {name} ({entry['link']}): its entry ended {entry['expires']}, so {shown} "
            "fail again; check it upstream, then renew or remove the entry"
        )
    if state == "changed":
        return (
            f"CHANGED known finding {name} ({entry['link']}): {shown} failed in other words than the entry's "
            f"{entry['words']!r} (now {other!r}): a new failure until the entry is updated"
        )
    return f"UNMATCHED known finding {name} ({entry['link']}): nothing failed as {entry['id']} in this run"


def match(found: Sequence[Failure], entries: Sequence[model.KnownFinding], on: dt.date) -> Matched:
    """Which failures the entries explain on the date ``on`` (the run's), and what each entry did."""
    known: dict[str, str] = {}
    hits: dict[int, list[str]] = {n: [] for n in range(len(entries))}
    for failure in found:
        words = normalise(failure.words)
        for n, entry in enumerate(entries):
            if entry["id"] == failure.id and normalise(entry["words"]) in words:
                hits[n].append(failure.label)
                if dt.date.fromisoformat(entry["expires"]) >= on:
                    known.setdefault(failure.label, entry["link"])
    for failure in found:  # a check that failed only on known steps is known through them
        if failure.label not in known and failure.steps and all(s in known for s in failure.steps):
            known[failure.label] = known[failure.steps[0]]
    outcomes: list[model.KnownOutcome] = []
    for n, entry in enumerate(entries):
        labels = hits[n]
        state: model.KnownState
        other = ""
        if labels:
            state = "known" if dt.date.fromisoformat(entry["expires"]) >= on else "expired"
        else:
            same_id = [f for f in found if f.id == entry["id"] and f.label not in known]
            labels = [f.label for f in same_id]
            state = "changed" if same_id else "unmatched"
            other = same_id[0].words[:300] if same_id else ""
        outcomes.append(
            model.KnownOutcome(finding=entry, state=state, failures=labels, said=_said(entry, state, labels, other))
        )
    return Matched(known, outcomes)
