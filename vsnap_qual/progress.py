"""What a user sees while a qualification runs: one line per lane and step from the controller (step, result,
elapsed), the harness's own messages through :mod:`logging` (logger ``vsnap_qual``: ``--log-cli-level=INFO``
shows them), and by-design skips kept out of pytest's SKIPPED lines.

A suite item's lane and step travel on its test reports (``vsnap_lane``, ``vsnap_step``: plain strings, which
xdist carries from a worker to the controller), so the controller prints the same line with or without ``-n``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import pytest

from vsnap_qual.model import NOT_APPLICABLE_PREFIX

log = logging.getLogger("vsnap_qual")

#: pytest's category (and short-summary word) for a step that does not apply to a lane by design (the head arm's
#: comparison with itself, overlay verification without an overlay). Not "skipped": pytest's ``-ra`` lists only
#: unexpected skips, and its summary line counts these apart ("6 not applicable").
NOT_APPLICABLE = "not applicable"
#: a step still running this many seconds after it started gets a line saying so (a long step is not silent)
STILL_RUNNING_AFTER = 10.0


def not_applicable(reason: str) -> NoReturn:
    """Skip a suite step that does not apply to this lane by design (never for something that went wrong)."""
    pytest.skip(NOT_APPLICABLE_PREFIX + reason)


def skip_reason(report: pytest.TestReport) -> str:
    """A skipped report's reason (pytest keeps it as ``(path, line, "Skipped: reason")``)."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr or "")


def without_lane(message: str, lane: str) -> str:
    """A step message without the lane name it starts with (the line already names the lane)."""
    return message.removeprefix(f"{lane}: ")


def is_not_applicable(report: pytest.TestReport) -> bool:
    return bool(report.skipped and skip_reason(report).startswith(NOT_APPLICABLE_PREFIX))


def mark_report(report: pytest.TestReport, lane: str, step: str) -> None:
    """Tag a suite item's report with its lane and step (worker side; the attributes survive xdist)."""
    report.vsnap_lane = lane  # type: ignore[attr-defined]
    report.vsnap_step = step  # type: ignore[attr-defined]


@dataclass
class _Item:
    lane: str
    step: str
    seconds: float = 0.0
    outcome: str = "passed"
    message: str = ""


class Progress:
    """Controller-side reporter: a line when each suite step ends; other tests are left to pytest."""

    def __init__(self, config: pytest.Config, lanes: list[str]) -> None:
        self.config = config
        self.items: dict[str, _Item] = {}
        self.width = max((len(lane) for lane in lanes), default=7)
        self.timers: dict[str, threading.Timer] = {}
        self.lock = threading.Lock()  # the timers' lines and the steps' end lines are written one at a time

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        timer = threading.Timer(STILL_RUNNING_AFTER, self._still_running, (nodeid, time.monotonic()))
        timer.daemon = True
        self.timers[nodeid] = timer
        timer.start()

    def _still_running(self, nodeid: str, started: float) -> None:
        """The step's line while it runs: it started a while ago (a suite step whose setup reported; the first
        step of a lane also waits for the lane's box)."""
        item = self.items.get(nodeid)
        if item is None:  # its setup (a lane's box starting) has not reported yet: look again in a second
            with self.lock:
                if nodeid in self.timers:
                    timer = threading.Timer(1.0, self._still_running, (nodeid, started))
                    timer.daemon = True
                    self.timers[nodeid] = timer
                    timer.start()
            return
        if self.config.get_verbosity() < -1:
            return
        line = f"vsnap {item.lane:<{self.width}}  {item.step:<24} {'running':<14} {time.monotonic() - started:6.1f} s"
        self._write(line + "  (started; its result follows when it ends)")

    @pytest.hookimpl(wrapper=True)
    def pytest_report_teststatus(self, report: Any, config: pytest.Config) -> Any:
        """Suite steps print no progress letter (their line says more); a by-design skip is its own category."""
        result = yield
        if getattr(report, "vsnap_step", None) is None or not result:
            return result
        category, _letter, word = result
        if isinstance(report, pytest.TestReport) and is_not_applicable(report):
            return NOT_APPLICABLE, "", "N/A"
        return category, "", word

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        lane, step = getattr(report, "vsnap_lane", None), getattr(report, "vsnap_step", None)
        if lane is None or step is None:
            return
        item = self.items.setdefault(report.nodeid, _Item(str(lane), str(step)))
        item.seconds += report.duration
        if report.failed:
            item.outcome = "failed" if report.when == "call" else f"error in {report.when}"
            item.message = item.message or _first_line(getattr(report.longrepr, "reprcrash", None), report)
        elif report.skipped and item.outcome == "passed":
            item.outcome = NOT_APPLICABLE if is_not_applicable(report) else "skipped"
            item.message = skip_reason(report).removeprefix(NOT_APPLICABLE_PREFIX)

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        with self.lock:
            timer = self.timers.pop(nodeid, None)
        if timer is not None:
            timer.cancel()
        item = self.items.get(nodeid)
        if item is None or self.config.get_verbosity() < -1:
            return
        line = f"vsnap {item.lane:<{self.width}}  {item.step:<24} {item.outcome:<14} {item.seconds:6.1f} s"
        if item.message and item.outcome != "passed":
            line += f"  {without_lane(item.message, item.lane)[:120]}"
        self._write(line, red=item.outcome.startswith(("failed", "error")), yellow=item.outcome == "skipped")

    def pytest_sessionfinish(self) -> None:
        for timer in self.timers.values():
            timer.cancel()

    def _write(self, line: str, **markup: bool) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        # without xdist a running step's output is being captured: its line goes past the capture, as live logs do
        suspended = capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext()
        with self.lock, suspended:
            reporter.ensure_newline()
            if getattr(getattr(reporter, "_tw", None), "width_of_current_line", 0):
                reporter.write("\n")  # after progress letters of other tests (xdist sets no file path to end)
            reporter.write_line(line, **markup)


def _first_line(crash: Any, report: pytest.TestReport) -> str:
    message = getattr(crash, "message", None) or str(report.longreprtext or "")
    lines = [line for line in str(message).splitlines() if line.strip()]
    return lines[0] if lines else ""


def say_line(config: pytest.Config) -> Callable[[str], None]:
    """Where a runtime says what it does while preflight waits (a pull's progress): a ``vsnap …`` line on the
    terminal, at once; the logger when there is no terminal."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")

    def say(line: str) -> None:
        if reporter is None:
            log.info("%s", line)
            return
        reporter.ensure_newline()
        reporter.write_line(f"vsnap {line}")

    return say


def register(config: pytest.Config, lanes: list[str]) -> None:
    """On the controller of an active session only. Without -v, pytest's per-file prefixes go (as under xdist):
    the step lines say where the run is."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and config.get_verbosity() <= 0:
        reporter.showfspath = False
    config.pluginmanager.register(Progress(config, lanes), "vsnap_qual-progress")


def pytest_counts(stats: Mapping[str, list[Any]]) -> dict[str, int]:
    """pytest's own outcome counts, worded and ordered as its summary line, from the terminal reporter's stats."""
    counts: dict[str, int] = {}
    for category in ("failed", "passed", "skipped", "deselected", "xfailed", "xpassed", "error", NOT_APPLICABLE):
        reports = [r for r in stats.get(category, []) if getattr(r, "count_towards_summary", True)]
        if reports:
            counts["errors" if category == "error" and len(reports) > 1 else category] = len(reports)
    return counts
