"""The identity kind (one fault per drift): for each class of identity field vLLM's manifest records and its
restore compares (``SnapshotRuntimeIdentity``), one way to make the faulted ``vllm snapshot restore`` see another
value, changed for that command only (nothing of the box or the host changes for anyone else), and a record of what
the restore saw, taken by the restore's own process just before it ``exec``s vLLM.

Each drift is data: the manifest field vLLM must name (``snapshot mismatch: <field>``), a ``prepare`` script run in
the box (it writes the drift's kit and prints what the launch needs, or ``N/A <reason>`` where the box cannot present
the drift), the launch (an argv prefix that ends by running the rest) and the record (a shell snippet printing the
value the restore sees). Whether a drift held is decided by comparing that value with the manifest's own.

The drifts present what vLLM reads, where vLLM reads it: the environment of the process (``env``), ``/etc/machine-id``
(a private mount namespace with a bind mount over it), ``platform.release()`` (``setarch --uname-2.6``),
``importlib.metadata.version("vllm")`` (a ``vllm`` dist-info first on ``PYTHONPATH``), ``nvidia-smi``'s
``driver_version`` and ``criu --version`` (a wrapper first on ``PATH`` that runs the real tool and changes only that
answer). Model and tokenizer revision and the engine arguments are not compared at restore (the restore takes no
model arguments; the artifact's ``engine_argv`` is what it restores), so they have no drift here."""

from __future__ import annotations

import dataclasses
import hashlib
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from vsnap_qual.box import ExecResult
from vsnap_qual.contract import CONTROL, WORK, restore_argv
from vsnap_qual.faults.injector import Attempt, Injector, Kind, Observation, params_of
from vsnap_qual.faults.lane import FaultLane
from vsnap_qual.model import IdentityInjected
from vsnap_qual.probe.vsnap_probe import control_files
from vsnap_qual.procedure import Fault, FaultParams, before_mutation
from vsnap_qual.vllm_words import StepFailed

KIT = f"{WORK}/identity-drift"
SEEN = control_files.IDENTITY_SEEN
ADDED = "VLLM_VSNAP_QUAL_DRIFT"
#: variables the harness sets in every lane that take part in the identity, in the order one is chosen to drift
#: (string-compared by vLLM, so another value is never a parse error before the identity check)
LANE_VARIABLES = ("VLLM_NO_USAGE_STATS", "VLLM_SERVER_DEV_MODE")
PLUGIN_ENTRY = "snapshot_plugin_sha256:"


Manifest = Mapping[str, Any]
#: what a drift's prepare script printed (``key=value``) and the manifest → launch prefix, record snippet, presented
Ready = Callable[[dict[str, str], Manifest], tuple[tuple[str, ...], str, str]]


@dataclass(frozen=True)
class Drift:
    """How one identity field is drifted for the faulted restore: the prepare script and, from its answer, the
    launch, both held here so a drift is written in one place."""

    id: str
    field: str  # the manifest field vLLM must name
    presents: str  # what the restore sees, in words
    prepare: Callable[[Manifest], str] = dataclasses.field(repr=False, compare=False)
    ready: Ready = dataclasses.field(repr=False, compare=False)

    def prepare_script(self, manifest: Manifest) -> str:
        """A script for the box: writes the kit; prints ``key=value`` lines the launch needs, or ``N/A <why>``."""
        return self.prepare(manifest)


def _sh(*lines: str) -> str:
    return "\n".join(("set -u", f"mkdir -p {KIT}", *lines))


def _env_name(manifest: Mapping[str, Any]) -> str | None:
    names = {str(entry[0]) for entry in manifest.get("environment") or [] if entry}
    return next((n for n in LANE_VARIABLES if n in names), None)


def _prepare_env_added(manifest: Mapping[str, Any]) -> str:
    return _sh(f"echo name={ADDED}", "echo value=1")


def _prepare_env_removed(manifest: Mapping[str, Any]) -> str:
    name = _env_name(manifest)
    if name is None:
        return _na(f"the create's identity environment (the manifest) holds none of {', '.join(LANE_VARIABLES)}")
    return _sh(f"echo name={name}")


def _prepare_env_changed(manifest: Mapping[str, Any]) -> str:
    name = _env_name(manifest)
    if name is None:
        return _na(f"the create's identity environment (the manifest) holds none of {', '.join(LANE_VARIABLES)}")
    # another value than the lane's: 0, or 1 where the lane has 0
    return _sh(f"echo name={name}", f'if [ "${{{name}:-}}" = 0 ]; then echo value=1; else echo value=0; fi')


