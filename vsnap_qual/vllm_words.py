"""The engine's words and what the harness makes of them: the most telling line of a failed command
(:func:`vllm_reason`), whether vLLM said the environment cannot do a step (:func:`skip_if_limitation`), CRIU's own
reason for a failed restore as vLLM relays it (:func:`criu_words`), a captured ID another host process took
(:func:`captured_id_taken`), vLLM's command error cut to its program (:func:`short_command`); and how a step says a
check did not hold (:class:`StepFailed`, :func:`check`). The lifecycle's steps, the fault layer and the report read
them; nothing here judges (``checks``) or touches a box."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from typing import Protocol

import pytest

from vsnap_qual import progress
from vsnap_qual.contract import CPU_NOT_APPLICABLE, FEATURE_REFUSALS, LIMITATIONS


class NamedVariant(Protocol):
    """An engine-feature variant as vLLM's refusal of it is said (``config.Variant``): its name and arguments."""

    @property
    def name(self) -> str: ...
    @property
    def args(self) -> tuple[str, ...]: ...


class StepFailed(AssertionError):
    """A qualification check did not hold; the message says what differs."""


EXCEPTION_LINE = re.compile(r"^\s*(?:[A-Za-z_][\w.]*(?:Error|Exception)|Value error)\b.*")


def vllm_reason(text: str) -> str:
    """The most telling line of an engine's failure output: a known limitation, else the last exception line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if any(marker in line for marker in LIMITATIONS):
            return line
    for line in reversed(lines):
        if EXCEPTION_LINE.match(line):
            return line
    return lines[-1] if lines else "(no output)"


def skip_if_limitation(reason: str, *, cpu_smoke: bool, variant: NamedVariant | None = None) -> None:
    """Skip the step when vLLM says the environment cannot do it (a reason quoted verbatim): not applicable when
    it is, in CPU smoke mode, a runner vLLM's CPU build does not have, or, in an engine-feature variant's lane, vLLM
    refusing the feature; an environment limitation otherwise (not a qualification: the verdict is not a pass)."""
    if cpu_smoke and any(marker in reason for marker in CPU_NOT_APPLICABLE):
        progress.not_applicable(f"vLLM's CPU build has no such runner: {reason}")
    if variant is not None and any(marker in reason for marker in FEATURE_REFUSALS):
        progress.not_applicable(f"vLLM refuses variant {variant.name} ({shlex.join(variant.args)}): {reason}")
    if any(marker in reason for marker in LIMITATIONS):
        pytest.skip(f"environment limitation: {reason}")


def check(condition: bool, message: str) -> None:
    """A qualification check; failing raises :class:`StepFailed` with the message."""
    if not condition:
        raise StepFailed(message)


# ---- CRIU's and vLLM's words in a failed command's output ------------------------------------------------------
_COMMAND = re.compile(r"Command '\[(?P<argv>[^\]]*)\]'")


def short_command(text: str) -> str:
    """vLLM's ``Command '[...]' returned non-zero exit status N`` with the argument list cut to the program and its
    subcommand (``'[… criu restore …]'``): the words are vLLM's, the dozen paths and flags are in the evidence."""

    def cut(match: re.Match[str]) -> str:
        words = re.findall(r"'([^']*)'", match.group("argv"))
        programs = [i for i, w in enumerate(words) if w.rsplit("/", 1)[-1] in ("criu", "cuda-checkpoint")]
        if not programs:
            return match.group(0)
        at = programs[0]
        said = " ".join([words[at].rsplit("/", 1)[-1], *words[at + 1 : at + 2]])
        return f"Command '[… {said} …]'"

    return _COMMAND.sub(cut, text)


# ---- host collisions (not the engine's defect) --------------------------------------------------------------
#: How every step that met the finding begins its message: one engine defect, said the same way wherever it shows.
NOT_SELF_CONTAINED = "the artifact is not self-contained"

_COLLISION = ("Unable to create a thread: -17", "File exists", "-17 (File exists)")


#: CRIU's ``Error`` lines that a successful restore prints too (a container without tun, a capped RLIMIT_NOFILE):
#: never the reason a restore failed
_CRIU_BENIGN = ("Unable to create tun", "Can't setup RLIMIT_NOFILE")


def criu_reason(stdout: str) -> list[str]:
    """CRIU's own reason for a failed dump or restore: its ``Error (criu/…)`` lines and its verdict line
    (``Restoring FAILED.``), which vLLM logs on stdout under ``CRIU restore.log (tail):`` (its stderr has only
    the exit status of the criu command). The first (the cause; CRIU's errors cascade after it) and the last two,
    oldest first, lines a successful restore prints too left out; empty when there are none."""
    lines = [
        _VLLM_LOG_PREFIX.sub("", ln).strip()
        for ln in stdout.splitlines()
        if ("Error (criu/" in ln or "FAILED" in ln) and not any(b in ln for b in _CRIU_BENIGN)
    ]
    return lines if len(lines) <= 3 else [lines[0], *lines[-2:]]


#: vLLM's logger prefix on each line of CRIU's log it repeats (``(MainProcess pid=12247) ERROR 12-02 02:25:18
#: [runtime.py:546]``): CRIU's words are what follows, the same whether vLLM logged them or the log was read
_VLLM_LOG_PREFIX = re.compile(r"^.*?\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d [\d:]+ \[[^\]]*\]\s*")


_CRIU_FAILED = re.compile(r"criu.*restore.*returned non-zero exit status")


def criu_words(stdout: str, stderr: str, restore_log: Callable[[], str]) -> list[str]:
    """CRIU's reason for a failed restore: from vLLM's stdout (0.32 logs the tail of CRIU's log there), else, when
    vLLM says its ``criu restore`` command failed, from the artifact's ``images/restore.log`` (0.31 logs nothing;
    read only then: a successful restore's log has harmless ``Error`` lines of its own)."""
    reason = criu_reason(stdout)
    if reason or not _CRIU_FAILED.search(stderr):
        return reason
    return criu_reason(restore_log())


def captured_id_collision(stdout: str, stderr: str) -> str | None:
    """CRIU could not recreate a captured PID or thread ID because another process on the host took it between
    vLLM's PID check and CRIU's clone (EEXIST, -17): with host PID namespaces on a busy host that is the host's
    doing, not the engine's. The CRIU log line that says so, else None."""
    if "CRIU restore.log (tail):" not in stdout:
        return None
    tail = stdout.split("CRIU restore.log (tail):", 1)[1]
    for line in tail.splitlines():
        if any(marker in line for marker in _COLLISION):
            return line.strip()
    return None


#: vLLM's pre-check before CRIU runs (``os.kill(pid, 0)`` on each captured PID) found one taken
PID_OCCUPIED = "captured PID is already occupied"


def captured_id_taken(stdout: str, stderr: str) -> str | None:
    """A restore refused because a captured ID was taken at that moment, in words that say whose check saw it:
    CRIU's clone (:func:`captured_id_collision`), or vLLM's pre-check (``captured PID is already occupied``).
    Either says nothing of the artifact; None for any other failure."""
    collision = captured_id_collision(stdout, stderr)
    if collision:
        return f"CRIU could not recreate a captured ID (another process took it): {collision}"
    said = next((ln.strip() for ln in reversed(stderr.splitlines()) if PID_OCCUPIED in ln), None)
    return f"vLLM's pre-check found a captured PID taken (another process held it): {said}" if said else None
