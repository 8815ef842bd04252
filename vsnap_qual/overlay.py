"""Source overlays: which changed ``vllm/**.py`` files of a checkout replace which files of the image."""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from vsnap_qual.model import FreshImport, ImportedModule, OverlayCheckout, OverlayFileResult


class OverlayError(ValueError):
    """The overlay cannot be built; the message names the fix."""


@dataclass(frozen=True)
class OverlayFile:
    """One host file mounted read-only over the image's installed copy of the same module."""

    relative: str  # e.g. "vllm/snapshot/server.py"
    host_path: Path
    sha256: str

    @property
    def module(self) -> str:
        parts = list(PurePosixPath(self.relative).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts)

    def image_path(self, package_dir: str) -> str:
        """Where the file lands in the image, given the installed ``vllm`` package directory."""
        inner = PurePosixPath(self.relative).relative_to("vllm")
        return str(PurePosixPath(package_dir) / inner)


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _git(checkout: Path, *args: str) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(checkout), *args], capture_output=True, text=True, timeout=60, check=False
        )
    except FileNotFoundError:
        raise OverlayError("git is not installed; pass --vsnap-overlay-files instead of a git ref") from None
    if done.returncode != 0:
        raise OverlayError(f"git {' '.join(args)} failed in {checkout}: {done.stderr.strip()[:300]}")
    return done.stdout


def _probe_git(checkout: Path, *args: str) -> bool:
    """Whether a git query succeeds in ``checkout`` (its own error is not for the user: callers name the fix)."""
    try:
        done = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, timeout=60, check=False)
    except FileNotFoundError:
        raise OverlayError("git is not installed; pass --vsnap-overlay-files instead of a git ref") from None
    return done.returncode == 0


