"""Every ``--vsnap-*`` option, its parser, its ini twin and its ``VSNAP_*`` environment fallback.

Precedence is resolved in one place (:func:`resolve`): command line > environment > ini > default. Parse
functions raise :class:`argparse.ArgumentTypeError` with a message that says what a good value looks like;
:func:`resolve` turns that into a :class:`pytest.UsageError` naming the option.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import re
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomllib's origin, tomli (a dependency there)
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

from vsnap_qual import runtimes
from vsnap_qual.config import ParsedOptions, Variant
from vsnap_qual.contract import DEFAULT_TIMEOUTS, RUNNERS
from vsnap_qual.model import KnownFinding
from vsnap_qual.runtimes import privileges

HEX40 = re.compile(r"^[0-9a-f]{40}$")
GPU_UUID = re.compile(r"^GPU-[0-9a-fA-F-]{8,}$")


def parse_str(value: str) -> str:
    value = value.strip()
    if not value:
        raise argparse.ArgumentTypeError("must not be empty")
    return value


def parse_image(value: str) -> str:
    value = parse_str(value)
    if any(c.isspace() for c in value):
        raise argparse.ArgumentTypeError(f"{value!r} is not an image reference (e.g. vllm/vllm-openai:nightly)")
    return value


def parse_revision(value: str) -> str:
    value = value.strip()
    if not HEX40.match(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an immutable revision: give the 40-character lowercase hex commit of the model "
            "repository (vllm snapshot create requires it)"
        )
    return value


def parse_optional_revision(value: str) -> str | None:
    return None if not value.strip() else parse_revision(value)


def parse_dtype(value: str) -> str:
    allowed = ("auto", "float16", "half", "bfloat16", "float", "float32")
    value = value.strip()
    if value not in allowed:
        raise argparse.ArgumentTypeError(f"{value!r} is not a vLLM dtype; use one of {', '.join(allowed)}")
    return value


def parse_positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"{number} must be positive")
    return number


#: the smallest --vsnap-max-model-len accepted: two of vLLM's default 16-token KV blocks (docs/design.md §6). The
#: check that matters is run.configure.build_config's: the canary tokens and the longest canary prompt must fit.
MIN_MAX_MODEL_LEN = 32


def parse_max_model_len(value: str) -> int:
    number = parse_positive_int(value)
    if number < MIN_MAX_MODEL_LEN:
        raise argparse.ArgumentTypeError(
            f"{number} is below the minimum {MIN_MAX_MODEL_LEN}: the canaries (vLLM's canary prompt, then each prompt "
            f"for --vsnap-canary-tokens tokens) and the long request shape need a context of at least that; give "
            f"{MIN_MAX_MODEL_LEN} or more (the default is 512)"
        )
    return number


def parse_shapes(value: str) -> tuple[str, ...]:
    """``repeated,seeded,concurrent,long`` (any of them, in any order) or ``none``."""
    from vsnap_qual.contract import REQUEST_SHAPES as SHAPES

    names = [v.strip() for v in value.split(",") if v.strip()]
    if names == ["none"]:
        return ()
    unknown = [n for n in names if n not in SHAPES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown request shape(s) {', '.join(unknown) or '(none given)'}: choose from {', '.join(SHAPES)}, "
            "comma-separated, or none"
        )
    return tuple(dict.fromkeys(names))


def parse_port_base(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number") from None
    if number != 0 and not 1024 <= number <= 65000:
        raise argparse.ArgumentTypeError(f"{number} must be 0 (pick free ports) or within 1024..65000")
    return number


def parse_fraction(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not 0.0 < number <= 1.0:
        raise argparse.ArgumentTypeError(f"{number} must be within (0, 1]")
    return number


def parse_tolerance(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not math.isfinite(number) or number < 0:
        raise argparse.ArgumentTypeError(f"{number} must be a finite number >= 0")
    return number


def parse_open_fraction(value: str) -> float:
    """A fraction strictly between 0 and 1 (a relative tolerance); a percentage given by mistake is named."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not math.isfinite(number) or not 0.0 < number < 1.0:
        hint = ""
        if 1.0 <= number < 100.0:
            hint = f"; {number:g} reads as {100 * number:g} %: for {number:g} % write {number / 100:g}"
        raise argparse.ArgumentTypeError(f"{number:g} must be a fraction within (0, 1), e.g. 0.02 for 2 %{hint}")
    return number


