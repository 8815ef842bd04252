"""What an engine left behind, as functions of a lane's box: the strict stop of a server's tree, the cleanup audit
after a stop or a failure (processes, ports, the GPU, ``/dev/shm``), and which lane a leftover belongs to.

Audits fail closed: an error while auditing (the box cannot list its processes, a probe fails) is a failed audit
that names the error, never an audit that saw nothing. With host PID and IPC namespaces several lanes share the
PIDs and ``/dev/shm``; a process is its PID *and* its start time, and a ``/dev/shm`` entry belongs to the lane that
saw it appear first.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from vsnap_qual import checks
from vsnap_qual.box import Box, ProcessRow, ShmEntry, Termination, TreeEntry
from vsnap_qual.engine import client
from vsnap_qual.model import CleanupAudit, LeftoverProcess, StopRecord

LINK_REMAP = "link_remap."


def link_remaps(entries: Sequence[ShmEntry]) -> str:
    """CRIU's ``/dev/shm/link_remap.*`` entries of a listing, one line each, sorted (the audit's inventory)."""
    return "".join(f"{line}\n" for line in sorted(e.line for e in entries if e.name.startswith(LINK_REMAP)))


@dataclass
class ServerHandle:
    """A running engine server (ordinary or restored) and what was recorded about it."""

    port: int
    root_pid: int
    pids: list[int] = field(default_factory=list)
    log_in_box: str | None = None
    #: The tree as recorded at stop: {"pid", "start_time", "cmdline", "gpu_holder"} per process.
    tree: list[LeftoverProcess] = field(default_factory=list)
    #: The /dev/shm files the tree held as it was stopped (open or mapped, still named).
    shm_held: list[str] = field(default_factory=list)
    #: The strict stop's timing: the grace, when the tree was gone, any extension (:func:`strict_stop`).
    stop: StopRecord = field(default_factory=lambda: StopRecord())


@dataclass
class AuditScope:
    """What a lane's audits know besides its box: its name, the grace, whether it has GPUs, its ``/dev/shm``
    baseline, and the run's claim directory (which lane saw a shared ``/dev/shm`` entry appear first)."""

    lane: str
    grace: float
    gpus: bool
    claims: Path
    link_remaps_baseline: str = ""


def session_pids(box: Box | None, root_pid: int, procs: list[ProcessRow] | None = None) -> list[int]:
    """The root's tree: its descendants and every process of its session (in ``procs``, else the box's now)."""
    if procs is None:
        assert box is not None, "session_pids needs a box or a listing"
        procs = box.processes()
    sid = next((p["sid"] for p in procs if p["pid"] == root_pid), None)
    tree = {root_pid}
    changed = True
    while changed:
        changed = False
        for p in procs:
            if p["pid"] not in tree and (p["ppid"] in tree or (sid is not None and p["sid"] == sid)):
                tree.add(p["pid"])
                changed = True
    return sorted(pid for pid in tree if any(p["pid"] == pid for p in procs))


def port_listening(box: Box, port: int, listening: set[int] | None = None) -> bool:
    """A listener on the port, as seen in the box's network namespace (and from here when a connect proves one;
    with published ports Docker's proxy answers even when nothing listens)."""
    if port in (box.listening_ports() if listening is None else listening):
        return True
    if not box.connect_proves_listener:
        return False
    host, mapped = box.endpoint(port)
    return client.port_open(mapped, host)


