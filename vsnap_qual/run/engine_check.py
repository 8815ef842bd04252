"""What an arm's engine is asked before any lane starts, in its own Python (issue 47): whether it holds the model at
the revision when no ``--vsnap-model-cache`` is mounted (the lanes run offline, ``HF_HUB_OFFLINE=1``, so a model the
engine's own Hugging Face cache lacks would fail the first serve minutes in), and whether every overlaid file
compiles in the Python that will import it (the harness's own Python may be older or newer than the engine's).

:data:`SCRIPT` runs with the arm's ``python3`` (a one-shot, network-less container of the image, or the host
runtime's Python) and one JSON argument (:func:`request`); it prints one JSON line, which :func:`problems` turns into
refusals that name the option and the fix. It reads files only: no network, nothing written.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from vsnap_qual.run.preflight_result import PreflightError

#: stdlib only, and Python 3.8's syntax (an engine's Python may be old)
SCRIPT = r"""
import json, os, sys
req = json.loads(sys.argv[1])
out = {"python": sys.version.split()[0]}
model = req.get("model")
if model:
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"), "hub")
    out["hub"] = hub
    if os.path.isabs(model):
        out["local"] = os.path.isfile(os.path.join(model, "config.json"))
    else:
        snaps = os.path.join(hub, "models--" + model.replace("/", "--"), "snapshots")
        out["revisions"] = sorted(os.listdir(snaps)) if os.path.isdir(snaps) else None
        out["complete"] = sorted(
            r for r in (out["revisions"] or []) if os.path.isfile(os.path.join(snaps, r, "config.json")))
errors = []
for path, name in req.get("compile", []):
    try:
        with open(path, "rb") as f:
            compile(f.read(), name, "exec", dont_inherit=True)
    except SyntaxError as e:
        errors.append({"file": name, "line": e.lineno, "offset": e.offset, "msg": e.msg,
                       "text": (e.text or "").strip()})
    except Exception as e:
        errors.append({"file": name, "msg": "cannot be read (%s)" % e})
out["compile"] = errors
print(json.dumps(out))
"""


def request(model: str | None, compile_paths: Sequence[tuple[str, str]] = ()) -> str:
    """The script's argument: the model to look for (None: a ``--vsnap-model-cache`` is mounted, nothing to ask)
    and the files to compile, each (path as the engine's Python sees it, its name in the overlay)."""
    return json.dumps({"model": model, "compile": [list(pair) for pair in compile_paths]})


def parse(stdout: str) -> dict[str, object] | None:
    """The script's JSON line (its last line), or None when it printed none."""
    try:
        data = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return data if isinstance(data, dict) else None


def problems(
    answer: dict[str, object], *, option: str, engine: str, model: str | None, revisions: Sequence[str]
) -> list[str]:
    """What the engine's answer refuses, each naming the option and the fix (empty: nothing)."""
    found: list[str] = []
    python = answer.get("python") or "?"
    errors = answer.get("compile")
    for error in errors if isinstance(errors, list) else []:
        if not isinstance(error, dict):
            continue
        where = f"line {error['line']}" + (f", column {error['offset']}" if error.get("offset") else "") + ": "
        text = f": {error['text']}" if error.get("text") else ""
        found.append(
            f"--vsnap-overlay: {error['file']} does not compile in the engine's own Python {python} ({engine}; "
            f"{where if error.get('line') else ''}{error['msg']}{text}); the engine imports every overlaid file: fix "
            "it or leave it out of the overlay"
        )
    if model:
        hub = answer.get("hub") or "?"
        fix = (
            f"mount a host cache that holds it with --vsnap-model-cache=<HF_HOME> (`hf download {model} --revision "
            f"{revisions[0]}`), or qualify an image that holds it"
        )
        if "local" in answer:
            if not answer["local"]:
                found.append(f"{option}: {engine} has no model directory {model} (no config.json there); {fix}")
        elif answer.get("revisions") is None:
            found.append(
                f"--vsnap-model: {engine} does not hold {model} in its Hugging Face cache ({hub}) and no "
                f"--vsnap-model-cache was given; the lanes run offline (HF_HUB_OFFLINE=1): {fix}"
            )
        else:
            complete = answer.get("complete")
            have = [str(r) for r in complete] if isinstance(complete, list) else []
            for revision in dict.fromkeys(revisions):
                if revision not in have:
                    found.append(
                        f"--vsnap-revision: {engine} holds {model} in {hub} but not at revision {revision} "
                        f"(cached: {', '.join(have) or 'none complete'}) and no --vsnap-model-cache was given; the "
                        f"lanes run offline: give a cached revision, or {fix}"
                    )
    return found


def refuse(stdout: str, *, option: str, engine: str, model: str | None, revisions: Sequence[str]) -> None:
    """Raise :class:`PreflightError` for the engine's answer (``problems``), or for no answer at all."""
    answer = parse(stdout)
    if answer is None:
        raise PreflightError(f"{option}: {engine}: the engine check printed no JSON: {stdout[-300:]!r}")
    found = problems(answer, option=option, engine=engine, model=model, revisions=revisions)
    if found:
        raise PreflightError("; ".join(found))