def parse_count(value: str) -> int:
    """A whole number >= 0."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"{number} must be >= 0")
    return number


def parse_slowdown(value: str) -> float:
    """A ratio > 1 (how many times slower is allowed); a fraction given by mistake is named."""
    number = parse_tolerance(value)
    if number <= 1.0:
        hint = f"; for {number * 100:g} % slower write {1 + number:g}" if 0 < number < 1 else ""
        raise argparse.ArgumentTypeError(f"{number:g} must be a ratio > 1, e.g. 1.75 (1.75x slower){hint}")
    return number


def parse_seed(value: str) -> int | None:
    """``random`` (None: drawn from the run's id, recorded with each draw) or a whole number >= 0 (a replay)."""
    if value.strip().lower() == "random":
        return None
    if not value.strip().removeprefix("-").isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is neither 'random' nor a whole number")
    return parse_count(value)


def parse_seconds(value: str) -> float:
    number = parse_tolerance(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"{number} must be > 0 seconds")
    return number


def parse_shard_option(value: str) -> tuple[int, int] | None:
    """``K/N``: this shard's number (from 1) and the shard count (issue 46); empty: none given."""
    from vsnap_qual.run.shards import parse_shard

    if not value.strip():
        return None
    try:
        return parse_shard(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_optional_count(value: str) -> int | None:
    return None if not value.strip() else parse_positive_int(value)


def parse_results_file(value: str) -> Path | None:
    """A previous run's ``results.json`` (or its report directory); empty: none."""
    if not value.strip():
        return None
    path = Path(value).expanduser()
    if path.is_dir():
        path = path / "results.json"
    if not path.is_file():
        raise argparse.ArgumentTypeError(
            f"{value!r} is no results.json of a finished run (nor a directory holding one): give a finished run's "
            "results.json or its report directory"
        )
    return path


def parse_plan_history(value: str) -> Path | None:
    """Where the plan line's estimate comes from: a previous run's ``results.json`` (or ``.gz``, or its report
    directory), or a directory of kept runs (``vsnap-qual history``'s); empty: none."""
    if not value.strip():
        return None
    path = Path(value).expanduser()
    if not path.exists():
        raise argparse.ArgumentTypeError(
            f"{value!r} does not exist: give a previous run's results.json or a directory of kept runs "
            "(`make qualify` keeps reports/history; create an empty one for a first run), or leave it empty"
        )
    return path


def parse_runners(value: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip().lower() for n in value.split(",") if n.strip()))
    if not names:
        raise argparse.ArgumentTypeError("name at least one runner: v1, v2 or v1,v2")
    unknown = [n for n in names if n not in RUNNERS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown runner {', '.join(unknown)}; runners are v1 (VLLM_USE_V2_MODEL_RUNNER=0) and v2 (=1)"
        )
    return names


def parse_gpus(value: str) -> str:
    """``auto``, ``all``, ``none``, or GPU UUIDs (comma-separated: runner lanes take them in turn; see gpus.py)."""
    value = value.strip()
    if value in ("auto", "all", "none"):
        return value
    uuids = [u.strip() for u in value.split(",") if u.strip()]
    bad = [u for u in uuids if not GPU_UUID.match(u)]
    if not uuids or bad:
        raise argparse.ArgumentTypeError(
            f"{value!r}: use 'auto' (one GPU per runner lane when the host has GPUs, else none), 'all' (every lane "
            "all GPUs), 'none', or GPU UUIDs from `nvidia-smi -L` (GPU-…, comma-separated: one per runner lane)"
        )
    if len(set(uuids)) != len(uuids):
        raise argparse.ArgumentTypeError(f"{value!r} names a GPU twice; name each GPU once")
    return ",".join(uuids)


def parse_privileges(value: str) -> str:
    value = value.strip()
    if value not in privileges.MODES:
        raise argparse.ArgumentTypeError(
            f"{value!r}: use " + "; ".join(f"'{k}' ({v})" for k, v in privileges.MODES.items())
        )
    return value


def parse_pull(value: str) -> str:
    from vsnap_qual.runtimes.pull import POLICIES

    value = value.strip()
    if value not in POLICIES:
        raise argparse.ArgumentTypeError(f"{value!r}: use " + "; ".join(f"'{k}' ({v})" for k, v in POLICIES.items()))
    return value


#: ``--vsnap-fault-runners``: where the fault kinds refused before any engine starts run (``faults/once.py``)
FAULT_RUNNERS: dict[str, str] = {
    "once": "on one runner per image and arm, the first the selection gives them",
    "every": "on every runner's lanes, as every other kind",
}


def parse_fault_runners(value: str) -> str:
    value = value.strip()
    if value not in FAULT_RUNNERS:
        raise argparse.ArgumentTypeError(
            f"{value!r}: use " + "; ".join(f"'{k}' ({v})" for k, v in FAULT_RUNNERS.items())
        )
    return value


#: ``--vsnap-overlap``'s values and what each does (issue 45)
OVERLAP_MODES = {
    "lanes": "each lane (runner x arm, variant) on an xdist worker of its own, so that lanes holding no GPU run at "
    "once under -n; the base arm takes the head arm's answers as they are handed on",
    "off": "each runner's lanes on one worker, one after another (as before issue 45)",
}


def parse_overlap(value: str) -> str:
    value = value.strip()
    if value not in OVERLAP_MODES:
        raise argparse.ArgumentTypeError(
            f"{value!r}: use " + "; ".join(f"'{k}' ({v})" for k, v in OVERLAP_MODES.items())
        )
    return value


def parse_expect(value: str) -> str:
    value = value.strip()
    if value not in ("head", "base", "auto"):
        raise argparse.ArgumentTypeError(
            f"{value!r}: use 'head' (private canary before HTTP), 'base', or 'auto' (from the image's snapshot package)"
        )
    return value


def parse_timeouts(value: str) -> dict[str, float]:
    """``serve=600,create=1800`` → merged over the defaults."""
    timeouts = dict(DEFAULT_TIMEOUTS)
    for part in (p.strip() for p in value.split(",") if p.strip()):
        name, sep, seconds = part.partition("=")
        if not sep or name not in DEFAULT_TIMEOUTS:
            raise argparse.ArgumentTypeError(
                f"{part!r}: write NAME=SECONDS with NAME one of {', '.join(DEFAULT_TIMEOUTS)}"
            )
        try:
            timeouts[name] = parse_seconds(seconds)
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"{name}={seconds.strip()}: {exc}") from None
    return timeouts


