"""The fault artifact's files at the cost of what changed (issue 27): its digest, and the reset that puts its
pristine copy back, before and after every fault.

Both used to read every byte: the digest hashed the whole artifact (1.5 GB on the H200, 2.4 GB for real vLLM on a
CPU) after each faulted command, and the reset copied all of it back. Now each file's hash is kept with the file's
*stat key* (inode, size, ctime and mtime, to the nanosecond) from the listing it was hashed after. The kernel sets
a file's ctime to the current time on every change of its content or metadata (``write``, ``truncate``, a write
fault on a shared mapping, ``chmod``, ``rename``), and no system call sets ctime to a chosen value, so a file whose
key is unchanged still has the content it was hashed with: the digest is the one hashing every file would give,
and only the changed files are read again. The reset likewise puts back only the entries whose key changed since
the last reset (and removes what was added); whatever it cannot reason about (no earlier listing, a directory gone
or turned into something else, a special file) makes it copy the whole artifact, as it always did, and its result
is checked against the pristine copy's listing either way.

The digest covers every entry: its path, type and mode, and a regular file's content (sha256); a directory's
times are not part of it (they change whenever an entry is added or removed, which shows as that entry)."""

from __future__ import annotations

import hashlib
import shlex
import time
from dataclasses import dataclass, field

from vsnap_qual.box import Box

#: type, mode (octal), inode, size, ctime and mtime (seconds with nanoseconds), the path below the root
LIST_FORMAT = r"%y %m %i %s %C@ %T@ %P\0"
#: a change this recent (seconds) may share the listing's ctime tick (a tick is at most 10 ms: HZ >= 100)
RECENT = 0.05
#: files are hashed in batches of this many, as many batches at once as the box has CPUs
HASH_BATCH = 8


class ArtifactFilesError(RuntimeError):
    """The box could not list, hash or copy the artifact's files (the message has its words)."""


@dataclass(frozen=True)
class Entry:
    """One entry of a listing: its type (``f`` file, ``d`` directory, else another kind), mode and stat key."""

    kind: str
    mode: str
    key: str  # inode size ctime mtime

    def same(self, other: Entry | None) -> bool:
        """Unchanged since ``other`` was listed (a directory by type and mode: its times move with its entries)."""
        if other is None or (self.kind, self.mode) != (other.kind, other.mode):
            return False
        return self.kind == "d" or (self.key != "" and self.key == other.key)


def parse_listing(output: str) -> dict[str, Entry]:
    """The listing script's output: the time it was taken, then ``find -printf LIST_FORMAT``'s records. An entry
    changed within :data:`RECENT` of that time gets no key (it never counts as unchanged): the kernel stamps ctime
    with a clock that moves in ticks, so a change in the same tick as the listing could leave the key as listed."""
    first, _, rest = output.partition("\0")
    try:
        listed_at = float(first.strip())
    except ValueError:  # a date without nanoseconds: no key is trusted
        listed_at = float("inf")
    entries: dict[str, Entry] = {}
    for record in rest.split("\0"):
        if not record.strip():
            continue
        kind, mode, inode, size, ctime, mtime, path = record.lstrip("\n").split(" ", 6)
        key = "" if float(ctime) > listed_at - RECENT else f"{inode} {size} {ctime} {mtime}"
        entries[path] = Entry(kind, mode, key)
    return entries


def listing_script(root: str) -> str:
    """The box script whose output :func:`parse_listing` reads."""
    find = f"find . -mindepth 1 -printf {shlex.quote(LIST_FORMAT)}"
    return f"date +%s.%N; printf '\\0'; cd {shlex.quote(root)} && {find}"


def listing(box: Box, root: str, before: str = "") -> dict[str, Entry]:
    """Every entry below ``root`` as the box sees it now (listed again once after :data:`RECENT` where an entry
    had just changed). ``before``: a script run first in the same command (a reset's copies; the listing then
    waits :data:`RECENT` in the box, so what it copied is not recent)."""
    script = f"{before}\nsleep {RECENT}\n{listing_script(root)}" if before else listing_script(root)
    for attempt in range(2):
        done = box.sh(script, 300)
        if done.exit_code != 0:
            raise ArtifactFilesError(f"cannot {'reset' if before else 'list'} {root}: {done.tail()}")
        entries = parse_listing(done.stdout)
        if attempt or all(e.key for e in entries.values()):
            return entries
        script = listing_script(root)  # only the listing again: what ran before it is done
        time.sleep(RECENT)
    return entries


def hash_files(box: Box, root: str, paths: list[str] | None = None) -> dict[str, str]:
    """The sha256 of each of ``paths`` below ``root`` (every regular file when None), hashed in parallel."""
    if paths == []:
        return {}
    hasher = f'xargs -0 -r -n {HASH_BATCH} -P "$(nproc 2>/dev/null || echo 1)" sha256sum -z --'
    if paths is None:
        script = f"cd {shlex.quote(root)} && find . -type f -print0 | {hasher}"
    else:
        names = " ".join(shlex.quote(p) for p in paths)
        script = f"cd {shlex.quote(root)} && printf '%s\\0' {names} | {hasher}"
    done = box.sh(script, 300)
    if done.exit_code != 0:
        raise ArtifactFilesError(f"cannot hash the files of {root}: {done.tail()}")
    hashes: dict[str, str] = {}
    for record in done.stdout.split("\0"):
        if record.strip():
            digest, _, path = record.lstrip("\n").partition("  ")
            hashes[path.removeprefix("./")] = digest
    return hashes


