"""What Docker accepts as an image reference (distribution's reference grammar), written part by part so that a
refusal can say which part is wrong and how to write it: the Docker runtime's rule for ``--vsnap-image`` and
``--vsnap-base-image`` (``DockerRuntime.engine_problem``), checked when the options are read. Pure: no Docker."""

from __future__ import annotations

import re

# A container image reference as Docker reads it (distribution's reference grammar):
#   reference := name [":" tag] ["@" digest];  name := [domain "/"] path-component ["/" path-component]*
# Written here part by part, so a refusal can say which part is wrong and how to write it.
_PATH_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = re.compile(rf"^(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}$")
_NAME_MAX = 255
_REFERENCE_EXAMPLE = (
    "e.g. vllm/vllm-openai:nightly, registry.example.com:5000/team/vllm:v1 or vllm/vllm-openai@sha256:<64 hex>"
)


def image_reference_problem(value: str) -> str | None:
    """What makes ``value`` no image reference Docker accepts, with how to write it; None when it is one."""
    if any(c.isspace() for c in value):
        return "an image reference has no spaces"
    rest, at, digest = value.partition("@")
    if at:
        if not _DIGEST.match(digest):
            return f"the digest after @ ({digest!r}) must be ALGORITHM:HEX, e.g. sha256:<64 hex digits>"
        if digest.startswith("sha256:") and len(digest) != len("sha256:") + 64:
            return f"a sha256 digest has 64 hex digits, {digest!r} has {len(digest) - len('sha256:')}"
    slash, colon = rest.rfind("/"), rest.rfind(":")
    name, tag = (rest[:colon], rest[colon + 1 :]) if colon > slash else (rest, None)
    if tag is not None and not _TAG.match(tag):
        return (
            f"the tag after the last ':' ({tag!r}) must be 1 to 128 letters, digits, '_', '.' or '-', not starting "
            "with '.' or '-'"
        )
    if not name:
        return "the repository name is empty"
    if len(name) > _NAME_MAX:
        return f"the repository name is {len(name)} characters long; Docker takes at most {_NAME_MAX}"
    parts = name.split("/")
    first = parts[0]
    if len(parts) > 1 and ("." in first or ":" in first or first == "localhost" or first.lower() != first):
        if not _DOMAIN.match(first):
            return f"the registry {first!r} is no host name (letters, digits, '-', '.'; an optional :PORT)"
        parts = parts[1:]
    for part in parts:
        if not part:
            return "the repository path has an empty component (a leading, trailing or doubled '/')"
        if not _PATH_COMPONENT.match(part):
            if ":" in part:
                return f"{part!r}: only the registry may carry a :PORT and only the end a :TAG"
            if part.lower() != part and _PATH_COMPONENT.match(part.lower()):
                return f"the repository path must be lowercase ({part!r}); write {value.replace(part, part.lower())!r}"
            return (
                f"the path component {part!r} must be lowercase letters and digits, separated by one '.', one or "
                "two '_' or any number of '-', not at either end"
            )
    return None


def image_reference_error(value: str) -> str | None:
    """The refusal of a malformed ``--vsnap-image``/``--vsnap-base-image`` with the Docker runtime, with an example
    and, for a path, the host runtime's option; None for a reference Docker accepts."""
    problem = image_reference_problem(value)
    if problem is None:
        return None
    hint = ""
    if value.startswith(("/", "./", "../", "~")):
        hint = "; a Python on this host is --vsnap-python with --vsnap-runtime=host"
    return f"{value!r} is not an image reference: {problem} ({_REFERENCE_EXAMPLE}){hint}"