# Every flag the harness itself puts on an engine command line (config.QualConfig.engine_argv, vllm serve's and
# vllm snapshot restore's --host/--port, create's --snapshot-dir) and the option that sets it; a test checks this
# against the argv the harness builds. --model: the model is the positional argument (--vsnap-model).
HARNESS_FLAGS: dict[str, str] = {
    "--model": "--vsnap-model",
    "--revision": "--vsnap-revision",
    "--tokenizer-revision": "--vsnap-tokenizer-revision",
    "--dtype": "--vsnap-dtype",
    "--max-model-len": "--vsnap-max-model-len",
    "--gpu-memory-utilization": "--vsnap-gpu-memory-utilization",
    "--worker-extension-cls": "",  # the harness's digest probe
    "--host": "",  # 127.0.0.1: the harness connects there
    "--port": "--vsnap-port-base",
    "--snapshot-dir": "",  # the lane's artifact path
}
# Real vLLM flags that are prefixes of a harness flag (argparse takes an exact name over an abbreviation).
_NOT_ABBREVIATIONS = frozenset({"--tokenizer", "--model", "--max-model"})


def harness_flag(arg: str) -> str | None:
    """The harness flag ``arg`` sets, exactly or as an abbreviation vLLM's parser would accept, else None."""
    if not arg.startswith("--"):
        return None
    name = arg.split("=", 1)[0]
    if name in HARNESS_FLAGS:
        return name
    if len(name) < 5 or name in _NOT_ABBREVIATIONS:
        return None
    matches = [flag for flag in HARNESS_FLAGS if flag.startswith(name)]
    return matches[0] if len(matches) == 1 else None


def parse_engine_args(value: str, option: str = "--vsnap-engine-args") -> tuple[str, ...]:
    try:
        args = tuple(shlex.split(value))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"cannot split {value!r}: {exc}") from None
    clashes = []
    for arg in args:
        flag = harness_flag(arg)
        if flag is None:
            continue
        owner = HARNESS_FLAGS[flag]
        how = f"set it with {owner}" if owner else "the harness chooses it"
        shown = arg if arg.split("=", 1)[0] == flag else f"{arg} (abbreviates {flag})"
        clashes.append(f"{shown} is set by the harness on every engine command ({how})")
    if clashes:
        raise argparse.ArgumentTypeError("; ".join(clashes) + f"; remove it from {option}")
    return args


VARIANT_NAME = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")
#: names a variant cannot take: the lane names' other parts (``v1-head-<variant>``)
_RESERVED_VARIANT_NAMES = frozenset({*RUNNERS, "head", "base", "plain"})


def parse_variants(value: str) -> tuple[Variant, ...]:
    """``NAME=ARGS`` per line (the command line repeats ``--vsnap-variant``; the environment and the ini file
    put one per line): an engine-feature variant's name and its engine arguments, shell-quoted."""
    variants: dict[str, Variant] = {}
    for line in (part.strip() for part in value.splitlines()):
        if not line:
            continue
        name, sep, text = line.partition("=")
        name = name.strip()
        if not sep or not text.strip():
            raise argparse.ArgumentTypeError(
                f"{line!r} is not NAME='ENGINE ARGS' (e.g. --vsnap-variant nopc='--no-enable-prefix-caching')"
            )
        if not VARIANT_NAME.match(name) or len(name) > 24 or name in _RESERVED_VARIANT_NAMES:
            raise argparse.ArgumentTypeError(
                f"variant name {name!r}: use lower-case letters, digits and single dashes, at most 24 characters, "
                f"starting with a letter, and none of {', '.join(sorted(_RESERVED_VARIANT_NAMES))} "
                "(it becomes part of the lane's name: v1-head-<name>)"
            )
        if name in variants:
            raise argparse.ArgumentTypeError(f"variant {name!r} is given twice: give each variant one name")
        variants[name] = Variant(name, parse_engine_args(text.strip(), f"--vsnap-variant {name}"))
    return tuple(variants.values())


def parse_existing_dir(value: str) -> Path:
    path = Path(value).expanduser()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{value!r} is not an existing directory: give an existing directory")
    return path.resolve()


def parse_optional_dir(value: str) -> Path | None:
    return None if not value.strip() else parse_existing_dir(value)


def parse_path(value: str) -> Path:
    return Path(parse_str(value)).expanduser()


def parse_runtime(value: str) -> str:
    """A registered runtime (``vsnap_qual.runtimes``): the built-in ``docker`` and ``host``, or one a conftest
    registered before the options are read."""
    value = value.strip()
    if value not in runtimes.names():
        extra = runtimes.registered()
        raise argparse.ArgumentTypeError(
            f"{value!r}: use 'docker' (each lane a container of --vsnap-image) or 'host' (each lane host processes "
            "of --vsnap-python, no Docker)" + (f", or a registered runtime: {', '.join(extra)}" if extra else "")
        )
    return value


def parse_optional_python(value: str) -> Path | None:
    """An executable Python interpreter (kept as given, not resolved: a venv's python is a symlink)."""
    if not value.strip():
        return None
    path = Path(value).expanduser()
    if not path.is_file() or not os.access(path, os.X_OK):
        raise argparse.ArgumentTypeError(f"{value!r} is not an executable file (a Python interpreter)")
    return path.absolute()


