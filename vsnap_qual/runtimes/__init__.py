"""Where lanes run, behind one protocol and a registry: ``--vsnap-runtime=NAME`` picks a :class:`Runtime`, and
nothing else in the harness branches on the name.

Built in: ``docker`` (each lane a container of ``--vsnap-image``; :mod:`vsnap_qual.runtimes.docker`, the only
module that imports the docker SDK) and ``host`` (each lane host processes in a mount namespace of their own;
:mod:`vsnap_qual.runtimes.host`). Built-ins are imported only when chosen, so a host-runtime run never loads the
docker SDK. A third runtime (a Kubernetes pod, a Slurm job on another node) is one module: a class with the
methods below whose ``start`` returns a :class:`vsnap_qual.box.Box`, registered before the options are read, e.g.
from a ``conftest.py``::

    from vsnap_qual import runtimes
    runtimes.register("k8s", KubernetesRuntime)

(``CONTRIBUTING.md`` walks through one; ``tests/seam/`` registers an in-memory runtime and runs the lifecycle on
it.)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from vsnap_qual.box import Box, BoxSpec, ImageInfo

if TYPE_CHECKING:
    from vsnap_qual.cli.diagnostics import CheckResult
    from vsnap_qual.config import ParsedOptions, QualConfig
    from vsnap_qual.overlay import OverlayFile
    from vsnap_qual.run.preflight_result import PreflightResult

#: the runtime a run uses unless ``--vsnap-runtime`` names another
DEFAULT = "docker"
DEFAULT_HOST_ROOT = Path("/var/tmp/vsnap-lanes")


@dataclass(frozen=True)
class RuntimeSettings:
    """What a runtime is told before it does anything (from the validated configuration, or the doctor's options)."""

    #: the host runtime's lane directories (``--vsnap-host-root``)
    host_root: Path = DEFAULT_HOST_ROOT
    #: how long a missing image may take to pull, a one-shot probe to run
    pull_timeout: float = 900.0
    probe_timeout: float = 120.0
    #: a registered runtime's own settings, opaque to the harness (the runtime narrows what it reads)
    extra: Mapping[str, object] = field(default_factory=dict)
    #: where a runtime says what it is doing while preflight waits (a pull's progress): the terminal in a pytest
    #: session, else the ``vsnap_qual`` logger
    say: Callable[[str], None] | None = None


def settings_for(config: QualConfig, say: Callable[[str], None] | None = None) -> RuntimeSettings:
    """What a run's runtime is told, from its validated configuration (``say``: where it reports progress)."""
    return RuntimeSettings(
        host_root=config.host_root,
        pull_timeout=config.timeouts["serve"],
        probe_timeout=config.timeouts["exec"],
        say=say,
    )


class EngineOptionError(ValueError):
    """The options naming the arms' engines do not fit the runtime; the message names the option and the fix."""


class Runtime(Protocol):
    """One way to run lanes. ``start`` gives a lane its :class:`Box`; the rest is what the harness asks before,
    around and after the lanes."""

    name: str
    #: how this runtime's arms are named on the command line (head, base), for messages
    engine_options: tuple[str, str]

    def engines(self, parsed: ParsedOptions, default_python: str) -> tuple[str, str | None]:
        """The head and base arms' engines (an image reference, a Python) from the parsed ``vsnap_*`` options;
        :class:`EngineOptionError` when options of another runtime are given."""
        ...

    def engine_problem(self, value: str) -> str | None:
        """What makes ``value``, given to one of :attr:`engine_options`, no engine of this runtime (the Docker
        runtime: no image reference Docker accepts), with how to write one; None when it is one. Asked as the
        options are read, so the refusal names where the value came from."""
        ...

    def preflight(self, config: QualConfig, overlay: list[OverlayFile]) -> PreflightResult:
        """Everything about the arms' engines checkable before a lane starts: they exist, where their ``vllm``
        is and which behaviour it implements, the overlay's targets, each lane's GPUs."""
        ...

    def image(self, ref: str, pre: PreflightResult) -> ImageInfo:
        """What the evidence records of an arm's engine (as preflight found it)."""
        ...

    def start(self, spec: BoxSpec) -> Box:
        """A lane's long-lived box, started; :class:`vsnap_qual.box.RuntimeFailure` with the fix when it cannot."""
        ...

    def sweep(self, *, session: str | None = None, owner: str | None = None) -> list[str]:
        """Remove labelled boxes: a session's (only ``owner``'s when given) or, with no session, those of owners
        that are gone. Returns their names."""
        ...

    def host_facts(self) -> dict[str, str | None]:
        """Facts of the machine the boxes run on, for the session record (e.g. ``docker_version``)."""
        ...

    def reachable(self) -> CheckResult:
        """The doctor's first check: whether the runtime answers at all (nothing else is asked when it does not)."""
        ...

    def doctor(self, opts: ParsedOptions, want_gpu: bool) -> list[CheckResult]:
        """This runtime's own doctor checks (reachable, privileges, the arms' engines)."""
        ...

    def gpu_capable(self) -> bool:
        """Whether this runtime can give its lanes GPUs on this machine."""
        ...

    def close(self) -> None:
        """Let go of what the runtime holds (a client connection); boxes it started are not touched."""
        ...


Factory = Callable[[RuntimeSettings], Runtime]

_BUILTIN: dict[str, str] = {
    "docker": "vsnap_qual.runtimes.docker:DockerRuntime",
    "host": "vsnap_qual.runtimes.host:HostRuntime",
}
_REGISTERED: dict[str, Factory] = {}


def register(name: str, factory: Factory) -> None:
    """Add a runtime under ``name`` (``--vsnap-runtime=name``); before the options are read (a conftest's import)."""
    if name in _BUILTIN or name in _REGISTERED:
        raise ValueError(f"runtime {name!r} is already registered")
    _REGISTERED[name] = factory


def unregister(name: str) -> None:
    """Drop a registered runtime (tests that register one for a while)."""
    _REGISTERED.pop(name, None)


def names() -> list[str]:
    return [*_BUILTIN, *_REGISTERED]


def registered() -> list[str]:
    """The runtimes added with :func:`register` (not built in)."""
    return list(_REGISTERED)


def factory(name: str) -> Factory:
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name not in _BUILTIN:
        raise KeyError(f"no runtime {name!r}; known: {', '.join(names())}")
    module, _, attr = _BUILTIN[name].partition(":")
    built: Factory = getattr(importlib.import_module(module), attr)
    return built


def create(name: str, settings: RuntimeSettings | None = None) -> Runtime:
    """The runtime ``name``, ready to use (a built-in is imported now)."""
    return factory(name)(settings or RuntimeSettings())
