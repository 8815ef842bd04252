"""The evidence model, typed once: every record the harness appends to ``evidence.jsonl``, each step's results,
and ``results.json`` assembled from them (docs/design.md §4–5).

The types are ``TypedDict``s: the JSON on disk *is* the model (no conversion layer that could drift). The store
writes these records (``EvidenceStore.write``), the report reads them back as the same types, checking each
value against its type once (``report.parse``, driven by these annotations through :func:`fields_of`), and the
report tests build their synthetic runs from them. ``results.schema.json``
(beside the report package) is generated from these types by :func:`json_schema` and checked against a fresh
generation by the tests.

Step results are partial by nature (a step that fails records what it had gathered), so their fields are all
optional; a field that is present has its documented type. Records and ``results.json`` themselves are closed:
a field not in the model is a schema violation.

Untyped dictionaries appear here only where the data is JSON nobody here defines (what vLLM prints or writes:
the inspect manifest, ``error.json``; the run's options and preflight; an injector's own notes) and in the JSON
Schema generator, whose output is a JSON document.
"""

import functools
import sys
from dataclasses import dataclass
from typing import Any, Final, Literal, Union

from vsnap_qual.contract import Arm, Purpose  # one definition each, re-exported for the model's users

if sys.version_info >= (3, 11):
    from typing import NotRequired, TypedDict, get_type_hints
else:  # Python 3.10: typing has no NotRequired; typing_extensions' TypedDict understands it
    from typing_extensions import NotRequired, TypedDict, get_type_hints

#: The one schema version: of ``results.json`` and of the evidence records it is assembled from.
SCHEMA: Final = "vsnap-qual/results@1"
#: How a step record's message begins when the step does not apply to its lane by design (not a gap, not counted)
NOT_APPLICABLE_PREFIX: Final = "not applicable: "
#: why a fault of a kind refused before any engine starts runs on one runner per image and arm (issue 45,
#: ``faults.once``), in the words of its records and every view
RUNS_ONCE: Final = "runs once per image and arm: refused before any engine starts, as the run's phase records show"
#: the message of the step that was running when the run was stopped (Ctrl-C, SIGTERM): recorded as skipped, never
#: judged, and named by the verdict INTERRUPTED
INTERRUPTED_PREFIX: Final = "interrupted: "

Outcome = Literal["passed", "failed", "skipped"]
Status = Literal["pass", "partial", "fail", "incomplete", "interrupted"]
CheckStatus = Literal["pass", "FAIL", "info", "incomplete", "not run"]
HarnessPhase = Literal["collection", "setup", "teardown"]
Behaviour = Literal["head", "base"]


# ---- pieces of step results -----------------------------------------------------------------------------------
class _CanaryBase(TypedDict):
    prompt: str
    token_ids: list[int]
    text: str
    logprob: float


class Canary(_CanaryBase, total=False):
    #: A multi-token canary: every position's sampled-token logprob (None for the one-token vLLM canary).
    logprobs: list[float] | None


class _CanaryCompareBase(TypedDict):
    prompt: str
    expected: Canary
    actual: Canary
    token_ids_equal: bool
    text_equal: bool
    logprob_delta: float
    bit_exact: bool
    ok: bool


class CanaryCompare(_CanaryCompareBase, total=False):
    tokens: int
    #: the largest |Δ logprob| over the positions
    max_logprob_delta: float
    #: the first token position where the outputs differ (id, or logprob beyond the tolerance); None: none
    first_divergence: int | None


class KeptAdapter(TypedDict):
    """A LoRA adapter of the lane's ``--lora-modules``, kept with the evidence: its path in the box, its files'
    sha256 and where the report holds their copy (None: no file of it could be read)."""

    path: str
    files: dict[str, str]
    kept: str | None


class LeftoverProcess(TypedDict, total=False):
    pid: int
    start_time: str
    cmdline: str
    gpu_holder: bool
    state: str


class KvJudgement(TypedDict, total=False):
    restored: int | None
    created: int | None
    ordinary: int | None
    tolerance: float
    restored_source: str
    snapshot_vs_ordinary: float
    observable: bool
    problems: list[str]
    ok: bool


class ShapeRecord(TypedDict):
    """The request shapes as the ordinary engine answered them (``shapes``): by shape, in plan order, and whether it
    answered each shape the same way twice (only such a shape judges a restored engine)."""

    answers: dict[str, list[Canary]]
    self_consistent: dict[str, bool]


class ShapeCompare(TypedDict):
    """One answer of a restored engine to a request shape, against the ordinary engine's answer."""

    shape: str
    index: int
    #: False: the ordinary engine did not answer this shape the same way twice (recorded, not judged)
    judged: bool
    compare: CanaryCompare


class ApiRequest(TypedDict):
    """One request of the API checks (``vsnap_qual.engine.api_checks``): its name, the check it serves, and what is
    sent (the same on the ordinary engine and on every restore)."""

    name: str
    check: str
    method: str
    path: str
    body: dict[str, object] | None


class ApiChoice(TypedDict, total=False):
    """One choice of an answer, as compared (a stream's chunks reassembled; a chat message's content as ``text``)."""

    index: int
    text: str
    token_ids: list[int] | None
    finish_reason: str | None
    stop_reason: str | int | None
    #: per position: the token's text, its logprob and the alternatives (token text → logprob) the engine listed
    tokens: list[str] | None
    logprobs: list[float] | None
    top_logprobs: list[dict[str, float]] | None


class ApiAnswer(TypedDict, total=False):
    """What the engine answered to one API request, reduced to what is compared (ids, times and fingerprints
    left out)."""

    status: int
    #: a refusal's words (HTTP status other than 200), or why there was no answer at all
    error: str
    choices: list[ApiChoice]
    usage: dict[str, int] | None
    #: a stream: its ``data:`` events, whether ``data: [DONE]`` ended it, the choices-less usage chunk's place
    events: int
    done: bool
    usage_chunk: bool
    #: ``/v1/models``, ``/tokenize``: the fields compared
    fields: dict[str, object]


class ApiRecord(TypedDict):
    """The API checks as the ordinary engine answered them: the requests (some made from its own answers: the
    stop string, the EOS id), its answers, whether it answered each the same way twice, and what was not asked
    and why."""

    requests: list[ApiRequest]
    answers: dict[str, ApiAnswer]
    self_consistent: dict[str, bool]
    not_asked: dict[str, str]


ApiStatus = Literal["as ordinary", "differs", "not applicable", "not judged"]


class ApiRequestCompare(TypedDict):
    """One API request after a restore against the ordinary engine's answer: the first divergence in words, or why
    it is not applicable (the engine's own words) or not judged."""

    name: str
    status: ApiStatus
    detail: str


class ApiCheck(TypedDict):
    """One named API check after a restore (``stream``, ``chat``, ``logprobs``, ``finish``, ``n-seeded``,
    ``models``, ``tokenize``): ``ok`` False only where a judged request differs, None where none was judged."""

    check: str
    status: ApiStatus
    ok: bool | None
    detail: str
    requests: list[ApiRequestCompare]


class SecondLook(TypedDict):
    """A liveness look that failed and was looked at again before it could be a death: the second look found the
    server alive (its processes by their own state, ``/health`` within a deadline sized by measurement)."""

    #: seconds after the restore exited
    after_s: float
    #: what the first look said (``processes gone [...]``, ``/health did not answer 200 within 2 s``)
    first: str
    #: how long the second ``/health`` ask took to answer 200, and its deadline
    health_s: float
    deadline_s: float