def parse_optional_path(value: str) -> Path | None:
    return None if not value.strip() else parse_path(value)


def parse_file_list(value: str) -> tuple[str, ...]:
    files = tuple(dict.fromkeys(f.strip() for f in value.split(",") if f.strip()))
    bad = [f for f in files if not (f.startswith("vllm/") and f.endswith(".py")) or ".." in f.split("/")]
    if bad:
        raise argparse.ArgumentTypeError(
            f"{', '.join(bad)}: overlay files are paths relative to the vLLM checkout, under vllm/, ending .py"
        )
    return files


def parse_prompts(value: str) -> tuple[str, ...]:
    """A file of prompts: a JSON list of strings, or one prompt per non-empty line. A leading UTF-8 byte-order
    mark (as some editors write) is dropped; text starting with ``[`` or ``{`` must be a JSON list."""
    path = Path(value).expanduser()
    try:
        text = path.read_text(encoding="utf-8-sig")  # -sig: a leading BOM is not part of the first prompt
    except OSError as exc:
        raise argparse.ArgumentTypeError(
            f"cannot read prompts file {value!r}: {exc.strerror}; give a file of prompts (a JSON list of strings, or "
            "one prompt per line)"
        ) from None
    except UnicodeDecodeError:
        raise argparse.ArgumentTypeError(f"prompts file {value!r} is not UTF-8 text: save it as UTF-8") from None
    prompts: list[Any]
    if text.lstrip().startswith(("[", "{")):
        try:
            loaded = json.loads(text)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"prompts file {value!r} is not valid JSON: {exc}") from None
        if not isinstance(loaded, list):
            kind = "an object" if isinstance(loaded, dict) else "a single value"
            raise argparse.ArgumentTypeError(
                f"prompts file {value!r} holds {kind}, not a JSON list: write "
                '["first prompt", "second prompt"], or one prompt per line'
            )
        prompts = loaded
    else:
        prompts = [line for line in text.splitlines() if line.strip()]
    if not prompts or not all(isinstance(p, str) and p.strip() for p in prompts):
        raise argparse.ArgumentTypeError(
            f"prompts file {value!r} must hold a non-empty JSON list of non-empty strings or one prompt per line"
        )
    return tuple(prompts)


def parse_known_findings(value: str) -> tuple[KnownFinding, ...] | None:
    """A known-findings file (``report.known``), read and checked whole: its entries (empty value: none)."""
    if not value.strip():
        return None
    from vsnap_qual.report.known import KnownFindingsError, read_file

    try:
        return read_file(Path(value.strip()).expanduser())
    except KnownFindingsError as exc:
        raise argparse.ArgumentTypeError(
            f"{exc}; give a known-findings TOML file (id, words, link, expires: docs/known-findings.md)"
        ) from None


