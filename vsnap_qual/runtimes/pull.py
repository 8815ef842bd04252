"""When preflight pulls an engine image (``--vsnap-pull``), and what a pull says while it runs: pure, no Docker (the
Docker runtime calls the registry; ``runtimes/docker.py``).

``auto`` (the default) pulls what a CI user expects: an absent image; a tag that came from a registry (the local
image has a repository digest), since a tag such as ``:nightly`` moves; never a reference by digest or image ID
(it names one image for ever), never an image built or loaded here (no registry to ask). ``missing`` pulls only
an absent image, ``always`` every image, ``never`` none (an absent image is refused, naming the pull).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

POLICIES: dict[str, str] = {
    "auto": "an absent image, and a tag that came from a registry (it may have moved); never a digest or a local build",
    "missing": "only an absent image",
    "always": "every image, every run",
    "never": "no image: an absent one is refused",
}
_IMAGE_ID = re.compile(r"^(sha256:)?[0-9a-f]{12,64}$")
#: the fractions of a layer's download at which a line is said (by bytes, not by time)
_STEPS = (0.25, 0.5, 0.75)


class PullRefused(ValueError):
    """The policy forbids the pull an absent image needs; the message names the option and the fix."""


def is_pinned(ref: str) -> bool:
    """A reference by digest (``repo@sha256:…``) or an image ID: one image for ever, never re-pulled."""
    return "@sha256:" in ref or bool(_IMAGE_ID.match(ref))


def decision(ref: str, policy: str, present: bool, repo_digests: Sequence[str]) -> str | None:
    """Why preflight pulls ``ref`` now, or None when it uses the local image. Raises :class:`PullRefused` for an
    absent image under ``never``."""
    if not present:
        if policy == "never":
            raise PullRefused(
                f"image {ref!r} is not present locally and --vsnap-pull=never forbids pulling it: `docker pull {ref}` "
                "first, or drop --vsnap-pull=never"
            )
        return "not present locally"
    if policy == "always":
        return "every run pulls"
    if policy != "auto" or is_pinned(ref):
        return None
    if not repo_digests:
        return None  # built or loaded on this host: no registry holds it
    return "a tag, which may have moved since it was pulled (--vsnap-pull=missing keeps the local image)"


@dataclass
class PullProgress:
    """Turns a registry's pull events (Docker's JSON stream) into progress lines: the start, each layer's download
    at a quarter, half and three quarters of its bytes, each layer done, and the result with the digest."""

    ref: str
    lines: list[str] = field(default_factory=list)
    digest: str | None = None
    status: str | None = None
    error: str | None = None
    layers_done: int = 0
    _said: dict[str, int] = field(default_factory=dict)

    def feed(self, event: Mapping[str, Any]) -> list[str]:
        """The lines one event adds (also kept in ``lines``)."""
        out: list[str] = []
        text = str(event.get("status") or "")
        layer = str(event.get("id") or "")
        if event.get("error"):
            self.error = str(event.get("errorDetail", {}).get("message") or event["error"])
        elif text == "Downloading" and layer:
            detail = event.get("progressDetail") or {}
            current, total = detail.get("current"), detail.get("total")
            if isinstance(current, int) and isinstance(total, int) and total > 0:
                reached = sum(1 for step in _STEPS if current >= step * total)
                if reached > self._said.get(layer, 0):
                    self._said[layer] = reached
                    out.append(f"{self.ref}: layer {layer} {int(100 * _STEPS[reached - 1])} % of {_size(total)}")
        elif text in ("Pull complete", "Already exists") and layer:
            self.layers_done += 1
            out.append(f"{self.ref}: layer {layer} {text.lower()} ({self.layers_done} done)")
        elif text.startswith("Digest: "):
            self.digest = text.removeprefix("Digest: ").strip()
        elif text.startswith("Status: "):
            self.status = text.removeprefix("Status: ").strip()
        self.lines += out
        return out

    def result_line(self) -> str:
        return f"{self.ref}: {self.status or 'pulled'}; digest {self.digest or 'unknown'}"


def _size(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