class ServingSeries(TypedDict, total=False):
    """A fixed series of requests on one engine (``vsnap_qual.engine.serving_series``, issue 44 item 2): vLLM's
    serving counters moved by it, and the engine's memory after each request; ``not_applicable`` in the engine's
    words where it serves no ``/metrics``."""

    requests: int
    prompt_tokens: int
    max_tokens: int
    #: each of ``serving_series.COUNTERS`` the engine reports, by how much the series moved it
    counters: dict[str, float]
    #: the box's engine processes' resident memory after each request, KiB (empty: the box cannot tell)
    rss_kb: list[int]
    #: the engine processes' GPU memory after each request, MiB, as ``nvidia-smi`` lists their compute apps (absent:
    #: the lane has no GPU)
    gpu_mib: list[int]
    #: how long the series took, requests and samples together (what it adds to a restore)
    seconds: float
    not_applicable: str


ServingStatus = Literal["as ordinary", "differs", "not applicable", "not judged"]


class ServingJudgement(TypedDict, total=False):
    """A restore's series against the ordinary engine's: the counters, and the memory's growth per request (MiB per
    request, least squares) after the restore against the ordinary engine's over the same series."""

    status: ServingStatus
    ok: bool | None
    problems: list[str]
    detail: str
    counters_ok: bool | None
    rss_growth_mib: float | None
    rss_growth_ordinary_mib: float | None
    gpu_growth_mib: float | None
    gpu_growth_ordinary_mib: float | None


BoundaryOutcome = Literal["refused", "answered", "closed", "timed out", "not sent"]


class BoundaryRequest(TypedDict, total=False):
    """One request across a lifecycle boundary (issue 44 item 3): sent while a restore's recovery was held
    (``recovery``), or in flight when the restored server was stopped gracefully (``stop``); what came of it.
    Times in seconds from when the boundary began (the hold's start, or the stop's)."""

    boundary: Literal["recovery", "stop"]
    #: ``recovery``: how long the probe held the recovery at its point (``wake-stall``), and whether it did
    hold_s: float
    held: bool
    #: when the request was sent, and answered or refused (from the boundary's start)
    sent_s: float
    ended_s: float
    #: whether the connection was taken (something listened) and whether that was while the recovery was held
    accepted: bool
    accepted_during_hold: bool
    outcome: BoundaryOutcome
    status: int
    tokens: int
    #: the answer equals the ordinary engine's for the same request (completed answers only)
    answer_ok: bool
    #: ``stop``: the engine reported the request running before the stop began (``vllm:num_requests_running``)
    in_flight: bool | None
    detail: str


class BoundaryJudgement(TypedDict):
    """A boundary request judged: ``ok`` None where it was not judged (and why, in ``detail``)."""

    boundary: str
    ok: bool | None
    detail: str


class Soak(TypedDict, total=False):
    alive: bool
    probes: int
    canaries: int
    seconds: float
    #: the observation window the server had to stay alive for (seconds after its restore exited)
    window_s: float
    #: how long after its restore exited it was last seen alive and healthy by the watch
    observed_after_restore_s: float
    #: the watch's pauses between its looks: the window's own time (the engine is watched, nobody works)
    idle_s: float
    #: soak rounds whose canary answers differed from the ordinary reference (the repeated-request shape)
    repeated_mismatch: list[CanaryCompare]
    died_after_s: float
    last_ok_after_s: float
    reason: str
    log_tail: str
    #: how the restored tree's processes ended (``exits``: the kernel's process events), or why that is unknown
    exit: str
    #: failed looks that a second look found alive (not deaths), the first few; how many in all
    second_looks: list[SecondLook]
    second_looks_count: int
    #: the slowest ``/health`` answer the watch measured (a second look's deadline is sized by it)
    slowest_health_s: float


class Digest(TypedDict, total=False):
    sha256: str | None
    shape: list[int]
    dtype: str
    #: ``buffer``: a ``named_buffers()`` entry (rotary caches, KV/quantization scales); the others are parameters
    source: Literal["parameter", "reconstructed", "unobservable", "buffer"]


class DigestCompare(TypedDict):
    total: int
    unchanged: int
    changed: list[str]
    missing: list[str]
    unobservable: list[str]
    extra: list[str]
    ok: bool
    #: how many of ``total`` are buffers, and which of ``changed`` are (runs before buffers were digested lack both)
    buffers: NotRequired[int]
    changed_buffers: NotRequired[list[str]]


class StopRecord(TypedDict, total=False):
    """A strict stop's timing: the grace (``--vsnap-cleanup-grace``), when the tree was gone, and, for a tree still
    alive at the grace but still exiting (a process left, or CPU time moving), the bounded extension it was given:
    each look after the grace and what moved, what ended it and the deadline the stop was judged at."""

    grace_s: float
    #: the most an extension may reach (seconds after SIGTERM)
    cap_s: float
    #: when the stop was judged (seconds after SIGTERM): the grace, or the end of the extension
    deadline_s: float
    #: seconds from SIGTERM until no process of the tree was left; absent while some outlived the deadline
    gone_after_s: float
    #: each look after the grace: ``"at 5.6 s: pid 8599 spent 9 CPU ticks in 0.52 s"``, ``"at 6.2 s: pid 8599 exited"``
    extension: list[str]
    #: why the extension ended without the tree gone: it stopped progressing (said how), or it reached the cap
    stalled: str


class CleanupAudit(TypedDict, total=False):
    pids: list[int]
    pids_alive: list[int]
    pids_gone: bool
    ports: list[int]
    ports_open: list[int]
    ports_closed: bool
    gpu_idle: bool | None
    link_remaps_equal: bool
    #: /dev/shm/link_remap.* entries new since the lane's baseline; those this lane saw first; others' by lane
    link_remaps_new: list[str]
    link_remaps_ours: list[str]
    link_remaps_others: dict[str, list[str]]
    #: who made each new entry: "<lane> <step>" of the artifact whose CRIU images name it (CRIU names a link remap
    #: by the dump's file id, ``link_remap.<id>``: the artifact that lists it is the dump that made it)
    link_remaps_made_by: dict[str, str]
    #: new entries that went away within the grace (another CRIU operation in flight on the host's /dev/shm)
    link_remaps_transient: list[str]
    lane: str
    step: str
    #: strict cleanup: processes alive ``grace_s`` after SIGTERM (GPU holders first), the tree as recorded
    leftovers: list[LeftoverProcess]
    #: PIDs found alive that another process (a later start time) now holds: not leftovers
    pids_reused: list[int]
    grace_s: float
    #: the strict stop's timing and any extension of its grace (a tree still exiting at the grace)
    stop: StopRecord
    tree: list[LeftoverProcess]
    ok: bool
    detail: str
    error: str
    #: Fault steps: whether this audit is judged for the behaviour (recorded either way).
    judged: bool
    #: a strict stop: the /dev/shm files the tree held as it was stopped (open or mapped, still named); of those,
    #: the ones still there that an artifact of the lane needs (``artifact_deps``: kept, not leaked), and the ones
    #: still there that none needs (left: a leak of this lane, whichever lane shares /dev/shm)
    shm_held: list[str]
    shm_kept: list[str]
    shm_left: list[str]
    #: Fault steps (issue 44): the /dev/shm files new since just before the fault that no process holds and the
    #: lane's artifact does not name, once its commands (the faulted one, the follow-up restore, a re-create) are
    #: done: named here and removed with the lane (where the box sees every holder; else ``shm_left_not_judged``)
    shm_left_by_fault: list[str]
    shm_left_not_judged: list[str]
    #: Fault steps: the audit's leftovers (as ``PID cmdline``), and the PIDs the harness then killed itself
    leftover_processes: list[str]
    killed_by_harness: list[int]
    #: Fault steps: each leftover's process state as listed (``T``: stopped, as a tree CRIU left mid-restore)
    leftover_states: dict[str, str]
    #: Fault steps: where in the kernel each leftover waited (``/proc/<pid>/wchan``), as evidence
    leftover_wchan: dict[str, str]
    #: Fault steps: the wait for what was left ended this long after it began, the leftovers parked for good in
    #: CRIU's restorer and their cleanup not judged (``vsnap_qual.faults.parked``); absent where the wait ran its course
    parked_for_good_after_s: float
    #: Fault steps: everything the faulted action left went by itself during the wait; it was still there this
    #: long (the engine's own teardown, its time the engine's: ``faults.tools.credit_teardown``)
    leftovers_went_after_s: float
    #: the kill kind (issue 29): the audit once more after the harness's sweep, and the PIDs that sweep killed
    after_sweep: "CleanupAudit"
    swept: list[int]