def strict_stop(box: Box, handle: ServerHandle, grace: float, cuda_holders: Sequence[int]) -> list[LeftoverProcess]:
    """SIGTERM the server's whole tree; what is still alive ``grace`` seconds later (same PID *and* start time)
    is a leftover: recorded with its command line and whether it holds the GPU, then SIGKILLed. The manifest's
    CUDA holders count as GPU holders when the server is the snapshot's restored tree.

    A tree still exiting at the grace is told from one that is not: it is looked at again and again while it
    progresses (a process leaves, or its CPU time moves: :func:`checks.stop_progress`), up to
    :func:`checks.stop_cap`; the first look at which nothing moved, or the cap, ends it, and what is alive then is
    the leftover. A loaded machine slows an exit down; it does not stop it. ``handle.stop`` records the timing."""
    pids = sorted(set(handle.pids) | set(session_pids(box, handle.root_pid)))
    handle.stop = StopRecord(grace_s=grace, cap_s=checks.stop_cap(grace), deadline_s=grace)
    if not pids:
        return []
    seen = box.terminate(pids, grace, kill=False)
    judged = time.monotonic()
    handle.pids = pids
    handle.shm_held = list(seen.shm_held)
    holders = set(seen.gpu_apps) | set(cuda_holders)
    tree = {t.pid: t for t in seen.tree}
    survivors = {
        pid: state
        for pid, state, start in seen.survivors
        if (known := tree.get(pid)) is not None and known.start_time == start and state != "Z"
    }
    if seen.gone_after_s is not None:
        handle.stop["gone_after_s"] = seen.gone_after_s
    if survivors:
        through_grace = checks.stop_progress(
            checks.StopLook(0.0, dict(seen.ticks_at_term)),
            checks.StopLook(grace, {p: t for p, t in seen.ticks_at_grace.items() if p in survivors}),
        )
        try:
            if through_grace is None:
                handle.stop["stalled"] = f"not progressing through the grace: {_grace_stall(seen, survivors, grace)}"
            else:
                survivors = _extend(box, handle.stop, tree, survivors, judged, through_grace)
        finally:  # a look that failed leaves the survivors of the grace: killed all the same
            box.signal(sorted(survivors), "KILL")
    leftovers = [
        LeftoverProcess(
            pid=pid,
            start_time=tree[pid].start_time,
            cmdline=tree[pid].cmdline,
            gpu_holder=pid in holders,
            state=state,
        )
        for pid, state in survivors.items()
    ]
    handle.tree = [
        LeftoverProcess(pid=t.pid, start_time=t.start_time, cmdline=t.cmdline, gpu_holder=t.pid in holders)
        for t in seen.tree
    ]
    return cast(list[LeftoverProcess], checks.order_leftovers(leftovers))


#: seconds between two looks at a tree still exiting after the grace (each look is a round trip to the box)
LOOK_PAUSE = 0.5


def _grace_stall(seen: Termination, survivors: dict[int, str], grace: float) -> str:
    """The survivors' CPU ticks spent through the grace, as a stalled stop's record says them."""
    spent = {p: seen.ticks_at_grace.get(p, 0) - seen.ticks_at_term.get(p, 0) for p in sorted(survivors)}
    each = ", ".join(f"pid {p} {n}" for p, n in spent.items())
    return (
        f"no process left and CPU ticks spent in {grace:g} s: {each} (under {checks.PROGRESS_TICKS_PER_S:g} a second)"
    )


def _extend(
    box: Box,
    stop: StopRecord,
    tree: dict[int, TreeEntry],
    survivors: dict[int, str],
    judged: float,
    through_grace: str,
) -> dict[int, str]:
    """Look at the survivors of the grace, which progressed through it (``through_grace`` says how), while they
    progress, up to the cap; returns those alive at the end (PID and start time as recorded, not zombies) with
    their states. Each look and what ended the extension go into ``stop``."""
    grace, cap = stop["grace_s"], stop["cap_s"]

    def look() -> tuple[checks.StopLook, dict[int, str]]:
        at = grace + time.monotonic() - judged
        states = {
            p["pid"]: p["stat"] for p in box.processes() if p["pid"] in survivors and not p["stat"].startswith("Z")
        }
        started = box.identify(sorted(states))
        alive = {pid: st for pid, st in states.items() if started.get(pid) == tree[pid].start_time}
        ticks = {pid: w.ticks for pid, w in box.thread_waits(sorted(alive)).items() if pid in alive}
        return checks.StopLook(at, ticks), {pid: alive[pid] for pid in ticks}

    before, alive = look()
    extension: list[str] = [through_grace]
    while alive:
        if before.at_s >= cap:
            stop["stalled"] = f"reached the cap ({cap:g} s, {checks.STOP_CAP_GRACES:g} graces) still progressing"
            break
        time.sleep(LOOK_PAUSE)
        after, alive = look()
        moved = checks.stop_progress(before, after)
        if not alive:
            extension.append(moved or f"at {after.at_s:.1f} s: gone")
            stop["gone_after_s"] = round(after.at_s, 3)
        elif moved is None:
            stop["stalled"] = checks.stop_stalled(before, after)
        else:
            extension.append(moved)
        before = after
        if moved is None:
            break
    if not alive and "gone_after_s" not in stop:  # gone by the first look
        extension.append(f"at {before.at_s:.1f} s: gone")
        stop["gone_after_s"] = round(before.at_s, 3)
    stop["deadline_s"] = round(before.at_s, 3)
    if extension:
        stop["extension"] = extension
    return alive


def cleanup_audit(box: Box, scope: AuditScope, pids: list[int], ports: list[int]) -> CleanupAudit:
    """After a stop: recorded PIDs gone, ports closed, GPU idle, link-remap inventory at its baseline."""
    try:
        return _audit(box, scope, pids, ports)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        return CleanupAudit(
            pids=pids,
            ports=ports,
            pids_gone=False,
            ports_closed=False,
            gpu_idle=None,
            link_remaps_equal=False,
            ok=False,
            error=error,
            detail=f"the audit itself failed: {error}",
        )


