"""LoRA adapters of an engine-feature variant (issue 28, vLLM #53888: a wake silently dropped the loaded
adapters): the adapter names an engine serves, read from its ``--lora-modules``, and the judgement of the canaries
asked through each. Pure: no engine, no Docker."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from vsnap_qual import model
from vsnap_qual.checks import Finding, compare_canary
from vsnap_qual.engine.client import CanaryOutput

LORA_MODULES = "--lora-modules"


#: the files of a PEFT adapter directory kept with the evidence (the ones that exist)
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")


def lora_modules(argv: Sequence[str]) -> dict[str, str]:
    """The adapters of every ``--lora-modules`` value in an engine command line, name to path, in order:
    ``name=path`` or vLLM's JSON form ``{"name": ..., "path": ...}``, several after one flag or the flag repeated."""
    values: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg.startswith(LORA_MODULES + "="):
            values.append(arg.split("=", 1)[1])
        elif arg == LORA_MODULES:
            while i < len(argv) and not argv[i].startswith("--"):
                values.append(argv[i])
                i += 1
    return dict(_module(v) for v in values)


def _module(value: str) -> tuple[str, str]:
    text = value.strip()
    if text.startswith("{"):
        try:
            found = json.loads(text)
        except json.JSONDecodeError:
            found = None
        if not isinstance(found, dict) or not found.get("name"):
            raise ValueError(f"{LORA_MODULES} {text!r}: a JSON adapter needs a 'name'")
        return str(found["name"]), str(found.get("path") or "")
    name, _, path = text.partition("=")
    if not name.strip():
        raise ValueError(f"{LORA_MODULES} {text!r}: expected name=path")
    return name.strip(), path.strip()


def compare(
    expected: Mapping[str, Sequence[model.Canary]],
    actual: Mapping[str, Sequence[CanaryOutput]],
    tolerance: float,
) -> dict[str, list[model.CanaryCompare]]:
    """Each adapter's canaries against the ordinary engine's through the same adapter."""
    out: dict[str, list[model.CanaryCompare]] = {}
    for name, reference in expected.items():
        got = list(actual.get(name) or [])
        if len(got) != len(reference):
            out[name] = []  # not every canary answered: nothing to judge, said by the finding
            continue
        out[name] = [compare_canary(CanaryOutput.of(e), a, tolerance) for e, a in zip(reference, got, strict=True)]
    return out


def effect_findings(
    base: Sequence[CanaryOutput],
    adapters: Mapping[str, Sequence[CanaryOutput]],
    tolerance: float,
) -> list[Finding]:
    """On the ordinary engine each adapter must answer at least one canary otherwise than the base model: an
    adapter that changes nothing could be dropped by a restore without any check noticing (an ineffective check)."""
    findings = []
    for name, answers in adapters.items():
        same = all(compare_canary(b, a, tolerance)["ok"] for b, a in zip(base, answers, strict=True))
        findings.append(
            Finding(
                "adapter takes effect",
                not same,
                f"adapter {name!r} answers every one of the {len(answers)} canaries as the base model does: a "
                "restore that dropped it could not be told from one that kept it; use an adapter that changes the "
                "answers (a larger scale or rank)",
            )
        )
    return findings


def restore_findings(compared: Mapping[str, Sequence[model.CanaryCompare]], step: str) -> list[Finding]:
    """After a restore every adapter answers its canaries as the ordinary engine did through it."""
    findings = []
    for name, group in compared.items():
        bad = [c for c in group if not c["ok"]]
        if not group:
            detail = f"{step}: adapter {name!r} did not answer every canary"
        else:
            first = bad[0] if bad else None
            said = f" (first: {first['prompt']!r})" if first else ""
            detail = (
                f"{step}: adapter {name!r}: {len(bad)} of {len(group)} canaries differ from the ordinary engine's "
                f"through the same adapter{said}: the restore lost or changed the adapter (as in vLLM #53888)"
            )
        findings.append(Finding("adapter canaries", bool(group) and not bad, detail))
    return findings


def arms_findings(compared: Mapping[str, Sequence[model.CanaryCompare]]) -> list[Finding]:
    """The base image's ordinary engine answers through every adapter as the image under test's does."""
    findings = []
    for name, group in compared.items():
        bad = [c for c in group if not c["ok"]]
        said = f" (first: {bad[0]['prompt']!r})" if bad else ""
        detail = f"the image under test and the base image disagree through adapter {name!r}: " + (
            f"{len(bad)} of {len(group)} canaries differ{said}" if group else "not every canary answered"
        )
        findings.append(Finding("adapter canaries", bool(group) and not bad, detail))
    return findings