class InspectCheck(TypedDict):
    name: str
    ok: bool
    #: the manifest's value (or the values compared): whatever JSON vLLM printed
    detail: Any


class InspectChange(TypedDict):
    """One field of ``vllm snapshot inspect``'s output that changed: its value before and after (JSON as vLLM
    printed it)."""

    before: Any
    after: Any


class ImportedModule(TypedDict):
    pid: int | None
    role: str | None
    path: str | None
    sha256: str | None


class FreshImport(TypedDict):
    exit_code: int | None
    path: str | None
    sha256: str | None


class OverlayFileResult(TypedDict, total=False):
    host_path: str
    relative: str
    module: str
    image_path: str
    host_sha256: str
    imported: list[ImportedModule]
    fresh_import: FreshImport
    fresh_ok: bool
    verified_in: str
    ok: bool
    #: ``in effect`` | ``overlaid, not imported by the engine`` | ``not in effect`` (``overlay.file_finding``)
    finding: str
    #: the finding in plain words, naming the file (and, when not in effect, where the engine imported it from)
    finding_detail: str


class FaultExpectation(TypedDict):
    exit_code: int | str
    http_bound: bool | None
    error_phase: str | None
    artifact_unchanged: bool | None
    fires: bool
    message: str | None
    followup_restore: bool
    cleanup: bool


class FiredRecord(TypedDict, total=False):
    """What the probe wrote when a fault hook acted (``faults/fired-<point>-<pid>.json``, docs/design.md §3)."""

    point: str
    pid: int
    method: str
    #: the hooked method's arguments, as the probe could write them
    args: Any
    time: str


class FaultObservation(TypedDict, total=False):
    exit_code: int | None
    http_bound: bool
    http_bound_by: list[str]
    #: vLLM's ``error.json``, as it wrote it
    error_json: dict[str, object] | None
    phase: str | None
    fired: bool
    fired_records: list[FiredRecord]
    artifact_unchanged: bool | None
    stderr_tail: str
    error_lines: list[str]
    seconds: float


class CapturedIdWait(TypedDict, total=False):
    """Waiting until no captured PID/TID names a task (a zombie, a thread of another process, one tearing down
    its GPU context): each held one as ``PID name state tgid ppid``."""

    held_at_first: list[str]
    waited_s: float
    held_s: float  # until the last look that still found one held: the tasks' own teardown, at least
    still_held: list[str]


class FollowupRestore(TypedDict, total=False):
    captured_ids_wait: CapturedIdWait
    held_at_retry: list[str]
    exit_code: int | None
    seconds: float
    canary: Canary
    canary_ok: bool | None
    error: str
    stderr_tail: str
    criu_reason: list[str]  # CRIU's own error lines (vLLM logs them on stdout)
    retried_after: str  # a captured PID/TID taken by another host process: the restore ran once more
    ids_taken: str  # the second try met a taken ID too: the artifact was never tried (nothing said of it)
    cleanup_ok: bool
    cleanup: CleanupAudit
    #: the artifact's outside files gone before the follow-up (the faulted restore's exit unlinked them): the
    #: follow-up is not judged as the fault's; it is the finding "artifact not self-contained"
    consumed: list[str]


class GpuEngaged(TypedDict):
    """After a restore: the CUDA holders the manifest names, and the compute apps ``nvidia-smi`` listed."""

    holders: list[int]
    gpu_apps: list[int]


UnitOutcome = Literal["passed", "failed", "skipped"]


class UnitRun(TypedDict, total=False):
    """The unit step: the user's command from the overlay checkout in one lane's box, and its JUnit per test id."""

    command: str
    exit_code: int | None
    seconds: float
    #: report-relative path of the JUnit file the command wrote (kept with the evidence)
    junit: str | None
    counts: dict[str, int]
    #: the failed test ids (``classname::name``), in the JUnit's order
    failed: list[str]
    #: how it was judged: alone (no base arm), recorded for the base arm to judge, or against the head arm
    judged: str
    #: the base arm: head failures that pass (or are absent) here; head failures failing here too; base failures
    #: that pass on head
    new_on_head: list[str]
    pre_existing: list[str]
    fixed_on_head: list[str]


class GroupProbe(TypedDict):
    """One step of a bisection (``faults.group.bisect``): these faults ran again from a reset artifact, then a
    restore; whether it restored."""

    faults: list[str]
    restored: bool


class GroupFollowup(TypedDict, total=False):
    """A refusal's follow-up restore proved once for its group (issue 45 item 5, ``faults.group``): on a fault that
    deferred it, the group and the step whose follow-up proves it; on the step that restored for the group, the
    faults it covered and, where that restore failed, the bisection that names the fault that broke it."""

    #: the run of refusals this fault belongs to in the lane's order
    group: list[str]
    #: this fault was refused with the artifact byte-identical: its follow-up is the group's, in that step
    deferred_to: str
    #: this step's follow-up restore proved every one of these (deferred earlier, and this fault itself)
    covered: list[str]
    #: where that restore failed: the probes, the fault that alone breaks it (None: none alone), in words
    bisection: list[GroupProbe]
    broke: str | None
    words: str


class RunsOnce(TypedDict, total=False):
    """A fault of a kind refused before any engine starts, run once per image and arm (issue 45 item 4,
    ``faults.once``): why, and on the lane that ran it the lanes it stood for, on a lane that did not the lane that
    ran it instead."""

    why: str
    stands_for: list[str]
    ran_on: str


class RecoveryDeadline(TypedDict, total=False):
    """The fault artifact's recovery deadline (``VLLM_SNAPSHOT_TIMEOUT_S``, frozen into it at create), as
    ``faults.deadline`` chose it: derived from what this lane's lifecycle measured before the fault artifact was
    made, never over ``--vsnap-fault-timeout``."""

    #: the deadline the fault artifact was created with (seconds)
    deadline_s: float
    #: ``--vsnap-fault-timeout``: the upper bound
    option_s: float
    #: the rule's value before the bound (None: nothing measured to derive it from, the option is the deadline)
    derived_s: float | None
    #: the longest time from a lifecycle restore's start until its HTTP listener was bound (recovery runs before
    #: the bind), and how many restores were measured
    restore_ready_s: float | None
    restores: int
    #: the lifecycle create's command seconds (the same deadline bounds the create's wait for its child)
    create_s: float | None
    #: the rule with its numbers, in words, and where the measurements came from (or why none were used)
    rule: str
    source: str


class FreshArtifact(TypedDict):
    """A fault step's new fault artifact: the previous one's outside files were gone before the fault."""

    reason: str
    consumed: list[str]
    outside_files: list[str]
    seconds: float


