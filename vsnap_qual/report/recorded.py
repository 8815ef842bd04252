"""What a run recorded, looked up the one way every part of the report does: the last record of each step, the
reference arm, an option's value. Reads ``model.RunEvidence`` (``results.json`` is one); judges nothing."""

from __future__ import annotations

from typing import TypedDict

from vsnap_qual import model

#: A step record's place: (runner, arm, step).
StepKey = tuple[str, str, str]


def latest_steps(run: model.RunEvidence) -> dict[StepKey, model.Step]:
    """The last record of each (runner, arm, step), in ``results.json``'s step order: a repeated step counts by
    its last run."""
    return {(step["runner"], step["arm"], step["step"]): step for step in run["steps"]}


def reference_arm(run: model.RunEvidence) -> str:
    """The arm whose ordinary serve is each runner's reference: the image under test (``head``) when it ran."""
    arms = run["arms"]
    return "head" if "head" in arms or not arms else arms[0]


def option_value(run: model.RunEvidence, name: str) -> object:
    """The run's value of option ``name`` (``logprob-tolerance``), however the session record spelled it
    (``vsnap_logprob_tolerance``, ``--vsnap-logprob-tolerance``); None when it recorded none. Options are the
    one untyped part of the session record (``model.SessionRecord.options``): the caller says what it expects."""
    wanted = _option_key(name)
    for key, value in run["run"]["options"].items():
        if _option_key(key) == wanted:
            return value
    return None


def _option_key(name: str) -> str:
    return name.strip().lower().lstrip("-").replace("_", "-").removeprefix("vsnap-")


# ---- what a record's results carry, read from its step's type (``procedure.results_as``) -----------------------
# Each piece is a field some steps' results types declare; a record is read as a piece only where its step's type
# declares every field of it (``procedure.results_as``): the report never knows which steps record what by name.
class Digested(TypedDict, total=False):
    """Parameter digests: the ordinary reference's and each restore's."""

    digests: dict[str, model.Digest]


class DigestCompared(TypedDict, total=False):
    """A recorded comparison of digests with the reference: each restore's, and the base arm's with the head's."""

    digest_compare: model.DigestCompare


class Canaried(TypedDict, total=False):
    """Canaries, as the engine answered them: the ordinary reference's and each restore's."""

    canary: list[model.Canary]


class CanaryCompared(TypedDict, total=False):
    """The canaries' recorded judgement against the reference: each restore's, and the base arm's with the head's."""

    canary_compare: list[model.CanaryCompare]


class Audited(TypedDict, total=False):
    """A cleanup audit: every step that stops engine processes."""

    cleanup: model.CleanupAudit


class Kv(TypedDict, total=False):
    """A KV capacity and where it was read."""

    kv_tokens: int | None


class Ready(TypedDict, total=False):
    """How long a server took to serve (an ordinary start, a restore)."""

    ready_seconds: float | None


class Noticed(TypedDict, total=False):
    """How late an ordinary server's first bind was noticed."""

    notice_latency_s: float | None


class Soaked(TypedDict, total=False):
    """The watch after a restore."""

    soak: model.Soak


class Refused(TypedDict, total=False):
    """vLLM's reason for a command that failed (a serve that died, a create or restore that exited non-zero)."""

    vllm_reason: str


class Consumed(TypedDict, total=False):
    """A restore's outside files that were gone (the artifact is not self-contained)."""

    consumed: list[str]


class OutsideFiles(TypedDict, total=False):
    """What an artifact needs from outside it."""

    outside_files: list[str]
