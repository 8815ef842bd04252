"""The fault artifact's recovery deadline, sized by measurement (issue 45), pure.

``VLLM_SNAPSHOT_TIMEOUT_S`` is frozen into an artifact at create: it bounds every recovery of its restores (the
stall fault waits it out) and, at the create itself, the wait for the snapshot child to become ready (the engine's
build and preparation). So the deadline the fault artifact is created with must exceed both with room to spare, and
the stall fault costs about that deadline on each arm. The rule (:func:`derive`):

    deadline = min(--vsnap-fault-timeout, max(FLOOR_S, 2 × --vsnap-cleanup-grace,
                                               RECOVERY_FACTOR × restore + MARGIN_S,
                                               CREATE_FACTOR × create + MARGIN_S))

``restore`` is the longest of this lane's lifecycle restores, from the command's start until its HTTP listener
was bound (vLLM binds only once recovery completed, so it bounds recovery from above); ``create`` is its lifecycle
create's command seconds (the child's build and preparation are inside it); twice the cleanup grace keeps what the
options are held to (a leftover is found long before the engine's own deadline). Rounded up to a whole second.
Where the lane measured no restore or no create before the fault artifact (the faults run alone, or the lifecycle
failed), the option is the deadline, as before, and the record says why. The option is the upper bound always.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from vsnap_qual.model import RecoveryDeadline

#: never below this (a measurement of a fast engine is noisy in relative terms)
FLOOR_S = 10.0
#: the measured restore's multiple: a restore under another lane's load must still recover within the deadline
RECOVERY_FACTOR = 3.0
#: the measured create's multiple: the fault artifact's own create (beside another lane's work) must not time out
#: waiting for its child: a timed-out create would fail the whole fault lane
CREATE_FACTOR = 2.0
#: added to each multiple
MARGIN_S = 5.0


def derive(
    option_s: float, grace_s: float, restore_ready_s: Sequence[float], create_s: Sequence[float], source: str
) -> RecoveryDeadline:
    """The deadline for a fault artifact of a lane that measured ``restore_ready_s`` (each restore's seconds until
    its listener was bound) and ``create_s`` (each create's seconds) before it, bounded by ``option_s``
    (``--vsnap-fault-timeout``), never under twice ``grace_s`` (``--vsnap-cleanup-grace``); ``source`` says where
    the measurements came from."""
    restore = max(restore_ready_s) if restore_ready_s else None
    create = max(create_s) if create_s else None
    record = RecoveryDeadline(
        deadline_s=option_s,
        option_s=option_s,
        derived_s=None,
        restore_ready_s=None if restore is None else round(restore, 3),
        restores=len(restore_ready_s),
        create_s=None if create is None else round(create, 3),
        source=source,
    )
    if restore is None or create is None:
        missing = " and ".join(w for w, value in (("no restore", restore), ("no create", create)) if value is None)
        record["rule"] = f"--vsnap-fault-timeout={option_s:g} s ({missing} of this lane measured before it)"
        return record
    floor = max(FLOOR_S, 2 * grace_s)
    derived = float(math.ceil(max(floor, RECOVERY_FACTOR * restore + MARGIN_S, CREATE_FACTOR * create + MARGIN_S)))
    bound = (
        f"under --vsnap-fault-timeout={option_s:g} s"
        if derived <= option_s
        else f"over --vsnap-fault-timeout={option_s:g} s: the option is the deadline"
    )
    record["deadline_s"] = min(derived, option_s)
    record["derived_s"] = derived
    record["rule"] = (
        f"max({floor:g}, {RECOVERY_FACTOR:g} × {restore:.2f} s restore + {MARGIN_S:g}, "
        f"{CREATE_FACTOR:g} × {create:.2f} s create + {MARGIN_S:g}) rounded up = {derived:g} s, {bound}"
    )
    return record