def parse_names(value: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    bad = [n for n in names if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", n)]
    if bad:
        raise argparse.ArgumentTypeError(
            f"{', '.join(bad)}: give environment variable names (letters, digits and _, not starting with a digit), "
            "comma-separated"
        )
    return names


def parse_env(value: str) -> dict[str, str]:
    """``NAME=VALUE,NAME2=VALUE2``: extra environment for every exec of a lane (create and restore alike)."""
    env: dict[str, str] = {}
    for part in (p.strip() for p in value.split(",") if p.strip()):
        name, sep, val = part.partition("=")
        if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise argparse.ArgumentTypeError(f"{part!r}: write NAME=VALUE pairs separated by commas")
        if name == "VLLM_USE_V2_MODEL_RUNNER":
            raise argparse.ArgumentTypeError("VLLM_USE_V2_MODEL_RUNNER is set per runner; use --vsnap-runners")
        env[name] = val
    return env


def parse_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"{value!r} is not a boolean (true/false)")


@dataclass(frozen=True)
class OptionSpec:
    """One option: ``--vsnap-<name>``, ini ``vsnap_<name_>``, env ``VSNAP_<NAME_>``."""

    name: str
    parse: Callable[[str], Any]
    default: str
    help: str
    flag: bool = False
    #: the command line may give it more than once (each is one line of the value; env and ini: one per line)
    repeat: bool = False

    @property
    def cli(self) -> str:
        return f"--vsnap-{self.name}"

    @property
    def no_cli(self) -> str:
        """A flag's off switch (``--no-vsnap-annotate``): it beats ``VSNAP_ANNOTATE=1``, the ini file and an
        ``@file`` profile given before it, as the command line beats them all."""
        return f"--no-vsnap-{self.name}"

    @property
    def no_help(self) -> str:
        return f"turn {self.cli} off, whatever {self.env}, the ini file or an @file profile before it says"

    def given_as(self, value: object) -> str:
        """How the command line gave this option's ``value``: a flag as itself or as its off switch."""
        if self.flag:
            return self.no_cli if str(value) == "false" else self.cli
        return f"{self.cli}={value}"

    @property
    def dest(self) -> str:
        return "vsnap_" + self.name.replace("-", "_")

    @property
    def env(self) -> str:
        return "VSNAP_" + self.name.replace("-", "_").upper()

    def help_line(self, *, ini: bool = True) -> str:
        """The option's help: what it does, its variable (and ini key) and its default."""
        where = f"env {self.env}, ini {self.dest}" if ini else f"env {self.env}"
        return f"{self.help} [{where}; default: {self.default or 'unset'}]"


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("image", parse_image, "", "engine image under test (e.g. vllm/vllm-openai:nightly-<sha>)"),
    OptionSpec("base-image", parse_image, "", "unmodified base image: a second comparison arm, no overlay"),
    OptionSpec("overlay", parse_optional_dir, "", "vLLM checkout whose changed vllm/**.py files are overlaid"),
    OptionSpec("overlay-ref", parse_str, "HEAD", "git base ref of the overlay checkout: files changed since it"),
    OptionSpec("overlay-files", parse_file_list, "", "explicit overlay files (comma-separated, under vllm/)"),
    OptionSpec(
        "unit-command",
        parse_str,
        "",
        "a test command run from the overlay checkout in each arm's box, writing JUnit to $VSNAP_JUNIT; "
        "failures new on the head arm fail",
    ),
    OptionSpec("model", parse_str, "", "model id as on the Hugging Face hub (e.g. Qwen/Qwen3-0.6B)"),
    OptionSpec("revision", parse_revision, "", "40-hex model revision (snapshot create requires one)"),
    OptionSpec("tokenizer-revision", parse_optional_revision, "", "40-hex tokenizer revision (default: revision)"),
    OptionSpec("dtype", parse_dtype, "float16", "--dtype for serve and create"),
    OptionSpec("max-model-len", parse_max_model_len, "512", "--max-model-len for serve and create"),
    OptionSpec("gpu-memory-utilization", parse_fraction, "0.5", "--gpu-memory-utilization"),
    OptionSpec("engine-args", parse_engine_args, "", "extra engine arguments, shell-quoted"),
    OptionSpec("env", parse_env, "", "extra engine environment NAME=VALUE,... (same at create and restore)"),
    OptionSpec(
        "variant",
        parse_variants,
        "",
        "an engine-feature variant, NAME='ENGINE ARGS' (repeatable; one per line in env and ini): lanes of its own "
        "per runner and arm, each with its own ordinary reference, lifecycle and faults",
        repeat=True,
    ),
    OptionSpec("runners", parse_runners, "v1,v2", "model runners to qualify: v1 and/or v2"),
    OptionSpec("prompts", parse_prompts, "", "file of canary prompts (JSON list or one per line)"),
    OptionSpec("logprob-tolerance", parse_tolerance, "0.001", "max |Δ logprob| vs the ordinary reference"),
    OptionSpec("model-cache", parse_optional_dir, "", "host HF cache (HF_HOME or its hub/), mounted read-only"),
    OptionSpec(
        "gpus",
        parse_gpus,
        "auto",
        "GPUs: auto (one per runner lane), all (every lane all), none, or GPU UUIDs (one per runner lane)",
    ),
    OptionSpec(
        "privileges",
        parse_privileges,
        "privileged",
        "privileged, all-caps, all-caps-own-pid, host-namespaces or isolated",
    ),
    OptionSpec("runtime", parse_runtime, runtimes.DEFAULT, "where lanes run: docker (containers) or host (processes)"),
    OptionSpec(
        "pull",
        parse_pull,
        "auto",
        "when preflight pulls an image: auto (an absent one, and a tag from a registry: it may have moved; never a "
        "digest or a local build), missing, always or never",
    ),
    OptionSpec("python", parse_optional_python, "", "host runtime: Python whose vllm is qualified (default: this one)"),
    OptionSpec("base-python", parse_optional_python, "", "host runtime: the base arm's Python (unmodified vllm)"),
    OptionSpec("host-root", parse_optional_path, "", "host runtime: lane directories (/var/tmp/vsnap-lanes)"),
    OptionSpec("port-base", parse_port_base, "0", "first host port to use; 0 picks free ports"),
    OptionSpec("timeouts", parse_timeouts, "", "per-step timeouts, e.g. serve=600,create=1800,restore=900,http=120"),
    OptionSpec("report-dir", parse_optional_path, "", "report directory (default reports/<run id>)"),
    OptionSpec(
        "expect",
        parse_expect,
        "auto",
        "behaviour expected of --vsnap-image: auto (from its snapshot package), head or base",
    ),
    OptionSpec("base-expect", parse_expect, "auto", "behaviour expected of --vsnap-base-image: auto, head or base"),
    OptionSpec(
        "fault-timeout",
        parse_seconds,
        "300",
        "upper bound of the fault artifact's VLLM_SNAPSHOT_TIMEOUT_S (derived from the lane's measured create and "
        "restores)",
    ),
    OptionSpec(
        "fault-runners",
        parse_fault_runners,
        "once",
        "where the fault kinds refused before any engine starts (identity, pid, manifest) run: once (one runner per "
        "image and arm) or every (every runner)",
    ),
    OptionSpec("probe-dir", parse_optional_dir, "", "probe package to mount instead of the built-in one"),
    OptionSpec("secrets", parse_names, "", "extra environment variable names whose values are redacted"),
    OptionSpec("doctor", parse_bool, "false", "run the doctor checks before the suites", flag=True),
    OptionSpec("annotate", parse_bool, "false", "run buildkite-agent annotate with summary.md", flag=True),
    OptionSpec(
        "cpu-smoke",
        parse_bool,
        "false",
        "CPU smoke mode: vLLM's CPU build with sleep mode declared on its CPU platform (never a GPU qualification)",
        flag=True,
    ),
    # issue 13: what a broken snapshot really does (KV after restore, liveness, strict cleanup, multi-token canaries)
    OptionSpec("kv-tolerance", parse_open_fraction, "0.02", "max |snapshot - ordinary| KV capacity, as a fraction"),
    OptionSpec("soak", parse_tolerance, "3", "seconds of /health + canary requests after each restore (0: none)"),
    # issue 28: a restore that answers right but slowly
    OptionSpec(
        "decode-runs",
        parse_count,
        "5",
        "timed runs of a fixed 64-token generation on the ordinary engine and after each restore (0: not measured)",
    ),
    OptionSpec(
        "decode-tolerance",
        parse_slowdown,
        "1.75",
        "the slowdown allowed after a restore: ordinary median tokens/s over the restored median (1.75 fails a 2x)",
    ),
    # issue 25: what a restored server meets in real serving
    OptionSpec(
        "observe",
        parse_tolerance,
        "30",
        "seconds each restored server must stay alive and healthy after vllm snapshot restore exits (its checks "
        "run inside the window; 0: the soak only)",
    ),
    # issue 45: time to a verdict
    OptionSpec(
        "overlap",
        parse_overlap,
        "lanes",
        "lanes: with -n, lanes that hold no GPU run at once, each on a worker of its own (the run records which "
        "overlapped and that they shared the machine); off: each runner's lanes one after another on one worker",
    ),
    OptionSpec("canary-prompts", parse_positive_int, "5", "how many canary prompts (of --vsnap-prompts)"),
    OptionSpec(
        "request-shapes",
        parse_shapes,
        "repeated,seeded,concurrent,long",
        "request shapes recorded on the ordinary reference and compared after every restore: repeated, seeded, "
        "concurrent, long (or none)",
    ),
    OptionSpec("concurrent-requests", parse_positive_int, "8", "requests in flight at once in the concurrent shape"),
    OptionSpec("canary-tokens", parse_positive_int, "16", "greedy tokens per multi-token canary prompt"),
    OptionSpec("cleanup-grace", parse_seconds, "5", "seconds a stopped or failed engine tree has to be gone"),
    # issue 29: killed at any moment
    OptionSpec(
        "kill-seed",
        parse_seed,
        "random",
        "seed of the random kills' offsets (random: drawn from the run's id; the seed is in each kill's evidence, "
        "give it to replay a kill)",
    ),
    OptionSpec(
        "chaos",
        parse_positive_int,
        "1",
        "how many times each random-kill fault runs per lane, each with its own draw (the chaos run: bench/chaos.py)",
    ),
    # issue 47: failures already recorded upstream
    OptionSpec(
        "known-findings",
        parse_known_findings,
        "",
        "TOML file of known findings (id, words, link, expires): a matching failure shows as KNOWN and does not "
        "fail the verdict by itself (docs/known-findings.md)",
    ),
    # issue 46: the matrix over many machines
    OptionSpec(
        "shard",
        parse_shard_option,
        "",
        "run shard K of N of the matrix (K/N, from 1), whole lane columns at a time; unset: K and N from the "
        "scheduler (Slurm array, Buildkite parallel job, Kubernetes Indexed Job with --vsnap-shard-count)",
    ),
    OptionSpec(
        "shard-count",
        parse_optional_count,
        "",
        "the shard count N of a Kubernetes Indexed Job (its JOB_COMPLETION_INDEX is K-1)",
    ),
    OptionSpec(
        "shard-times",
        parse_results_file,
        "",
        "a previous run's results.json: shards balanced by its step times (default: by lane counts)",
    ),
    OptionSpec(
        "plan-history",
        parse_plan_history,
        "",
        "the plan line's estimate from kept runs: a previous run's results.json or a directory of them (the "
        "newest runs of the same image family); empty: no estimate",
    ),
)
OPTIONS_BY_DEST = {spec.dest: spec for spec in OPTIONS}
OPTIONS_BY_CLI = {spec.cli: spec for spec in OPTIONS}


