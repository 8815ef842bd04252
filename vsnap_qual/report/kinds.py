"""A fault step's kind as its record says it (``results.kind``), and the one fallback for evidence written before
fault records carried their kind: the kinds the views name (the kill kind, the identity drifts) recognised as they
were then, by the fault's id or the shape of its ``injected`` record."""

from __future__ import annotations

import re
from collections.abc import Mapping

#: the kill kind's fault ids as the built-in table named them (``--vsnap-chaos`` adds ``.2`` … ``.N``)
_KILL_ID = re.compile(r"^(?:kill|term)-(?:create|restore)(?:\.\d+)?$")
#: the identity kind's fault ids as the built-in table named them
_IDENTITY_PREFIX = "identity-"


def fault_kind(fault_id: str, results: Mapping[str, object] | None = None) -> str | None:
    """The kind of the fault ``fault_id`` as its step's results recorded it; for a record without one (older
    evidence, or a step that never ran), the kill kind by its ``injected`` record (a seed and an offset drawn) or
    its id, the identity kind by its id; None where neither tells."""
    recorded = (results or {}).get("kind")
    if isinstance(recorded, str):
        return recorded
    injected = (results or {}).get("injected")
    drew = isinstance(injected, Mapping) and "offset_s" in injected and "seed" in injected
    if drew or _KILL_ID.match(fault_id):
        return "kill"
    if fault_id.startswith(_IDENTITY_PREFIX):
        return "identity"
    return None
