"""Source overlays: which changed ``vllm/**.py`` files of a checkout replace which files of the image."""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath


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


def changed_files(checkout: Path, ref: str) -> list[str]:
    """``vllm/**.py`` files added or modified since ``ref``, committed or not, plus untracked ones."""
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
            raise OverlayError(f"overlay file {name} does not exist in {checkout}")
        files.append(OverlayFile(name, path.resolve(), sha256_file(path)))
    return files