def add_options(parser: pytest.Parser) -> None:
    """Register every option, its ini twin and its help text (default and env name included)."""
    group = parser.getgroup("vsnap", "vsnap-qual: vLLM snapshot qualification")
    for spec in OPTIONS:
        help_text = spec.help_line()
        if spec.flag:
            group.addoption(spec.cli, dest=spec.dest, action="store_const", const="true", default=None, help=help_text)
            group.addoption(
                spec.no_cli, dest=spec.dest, action="store_const", const="false", default=None, help=spec.no_help
            )
        else:
            group.addoption(
                spec.cli,
                dest=spec.dest,
                default=None,
                action="append" if spec.repeat else "store",
                metavar=spec.name.split("-")[-1].upper(),
                help=help_text,
            )
        parser.addini(spec.dest, help=spec.help, default=spec.default)


def raw_values(
    cli: Mapping[str, str | list[str] | None], env: Mapping[str, str], ini: Mapping[str, str]
) -> dict[str, tuple[str, str]]:
    """Pick each option's raw text and where it came from: cli > env > ini > default (a repeated option's
    values one per line)."""
    chosen: dict[str, tuple[str, str]] = {}
    for spec in OPTIONS:
        given_value = cli.get(spec.dest)
        if isinstance(given_value, list):
            chosen[spec.dest] = ("\n".join(given_value), spec.cli)
        elif given_value is not None:
            given = spec.given_as(given_value).split("=", 1)[0]
            chosen[spec.dest] = (str(given_value), given)
        elif spec.env in env:
            chosen[spec.dest] = (env[spec.env], f"environment {spec.env}")
        elif ini.get(spec.dest, "") not in ("", None):
            chosen[spec.dest] = (str(ini[spec.dest]), f"ini {spec.dest}")
        else:
            chosen[spec.dest] = (spec.default, "default")
    return chosen