class CpuSample(TypedDict):
    """At one moment (``Box.cpu_sample``): each engine task's CPU time and run-queue wait in ns
    (``/proc/<tid>/schedstat``: time run, time runnable but waiting for a CPU), keyed by TID, and the seconds
    every CPU of the machine has spent busy (``/proc/stat``) and how many CPUs it has."""

    tasks: dict[str, list[int]]
    machine_busy_s: float
    cpus: int
    #: the engine processes' resident memory and, of it, anonymous memory in transparent huge pages
    #: (``/proc/<pid>/smaps_rollup``: ``Rss``, ``AnonHugePages``; absent where it cannot be read). CRIU restores
    #: memory without huge pages (checkpoint-restore/criu#2081), which slows what walks it
    rss_kb: NotRequired[int]
    anon_huge_kb: NotRequired[int]
    #: how many of the engine's tasks may run on which CPUs (``Cpus_allowed_list`` of ``/proc/<tid>/status`` ->
    #: tasks): vLLM's CPU backend binds its OpenMP threads and CRIU does not restore a thread's affinity
    cpus_allowed: NotRequired[dict[str, int]]


class CpuShare(TypedDict):
    """Between two :class:`CpuSample` around a set of timed runs: how much CPU the engine used and how long its
    tasks waited for one, and how much the machine's other work used (``vsnap_qual.engine.decode_speed.cpu_share``)."""

    wall_s: float
    engine_cpu_s: float
    engine_wait_s: float
    #: (engine CPU + run-queue wait) / engine CPU: how much longer the engine's work took than the CPU it used
    stretch: float
    #: CPUs' worth of other work on the machine over the set (busy seconds not the engine's / wall seconds)
    others_load: float
    #: the engine's memory and its tasks' allowed CPUs after the set (:class:`CpuSample`)
    rss_kb: NotRequired[int]
    anon_huge_kb: NotRequired[int]
    cpus_allowed: NotRequired[dict[str, int]]
    cpus: int


class Calibration(TypedDict):
    """The same fixed CPU work timed in the engine's box around a set of decode runs, while the engine is idle
    (``vsnap_qual.engine.decode_speed``): how long each took to get done (its wall time in the box; where the box
    cannot tell, the seconds it ran plus the seconds it waited for a CPU) and, by its own ``/proc/self/schedstat``,
    the seconds it ran and waited. Its stretch between two sets is the machine's slowdown whatever causes it: other
    work queued on the CPUs (the wait), a CPU that does less per second it runs (a busy SMT sibling, a shared cache
    or memory bus: the time run), or time taken from the machine that neither shows (a hypervisor's steal)."""

    runs_s: list[float]
    ran_s: list[float]
    wait_s: list[float]
    #: the median of ``runs_s``
    median_s: float


class DecodeSpeed(TypedDict):
    """A fixed greedy generation timed after a warm-up (``vsnap_qual.engine.decode_speed``): tokens per second of each
    run and their median; vLLM's speculative-decoding counters over the runs where it decodes speculatively."""

    tokens: int
    runs_tps: list[float]
    median_tps: float
    #: how many generations each timed run repeated to last ``decode_speed.MIN_RUN_S`` (absent: one)
    generations_per_run: NotRequired[int]
    spec_draft_tokens: NotRequired[float]
    spec_accepted_tokens: NotRequired[float]
    spec_acceptance: NotRequired[float]
    #: the engine's CPU and the machine's other work over the timed runs (absent where the runtime cannot tell)
    cpu: NotRequired[CpuShare]
    #: the fixed calibration work timed in the engine's box before the first run and after each
    #: (``decode_speed.CALIBRATION``; absent where the box cannot run it)
    calibration: NotRequired[Calibration]


class DecodeJudgement(TypedDict, total=False):
    """A restore's decode speed against the ordinary engine's: the slowdown (ordinary median / restored median
    over the machine's own slowdown, the better of two sets where the first was over the tolerance) and the
    speculative acceptance rates."""

    ordinary_tps: float
    restored_tps: float
    #: ordinary tokens/s over restored tokens/s, as measured
    measured_slowdown: float
    #: how much more the restored engine's work was stretched by waiting for a CPU than the ordinary engine's,
    #: where the machine's other work explains it (1: not so, or not known); see ``decode_speed.machine_slowdown``
    machine_slowdown: float
    #: the two estimates of the machine's slowdown behind ``machine_slowdown``: the ratio of the sets' run-queue
    #: stretches (where other work explains it) and of their calibrations' medians (where the restored engine's
    #: CPU per token says it is not its own work); absent where not measured
    queued_slowdown: float
    calibrated_slowdown: float
    #: the judged figure: the measured slowdown over the machine's
    slowdown: float
    tolerance: float
    retried: bool
    ordinary_acceptance: float
    restored_acceptance: float | None
    ok: bool | None
    problems: list[str]


class PrefixAsk(TypedDict, total=False):
    """One ask of the prefix-cache prompt (``vsnap_qual.engine.prefix_cache``) and what vLLM's counters moved by."""

    answer: Canary
    queried_tokens: float
    hit_tokens: float


class PrefixCacheProbe(TypedDict, total=False):
    """A token-id prompt of whole KV blocks asked twice (``vsnap_qual.engine.prefix_cache``); ``not_judged`` where it
    could not be asked, and why."""

    block_size: int
    prompt_tokens: int
    #: ``vllm:cache_config_info``'s ``enable_prefix_caching`` (absent: not reported)
    enabled: bool
    asks: list[PrefixAsk]
    not_judged: str


class PrefixCacheJudgement(TypedDict, total=False):
    """A restore's probe against the ordinary engine's: answers ask by ask, hits ask by ask (where judged)."""

    ok: bool | None
    problems: list[str]
    not_judged: str
    #: both asks answered as on the ordinary engine
    answers_equal: bool
    #: why the hits were not judged (the answers were): no counters, or prefix caching off
    hits_not_judged: str
    hits_ordinary: list[float]
    hits_restored: list[float]


class WeightTamper(TypedDict, total=False):
    """The weight-tamper fault (``vsnap_qual.faults.kinds.weights``): where the private copy's shard was changed,
    and what the restored engine held against the ordinary engine."""

    #: the user's cache entry the private copy links to, the copied shard, the tensor and bytes changed
    cache: str
    shard: str
    tensor: str
    dtype: str
    shape: list[int]
    offset: int
    length: int
    sha256_before: str
    sha256_after: str
    #: ``refused`` (the restore exited non-zero), ``restored`` (compared below) or ``unasked`` (its server did
    #: not answer)
    outcome: str
    error: str
    #: whether an ordinary reference of this run was there to compare with
    compared: bool
    changed: list[str]
    missing: list[str]
    unobservable: list[str]
    canaries_differ: list[str]
    #: the outcome in words
    said: str


# ---- what each fault kind's injector records (``results.injected``; ``vsnap_qual/faults/kinds/``) ----------------
class HookInjected(TypedDict, total=False):
    """The hook kind's record: nothing of its own (the probe's fired records are ``observed.fired_records``)."""


class SignalInjected(TypedDict, total=False):
    """The signal kind's record: the signal sent to the restore once recovery ran (``SIGTERM to [PID]``)."""

    signal: list[str]


class CreateInjected(TypedDict, total=False):
    """The create kind's record: whether the failed create removed its target directory."""

    target_removed: bool


class IdentityInjected(TypedDict, total=False):
    """The identity kind's record: the drifted field, what was presented, what the restore's own process saw and
    the manifest's value in the same form, and whether they differed (the drift held)."""

    field: str
    presents: str
    presented: str
    seen_by_restore: str | None
    manifest_value: str
    held: bool


