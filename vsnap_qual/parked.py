"""Whether what a faulted restore left is parked for good in CRIU's restorer, so that the audit stops waiting.

When a signal ends CRIU while it restores (vLLM's error path kills the CRIU child it waits on), the tasks CRIU had
already made stay in its restorer, each thread waiting on a futex for a stage CRIU will never announce: they never
run vLLM's code again and never exit by themselves. Waiting the cleanup grace for them to go is time the verdict
cannot use (the kill injector then records what was left without judging vLLM's cleanup). A tree that is still
tearing down runs: some thread is not on a futex, or its CPU time moves, or the set of processes changes.

:class:`ParkedWatch` says a leftover set is parked once, at looks at least :data:`PARKED_FOR` seconds apart, it
stayed the same processes, no CRIU among them, every thread of each on a futex and no CPU tick spent. It is only a
reason to stop a wait early: the injector still decides from what was left whether the cleanup is judged.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from vsnap_qual import kills
from vsnap_qual.box import Box, ProcessRow

#: how long a leftover set must look parked, unchanged, before a wait for it stops
PARKED_FOR = 1.5


def look_threads(box: Box, pids: Sequence[int]) -> dict[int, tuple[tuple[str, ...], int]]:
    """For each PID (as the box numbers it), in one exec: where each of its threads waits in the kernel
    (``/proc/<pid>/task/*/wchan``) and its CPU ticks so far (``utime + stime`` of ``/proc/<pid>/stat``, all its
    threads). A PID that is gone is left out."""
    if not pids:
        return {}
    script = (
        f"for p in {' '.join(str(int(p)) for p in pids)}; do "
        "[ -r /proc/$p/stat ] || continue; "
        "t=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -d' ' -f12,13); "
        'w=""; for d in /proc/$p/task/*; do w="$w,$(cat $d/wchan 2>/dev/null)"; done; '
        'echo "$p $t $w"; done'
    )
    done = box.sh(script, 15)
    out: dict[int, tuple[tuple[str, ...], int]] = {}
    if done.exit_code != 0:
        return out
    for line in done.stdout.splitlines():
        words = line.split()
        if len(words) != 4 or not (words[0] + words[1] + words[2]).isdigit():
            continue
        out[int(words[0])] = (tuple(sorted(w for w in words[3].split(",") if w)), int(words[1]) + int(words[2]))
    return out


class ParkedWatch:
    """Called with the leftovers at each look of a wait (:func:`vsnap_qual.injection.settle`): True once they are
    parked for good (the module's rule). ``clock`` is injectable for tests of the rule alone."""

    def __init__(self, box: Box, clock: Callable[[], float] = time.monotonic) -> None:
        self.box = box
        self.clock = clock
        self.since: float | None = None
        self.seen: Mapping[int, tuple[tuple[str, ...], int]] | None = None

    def __call__(self, left: Sequence[ProcessRow]) -> bool:
        if not left or any(kills.criu_action(p["args"]) for p in left):
            self.since = self.seen = None
            return False
        now = self.clock()
        looked = look_threads(self.box, sorted(p["pid"] for p in left))
        parked = len(looked) == len(left) and all(
            waits and all(w.startswith("futex") for w in waits) for waits, _ in looked.values()
        )
        if not parked or looked != self.seen:
            self.seen = looked if parked else None
            self.since = now if parked else None
            return False
        return self.since is not None and now - self.since >= PARKED_FOR
