"""The injector base every fault kind's injector builds on (:class:`Injector`), what one injection of one fault
shares with the sequence (:class:`Attempt`) and what the faulted action did (:class:`Observation`), and the shape a
kind's module exports (:class:`Kind`, read by :mod:`vsnap_qual.faults.catalogue`)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from vsnap_qual.box import ExecResult, ProcessRow
from vsnap_qual.engine import client
from vsnap_qual.faults.lane import FaultLane
from vsnap_qual.faults.tools import ListenerScan
from vsnap_qual.model import FaultResults, FiredRecord
from vsnap_qual.procedure import Fault, FaultParams
from vsnap_qual.recorder import StepEvidence


class Injector:
    """How the faults of one kind (``Fault.kind``) are injected, acted on and known to have fired: one class per
    kind, built in or added with a conftest's faults, all run by the one sequence of ``sequence.run_fault``.

    The three documented hooks (``docs/adding-a-fault.md``): ``inject`` runs before the faulted
    ``vllm snapshot restore`` (it may add variables to ``env`` and must record what it did in ``injected``);
    ``fired`` decides from the harness's own evidence (``injected``, and what the restore did in ``obs``) whether
    the injection held at the moment of the action; ``release`` undoes it (also when the action raised).

    The rest of the sequence has defaults a kind may override: ``begin``/``end`` (the whole :class:`Attempt`,
    defaults: ``inject``/``release``), ``act`` (default: the faulted restore, watched for HTTP),
    ``at_restore_start`` and ``restoring`` (verify the injection in place as the restore starts, act around the
    command), ``restore`` (the command) and ``problems`` (what else the judge says about this kind)."""

    #: the restore's port is watched for HTTP and audited after the failure (not where the injection holds it)
    watches_port: bool = True
    #: the artifact digest before and after the action is compared (not where the action is a create)
    judges_artifact: bool = True
    #: the harness's own corruption of the artifact (made by ``begin``) is undone before the follow-up restore;
    #: the artifact's digest before the action is then taken after the injection, not the pristine copy's
    undo_before_followup: bool = False
    #: fires through a probe hook point: a command that died before reaching it says why (the judge quotes it)
    through_hook: bool = False
    #: the cleanup is audited once more after the harness's sweep (``results.cleanup.after_sweep``): a kind
    #: whose action may leave what no engine could clean (a SIGKILL) judges that audit itself
    audits_after_sweep: bool = False

    def inject(self, lane: FaultLane, injected: dict[str, object], env: dict[str, str]) -> None:
        """Inject before the faulted action: add variables to ``env``, record what was done in ``injected``."""
        raise NotImplementedError

    def fired(self, obs: Observation, injected: Mapping[str, Any]) -> bool:
        """Whether the injection held at the moment of the action, from the harness's own evidence."""
        raise NotImplementedError

    def release(self, lane: FaultLane, injected: dict[str, object]) -> None:
        """Undo the injection (default: nothing to undo)."""

    def after_sweep(self, at: Attempt) -> None:
        """After the harness's sweep, before the follow-up restore (default: nothing)."""

    def own_cleanup_judged(
        self, at: Attempt, expected: bool, left: Sequence[ProcessRow], wchan: Mapping[str, str]
    ) -> bool:
        """Whether vLLM's own cleanup is judged for this attempt, as its action turned out and by what it left
        (its processes and where each waits in the kernel; default: as this arm's expectation says)."""
        return expected

    def left_serving(self, at: Attempt, obs: Observation) -> bool:
        """Whether the action ended with a restored server that runs by design (default: the restore exited 0);
        the harness stops it before vLLM's own cleanup is audited."""
        return obs.exit_code == 0

    def not_applicable(self, lane: FaultLane, fault: Fault) -> str | None:
        """Why this lane's box cannot present this fault at all (the step is then not applicable, in those
        words), asked once before the fault runs; default: it always can."""
        return None

    # ---- the rest of the sequence (defaults) --------------------------------------------------------------
    def begin(self, at: Attempt) -> None:
        """Inject (default: :meth:`inject`); runs after the artifact is reset, before its digest is taken."""
        self.inject(at.lane, at.injected, at.env)

    def end(self, at: Attempt) -> None:
        """Undo (default: :meth:`release`); always runs, before vLLM's own cleanup is audited."""
        self.release(at.lane, at.injected)

    def act(self, at: Attempt) -> ExecResult:
        """The faulted action: ``vllm snapshot restore``, with a connect poll from here and a listener scan in
        the box watching its port (whether HTTP was bound during the failed restore)."""
        self.at_restore_start(at)
        host, reach = at.lane.box.endpoint(at.port)
        with client.ListenerWatch(reach, host) as watch, ListenerScan(at.lane, at.port) as scan:
            at.ignore.add(scan.pid or 0)
            with self.restoring(at):
                result = self.restore(at)
            time.sleep(0.1)
            if self.watches_port:
                seen = (("host connect poll", watch.bound), ("container listener scan", scan.bound))
                at.obs.http_bound_by = [name for name, bound in seen if bound]
                at.obs.http_bound = bool(at.obs.http_bound_by)
            at.rec.results["watch_polls"] = watch.polls
        return result

    def at_restore_start(self, at: Attempt) -> None:
        """Verify the injection in place as the restore starts (before the watchers start: a listener that
        never accepts, as the port kind's, stops answering once their connect polls fill its backlog)."""

    @contextlib.contextmanager
    def restoring(self, at: Attempt) -> Iterator[None]:
        """Around the restore command: code before ``yield`` runs just before it, after ``yield`` once it ended."""
        yield

    def restore(self, at: Attempt) -> ExecResult:
        """The faulted ``vllm snapshot restore`` of the fault artifact, with the injection's environment."""
        return at.lane.cli.restore_at(at.rec, at.port, name="restore-faulted", env=at.env)

    def problems(self, obs: Observation, results: FaultResults) -> list[str]:
        """What else is wrong with this kind's outcome (judged after the stderr message, before cleanup)."""
        return []