class PidInjected(TypedDict, total=False):
    """The pid kind's record: the captured PID occupied, where, after how many tries, and whether it was held as
    the restore started and as it ended."""

    pid: int
    occupied: bool
    occupied_in: str | None
    attempts: int
    pid_cursor_moved: bool
    held_at_restore: bool
    held_after_restore: bool


class PortInjected(TypedDict, total=False):
    """The port kind's record: the port held, and whether it was bound as the restore started."""

    port: int
    bound_at_restore: bool


class ManifestInjected(TypedDict, total=False):
    """The manifest kind's record: the field changed (``schema_version=2``)."""

    manifest: str


class ImageInjected(TypedDict, total=False):
    """The image kind's record: the core image truncated (its path in the box)."""

    truncated: str


class WeightsInjected(TypedDict, total=False):
    """The weights kind's record: what was damaged, or why nothing could be (the rest is ``weight_tamper``)."""

    tampered: str
    error: str


class KillInjected(TypedDict, total=False):
    """The kill kind's record (issue 29): the seeded draw (seed, attempt, duration, offset, fraction), the command
    and signal, what was running when it went (the phase reached, the tree), what was sent (empty: every draw missed
    the command, ``missed`` says how), a restore that had completed first, and whether vLLM's own cleanup was judged."""

    seed: int
    attempt: int
    command: str
    signal: str
    duration_s: float
    duration_measured_now: bool
    offset_s: float
    fraction: float
    sent: list[str]
    sent_after_s: float
    missed: str
    phase: str
    tree: list[str]
    completed: str
    own_cleanup: str
    #: a killed restore: what the kill left changed in the fault artifact against its pristine copy's listing, as
    #: the follow-up restore meets it (files removed, renamed, resized or truncated, modes; and what was added)
    artifact_changes: list[str]


#: ``results.injected`` of a fault step: its kind's record (``results.kind`` says which), or a conftest kind's own
FaultInjected = (
    HookInjected
    | SignalInjected
    | CreateInjected
    | IdentityInjected
    | PidInjected
    | PortInjected
    | ManifestInjected
    | ImageInjected
    | WeightsInjected
    | KillInjected
    | dict[str, object]
)


class KilledCanaries(TypedDict, total=False):
    """The canaries asked of a server restored from a killed create's artifact, each compared (``kill`` kind)."""

    ok: bool
    against: str
    compared: list[CanaryCompare]
    error: str


class KilledArtifact(TypedDict, total=False):
    """The kill kind (issue 29): what a restore made of a killed create's target: ``absent``, ``refused by
    inspect``, ``refused by restore`` (with its message) or ``restored`` (with the canaries asked of it)."""

    target: str
    outcome: str
    left: list[str]
    inspect_exit: int | None
    restore_exit: int | None
    message: str
    canaries: KilledCanaries
    #: a captured ID taken at the restore (``faults.tools.restore_retrying_taken``)
    retried_after: str
    held_at_retry: list[str]
    ids_taken: str


# ---- each step's results: one type per step, holding exactly what that step records ----------------------------
# A step's type is named by its table entry (``procedure.Step.results``); a record's results are read back as the
# type of its step (``report.parse``). Every field is optional: a step that fails keeps what it had gathered.
class ShmNotJudged(TypedDict):
    """What a create left in ``/dev/shm`` that is recorded and not judged, and why (``shm_left_by_create``)."""

    files: list[str]
    why: str


class ShmLeftRecord(TypedDict, total=False):
    """What a create of the lane's artifact left in ``/dev/shm`` (``lane.snapshot_cli.shm_left_by_create``): the
    processes whose fds and maps the look for holders could not read (``box.ShmHolders``: taken to hold none), and
    the new files no process holds and the artifact does not name where they are recorded and not judged."""

    shm_unread: list[str]
    shm_left_not_judged: ShmNotJudged


class ServeRecord(TypedDict, total=False):
    """What ``lane.servers.serve`` records of an ordinary server's start: how long until ``/health`` answered, how
    late the port's first bind was noticed, and, where the server died first, vLLM's reason."""

    ready_seconds: float | None
    notice_latency_s: float | None
    bind_to_ready_s: float
    vllm_reason: str


class OrdinaryResults(ServeRecord, total=False):
    """``ordinary``: what the ordinary ``vllm serve`` answered (the reference every restore is compared with), how
    it stopped, and what it left."""

    #: the adapters' files, kept in the report (a lane serving LoRA adapters, ``--lora-modules``)
    adapters: dict[str, KeptAdapter]
    canary: list[Canary]
    digests: dict[str, Digest]
    kv_tokens: int | None
    kv_source: str | None
    pids: list[int]
    cleanup: CleanupAudit
    #: the request shapes as it answered them (twice)
    shapes: ShapeRecord
    decode_speed: DecodeSpeed
    #: the prefix-cache prompt asked twice
    prefix_cache: PrefixCacheProbe
    #: the canaries asked through each adapter, by its name
    adapter_canary: dict[str, list[Canary]]
    #: the API checks' requests and its answers (twice), every restore's reference (issue 44)
    api: ApiRecord
    #: the fixed request series: counters moved and memory per request, every restore's reference (issue 44)
    serving_series: ServingSeries


class VsHeadResults(TypedDict, total=False):
    """``vs-head`` (the base arm): its ordinary reference against the head arm's."""

    canary_compare: list[CanaryCompare]
    digest_compare: DigestCompare
    kv_head: int | None
    kv_base: int | None
    adapter_compare: dict[str, list[CanaryCompare]]


class CreateResults(ShmLeftRecord, total=False):
    """``create``: the artifact ``vllm snapshot create`` published, and what the create left behind."""

    vllm_reason: str
    #: the /dev/shm files the artifact's CRIU images name and that existed when it was made: what a restore needs
    #: from outside the artifact (``artifact_deps``; empty: self-contained)
    outside_files: list[str]
    #: the /dev/shm/link_remap.* paths the artifact's CRIU images name (made by its dump)
    link_remaps_made: list[str]
    kv_tokens: int | None
    artifact_bytes: int | None
    process_tree: list[int] | None
    cleanup: CleanupAudit
    #: /dev/shm files new since just before it that no process holds and the artifact does not name (a leak of the
    #: create, judged where the box sees every holder: else ``shm_left_not_judged``)
    shm_left: list[str]


class InspectResults(TypedDict, total=False):
    """``inspect``: what ``vllm snapshot inspect`` printed, its sha256, and every upstream e2e check of it."""

    sha256: str
    #: what ``vllm snapshot inspect`` printed (vLLM's JSON)
    manifest: dict[str, object]
    checks: list[InspectCheck]


