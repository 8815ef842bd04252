"""``vsnap-qual nightly-tag REPOSITORY``: the newest tag of a repository that matches a pattern (``nightly-*``),
and whether the nightly has qualified it yet. A scheduled build needs no image name from outside: ``ci/nightly.sh``
asks this, qualifies only a new tag, and records the tag it qualified in the file given as ``--last-file``.

"Newest" is the image's own creation time: the ``created`` field of the image config blob that the tag's manifest
names (for a multi-platform tag, the manifest of ``--platform``), never the tag's name (``nightly-<sha>`` names
do not sort by time) nor the order the registry lists tags in. Equal times fall back to the tag name, so the answer
is deterministic. Creation times are kept by manifest digest in ``--cache`` (a HEAD gives the digest, and Docker Hub
does not count HEADs as pulls), so each night reads the manifests and configs of new tags only.

The last qualified tag is recorded as ``TAG@DIGEST``: a tag counts as new when its name or its manifest digest
differs from the record (a tag pushed again is new). A record of a bare ``TAG`` compares the name alone.

Output, on stdout, one ``key=value`` a line for the script: ``image``, ``tag``, ``digest``, ``created``, ``record``
(``TAG@DIGEST``, what to write to the last file once qualified), ``last`` (the record read, or empty) and ``new``
(``true``/``false``); on stderr, what was listed and chosen, in words.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

HELP = "the newest tag of a repository matching a pattern, by image creation time, and whether it is new"
EPILOG = (
    "Exit status: 0 when a tag was resolved (new or not: the `new=` line says), 2 when the registry could not be "
    "read (unreachable, an HTTP error, a refused token), no tag matches, or the arguments are wrong."
)
#: The exit status for a registry that cannot be read or a bad argument (as ``vsnap-qual report``'s bad input).
EXIT_ERROR = 2


@dataclass(frozen=True)
class Resolved:
    """The newest matching tag and what the nightly knew of it before."""

    image: str
    tag: str
    digest: str
    created: datetime
    last: str

    @property
    def record(self) -> str:
        """What the last file holds once this tag is qualified."""
        return f"{self.tag}@{self.digest}"

    @property
    def new(self) -> bool:
        """Whether the nightly has not qualified this tag (by name and digest) yet."""
        return not is_recorded(self.last, self.tag, self.digest)

    def lines(self) -> list[str]:
        """The ``key=value`` lines of the output."""
        return [
            f"image={self.image}",
            f"tag={self.tag}",
            f"digest={self.digest}",
            f"created={self.created.isoformat()}",
            f"record={self.record}",
            f"last={self.last}",
            f"new={'true' if self.new else 'false'}",
        ]


def is_recorded(last: str, tag: str, digest: str) -> bool:
    """Whether the record ``last`` (``TAG@DIGEST`` or a bare ``TAG``) names this tag at this digest."""
    name, at, recorded_digest = last.strip().partition("@")
    return name == tag and (not at or recorded_digest == digest)


def read_last(path: Path | None) -> str:
    """The last qualified record, or empty when there is no file yet (the first night)."""
    if path is None or not path.exists():
        return ""
    lines = path.read_text().split()
    return lines[0] if lines else ""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``vsnap-qual nightly-tag``'s arguments."""
    parser.add_argument("repository", help="the repository, without tag: vllm/vllm-openai, HOST[:PORT]/PATH")
    parser.add_argument("--pattern", default="nightly-*", help="the tags considered (a glob; default nightly-*)")
    parser.add_argument(
        "--last-file", type=Path, default=None, help="the record of the last qualified tag (TAG@DIGEST); absent: none"
    )
    parser.add_argument(
        "--cache", type=Path, default=None, help="creation times by manifest digest, kept between nights (JSON)"
    )
    parser.add_argument(
        "--platform", default="linux/amd64", help="a multi-platform tag's image to date (default linux/amd64)"
    )
    parser.add_argument("--page-size", type=int, default=None, help="tags per page of the tag list (the ?n= parameter)")
    parser.epilog = EPILOG


def resolve(args: argparse.Namespace) -> Resolved:
    """The newest tag matching ``args.pattern``; RegistryError or ValueError when there is none or the registry
    cannot be read."""
    from vsnap_qual.cli import registry

    repository = registry.parse_repository(args.repository)
    client = registry.RegistryClient(repository, registry.docker_credentials(repository.registry))
    listed: list[str] = []
    pages = 0
    for page in client.tag_pages(args.page_size):
        pages += 1
        listed.extend(page)
    matching = sorted({tag for tag in listed if fnmatch.fnmatchcase(tag, args.pattern)})
    say(f"{len(listed)} tags of {args.repository} listed ({pages} page(s)), {len(matching)} match {args.pattern!r}")
    if not matching:
        raise ValueError(f"no tag of {args.repository} matches {args.pattern!r} ({len(listed)} tags listed)")
    cache_path: Path | None = args.cache
    cache = registry.load_created_cache(cache_path.read_text()) if cache_path and cache_path.exists() else {}
    dated: list[tuple[datetime, str, str]] = []
    kept: dict[str, str] = {}
    for tag in matching:
        digest = client.manifest_digest(tag)
        created = registry.parse_created(cache.get(digest))
        if created is None:
            created = client.created(digest, args.platform)
        if created is None:
            say(f"{tag}: its image config records no creation time; not considered")
            continue
        kept[digest] = created.isoformat()
        dated.append((created, tag, digest))
    if cache_path is not None:
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        cache_path.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n")
    if not dated:
        raise ValueError(f"none of the {len(matching)} tags matching {args.pattern!r} records a creation time")
    created, tag, digest = max(dated)
    resolved = Resolved(repository.reference(tag), tag, digest, created, read_last(args.last_file))
    state = "new" if resolved.new else f"already qualified (the record says {resolved.last})"
    say(f"newest: {tag} (created {created.isoformat()}, {digest}): {state}; {client.requests} registry requests")
    return resolved


def say(text: str) -> None:
    """A line for the person reading the log (stderr: stdout is for the script)."""
    print(f"vsnap-qual nightly-tag: {text}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    """Resolve and print the ``key=value`` lines; the exit status."""
    from vsnap_qual.cli.registry import RegistryError

    if args.page_size is not None and args.page_size < 1:
        say(f"--page-size must be at least 1, not {args.page_size}")
        return EXIT_ERROR
    try:
        resolved = resolve(args)
    except (RegistryError, ValueError, OSError) as exc:
        say(f"error: {exc}")
        return EXIT_ERROR
    print("\n".join(resolved.lines()))
    return 0