def _prepare_host(manifest: Mapping[str, Any]) -> str:
    host = str(manifest.get("host_id") or "")
    other = hashlib.sha256(f"vsnap-qual drift of {host}".encode()).hexdigest()[:32]
    return _sh(
        "command -v unshare >/dev/null || { echo 'N/A the box has no unshare (util-linux) to mount another "
        "/etc/machine-id for the restore alone'; exit 0; }",
        f"echo {other} > {KIT}/machine-id",
        f"out=$(unshare -m sh -c 'mount --bind {KIT}/machine-id /etc/machine-id && cat /etc/machine-id' 2>&1)"
        ' || { echo "N/A the box cannot present another /etc/machine-id to the restore alone: $out"; exit 0; }',
        f"echo value={other}",
    )


def _prepare_kernel(manifest: Mapping[str, Any]) -> str:
    return _sh(
        "command -v setarch >/dev/null || { echo 'N/A the box has no setarch (util-linux) to present another "
        "kernel release'; exit 0; }",
        'out=$(setarch "$(uname -m)" --uname-2.6 uname -r 2>&1) || { echo "N/A setarch --uname-2.6 fails in the '
        'box: $out"; exit 0; }',
        'echo "machine=$(uname -m)"',
        'echo "value=$out"',
    )


def other_version(version: str) -> str:
    """Another PEP 440 version, the same release with one more local label (``0.32.0+cpu`` keeps its ``cpu``)."""
    return f"{version}.vsnapdrift" if "+" in version else f"{version}+vsnapdrift"


def _prepare_vllm_version(manifest: Mapping[str, Any]) -> str:
    other = other_version(str(manifest.get("vllm_version") or "0"))
    info = f"{KIT}/pythonpath/vllm-{other}.dist-info"
    return _sh(
        f"rm -rf {KIT}/pythonpath && mkdir -p {info}",
        f"printf 'Metadata-Version: 2.1\\nName: vllm\\nVersion: %s\\n' {shlex.quote(other)} > {info}/METADATA",
        f"echo value={other}",
        'echo "pythonpath=${PYTHONPATH:-}"',
    )


_GPU_WRAPPER = r"""#!/bin/sh
# vsnap-qual identity drift: the real nvidia-smi; in a --query-gpu answer, driver_version gets a suffix
q=""
for a in "$@"; do case "$a" in --query-gpu=*) q="${a#--query-gpu=}";; esac; done
[ -n "$q" ] || exec REAL "$@"
REAL "$@" | awk -v q="$q" '
  BEGIN { n = split(q, f, ","); for (i = 1; i <= n; i++) if (f[i] == "driver_version") k = i }
  !k { print; next }
  { m = split($0, v, ", *"); out = ""
    for (i = 1; i <= m; i++) out = out (i > 1 ? ", " : "") v[i] (i == k ? ".vsnapdrift" : "")
    print out }'
"""

_CRIU_WRAPPER = r"""#!/bin/sh
# vsnap-qual identity drift: the real criu; its --version's first line gets a suffix
case " $* " in *" --version "*|*" -V "*) REAL "$@" | sed '1s/$/ (vsnapdrift)/'; exit 0;; esac
exec REAL "$@"
"""


def _wrapper(tool: str, script: str, needs: str) -> str:
    kit = f"{KIT}/{tool}"  # one kit per drift: another drift's wrapper is never on this restore's PATH
    return _sh(
        f"real=$(command -v {tool}) || {{ echo 'N/A the box has no {tool}: vLLM reads this identity from it'; "
        "exit 0; }",
        f"command -v {needs} >/dev/null || {{ echo 'N/A the box has no {needs} for the {tool} wrapper'; exit 0; }}",
        f"mkdir -p {kit}/bin",
        f"cat > {kit}/bin/{tool} <<'VSNAP_EOF'\n{script}VSNAP_EOF",
        f'sed -i "s|REAL|$real|g" {kit}/bin/{tool} && chmod 0755 {kit}/bin/{tool}',
        'echo "path=${PATH:-}"',
    )


def _prepare_gpu(manifest: Mapping[str, Any]) -> str:
    return _wrapper("nvidia-smi", _GPU_WRAPPER, "awk")