OPTIONS_BY_ENV = {spec.env: spec for spec in OPTIONS}


def _distance(a: str, b: str) -> int:
    """Edit distance with adjacent transpositions (optimal string alignment)."""
    rows = [list(range(len(b) + 1))]
    for i, ca in enumerate(a, 1):
        row = [i]
        for j, cb in enumerate(b, 1):
            cost = 0 if ca == cb else 1
            best = min(rows[-1][j] + 1, row[j - 1] + 1, rows[-1][j - 1] + cost)
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                best = min(best, rows[-2][j - 2] + 1)
            row.append(best)
        rows.append(row)
    return rows[-1][-1]


def misspelled_variable(name: str) -> str | None:
    """The option variable ``name`` is a misspelling of (a letter off, two swapped, or another case), or None.
    Other ``VSNAP_*`` names are left alone: this project's build scripts and tests use some of their own."""
    if name in OPTIONS_BY_ENV or not name.upper().startswith("VSNAP_"):
        return None
    if name.upper() in OPTIONS_BY_ENV:
        return name.upper()
    suffix = name.upper()[len("VSNAP_") :]
    close = [env for env in OPTIONS_BY_ENV if _distance(suffix, env[len("VSNAP_") :]) <= 1]
    return close[0] if len(close) == 1 else None


def environment_problems(
    env: Mapping[str, str], ini: Mapping[str, str], cli: Mapping[str, object] | None = None
) -> list[str]:
    """``VSNAP_*`` variables that would be silently ignored (misspelt) or silently override something with
    nothing (set but empty), each with its fix."""
    problems = []
    for name in sorted(env):
        meant = misspelled_variable(name)
        if meant:
            problems.append(
                f"environment variable {name} is not a vsnap-qual option: did you mean {meant} "
                f"({OPTIONS_BY_ENV[meant].cli})? Rename it, or unset it"
            )
    for spec in OPTIONS:
        if spec.env not in env or env[spec.env].strip() or spec.flag:
            continue
        if cli is not None and cli.get(spec.dest) is not None:
            continue  # the command line wins anyway
        shadowed = str(ini.get(spec.dest) or "").strip()
        if shadowed and shadowed != spec.default:  # pytest's getini gives the default where the file says nothing
            problems.append(
                f"{spec.env} is set but empty in the environment, and an empty value overrides ini "
                f"{spec.dest} = {shadowed!r}: unset {spec.env} to use the ini value, or give it a value "
                f"(to clear the option, pass {spec.cli}= on the command line)"
            )
        elif spec.default:
            problems.append(
                f"{spec.env} is set but empty in the environment: unset it (default {spec.default}) or give it a value"
            )
    return problems


def check_environment(env: Mapping[str, str], ini: Mapping[str, str], cli: Mapping[str, object] | None = None) -> None:
    problems = environment_problems(env, ini, cli)
    if problems:
        raise OptionError("; ".join(problems))


def unread_ini_keys(inipath: Path | None, starts: Sequence[Path]) -> list[tuple[Path, list[str]]]:
    """``vsnap_*`` keys in a ``pyproject.toml`` that pytest does not read in this session (pytest reads one
    configuration file: ``inipath``, e.g. ``suites/pytest.ini`` under ``pytest suites/``), searched from each of
    ``starts`` up to the file system's root; each file with the keys it holds."""
    found: dict[Path, list[str]] = {}
    chosen = inipath.resolve() if inipath is not None else None
    for start in starts:
        for folder in (start.resolve(), *start.resolve().parents):
            candidate = folder / "pyproject.toml"
            if candidate in found or candidate == chosen or not candidate.is_file():
                continue
            try:
                data = tomllib.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # not ours to judge: pytest says so when it reads it
            table = data.get("tool", {}).get("pytest", {}).get("ini_options", {})
            keys = sorted(k for k in table if isinstance(table, dict) and str(k).startswith("vsnap_"))
            if keys:
                found[candidate] = keys
    return list(found.items())


def check_unread_ini(inipath: Path | None, starts: Sequence[Path]) -> None:
    """Refuse ``vsnap_*`` keys that pytest would silently ignore (issue 47: ``pytest suites/`` reads
    ``suites/pytest.ini``, never the checkout's ``pyproject.toml``)."""
    for path, keys in unread_ini_keys(inipath, starts):
        read = f"this session reads {inipath}" if inipath is not None else "this session reads no configuration file"
        raise OptionError(
            f"{', '.join(keys)} in {path} [tool.pytest.ini_options] would be ignored: {read} (pytest reads one "
            "configuration file); pass them as --vsnap-* options (or an @file profile, as suites/profiles/), move "
            f"them into {inipath or 'a pytest.ini'}, or remove them from {path.name}"
        )


