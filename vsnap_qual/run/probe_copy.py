"""The session's copy of the probe package (``vsnap_probe``, the plugin the engine processes import from
``/vsnap/probe``).

The controller copies the probe (``--vsnap-probe-dir`` or the built-in ``vsnap_qual/probe``) into the report
directory once, before any lane starts, and records its digest in the session record; every lane binds that copy.
So the probe a run used is kept with its evidence, and replacing the harness's files while a run is going (a
``git checkout``, a re-sent tree) no longer reaches a lane started earlier, which had found its probe mount
emptied (seen on the H200: evidence/gpu/2026-12-01-full-beb4d07-diagnostic/diagnosis.md)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from vsnap_qual import model

BUILT_IN = Path(__file__).parents[1] / "probe"  # vsnap_qual/probe, this module in run/
COPY_NAME = "probe"
#: CPU smoke mode's platform plugin (``--vsnap-cpu-smoke``), copied and bound the same way
SMOKE_BUILT_IN = Path(__file__).parents[1] / "smoke"
SMOKE_COPY_NAME = "smoke"


def _is_cache(name: str) -> bool:
    """Bytecode caches: neither copied nor digested (an engine importing the probe may write them)."""
    return name == "__pycache__" or name.endswith(".pyc")


def session_copy(report_dir: Path) -> Path:
    """Where a session's probe copy is: what every lane binds at ``/vsnap/probe``."""
    return report_dir / COPY_NAME


def tree_digest(root: Path) -> tuple[str, int]:
    """sha256 over the tree's relative paths and contents, in path order (bytecode caches left out), and its
    number of files."""
    digest = hashlib.sha256()
    files = sorted(p for p in root.rglob("*") if p.is_file() and not any(map(_is_cache, p.relative_to(root).parts)))
    for path in files:
        data = path.read_bytes()
        digest.update(f"{path.relative_to(root).as_posix()}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest(), len(files)


def copy_probe(source: Path | None, report_dir: Path, expected: model.ProbeCopy | None = None) -> model.ProbeCopy:
    """Copy the probe package into ``report_dir`` (once per session) and describe the copy; with ``expected``
    (:func:`describe_probe` at preflight), a copy that differs from it is refused."""
    return _copy(source or BUILT_IN, report_dir, COPY_NAME, expected)


def describe_probe(source: Path | None) -> model.ProbeCopy:
    """What :func:`copy_probe` will record, read from the source before anything is copied (the session record
    is known at preflight; the copy is made when the first lane starts)."""
    return _describe(source or BUILT_IN, COPY_NAME)


def smoke_copy(report_dir: Path) -> Path:
    """Where a session's copy of the CPU smoke platform is: what every lane binds at ``/vsnap/smoke``."""
    return report_dir / SMOKE_COPY_NAME


def copy_smoke(report_dir: Path, expected: model.ProbeCopy | None = None) -> model.ProbeCopy:
    """Copy the CPU smoke platform into ``report_dir`` (once per session, smoke mode only) and describe the copy."""
    return _copy(SMOKE_BUILT_IN, report_dir, SMOKE_COPY_NAME, expected)


def describe_smoke() -> model.ProbeCopy:
    """What :func:`copy_smoke` will record (see :func:`describe_probe`)."""
    return _describe(SMOKE_BUILT_IN, SMOKE_COPY_NAME)


def _describe(source: Path, name: str) -> model.ProbeCopy:
    sha256, files = tree_digest(source)
    return {"source": str(source), "path": name, "sha256": sha256, "files": files}


class ProbeChanged(RuntimeError):
    """The package changed between preflight (recorded in the session record) and its copy."""


def _copy(source: Path, report_dir: Path, name: str, expected: model.ProbeCopy | None = None) -> model.ProbeCopy:
    target = report_dir / name
    shutil.copytree(source, target, ignore=lambda _dir, names: {n for n in names if _is_cache(n)}, dirs_exist_ok=True)
    sha256, files = tree_digest(target)
    copied: model.ProbeCopy = {"source": str(source), "path": name, "sha256": sha256, "files": files}
    if expected is not None and (expected["sha256"], expected["files"]) != (sha256, files):
        raise ProbeChanged(
            f"{source} changed since preflight ({expected['files']} files, sha256 {expected['sha256'][:12]}; the "
            f"copy: {files} files, sha256 {sha256[:12]}): do not change the harness's files while a run starts"
        )
    return copied