def _prepare_criu(manifest: Mapping[str, Any]) -> str:
    return _wrapper("criu", _CRIU_WRAPPER, "sed")


def _na(reason: str) -> str:
    return f"echo {shlex.quote('N/A ' + reason)}"


_ENV_RECORD = "tr '\\0' '\\n' < /proc/$$/environ | grep -a '^{}=' || true"


def _ready_env_set(got: dict[str, str], manifest: Manifest) -> tuple[tuple[str, ...], str, str]:
    name, value = got["name"], got["value"]
    return ("env", f"{name}={value}"), _ENV_RECORD.format(name), f"{name}={value}"


def _ready_env_removed(got: dict[str, str], manifest: Manifest) -> tuple[tuple[str, ...], str, str]:
    return ("env", "-u", got["name"]), _ENV_RECORD.format(got["name"]), ""


def _ready_host(got: dict[str, str], manifest: Manifest) -> tuple[tuple[str, ...], str, str]:
    bind = f'mount --bind {KIT}/machine-id /etc/machine-id && exec "$@"'
    return ("unshare", "-m", "sh", "-c", bind, "sh"), "cat /etc/machine-id", got["value"]


def _ready_kernel(got: dict[str, str], manifest: Manifest) -> tuple[tuple[str, ...], str, str]:
    return ("setarch", got["machine"], "--uname-2.6"), "uname -r", got["value"]


def _ready_vllm_version(got: dict[str, str], manifest: Manifest) -> tuple[tuple[str, ...], str, str]:
    path = ":".join(p for p in (f"{KIT}/pythonpath", got.get("pythonpath", "")) if p)
    interpreter = """sed -n '1s/^#![[:space:]]*//p' "$(command -v vllm)" """.strip()
    record = f"$({interpreter}) -c 'import importlib.metadata as m; print(m.version(\"vllm\"))'"
    return ("env", f"PYTHONPATH={path}"), record, got["value"]


def _ready_gpu(got: dict[str, str], manifest: Manifest) -> tuple[tuple[str, ...], str, str]:
    uuid = shlex.quote(str(manifest.get("gpu_uuid") or ""))
    record = f"nvidia-smi --query-gpu=driver_version --format=csv,noheader,nounits --id={uuid}"
    presented = other_driver(str(manifest.get("driver_version") or ""))
    return ("env", f"PATH={KIT}/nvidia-smi/bin:{got.get('path', '')}"), record, presented


def _ready_criu(got: dict[str, str], manifest: Manifest) -> tuple[tuple[str, ...], str, str]:
    presented = f"{manifest.get('criu_version') or ''} (vsnapdrift)"
    return ("env", f"PATH={KIT}/criu/bin:{got.get('path', '')}"), "criu --version | head -n 1", presented


DRIFTS: dict[str, Drift] = {
    d.id: d
    for d in (
        Drift("env-added", "environment", f"an extra {ADDED}=1", _prepare_env_added, _ready_env_set),
        Drift(
            "env-removed",
            "environment",
            "a variable of the lane's identity environment unset",
            _prepare_env_removed,
            _ready_env_removed,
        ),
        Drift(
            "env-changed",
            "environment",
            "a variable of the lane's identity environment with another value",
            _prepare_env_changed,
            _ready_env_set,
        ),
        Drift(
            "host",
            "host_id",
            "another /etc/machine-id (a bind mount in the restore's own mount namespace)",
            _prepare_host,
            _ready_host,
        ),
        Drift(
            "kernel",
            "kernel_release",
            "another kernel release (setarch --uname-2.6)",
            _prepare_kernel,
            _ready_kernel,
        ),
        Drift(
            "vllm-version",
            "vllm_version",
            "another vLLM version (a vllm dist-info first on PYTHONPATH)",
            _prepare_vllm_version,
            _ready_vllm_version,
        ),
        Drift(
            "gpu",
            "driver_version",
            "another GPU driver version (nvidia-smi's answer, through a wrapper)",
            _prepare_gpu,
            _ready_gpu,
        ),
        Drift(
            "criu",
            "criu_version",
            "another CRIU version (criu --version, through a wrapper)",
            _prepare_criu,
            _ready_criu,
        ),
    )
}


@dataclass(frozen=True)
class Prepared:
    """A drift ready in the box: the launch prefix, the record snippet and what it presents."""

    drift: Drift
    launch: tuple[str, ...]
    record: str
    presented: str  # the value presented to the restore, as the record prints it ("" = unset)