def resolve(config: pytest.Config, env: Mapping[str, str] | None = None) -> ParsedOptions:
    """Resolve and parse every option; a bad value raises ``pytest.UsageError`` naming option and fix."""
    cli = {spec.dest: config.getoption(spec.dest) for spec in OPTIONS}
    ini = {spec.dest: str(config.getini(spec.dest) or "") for spec in OPTIONS}
    environ = os.environ if env is None else env
    try:
        check_unread_ini(config.inipath, [Path(config.invocation_params.dir), config.rootpath])
        check_environment(environ, ini, cli)
        parsed = parse_values(raw_values(cli, environ, ini))
    except OptionError as exc:
        raise pytest.UsageError(str(exc)) from None
    return parsed


class OptionError(ValueError):
    """A bad option value; the message names the option, the fix and where the value came from."""


def parse_values(chosen: Mapping[str, tuple[str, str]]) -> ParsedOptions:
    """Parse each option's chosen text (unset options without a default become None). The parsed values are
    whatever each option's parse function returns (``OPTIONS``), by dest: :class:`ParsedOptions` declares each
    one's type (a test holds the two together), read by ``run.configure.build_config`` into the ``QualConfig``."""
    values: dict[str, object] = {}
    for dest, (text, origin) in chosen.items():
        spec = OPTIONS_BY_DEST[dest]
        if text == "" and spec.default == "":
            values[dest] = None
            continue
        try:
            values[dest] = spec.parse(text)
        except argparse.ArgumentTypeError as exc:
            raise OptionError(f"{spec.cli}: {exc} (value from {origin})") from None
    parsed = cast(ParsedOptions, values)  # each dest's value is its parse function's, as ParsedOptions declares
    runtime = runtimes.create(parsed.get("vsnap_runtime") or runtimes.DEFAULT)
    for cli in runtime.engine_options:  # each runtime says what a well-formed engine of its own is
        dest = OPTIONS_BY_CLI[cli].dest
        given = values.get(dest)
        problem = runtime.engine_problem(str(given)) if given else None
        if problem:
            raise OptionError(f"{cli}: {problem} (value from {chosen[dest][1]})")
    return parsed


def parse_standalone(argv: list[str], env: Mapping[str, str] | None = None) -> ParsedOptions:
    """The same options for the ``vsnap-qual`` commands: command line > ``VSNAP_*`` environment > default."""
    parser = argparse.ArgumentParser(prog="vsnap-qual", add_help=False, allow_abbrev=False)  # as pytest's parser
    for spec in OPTIONS:
        if spec.flag:
            parser.add_argument(spec.cli, dest=spec.dest, action="store_const", const="true", default=None)
            parser.add_argument(spec.no_cli, dest=spec.dest, action="store_const", const="false", default=None)
        else:
            parser.add_argument(spec.cli, dest=spec.dest, default=None, action="append" if spec.repeat else "store")
    namespace, rest = parser.parse_known_args(argv)
    if rest:
        raise OptionError("; ".join(unknown_argument(arg) for arg in rest))
    environ = os.environ if env is None else env
    check_environment(environ, {}, vars(namespace))
    return parse_values(raw_values(vars(namespace), environ, {}))


def unknown_argument(arg: str) -> str:
    """An argument no option takes, said with the option it abbreviates or misspells (abbreviations are refused, as
    pytest refuses them: a name that stops matching one option when another is added would change meaning)."""
    name = arg.split("=", 1)[0]
    names = [known for spec in OPTIONS for known in ((spec.cli, spec.no_cli) if spec.flag else (spec.cli,))]
    starts = [known for known in names if known.startswith(name)] if name.startswith("--vsnap") else []
    close = starts or difflib.get_close_matches(name, names, n=1, cutoff=0.8)
    if close and len(starts) > 1:
        return f"{name}: abbreviations are not accepted (it begins {', '.join(starts)}): write the option in full"
    if close:
        how = "abbreviations are not accepted" if starts else "no such option"
        return f"{name}: {how}: did you mean {close[0]}? Write it in full"
    return f"unknown argument {arg}: see --help for the --vsnap-* options"


def reference_markdown() -> str:
    """The options reference (docs/options.md), generated from :data:`OPTIONS` so it cannot drift."""
    lines = [
        "# vsnap-qual options",
        "",
        "Generated from `vsnap_qual/options.py` (`python -m vsnap_qual.options > docs/options.md`); a test fails "
        "when this file is stale. Precedence: command line > `VSNAP_*` environment > ini (`vsnap_*` in the "
        "pytest ini file) > default. Each on/off option has an off switch, `--no-vsnap-<name>`, which beats its "
        "variable, the ini file and an `@file` profile given before it (the last of the two on the command line "
        "wins). With the Docker runtime, `--vsnap-image` and `--vsnap-base-image` are image references as Docker "
        "reads them (`[registry[:port]/]path[:tag][@digest]`, distribution's reference grammar): a malformed one is "
        "refused before anything starts, naming the part that is wrong; the host runtime's engines are Pythons "
        "(`--vsnap-python`).",
        "",
        "| option | environment | ini | default | meaning |",
        "|---|---|---|---|---|",
    ]
    for spec in OPTIONS:
        default = f"`{spec.default}`" if spec.default else "unset"
        names = f"`{spec.cli}`, `{spec.no_cli}`" if spec.flag else f"`{spec.cli}`"
        lines.append(f"| {names} | `{spec.env}` | `{spec.dest}` | {default} | {spec.help} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(reference_markdown(), end="")