def _audit(box: Box, scope: AuditScope, pids: list[int], ports: list[int]) -> CleanupAudit:
    deadline = time.monotonic() + scope.grace
    pause = 0.02  # the grace is a maximum: looked at often at first, so a clean state ends it at once
    while True:
        alive, listening = box.look(pids)
        open_ports = [p for p in ports if port_listening(box, p, listening)]
        if (not alive and not open_ports) or time.monotonic() > deadline:
            break
        time.sleep(pause)
        pause = min(pause * 2, 0.1)
    gpu_idle: bool | None = None
    if scope.gpus:
        apps = box.gpu_apps()
        if apps is not None:
            ours = set(pids) | {p["pid"] for p in box.processes()}  # other lanes may share the GPU
            gpu_idle = not (apps & ours)
    remaps = link_remaps(box.shm())
    audit = CleanupAudit(
        pids=pids,
        pids_alive=alive,
        pids_gone=not alive,
        ports=ports,
        ports_open=open_ports,
        ports_closed=not open_ports,
        gpu_idle=gpu_idle,
        link_remaps_equal=remaps == scope.link_remaps_baseline,
    )
    audit.update(attribute_link_remaps(box, scope, remaps))
    if not audit["link_remaps_equal"] and not audit["link_remaps_ours"]:
        audit["link_remaps_equal"] = True  # changed only by others (another lane or session): named, not ours
    audit["ok"] = checks.audit_ok(alive, open_ports, gpu_idle, bool(audit["link_remaps_equal"]))
    return audit


def claim_made_remaps(scope: AuditScope, names: Sequence[str], step: str) -> None:
    """Record that this lane's artifact (made by ``step``) names these ``/dev/shm/link_remap.*`` paths: CRIU makes a
    link remap while it dumps and names it by the dump's file id, so the artifact whose images list it is the dump
    that made it, whichever lane later looks first. The latest artifact to name a path owns it (a freed name can be
    made again by a later dump)."""
    scope.claims.mkdir(parents=True, exist_ok=True)
    for name in names:
        (scope.claims / f"made-{name.rsplit('/', 1)[-1]}").write_text(f"{scope.lane} {step}")


def made_by(scope: AuditScope, entry: str) -> tuple[str, str] | None:
    """The lane and step whose artifact names this ``/dev/shm`` entry (``claim_made_remaps``), if any."""
    claim = scope.claims / f"made-{entry.split('|', 1)[0].rsplit('/', 1)[-1]}"
    try:
        lane, _, step = claim.read_text().strip().partition(" ")
    except FileNotFoundError:
        return None
    return lane, step


def attribute_link_remaps(box: Box, scope: AuditScope, listing: str) -> CleanupAudit:
    """Entries of ``/dev/shm/link_remap.*`` new since this lane's baseline, each attributed to the lane whose
    artifact names it (the dump that made it, :func:`claim_made_remaps`), else to the lane that first saw it
    appear (a claim file in the report directory, shared by every lane of the run): with host IPC namespaces
    ``/dev/shm`` is shared, so one lane's leak must not be reported as every lane's."""
    baseline = set(scope.link_remaps_baseline.splitlines())
    new = [e for e in listing.splitlines() if e and e not in baseline]
    transient: list[str] = []
    deadline = time.monotonic() + scope.grace
    while new and time.monotonic() < deadline:
        # /dev/shm is the host's: another CRIU dump in flight (another lane, session or tool) has its link
        # remaps there for a moment. A leak stays; an entry that goes within the grace was not a leak.
        time.sleep(0.5)
        now = set(link_remaps(box.shm()).splitlines())
        transient += [e for e in new if e not in now]
        new = [e for e in new if e in now]
    scope.claims.mkdir(parents=True, exist_ok=True)
    ours: list[str] = []
    others: dict[str, list[str]] = {}
    makers: dict[str, str] = {}
    for entry in new:
        maker = made_by(scope, entry)
        if maker is not None:
            owner = maker[0]
            makers[entry] = " ".join(maker)
        else:
            claim = scope.claims / entry.replace("/", "_").replace("|", "_")
            try:
                with open(claim, "x") as fh:
                    fh.write(scope.lane)
                owner = scope.lane
            except FileExistsError:
                owner = claim.read_text().strip() or "?"
        (ours.append(entry) if owner == scope.lane else others.setdefault(owner, []).append(entry))
    return CleanupAudit(
        lane=scope.lane,
        link_remaps_new=new,
        link_remaps_ours=ours,
        link_remaps_others=others,
        link_remaps_transient=transient,
        link_remaps_made_by=makers,
    )