class RestoreResults(TypedDict, total=False):
    """A restore (``restore-1``, ``restore-2``, ``restore-after-stop``, ``fresh-box``): the restored server's answers,
    each judged against the ordinary reference, the watch after it and, where the step stops it, its stop."""

    #: a restore run a second time, and why the first did not count
    retried_after: str
    #: after a failed restore: vLLM's ``error.json`` as it wrote it, its reason, CRIU's own reason (vLLM logs it on
    #: stdout), and the outside files that were gone (the artifact was consumed: "not self-contained")
    error_json: dict[str, object] | None
    vllm_reason: str
    criu_reason: list[str]
    consumed: list[str]
    #: what the restored server answered, and each compared with the ordinary engine's
    canary: list[Canary]
    canary_compare: list[CanaryCompare]
    digests: dict[str, Digest]
    digest_compare: DigestCompare
    kv_tokens: int | None
    kv_source: str | None
    kv_ordinary: int | None
    kv_create: int | None
    kv_judgement: KvJudgement
    inspect_changes: dict[str, InspectChange]
    soak: Soak
    #: the request shapes' answers, and each compared with the ordinary engine's
    shape_answers: dict[str, list[Canary]]
    shape_compare: list[ShapeCompare]
    #: the API checks' answers, by request, and each check against the ordinary engine's answers (issue 44)
    api_answers: dict[str, ApiAnswer]
    api_compare: list[ApiCheck]
    #: the fixed request series after the restore and its judgement against the ordinary engine's (issue 44)
    serving_series: ServingSeries
    serving_judgement: ServingJudgement
    #: requests across the boundaries (issue 44 item 3): one sent while the first restore's recovery was held, one
    #: in flight at the graceful stop of ``restore-2``; each judged
    boundary_requests: list[BoundaryRequest]
    boundary_judgements: list[BoundaryJudgement]
    prefix_cache: PrefixCacheProbe
    prefix_cache_judgement: PrefixCacheJudgement
    pids: list[int]
    root_pid: int | None
    listener_first_bound: float | None
    #: the CUDA holders on the GPU again (None: the lane has no GPU)
    gpu_engaged: GpuEngaged | None
    ready_seconds: float | None
    adapter_canary: dict[str, list[Canary]]
    adapter_compare: dict[str, list[CanaryCompare]]
    #: the decode speed; the second set of runs where the first was over the tolerance; the judgement
    decode_speed: DecodeSpeed
    decode_judgement: DecodeJudgement
    decode_retry: DecodeSpeed
    #: ``fresh-box``: the identity of the fresh box the artifact was restored in
    box: str
    #: a restore the step stops (not ``restore-1``: ``restart`` sees its server): alive at the stop, the stop's
    #: audit, and the stop after a failed restore that failed too (the restore's failure stays the step's)
    alive_at_stop: bool
    cleanup: CleanupAudit
    cleanup_error: str


class RestartResults(TypedDict, total=False):
    """``restart``: the lane's box stopped and started, the restored server gone, ``inspect`` unchanged."""

    alive_before_restart: bool
    container_id_before: str
    container_id_after: str
    sha256_before: str | None
    sha256_after: str | None
    inspect_changes: dict[str, InspectChange]
    cleanup: CleanupAudit


class OverlayResults(TypedDict, total=False):
    """``overlay``: every overlaid file, and whether it is the one the engine imported."""

    files: list[OverlayFileResult]
    #: one plain line over every file (``overlay.findings_line``)
    summary: str
    probe_loaded_pids: list[int]


class UnitResults(TypedDict, total=False):
    """``unit``: the user's unit command and its JUnit per test id."""

    unit: UnitRun


class FaultArtifactResults(ShmLeftRecord, total=False):
    """``fault-artifact``: the fault lane's own artifact, and which expectations judge the lane's faults."""

    expect: Behaviour
    #: why these expectations: the option that named them, or what the image's snapshot package implements
    expect_reason: str
    snapshot_timeout_s: float
    #: how ``snapshot_timeout_s`` was chosen: measured, the rule, the deadline (``faults.deadline``)
    recovery_deadline: RecoveryDeadline
    #: the artifact's ``manifest.json`` (vLLM's JSON)
    manifest: dict[str, object]
    outside_files: list[str]


class FaultResults(ShmLeftRecord, total=False):
    """``fault:<id>``: one injected failure, its kind and its kind's record, what it must produce on this lane's
    behaviour, what it did, and the follow-up restore. (``shm_*``: a fresh fault artifact made before it.)"""

    #: its fault's kind (``Fault.kind``: the views read it; evidence before it was recorded has none)
    kind: str
    fault: str
    title: str
    expect: Behaviour
    expect_reason: str
    expected: FaultExpectation
    observed: FaultObservation
    mismatches: list[str]
    #: an ineffective first injection, tried once more
    retried_after: str
    #: seconds per phase of its sequence (``faults.Phases``; a retried injection's summed), and of those the
    #: seconds spent waiting on the engine (its commands, starts and answers)
    phases: dict[str, float]
    phases_engine: dict[str, float]
    #: a new fault artifact made before it, because the previous one was consumed (and by what)
    fresh_artifact: FreshArtifact
    #: what the reset before it put back (``full``, or how many changed entries; ``artifact_files``)
    artifact_reset: str
    #: the faulted restore's connect polls
    watch_polls: int
    #: what the fault's injector did, in its own terms (its kind's record: ``kind`` says which)
    injected: FaultInjected
    cleanup: CleanupAudit
    #: the waits for the captured PIDs to be free, before the fault and after its cleanup
    captured_id_waits: dict[str, CapturedIdWait]
    followup_restore: FollowupRestore
    #: the kill kind (issue 29): what a restore made of a killed create's target (``kinds.kill.judge_killed_create``)
    killed_artifact: KilledArtifact
    #: the weights kind (issue 28)
    weight_tamper: WeightTamper
    #: a refusal's follow-up restore proved once for its group (``faults.group``)
    group_followup: GroupFollowup
    #: a kind refused before any engine starts, run once per image and arm (``faults.once``)
    runs_once: RunsOnce
    #: a fault that waits out the recovery deadline (``HookParams.stall``): the deadline it waited out, as frozen
    #: at the fault artifact's create, and how it was chosen
    recovery_deadline: RecoveryDeadline


#: A step record's results: the type its step's table entry names (``procedure.Step.results``; ``report.parse``
#: reads each record's results as the type of its step).
StepResults = (
    OrdinaryResults
    | VsHeadResults
    | CreateResults
    | InspectResults
    | RestoreResults
    | RestartResults
    | OverlayResults
    | UnitResults
    | FaultArtifactResults
    | FaultResults
)


# ---- evidence records -----------------------------------------------------------------------------------------
class Host(TypedDict, total=False):
    kernel: str
    hostname: str
    python: str
    docker_version: str | None
    machine: str
    cpus: int | None


class Selection(TypedDict):
    args: list[str]
    keyword: str
    markexpr: str
    deselect: list[str]


class Coverage(TypedDict, total=False):
    """What a full qualification of the configuration requires (session) and what the run selected (plans)."""

    runners: list[str]
    arms: list[str]
    overlay: bool
    faults: list[str]
    #: the observation window after each lifecycle restore, seconds
    observe_s: float
    #: the request shapes compared after each restore
    request_shapes: list[str]
    required: list[str]
    selected: list[str]
    deselected: list[str]
    selection: Selection


class ProbeCopy(TypedDict):
    """The session's copy of the probe package in the report directory (``probe_copy``): what every lane bound."""

    source: str
    path: str
    sha256: str
    files: int


class Invocation(TypedDict):
    """The command a run was started with (``vsnap_qual.run.invocation``): pytest's arguments as given (``@file``
    arguments unexpanded), the directory, the Python, and the ``VSNAP_*`` option variables set."""

    args: list[str]
    dir: str
    python: str
    environment: dict[str, str]


class HarnessSource(TypedDict):
    """The harness's own git checkout, when it runs from one: its ``HEAD`` and whether ``vsnap_qual/`` has
    uncommitted changes (None when git could not say)."""

    commit: str
    dirty: bool | None


class ShardLane(TypedDict):
    """One lane of the matrix and the shard that runs it (``run.shards``)."""

    name: str
    column: str
    arm: str
    shard: int


class ShardInfo(TypedDict):
    """A shard's part of the matrix (issue 46): shard ``k`` of ``n``, where that was read, the matrix's id and the
    inputs it was computed from, every lane of the matrix with its shard, the lanes this one runs, how the shards
    were balanced, and what the whole matrix requires (the merge's coverage)."""

    k: int
    n: int
    source: str
    matrix_id: str
    matrix: dict[str, object]
    lanes: list[str]
    matrix_lanes: list[ShardLane]
    balanced_by: str
    required: list[str]


