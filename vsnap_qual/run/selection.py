"""What a ``-k``/``-m`` selection could have chosen, said when it chose nothing (pytest's exit 5): the lanes, the
procedure's step ids, the session's fault names and the suites' test names, each usable in ``-k``."""

from __future__ import annotations

from collections.abc import Sequence

from vsnap_qual import procedure


def nothing_selected_lines(
    *, lanes: Sequence[str], faults: Sequence[str], tests: Sequence[str], keyword: str, markexpr: str
) -> list[str]:
    """The lines the terminal shows when the selection left no test: what was asked, what there is to select."""
    asked = " ".join(part for part in (f"-k {keyword!r}" if keyword else "", f"-m {markexpr!r}" if markexpr else "")
                     if part)  # fmt: skip
    steps = [s.name for s in procedure.LIFECYCLE]
    lines = [
        f"nothing selected{' by ' + asked if asked else ''}: no lane started and nothing was written. "
        "-k matches the test names and their [lane-fault] ids; -m fault selects the injected failures, "
        "-m 'not fault' the lifecycle",
        "lanes: " + ", ".join(lanes),
        "step ids: " + ", ".join(steps),
        f"fault names ({len(faults)}): " + ", ".join(faults),
    ]
    if tests:
        lines.append("tests: " + ", ".join(dict.fromkeys(tests)))
    return lines


def unmatched_deselects(prefixes: Sequence[str], nodeids: Sequence[str]) -> str:
    """The refusal of ``--deselect`` ids that match no collected test (pytest deselects by node-id prefix and
    ignores one that matches nothing), naming a few ids there are; empty when each matched."""
    unmatched = [prefix for prefix in prefixes if not any(nodeid.startswith(prefix) for nodeid in nodeids)]
    if not unmatched:
        return ""
    shown = ", ".join(list(dict.fromkeys(nodeids))[:3])
    return (
        f"--deselect {', '.join(unmatched)}: no collected test has that id, so nothing would be left out; give a node "
        f"id as `pytest --collect-only -q` lists them, relative to the rootdir (e.g. {shown}), or use -k to select "
        "by name"
    )
