"""What a run was started with, so that its summary can say how to run it again: the command line as pytest
received it (``@file`` arguments unexpanded), the directory it ran in, the Python, the ``VSNAP_*`` option variables
it read, and the harness's own source commit when it runs from a git checkout. The summary renders it as a command
to run again (``report.markdown.command_line``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from vsnap_qual import model, options

_GIT_TIMEOUT_S = 10


def invocation(args: Sequence[str], directory: Path | str, environ: Mapping[str, str]) -> model.Invocation:
    """The command as given: ``args`` are pytest's invocation arguments; the environment keeps only the
    ``VSNAP_*`` variables of options (they take part in the run: command line > environment > ini)."""
    known = {spec.env for spec in options.OPTIONS}
    return model.Invocation(
        args=[str(a) for a in args],
        dir=str(directory),
        python=sys.executable,
        environment={name: environ[name] for name in sorted(environ) if name in known},
    )


def harness_source(package_dir: Path | None = None) -> model.HarnessSource | None:
    """The commit of the git checkout the harness runs from (an editable install of a clone) and whether it has
    uncommitted changes; None for an installed wheel (no checkout of its own)."""
    package_dir = package_dir or Path(__file__).resolve().parents[1]  # vsnap_qual/, this module in run/
    root = package_dir.parent

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=_GIT_TIMEOUT_S
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if not top or Path(top).resolve() != root.resolve():  # site-packages inside someone else's repository
        return None
    commit = git("rev-parse", "HEAD")
    if not commit:
        return None
    status = git("status", "--porcelain", "--untracked-files=no", "--", str(package_dir.name))
    return model.HarnessSource(commit=commit, dirty=None if status is None else bool(status))


def _main() -> None:  # pragma: no cover - a debugging aid
    from vsnap_qual.report.markdown import command_line  # the summary's rendering of it

    print(command_line(invocation(sys.argv[1:], os.getcwd(), os.environ)))


if __name__ == "__main__":  # pragma: no cover
    _main()