def digest_of(entries: dict[str, Entry], hashes: dict[str, str]) -> str:
    """One digest over every entry's path, type and mode, and each regular file's content hash."""
    h = hashlib.sha256()
    for path in sorted(entries):
        entry = entries[path]
        content = hashes[path] if entry.kind == "f" else "" if entry.kind == "d" else entry.key
        h.update(f"{path}\0{entry.kind}\0{entry.mode}\0{content}\n".encode())
    return h.hexdigest()


@dataclass
class ArtifactFiles:
    """One fault artifact and its pristine copy, as last seen: what the digest and the reset reuse."""

    artifact: str
    backup: str
    pristine: dict[str, Entry] = field(default_factory=dict)  # the pristine copy's entries (its own keys)
    pristine_hashes: dict[str, str] = field(default_factory=dict)
    #: the artifact's files: path -> (the stat key it was hashed at, its sha256)
    hashed: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: the artifact's entries right after it was last made equal to the pristine copy
    after_reset: dict[str, Entry] | None = None
    #: the last reset's extent, as evidence: ``full`` or how many entries it put back or removed
    last_reset: str = ""

    @classmethod
    def kept(cls, box: Box, artifact: str, backup: str) -> ArtifactFiles:
        """Just after the pristine copy was made from the artifact: both are hashed once (the copy's content is
        read; the artifact's files have that same content)."""
        files = cls(artifact, backup)
        files.pristine = listing(box, backup)
        files.pristine_hashes = hash_files(box, backup)
        files._record_equal(listing(box, artifact))
        return files

    @property
    def pristine_digest(self) -> str:
        return digest_of(self.pristine, self.pristine_hashes)

    def digest(self, box: Box) -> str:
        """The artifact's digest now: only the files whose stat key changed since they were hashed are read."""
        now = listing(box, self.artifact)
        stale = [p for p, e in now.items() if e.kind == "f" and (not e.key or self.hashed.get(p, ("", ""))[0] != e.key)]
        # a file changed after the listing keeps the listed key with the newer content's hash: its key then
        # differs from the next listing's, so it is read again then
        for path, sha in hash_files(box, self.artifact, stale).items():
            if path in now:
                self.hashed[path] = (now[path].key, sha)
        return digest_of(now, {p: sha for p, (_, sha) in self.hashed.items() if p in now})

    def reset(self, box: Box) -> None:
        """Make the artifact equal to the pristine copy again, copying only what changed where that is sound."""
        listed = listing(box, self.artifact) if self.after_reset is not None else {}
        plan = self._plan(listed) if self.after_reset is not None else None
        if plan is not None:
            script = _reset_script(self.artifact, self.backup, *plan)
            # nothing changed: the listing just taken stands; else the copies and the listing in one command
            now = listing(box, self.artifact, before=script) if script else listed
            if self._matches_pristine(now):
                self._record_equal(now)
                self.last_reset = f"{sum(len(p) for p in plan)} entries put back or removed"
                return
        a, b = shlex.quote(self.artifact), shlex.quote(self.backup)
        now = listing(box, self.artifact, before=f"set -e\nrm -rf {a}\ncp -a {b} {a}")
        if not self._matches_pristine(now):
            raise ArtifactFilesError("the artifact copied from its pristine copy does not list as that copy")
        self.hashed = {}
        self._record_equal(now)
        self.last_reset = "full"

    # ---- inside ---------------------------------------------------------------------------------------------
    def _record_equal(self, now: dict[str, Entry]) -> None:
        """``now`` is the artifact made equal to the pristine copy: each file's hash is the copy's."""
        self.after_reset = now
        self.hashed = {p: (e.key, self.pristine_hashes[p]) for p, e in now.items() if e.kind == "f" and e.key}

    def _matches_pristine(self, now: dict[str, Entry]) -> bool:
        return now.keys() == self.pristine.keys() and all(
            (e.kind, e.mode) == (self.pristine[p].kind, self.pristine[p].mode) for p, e in now.items()
        )

    def _plan(self, now: dict[str, Entry]) -> tuple[list[str], list[str], list[tuple[str, str]]] | None:
        """What to remove, what to copy back and which directory modes to set; None where only a whole copy
        is sound."""
        assert self.after_reset is not None
        remove: list[str] = []
        copy: list[str] = []
        modes: list[tuple[str, str]] = []
        for path in sorted(now.keys() | self.after_reset.keys()):
            entry, pristine = now.get(path), self.pristine.get(path)
            if entry is not None and entry.same(self.after_reset.get(path)):
                continue
            if pristine is None:
                remove.append(path)  # added since (or changed and never pristine)
            elif pristine.kind == "f":
                copy.append(path)
            elif pristine.kind == "d" and entry is not None and entry.kind == "d":
                modes.append((path, pristine.mode))
            else:
                return None  # a directory gone or replaced, or another kind of entry: copy it all
        return remove, copy, modes


def _reset_script(artifact: str, backup: str, remove: list[str], copy: list[str], modes: list[tuple[str, str]]) -> str:
    a, b = artifact.rstrip("/"), backup.rstrip("/")
    lines = [f"rm -rf -- {shlex.quote(f'{a}/{p}')}" for p in remove]
    for p in copy:
        dst = shlex.quote(f"{a}/{p}")
        lines.append(f"rm -rf -- {dst} && cp -a -- {shlex.quote(f'{b}/{p}')} {dst}")
    lines += [f"chmod {mode} -- {shlex.quote(f'{a}/{p}')}" for p, mode in modes]
    return "set -e\n" + "\n".join(lines) if lines else ""
