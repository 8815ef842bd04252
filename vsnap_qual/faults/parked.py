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

from vsnap_qual.box import BoxProcesses, ProcessRow, ThreadWaits

#: how long a leftover set must look parked, unchanged, before a wait for it stops
PARKED_FOR = 1.5


def criu_action(args: str) -> str | None:
    """``dump`` or ``restore`` where ``args`` runs CRIU (directly, or through a loader that names its binary)."""
    words = args.split()
    for i, word in enumerate(words):
        if word.rsplit("/", 1)[-1] == "criu":
            return next((w for w in words[i + 1 :] if w in ("dump", "restore")), None)
    return None


class ParkedWatch:
    """Called with the leftovers at each look of a wait (:func:`vsnap_qual.faults.tools.settle`): True once they are
    parked for good (the module's rule), looked at through the box's :meth:`~vsnap_qual.box.BoxProcesses.thread_waits`.
    ``clock`` is injectable for tests of the rule alone."""

    def __init__(self, box: BoxProcesses, clock: Callable[[], float] = time.monotonic) -> None:
        self.box = box
        self.clock = clock
        self.since: float | None = None
        self.seen: Mapping[int, ThreadWaits] | None = None

    def __call__(self, left: Sequence[ProcessRow]) -> bool:
        if not left or any(criu_action(p["args"]) for p in left):
            self.since = self.seen = None
            return False
        now = self.clock()
        looked = self.box.thread_waits(sorted(p["pid"] for p in left))
        parked = len(looked) == len(left) and all(
            waits.wchans and all(w.startswith("futex") for w in waits.wchans) for waits in looked.values()
        )
        if not parked or looked != self.seen:
            self.seen = looked if parked else None
            self.since = now if parked else None
            return False
        return self.since is not None and now - self.since >= PARKED_FOR