@dataclass
class Observation:
    """What one injected failure actually did."""

    exit_code: int | None = None
    http_bound: bool = False
    http_bound_by: list[str] = field(default_factory=list)
    error_json: dict[str, object] | None = None  # vLLM's error.json: any JSON object it wrote
    phase: str | None = None
    fired: bool = False
    fired_records: list[FiredRecord] = field(default_factory=list)
    artifact_unchanged: bool | None = None
    stderr_tail: str = ""
    error_lines: list[str] = field(default_factory=list)  # exception lines anywhere in stderr
    seconds: float = 0.0


@dataclass
class Attempt:
    """One injection of one fault: what the common sequence (``sequence.run_fault``) and the kind's injector share."""

    lane: FaultLane
    fault: Fault
    rec: StepEvidence[FaultResults]
    port: int  # the faulted restore's port
    captured: set[int]  # the snapshot's captured PIDs
    obs: Observation = field(default_factory=Observation)
    env: dict[str, str] = field(default_factory=dict)  # added to the faulted command's environment
    injected: dict[str, object] = field(default_factory=dict)  # the injection's evidence (results.injected)
    ignore: set[int] = field(default_factory=set)  # the injection's own processes: not vLLM's leftovers
    state: dict[str, object] = field(default_factory=dict)  # the injector's own objects for this attempt
    number: int = 1  # the step's second attempt after an ineffective first (``sequence.fault_step``)


@dataclass(frozen=True)
class Kind:
    """One fault kind, as its module exports it (``vsnap_qual/faults/kinds/``, or a conftest's module through the
    ``pytest_vsnap_add_faults`` hook: ``catalogue.add_kind(KIND)``): the name its faults give as ``Fault.kind``, its
    injector, the frozen parameter type its faults carry (``Fault.params``; None: they carry none), the record its
    injector leaves in ``results.injected`` (a ``TypedDict`` of ``vsnap_qual.model``) and its own faults."""

    name: str
    injector: Injector
    params: type[FaultParams] | None = None
    injected: type[Mapping[str, Any]] | None = None
    faults: tuple[Fault, ...] = ()


P = TypeVar("P", bound=FaultParams)


def params_of(fault: Fault, kind: type[P]) -> P:
    """The fault's parameters as its kind reads them; a fault that carries other ones is named (a table error)."""
    if not isinstance(fault.params, kind):
        raise TypeError(f"fault {fault.id!r} of kind {fault.kind!r} carries {fault.params!r}, not {kind.__name__}")
    return fault.params