class MergedShard(TypedDict):
    """One shard as the merge found it: ``status`` ``ok``, ``missing``, ``duplicate`` (a second copy, left
    out), ``foreign`` (another matrix: left out), ``interrupted`` (stopped, or killed before its end) or
    ``empty`` (it held no lane); its lanes as the matrix assigns them."""

    k: int
    status: str
    source: str
    run_id: str | None
    matrix_id: str | None
    lanes: list[str]
    host: Host
    message: str


class SetupDifference(TypedDict):
    """A fact of the setup (host kernel, driver, CRIU, GPU) that differs between shards: each value's lanes."""

    fact: str
    values: dict[str, list[str]]


class MergeInfo(TypedDict):
    """``vsnap-qual merge``: the matrix, its shard count and each shard as found; the setups that differ."""

    matrix_id: str
    n: int
    shards: list[MergedShard]
    setups: list[SetupDifference]


class Overlap(TypedDict):
    """Issue 45: how the run's lanes were given to its processes (``--vsnap-overlap``, ``-n``), decided before any
    lane starts (``plugin.lane_scheduling.overlap_plan``). ``scope``: ``lane`` (each lane a worker's: lanes run
    at once) or ``runner`` (each runner's lanes one worker's, one after another); ``at_once``: how many lanes can
    hold an engine at the same time; ``lanes``: the lanes that can run at once (empty when one runs at a time);
    ``shared``: what those lanes share, in words (the machine's CPUs and memory; never a GPU); ``why``: why this
    scope. Which lanes' steps did overlap is read from their step times (``report.assemble``: ``overlapped``)."""

    mode: str
    scope: Literal["lane", "runner"]
    workers: int
    at_once: int
    lanes: list[str]
    shared: str
    why: str


class LanesOverlapped(TypedDict):
    lanes: list[str]
    seconds: float


class RunOverlap(Overlap):
    """The session record's :class:`Overlap` in ``results.json``, with what the run's step times show:
    ``overlapped``, each pair of lanes whose steps ran at the same time, and for how many seconds (a lane's
    lifecycle and faults boxes count as the lane)."""

    overlapped: list[LanesOverlapped]


class SessionRecord(TypedDict):
    kind: Literal["session"]
    time: str
    run_id: str
    harness_version: str
    started: str
    #: every option's value as the run resolved it (``QualConfig.public_options``): as many shapes as options
    options: dict[str, Any]
    #: the preflight's findings as the plugin records them for the workers (``PreflightResult``); not read here
    preflight: NotRequired[dict[str, Any]]
    coverage: NotRequired[Coverage]
    probe: NotRequired[ProbeCopy]
    #: CPU smoke mode: the session's copy of vsnap-qual's CPU smoke platform (what every lane bound)
    smoke: NotRequired[ProbeCopy]
    host: Host
    invocation: NotRequired[Invocation]
    harness_source: NotRequired[HarnessSource]
    #: issue 46: the shard of the matrix this run is; absent for an unsharded run
    shard: NotRequired[ShardInfo]
    #: issue 46: a merge of shards (``vsnap-qual merge``): what each shard brought
    merge: NotRequired[MergeInfo]
    #: issue 45: how the lanes were given to the run's processes, and what lanes running at once shared
    overlap: NotRequired[Overlap]


class Image(TypedDict, total=False):
    ref: str
    id: str
    repo_digests: list[str]
    labels: dict[str, str] | None
    platform: str


class OverlayCheckout(TypedDict, total=False):
    """The overlay's git checkout as the lane found it: ``commit`` is its ``HEAD``, ``ref_commit`` what
    ``--vsnap-overlay-ref`` names, ``dirty`` whether it has uncommitted changes (``changed`` entries of
    ``git status --porcelain``); ``error`` when git could not say."""

    path: str
    ref: str
    commit: str | None
    ref_commit: str | None
    dirty: bool | None
    changed: int
    error: str


class CiBuild(TypedDict, total=False):
    """The CI build the run belongs to, from the CI's own environment (Buildkite, GitHub Actions, GitLab)."""

    provider: str
    build_url: str
    commit: str
    branch: str


#: The lane's GPU as ``nvidia-smi`` names it, the first one it lists (``name``, ``uuid``, ``driver``,
#: ``memory_mib``) and how many it lists (``count``). A map of facts rather than a ``TypedDict``: the lane
#: gathers them as a plain dictionary (``lane.environment.LaneEnvironment.record_environment``).
Gpu = dict[str, str | int | None]


class Environment(TypedDict):
    """One lane's environment (the record without ``kind``): its image, container, versions and GPU. A lane may
    run in more than one container (``purpose``: the lifecycle, the faults), each with its record."""

    time: str
    #: the lane's column (``config.LaneSpec.column``): its model runner, ``+<variant>`` for a variant's lane
    runner: str
    arm: Arm
    lane: NotRequired[str]
    #: the engine-feature variant (``--vsnap-variant``) of the lane; absent in the plain configuration
    variant: NotRequired[str]
    image: Image
    container_id: str
    #: vllm, torch, python, cuda, driver, criu, and what the package probe says (``package_dir``, the snapshot
    #: behaviour it detected); None where the lane could not say
    versions: dict[str, str | None]
    gpu: Gpu | None
    package_dir: str | None
    ports: NotRequired[dict[str, int]]
    environment: NotRequired[dict[str, str]]
    overlaid: NotRequired[bool]
    worker: NotRequired[str]
    purpose: NotRequired[Purpose]
    overlay_checkout: NotRequired[OverlayCheckout]
    ci: NotRequired[CiBuild]


class EnvironmentRecord(Environment):
    """An environment as the evidence store writes it: the lane's environment plus its record kind."""

    kind: Literal["environment"]


class Step(TypedDict):
    """A step record as ``results.json`` carries it (the record without ``kind``)."""

    time: str
    #: the lane's column (``config.LaneSpec.column``): its model runner, ``+<variant>`` for a variant's lane
    runner: str
    arm: Arm
    lane: NotRequired[str]
    #: the engine-feature variant (``--vsnap-variant``) of the lane; absent in the plain configuration
    variant: NotRequired[str]
    purpose: NotRequired[Purpose]
    step: str
    nodeid: str
    outcome: Outcome
    message: str
    argv: list[str] | None
    exit_code: int | None
    started: str
    ended: str
    seconds: float
    engine_seconds: NotRequired[float]
    logs: list[str]
    results: StepResults


class StepRecord(Step):
    """A step as the evidence store writes it: the ``results.json`` step plus its record kind."""

    kind: Literal["step"]


class PlanRecord(TypedDict):
    kind: Literal["plan"]
    time: str
    worker: str
    selected: list[str]
    deselected: list[str]
    selection: Selection


class HarnessError(TypedDict):
    """A collection, setup or teardown error (the record without ``kind``)."""

    time: str
    phase: HarnessPhase
    nodeid: str
    message: str


class HarnessErrorRecord(HarnessError):
    kind: Literal["harness_error"]


class SessionEndRecord(TypedDict):
    kind: Literal["session_end"]
    time: str
    ended: str
    exitstatus: int
    complete: bool
    environment_limitations: NotRequired[list[str]]
    #: what stopped the run before it finished (``KeyboardInterrupt: signal 15``); absent when nothing did
    interrupted: NotRequired[str]
    #: pytest's own outcome counts, as its summary line says them (``{"passed": 78, "not applicable": 6}``)
    pytest_counts: NotRequired[dict[str, int]]