def parse_prepared(drift: Drift, output: str, manifest: Manifest) -> Prepared | str:
    """The prepare script's answer: a :class:`Prepared`, or the reason the box cannot present this drift."""
    lines = [ln for ln in output.splitlines() if ln.strip()]
    na = next((ln for ln in lines if ln.startswith("N/A ")), None)
    if na:
        return na.removeprefix("N/A ").strip()
    got = dict(ln.split("=", 1) for ln in lines if "=" in ln)
    return Prepared(drift, *drift.ready(got, manifest))


def other_driver(driver: str) -> str:
    return f"{driver}.vsnapdrift"


def restore_command(prepared: Prepared, port: int) -> list[str]:
    """The faulted restore: the launch, then a shell that records what this process sees (its output into the
    lane's control directory) and ``exec``s ``vllm snapshot restore`` in the same process."""
    # the record's errors are not a value: a record that failed leaves nothing, and the drift did not hold
    record = f'{{ {prepared.record} ; }} > {CONTROL}/{SEEN} 2>/dev/null; exec vllm snapshot restore "$@"'
    return [*prepared.launch, "sh", "-c", record, "sh", *restore_argv(port)[3:]]


def env_hash(name: str, value: str) -> str:
    """The manifest's hash of one environment variable (``sha256(name + "\\0" + value)``)."""
    return hashlib.sha256(name.encode() + b"\0" + value.encode()).hexdigest()


def manifest_value(drift: Drift, manifest: Mapping[str, Any], seen: str) -> str:
    """What the manifest recorded for the field, in the form the record prints (env: ``NAME=<hash>`` compared by
    hash, so the seen value is hashed the same way)."""
    if drift.field != "environment":
        return str(manifest.get(drift.field) or "")
    name = (seen.split("=", 1)[0] if "=" in seen else "") or _drifted_name(drift, manifest)
    recorded = {str(e[0]): str(e[1]) for e in manifest.get("environment") or [] if len(e) == 2}
    return f"{name} hash {recorded[name]}" if name in recorded else f"{name} unset"


def _drifted_name(drift: Drift, manifest: Mapping[str, Any]) -> str:
    return ADDED if drift.id == "env-added" else (_env_name(manifest) or "")


def seen_value(drift: Drift, manifest: Mapping[str, Any], seen: str) -> str:
    """The record's value in the manifest's form (env: the seen variable's hash, or ``unset``)."""
    seen = seen.strip()
    if drift.field != "environment":
        return seen
    if "=" not in seen:
        return f"{_drifted_name(drift, manifest)} unset"
    name, value = seen.split("=", 1)
    return f"{name} hash {env_hash(name, value)}"


def held(drift: Drift, manifest: Mapping[str, Any], seen: str | None) -> bool:
    """Whether the restore saw another value for the field than the manifest recorded (the record exists and
    differs)."""
    if seen is None or drift.field != "environment" and len(seen.strip().splitlines()) != 1:
        return False  # no record, or not one value
    return seen_value(drift, manifest, seen) != manifest_value(drift, manifest, seen)


def named_fields(text: str) -> list[str] | None:
    """The fields the last ``snapshot mismatch: a, b`` line of the text names (None: no such line)."""
    lines = [line for line in text.splitlines() if "snapshot mismatch" in line]
    if not lines:
        return None
    named = lines[-1].split("snapshot mismatch", 1)[1].lstrip(" :")
    return [name.strip() for name in named.split(",") if name.strip()]


@dataclass(frozen=True)
class IdentityParams(FaultParams):
    """An identity fault's parameters: its drift (a :data:`DRIFTS` id)."""

    drift: str


