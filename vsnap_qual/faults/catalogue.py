"""The session's faults: the built-in kinds' own entries, gathered from their modules in one table
(:data:`BUILTIN`), and whatever a conftest or plugin adds through the ``pytest_vsnap_add_faults`` hook
(:class:`FaultCatalogue`); and which behaviour a lane's faults are judged by (:func:`lane_expectation`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from vsnap_qual.faults.injector import Injector, Kind
from vsnap_qual.faults.kinds import artifact, hook, identity, kill, occupy, weights
from vsnap_qual.faults.lane import FaultLane
from vsnap_qual.model import Behaviour
from vsnap_qual.procedure import Fault
from vsnap_qual.run import package_probe
from vsnap_qual.vllm_words import StepFailed

#: The built-in kinds, in the order their faults run (a lane's steps, the coverage, the report): a new built-in kind
#: is one module of ``kinds/`` and one line here.
BUILTIN: tuple[Kind, ...] = (
    *hook.KINDS,
    *identity.KINDS,
    *occupy.KINDS,
    *artifact.KINDS,
    *weights.KINDS,
    *kill.KINDS,
)
BUILTIN_KINDS: Mapping[str, Kind] = {kind.name: kind for kind in BUILTIN}
#: The built-in kinds' injectors (a conftest's faults bring their own kinds: :meth:`FaultCatalogue.add_kind`).
BUILTIN_INJECTORS: Mapping[str, Injector] = {name: kind.injector for name, kind in BUILTIN_KINDS.items()}
#: The built-in faults, each kind's entries in the table's order.
BUILTIN_FAULTS: tuple[Fault, ...] = tuple(fault for kind in BUILTIN for fault in kind.faults)
FAULTS_BY_ID: Mapping[str, Fault] = {fault.id: fault for fault in BUILTIN_FAULTS}


class FaultCatalogue:
    """The session's faults: the built-in kinds' (:data:`BUILTIN`) and those a conftest or plugin adds through the
    ``pytest_vsnap_add_faults`` hook (``docs/adding-a-fault.md``), with one injector per kind."""

    def __init__(self, faults: Iterable[Fault] = (), kinds: Iterable[Kind] = BUILTIN) -> None:
        self._faults: dict[str, Fault] = {}
        self._kinds: dict[str, Kind] = {}
        for kind in kinds:
            self._kinds[kind.name] = dataclasses.replace(kind, faults=())
        for fault in faults:
            self.add(fault)

    @classmethod
    def builtin(cls) -> FaultCatalogue:
        """The built-in kinds and their faults."""
        return cls(BUILTIN_FAULTS)

    def repeat_kills(self, times: int) -> None:
        """The chaos run (``--vsnap-chaos``): each fault of the kill kind ``times`` times, ``<id>.2`` … ``<id>.N``
        after the catalogue's faults, each repeat its own draw (the fault's id is part of the draw's seed)."""
        for fault in [f for f in self.faults if f.kind == kill.KIND.name]:
            for i in range(2, times + 1):
                self.add(dataclasses.replace(fault, id=f"{fault.id}.{i}"))

    def add_kind(self, kind: Kind) -> None:
        """Add a kind of one's own (a conftest's module exports it, as ``kinds/`` modules do): its injector and its
        faults."""
        known = self._kinds.get(kind.name)
        if known is not None and known.injector is not kind.injector:
            raise ValueError(f"kind {kind.name!r} is already in the catalogue ({type(known.injector).__name__})")
        self._kinds[kind.name] = dataclasses.replace(kind, faults=())
        for fault in kind.faults:
            self.add(fault)

    def add(self, fault: Fault, injector: Injector | None = None) -> None:
        """Add a fault point: its table entry and, for a kind of its own, its injector."""
        if fault.id in self._faults:
            raise ValueError(f"fault {fault.id!r} is already in the catalogue")
        known = self._kinds.get(fault.kind)
        if known is None and injector is None:
            raise ValueError(f"fault {fault.id!r} of a new kind {fault.kind!r} needs an injector")
        if known is not None and injector is not None and injector is not known.injector:
            raise ValueError(
                f"fault {fault.id!r}: kind {fault.kind!r} already has an injector ({type(known.injector).__name__}); "
                "give a fault with its own injector a new kind"
            )
        if known is not None and known.params is not None and not isinstance(fault.params, known.params):
            raise ValueError(
                f"fault {fault.id!r} of kind {fault.kind!r} needs its parameters as {known.params.__name__} "
                f"(params={fault.params!r})"
            )
        self._faults[fault.id] = fault
        if known is None and injector is not None:
            self._kinds[fault.kind] = Kind(fault.kind, injector)

    @property
    def faults(self) -> tuple[Fault, ...]:
        return tuple(self._faults.values())

    def get(self, fault_id: str) -> Fault | None:
        """The fault of this id, None where the catalogue has none."""
        return self._faults.get(fault_id)

    @property
    def ids(self) -> list[str]:
        return list(self._faults)

    @property
    def kinds(self) -> Mapping[str, Injector]:
        """Each kind's injector, by kind name."""
        return {name: kind.injector for name, kind in self._kinds.items()}

    def injector_for(self, fault: Fault) -> Injector:
        """The injector of this fault's kind; a kind nobody added is named with the fix."""
        try:
            return self._kinds[fault.kind].injector
        except KeyError:
            raise ValueError(
                f"fault {fault.id!r}: no injector for kind {fault.kind!r} (known: {', '.join(self._kinds)}); "
                "add the fault with its injector in a pytest_vsnap_add_faults hook (docs/adding-a-fault.md)"
            ) from None


def lane_expectation(lane: FaultLane) -> tuple[Behaviour, str]:
    """The behaviour this lane's faults are judged by, and why: ``--vsnap-expect``/``--vsnap-base-expect`` when
    they name one, else (``auto``) what the lane's installed snapshot package implements, probed in the lane
    (with its overlay) by a plain interpreter before the lane's first engine command. Probed once per lane."""
    if lane.state.expectation is None:
        option = "--vsnap-expect" if lane.spec.arm == "head" else "--vsnap-base-expect"
        if lane.spec.expect == "head":
            lane.state.expectation = ("head", f"{option}=head")
        elif lane.spec.expect == "base":
            lane.state.expectation = ("base", f"{option}=base")
        else:
            probe = lane.box.exec(["python3", "-c", package_probe.SCRIPT], lane.config.timeouts["exec"])
            info = package_probe.parse(probe.stdout) or {
                "snapshot_behaviour_reason": f"the package probe failed: {probe.tail()}"
            }
            found, why = package_probe.detected_behaviour(info)
            if found is None:
                raise StepFailed(f"{option}=auto: cannot tell which snapshot behaviour the image implements ({why})")
            lane.state.expectation = (found, f"detected from the image: {why}")
    assert lane.state.expectation is not None
    return lane.state.expectation