Record = Union[SessionRecord, EnvironmentRecord, StepRecord, PlanRecord, HarnessErrorRecord, SessionEndRecord]  # noqa: UP007
RECORD_TYPES: dict[str, type] = {
    "session": SessionRecord,
    "environment": EnvironmentRecord,
    "step": StepRecord,
    "plan": PlanRecord,
    "harness_error": HarnessErrorRecord,
    "session_end": SessionEndRecord,
}


# ---- results.json ---------------------------------------------------------------------------------------------
class LastStep(TypedDict):
    """The step record last written to the evidence (what a killed run reached)."""

    label: str
    runner: str
    arm: Arm
    step: str
    outcome: Outcome
    ended: str


class RunInfo(TypedDict):
    run_id: str | None
    harness_version: str | None
    started: str | None
    ended: str | None
    exitstatus: int | None
    complete: bool
    #: what stopped the run (Ctrl-C, SIGTERM), from its ``session_end``; absent when nothing did
    interrupted: NotRequired[str]
    #: pytest's own outcome counts (its summary line's), from the ``session_end``; absent when not recorded
    pytest_counts: NotRequired[dict[str, int]]
    #: the command the run was started with and the harness's source commit, from the session record
    invocation: NotRequired[Invocation]
    harness_source: NotRequired[HarnessSource]
    last_step: LastStep | None
    last_record_time: str | None
    #: the session record's options (untyped: see ``SessionRecord.options``)
    options: dict[str, Any]
    probe: ProbeCopy | None
    smoke: NotRequired[ProbeCopy]
    host: Host
    #: issue 46: the shard of the matrix this run was, from its session record
    shard: NotRequired[ShardInfo]
    #: issue 46: the shards this merged run was made of (``vsnap-qual merge``)
    merge: NotRequired[MergeInfo]
    #: issue 45: which lanes could run at once and what they shared (the session record's), and which did
    overlap: NotRequired[RunOverlap]


class Lane(TypedDict):
    runner: str
    arm: str
    #: the lane's environment the views show: its lifecycle container's (else the last one recorded)
    environment: Environment | None
    #: the lane's other containers' environments (its faults container's), in the order they were recorded
    other_environments: NotRequired[list[Environment]]


class CheckItem(TypedDict):
    """One recorded judgement a check sums up: ``digests.v1.head.restore-1``; ``ok`` None when not judged."""

    id: str
    ok: bool | None


class Check(TypedDict):
    """One validation-table row: ``id`` is stable across runs (``canary.single-token``), ``name`` the sentence;
    ``items`` the recorded judgements behind it, by stable id."""

    id: str
    name: str
    items: list[CheckItem]
    ok: bool | None
    result: str
    details: list[str]
    informational: bool
    short: str
    pending: bool
    status: CheckStatus


class SkippedStep(TypedDict):
    step: str
    message: str


class NoSelection(TypedDict):
    """No plan record, so no selection: an empty object."""


class VerdictCoverage(TypedDict):
    known: bool
    runners: list[str]
    arms: list[str]
    overlay: bool
    faults: list[str]
    observe_s: NotRequired[float]
    request_shapes: NotRequired[list[str]]
    selection: Selection | NoSelection
    required: int | None
    passed: list[str]
    failed: list[str]
    skipped: list[SkippedStep]
    #: required steps the target's platform cannot run, by its own words (a runner it does not have): not counted
    not_applicable: NotRequired[list[SkippedStep]]
    not_reached: list[str]
    left_out: list[str]


class Counts(TypedDict):
    passed: int
    failed: int
    skipped: int


KnownState = Literal["known", "expired", "unmatched", "changed"]


class KnownFinding(TypedDict):
    """One entry of a known-findings file (``--vsnap-known-findings``, ``report.known``): a failure already
    recorded upstream. ``id``: ``step:<step>`` (on any lane) or ``check:<check id>``; ``words``: the exact words of
    the failure (a part of its message's first line, or of the check's result); ``link``: where it is recorded;
    ``expires``: the last day (``YYYY-MM-DD``, the run's date) the entry applies; ``title``: the finding in words."""

    id: str
    words: str
    link: str
    expires: str
    title: str


class KnownOutcome(TypedDict):
    """What one known-findings entry did in a run: ``known`` (its failures shown as KNOWN, not failing the
    verdict), ``expired`` (its failures fail), ``unmatched`` (nothing failed under its id) or ``changed`` (its id
    failed in other words: a new failure); ``failures``: the failures it matched or, changed, those of its id;
    ``said``: one line for every view."""

    finding: KnownFinding
    state: KnownState
    failures: list[str]
    said: str


class Verdict(TypedDict):
    status: Status
    headline: str
    complete: bool
    reasons: list[str]
    counts: Counts
    failed: list[str]
    narrowed: bool
    coverage: VerdictCoverage
    coverage_line: str
    harness_errors: list[HarnessError]
    checks: list[Check]
    #: what was qualified, in plain words, from the target's own labels and the run's mode (the report's banner,
    #: summary.md's second line, a JUnit property): a reference engine, a simulated piece, CPU smoke mode
    qualified: NotRequired[list[str]]
    #: the same in one phrase, beside the verdict wherever it is shown (the HTML banner, summary.md's first line,
    #: the JUnit property ``qualified_target``): the engine, as its labels name it, and what is simulated
    target: NotRequired[str]
    #: the known-findings entries the run was judged with (``--vsnap-known-findings``) and what each did
    known: NotRequired[list[KnownOutcome]]
    #: each failure a known finding explains (a step label ``v1/head/create``, or ``check:<id>``) → its link
    known_failures: NotRequired[dict[str, str]]


class EvidenceInfo(TypedDict):
    file: str
    records: int
    malformed_lines: int
    kinds: dict[str, int]
    has_session: bool


class RunEvidence(TypedDict):
    """What the evidence says about a run, assembled: ``results.json`` without its verdict. The verdict is
    judged from it and the views render it (``report.frames``)."""

    run: RunInfo
    runners: list[str]
    arms: list[str]
    lanes: list[Lane]
    steps: list[Step]
    coverage: Coverage
    harness_errors: list[HarnessError]
    evidence: EvidenceInfo


class Results(RunEvidence):
    """``results.json``: the assembled evidence, and the verdict judged from it once."""

    schema: Literal["vsnap-qual/results@1"]
    generated: str
    verdict: Verdict


# ---- the model's own shape (read by the JSON Schema generator and by report.parse) ----------------------------
@dataclass(frozen=True)
class Fields:
    """A ``TypedDict``'s fields: each one's type, which are required, and whether others may be present."""

    types: dict[str, object]  # field -> its annotation (a type, a generic alias, a Literal ...)
    required: frozenset[str]
    open: bool


def is_typeddict(tp: object) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


@functools.cache
def fields_of(tp: type) -> Fields:
    """The fields of the model's ``TypedDict`` ``tp`` (``NotRequired`` unwrapped into ``required``)."""
    return Fields(
        types=get_type_hints(tp, include_extras=False),
        required=frozenset(getattr(tp, "__required_keys__", ())),
        open=tp.__name__ in _OPEN,
    )


#: Partial objects whose producers may add fields over time (step results and their parts, host facts).
_OPEN = {
    "OrdinaryResults",
    "VsHeadResults",
    "CreateResults",
    "InspectResults",
    "RestoreResults",
    "RestartResults",
    "OverlayResults",
    "UnitResults",
    "FaultArtifactResults",
    "FaultResults",
    "CleanupAudit",
    "KvJudgement",
    "Soak",
    "LeftoverProcess",
    "FaultObservation",
    "FollowupRestore",
    "OverlayFileResult",
    "Digest",
    "FiredRecord",
    "KilledArtifact",
    "KilledCanaries",
    "Host",
    "Image",
    "Coverage",
    "OverlayCheckout",
    "CiBuild",
}