class IdentityInjector(Injector):
    """``identity``: one identity field drifted for the faulted restore alone (``IdentityParams.drift``, a
    :data:`DRIFTS` entry): its kit prepared in the box, the restore launched through it and a shell that
    records the value this process sees before it ``exec``s vLLM. Fired when that value differs from the
    manifest's; not applicable where the box cannot present the drift (said in the box's own words), or runs
    no shell at all."""

    def __init__(self) -> None:
        # a drift prepared when the step asked whether the box can present it: its first attempt uses it
        self._asked: dict[tuple[str, str], Prepared] = {}

    def not_applicable(self, lane: FaultLane, fault: Fault) -> str | None:
        if not lane.box.has_shell:
            return "the box runs no shell: a drift is presented by a kit of shell scripts and a recording shell"
        prepared = self._prepare(lane, fault)
        if isinstance(prepared, str):
            return prepared
        self._asked[(lane.spec.name, fault.id)] = prepared
        return None

    def _prepare(self, lane: FaultLane, fault: Fault) -> Prepared | str:
        drift = DRIFTS[params_of(fault, IdentityParams).drift]
        manifest = lane.state.manifest
        result = lane.box.sh(drift.prepare_script(manifest), lane.config.timeouts["exec"])
        if result.exit_code != 0:
            raise StepFailed(f"preparing the {drift.id} drift in the box failed: {result.tail(5)}")
        return parse_prepared(drift, result.stdout, manifest)

    def begin(self, at: Attempt) -> None:
        asked = self._asked.pop((at.lane.spec.name, at.fault.id), None)  # a retry prepares its kit again
        prepared = asked or self._prepare(at.lane, at.fault)
        if isinstance(prepared, str):  # the box changed since the step asked: nothing to inject
            raise StepFailed(f"the {params_of(at.fault, IdentityParams).drift} drift cannot be presented: {prepared}")
        at.state["prepared"] = prepared
        injected = cast(IdentityInjected, at.injected)
        injected.update(
            {"field": prepared.drift.field, "presents": prepared.drift.presents, "presented": prepared.presented}
        )
        at.lane.control.remove(SEEN)

    def end(self, at: Attempt) -> None:
        """Nothing to undo: the drift lived in the restore's own launch (its kit stays for the next attempt)."""

    def restore(self, at: Attempt) -> ExecResult:
        """The restore launched through the drift's kit and the recording shell (what its process saw is read
        back: the evidence that the drift held)."""
        prepared = at.state["prepared"]
        assert isinstance(prepared, Prepared)
        argv = restore_command(prepared, at.port)
        result = at.lane.cli.command(at.rec, argv, "restore", at.env, "restore-faulted")
        seen = at.lane.control.read_text(SEEN)
        manifest = at.lane.state.manifest
        injected = cast(IdentityInjected, at.injected)
        injected["seen_by_restore"] = None if seen is None else seen.strip()[:300]
        injected["manifest_value"] = manifest_value(prepared.drift, manifest, seen or "")[:300]
        injected["held"] = held(prepared.drift, manifest, seen)
        return result

    def fired(self, obs: Observation, injected: Mapping[str, Any]) -> bool:
        return bool(injected.get("held"))

    def problems(self, obs: Observation, results: Mapping[str, Any]) -> list[str]:
        """The refusal must name the drifted field, and only it (one field changed)."""
        field_name = str((results.get("injected") or {}).get("field") or "")
        named = named_fields("\n".join((obs.stderr_tail, *obs.error_lines)))
        if not field_name or named is None:
            return []  # no refusal in vLLM's words: the message check says so
        if field_name not in named:
            said = ", ".join(named) or "no field"
            return [f"the identity check refused, but names {said}, not the drifted {field_name}"]
        others = [name for name in named if name != field_name]
        if others:
            return [
                f"the identity check names {', '.join(others)} besides the drifted {field_name}: either the check "
                f"compares a value that did not change or the injection changed more than {field_name}"
            ]
        return []


KIND = Kind(
    "identity",
    IdentityInjector(),
    IdentityParams,
    IdentityInjected,
    faults=tuple(
        Fault(fault_id, title, "identity", head=before_mutation("snapshot mismatch"), params=IdentityParams(drift))
        for fault_id, drift, title in (
            ("identity-drift", "env-added", "identity: an extra VLLM_* variable at restore"),
            ("identity-env-removed", "env-removed", "identity: a variable of the create's environment unset"),
            ("identity-env-changed", "env-changed", "identity: a variable of the create's environment changed"),
            ("identity-host", "host", "identity: another host (/etc/machine-id) at restore"),
            ("identity-kernel", "kernel", "identity: another kernel release at restore"),
            ("identity-vllm-version", "vllm-version", "identity: another vLLM version at restore"),
            ("identity-gpu", "gpu", "identity: another GPU driver version at restore"),
            ("identity-criu", "criu", "identity: another CRIU version at restore"),
        )
    ),
)
KINDS = (KIND,)
