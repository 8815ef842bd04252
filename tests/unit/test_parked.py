"""The rule that ends a fault audit's wait early (vsnap_qual.faults.parked): only a leftover set that stays the same,
with no CRIU among it, every thread on a futex and no CPU spent, for PARKED_FOR seconds. The box is a fake that
answers its one look (``Box.thread_waits``) with what /proc would say (the shell box's script runs against real /proc
in tests/integration/test_runtime.py)."""

from __future__ import annotations

from collections.abc import Callable

from vsnap_qual.box import ProcessRow
from vsnap_qual.faults.parked import PARKED_FOR, ParkedWatch
from vsnap_qual.runtimes.shell import parse_thread_waits


class ProcBox:
    """Answers ``thread_waits`` from ``self.tasks``: pid -> (utime + stime, [wchan of each thread]), through the
    shell box's own parsing of its script's lines."""

    def __init__(self) -> None:
        self.tasks: dict[int, tuple[int, list[str]]] = {}

    def thread_waits(self, pids: list[int]) -> dict[int, object]:
        lines = [f"{pid} {ticks} 0 {''.join(',' + w for w in waits)}" for pid, (ticks, waits) in self.tasks.items()]
        return dict(parse_thread_waits("\n".join(lines) + "\n"))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def row(pid: int, args: str = "python -m vllm.v1.engine.core") -> ProcessRow:
    return {"pid": pid, "ppid": 1, "sid": 1, "stat": "S", "args": args}


def watch_over(
    box: ProcBox, left: list[ProcessRow], looks: list[float], change: Callable[[int], None] | None = None
) -> list[bool]:
    """The watch's answers at looks this many seconds after the first; ``change(i)`` alters /proc before look i."""
    clock = Clock()
    watch = ParkedWatch(box, clock)  # type: ignore[arg-type]
    said = []
    for i, at in enumerate(looks):
        if change:
            change(i)
        clock.now = 100.0 + at
        said.append(watch(left))
    return said


def test_a_tree_parked_on_futexes_and_unchanged_is_hopeless_once_it_stayed_so() -> None:
    box = ProcBox()
    box.tasks = {4313: (70, ["futex_do_wait", "futex_do_wait"]), 4316: (900, ["futex_wait_queue"])}
    left = [row(4313), row(4316)]
    assert watch_over(box, left, [0.0, PARKED_FOR / 2, PARKED_FOR]) == [False, False, True]


def test_cpu_spent_between_looks_is_a_tree_still_running() -> None:
    box = ProcBox()
    box.tasks = {4313: (70, ["futex_do_wait"])}

    def tick(i: int) -> None:
        box.tasks[4313] = (70 + i, ["futex_do_wait"])

    assert watch_over(box, [row(4313)], [0.0, 1.0, 2.0, 3.0, 4.0], tick) == [False] * 5


def test_one_thread_off_a_futex_or_a_process_gone_is_not_parked() -> None:
    box = ProcBox()
    box.tasks = {4313: (70, ["futex_do_wait", "ep_poll"])}
    assert watch_over(box, [row(4313)], [0.0, 2.0, 4.0]) == [False] * 3
    box.tasks = {4313: (70, ["futex_do_wait"])}  # 4316 listed but gone from /proc as it is looked at
    assert watch_over(box, [row(4313), row(4316)], [0.0, 2.0, 4.0]) == [False] * 3


def test_criu_among_the_leftovers_may_still_resume_them() -> None:
    box = ProcBox()
    box.tasks = {4313: (70, ["futex_do_wait"]), 6935: (5, ["futex_do_wait"])}
    criu = row(6935, "/opt/vsnap-criu/lib/ld-linux-x86-64.so.2 --library-path /x /opt/vsnap-criu/bin/criu restore -D")
    assert watch_over(box, [row(4313), criu], [0.0, 2.0, 4.0]) == [False] * 3


def test_a_set_that_changes_starts_the_time_again() -> None:
    box = ProcBox()
    box.tasks = {4313: (70, ["futex_do_wait"]), 4316: (9, ["futex_do_wait"])}

    def one_exits(i: int) -> None:
        if i == 2:
            del box.tasks[4316]

    left_then = [row(4313), row(4316)]
    clock = Clock()
    watch = ParkedWatch(box, clock)  # type: ignore[arg-type]
    said = []
    for i, at in enumerate([0.0, 1.0, PARKED_FOR + 0.1, PARKED_FOR + 1.0, 2 * PARKED_FOR + 0.2]):
        one_exits(i)
        clock.now = 100.0 + at
        said.append(watch(left_then if i < 2 else [row(4313)]))
    assert said == [False, False, False, False, True]