def checkout_state(checkout: Path, ref: str) -> OverlayCheckout:
    """The checkout's ``HEAD`` commit, the commit ``ref`` names, and whether it has uncommitted changes (what a
    PR's validation cites); ``error`` says what git could not tell (never raises)."""
    out = OverlayCheckout(path=str(checkout), ref=ref, commit=None, ref_commit=None, dirty=None)
    try:
        out["commit"] = _git(checkout, "rev-parse", "HEAD").strip()
        out["ref_commit"] = _git(checkout, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").strip()
        changed = [line for line in _git(checkout, "status", "--porcelain").splitlines() if line.strip()]
        out["dirty"], out["changed"] = bool(changed), len(changed)
    except (OSError, OverlayError, subprocess.TimeoutExpired) as exc:
        out["error"] = str(exc)
    return out


def changed_files(checkout: Path, ref: str) -> list[str]:
    """``vllm/**.py`` files added or modified since ``ref``, committed or not, plus untracked ones."""
    if not _probe_git(checkout, "rev-parse", "--is-inside-work-tree"):
        raise OverlayError(
            f"{checkout} is not a git checkout, so the changed files cannot be found: point --vsnap-overlay at a "
            "git clone of vLLM, or name the files to overlay with --vsnap-overlay-files=vllm/a.py,vllm/b/c.py"
        )
    if not _probe_git(checkout, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"):
        raise OverlayError(
            f"--vsnap-overlay-ref={ref} is not a commit in {checkout}: give the branch, tag or commit your change "
            "starts from (e.g. origin/main), or name the files with --vsnap-overlay-files"
        )
    tracked = _git(checkout, "diff", "--name-only", "--diff-filter=AMR", ref, "--", "vllm")
    untracked = _git(checkout, "ls-files", "--others", "--exclude-standard", "--", "vllm")
    names = {n.strip() for n in (tracked + untracked).splitlines() if n.strip().endswith(".py")}
    return sorted(names)


def collect(checkout: Path, ref: str, explicit: tuple[str, ...] = ()) -> list[OverlayFile]:
    """The overlay files of a checkout: the explicit list, else every changed file since ``ref``."""
    if not (checkout / "vllm").is_dir():
        raise OverlayError(f"{checkout} has no vllm/ package directory: point --vsnap-overlay at a vLLM checkout")
    names = list(explicit) if explicit else changed_files(checkout, ref)
    if not names:
        raise OverlayError(
            f"no vllm/**.py file changed in {checkout} since {ref}: set --vsnap-overlay-ref to the base of "
            "your change, list files with --vsnap-overlay-files, or drop --vsnap-overlay"
        )
    files = []
    for name in names:
        path = checkout / name
        if not path.is_file():
            raise OverlayError(
                f"overlay file {name} does not exist in {checkout}: name files that exist in the checkout "
                "(--vsnap-overlay-files, paths under vllm/)"
            )
        files.append(OverlayFile(name, path.resolve(), sha256_file(path)))
    return files


def _module_seen(report: Mapping[str, object], module: str) -> ImportedModule | None:
    """One process's report of ``module`` (``{"pid", "role", "modules": {module: {"path", "sha256"}}}``, JSON the
    probe wrote), or None when that process did not import it."""
    modules = report.get("modules")
    entry = modules.get(module) if isinstance(modules, dict) else None
    if not isinstance(entry, dict):
        return None
    pid, role = report.get("pid"), report.get("role")

    def text(value: object) -> str | None:
        return value if isinstance(value, str) else None

    return ImportedModule(
        pid=pid if isinstance(pid, int) else None, role=text(role), path=text(entry.get("path")),
        sha256=text(entry.get("sha256")),
    )  # fmt: skip


def imported(
    reports: Sequence[Mapping[str, object]], files: list[OverlayFile], package_dir: str
) -> list[OverlayFileResult]:
    """Each overlaid file as the engine processes imported it, from the probe's ``imports-<pid>.json`` reports."""
    results = []
    for item in files:
        seen = [found for r in reports if (found := _module_seen(r, item.module)) is not None]
        results.append(
            OverlayFileResult(
                host_path=str(item.host_path),
                relative=item.relative,
                module=item.module,
                image_path=item.image_path(package_dir),
                host_sha256=item.sha256,
                imported=seen,
                ok=bool(seen) and all(i["sha256"] == item.sha256 for i in seen),  # refined by the step
            )
        )
    return results


# ---- what the overlay verification found, in plain words -------------------------------------------------
OVERLAY_IN_EFFECT = "in effect"  # imported by the engine processes from the overlay, and by a fresh interpreter
OVERLAY_NOT_IMPORTED = "overlaid, not imported by the engine"  # no engine process loaded it; fresh import holds
OVERLAY_NOT_IN_EFFECT = "not in effect"


def file_finding(item: OverlayFileResult) -> tuple[str, str]:
    """How one overlaid file fared, as (status, plain sentence): ``item`` is a step's ``files`` entry
    (``relative``, ``host_sha256``, ``imported`` [{pid, role, path, sha256}], ``fresh_import`` {exit_code, path,
    sha256}). A file no engine process imported (a new helper, or code of the ``vllm`` command's own process,
    which loads no plugins) is not a failure when a fresh interpreter imports exactly the overlay's bytes; a file
    an engine process imported with other bytes, or that a fresh interpreter cannot import as overlaid, is."""
    name = str(item.get("relative") or item.get("module") or "?")
    want = str(item.get("host_sha256") or "")
    fresh = item.get("fresh_import") or FreshImport(exit_code=None, path=None, sha256=None)
    imported = list(item.get("imported") or [])
    wrong = [i for i in imported if i.get("sha256") != want]
    if wrong:
        where = "; ".join(
            f"{i.get('role') or 'process'} (pid {i.get('pid')}) loaded {i.get('path') or 'an unknown file'}"
            + (f" whose sha256 starts {str(i.get('sha256'))[:12]}" if i.get("sha256") else "")
            for i in wrong
        )
        return OVERLAY_NOT_IN_EFFECT, (
            f"{name}: the engine imported it from somewhere other than the overlay: {where} "
            f"(the overlay's sha256 starts {want[:12]})"
        )
    if fresh.get("exit_code") != 0:
        return OVERLAY_NOT_IN_EFFECT, (
            f"{name}: a fresh interpreter cannot import it (exit {fresh.get('exit_code')}), so the overlay is not "
            "importable in the image"
        )
    if fresh.get("sha256") != want:
        got = f"sha256 starts {str(fresh.get('sha256'))[:12]}, " if fresh.get("sha256") else ""
        return OVERLAY_NOT_IN_EFFECT, (
            f"{name}: a fresh interpreter imports {fresh.get('path') or 'another file'}, not the overlay's bytes "
            f"({got}the overlay's starts {want[:12]})"
        )
    if not imported:
        return OVERLAY_NOT_IMPORTED, (
            f"{name}: overlaid, not imported by the engine (no engine process loaded it); a fresh interpreter "
            "imports exactly the overlay's file"
        )
    roles = ", ".join(sorted({str(i.get("role") or "process") for i in imported}))
    processes = "1 engine process" if len(imported) == 1 else f"{len(imported)} engine processes"
    return OVERLAY_IN_EFFECT, f"{name}: in effect in {processes} ({roles}) and a fresh import"


def findings_line(files: Sequence[OverlayFileResult]) -> tuple[bool, str]:
    """Whether the overlay is in effect (no file ``not in effect``) and one plain line saying what was found."""
    found = [file_finding(f) for f in files]
    bad = [text for status, text in found if status == OVERLAY_NOT_IN_EFFECT]
    if bad:
        return False, "overlay not in effect: " + "; ".join(bad)
    unused = [text.split(":", 1)[0] for status, text in found if status == OVERLAY_NOT_IMPORTED]
    line = f"{len(found) - len(unused)} of {len(found)} overlaid files imported by the engine from the overlay"
    if unused:
        line += f"; overlaid, not imported by the engine (fresh import verified): {', '.join(unused)}"
    return True, line
