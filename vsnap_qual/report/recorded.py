"""What a run recorded, looked up the one way every part of the report does: the last record of each step, the
reference arm, an option's value. Reads ``model.RunEvidence`` (``results.json`` is one); judges nothing."""

from __future__ import annotations

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
