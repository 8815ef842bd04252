"""The snapshot manifest: strict schema (the same fields, order and rules as vLLM's pydantic models, checked
by hand because the reference image carries no pydantic), private-path checks and atomic JSON writes."""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any


class SnapshotCompatibilityError(RuntimeError):
    """The snapshot identity does not match the requested runtime."""


class SnapshotSecurityError(RuntimeError):
    """The snapshot artifact does not meet the private-path contract."""


class ValidationError(ValueError):
    """A schema violation; ``loc`` is the location pydantic would report first ("" for the model itself)."""

    def __init__(self, loc: str, message: str) -> None:
        super().__init__(f"{loc or 'root'}: {message}")
        self.loc = loc


_MAX_PID = 2**31 - 1
BOUNDARY = "post-engine-init-reloadable-state-released"


@dataclass(frozen=True)
class SnapshotRuntimeIdentity:
    vllm_version: str
    python_version: str
    torch_version: str
    cuda_runtime: str
    driver_version: str
    criu_version: str
    cuda_checkpoint_sha256: str
    kernel_release: str
    host_id: str
    gpu_name: str
    gpu_uuid: str
    environment: tuple[tuple[str, str], ...]

    def model_dump(self, include: set[str] | None = None) -> dict[str, Any]:
        return {
            item.name: _to_json(getattr(self, item.name))
            for item in fields(self)
            if include is None or item.name in include
        }


@dataclass(frozen=True)
class SnapshotManifest(SnapshotRuntimeIdentity):
    schema_version: int
    boundary: str
    created_at: str
    artifact_bytes: int
    model: str
    served_model_name: str
    model_revision: str
    tokenizer_revision: str
    engine_argv: tuple[str, ...]
    process_tree: tuple[int, ...]
    cuda_holders: tuple[int, ...]
    external_cache_files: tuple[tuple[str, str], ...]
    oracle_token_ids: tuple[int, ...]
    oracle_text: str
    oracle_sampled_token_logprob: float

    @classmethod
    def validate(cls, payload: Any) -> SnapshotManifest:
        return cls(**_validate_object(payload, _MANIFEST_RULES, {"external_cache_files": ()}, _check_processes))


IDENTITY_FIELDS = tuple(item.name for item in fields(SnapshotRuntimeIdentity))


def _to_json(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_to_json(item) for item in value]
    return value


# -- strict field rules -
Rule = Callable[[str, Any], Any]


def _string(loc: str, value: Any) -> str:
    if type(value) is not str:
        raise ValidationError(loc, "Input should be a valid string")
    return value


def _integer(loc: str, value: Any, minimum: int | None = None, maximum: int | None = None) -> int:
    if type(value) is not int:
        raise ValidationError(loc, "Input should be a valid integer")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValidationError(loc, "Input is out of range")
    return value


def _array(loc: str, value: Any, item: Rule, min_length: int = 0, max_length: int | None = None) -> tuple[Any, ...]:
    if type(value) is not list:
        raise ValidationError(loc, "Input should be a valid tuple")
    if len(value) < min_length or (max_length is not None and len(value) > max_length):
        raise ValidationError(loc, "Tuple has the wrong length")
    return tuple(item(f"{loc}.{index}", element) for index, element in enumerate(value))


def _pair_of_strings(loc: str, value: Any) -> tuple[str, str]:
    if type(value) is not list:
        raise ValidationError(loc, "Input should be a valid tuple")
    if len(value) != 2:
        raise ValidationError(loc if len(value) < 2 else f"{loc}.2", "Tuple has the wrong length")
    return (_string(f"{loc}.0", value[0]), _string(f"{loc}.1", value[1]))


def _pid(loc: str, value: Any) -> int:
    return _integer(loc, value, 1, _MAX_PID)


def _schema_version(loc: str, value: Any) -> int:
    if type(value) is not int or value != 1:
        raise ValidationError(loc, "Value error, schema version must be integer 1")
    return value


def _boundary(loc: str, value: Any) -> str:
    if value != BOUNDARY or type(value) is not str:
        raise ValidationError(loc, f"Input should be '{BOUNDARY}'")
    return value


def _finite_float(loc: str, value: Any) -> float:
    if type(value) is not float or not math.isfinite(value):
        raise ValidationError(loc, "Value error, sampled token log probability must be a finite float")
    return value


_IDENTITY_RULES: dict[str, Rule] = {
    **{name: _string for name in IDENTITY_FIELDS if name != "environment"},
    "environment": lambda loc, value: _array(loc, value, _pair_of_strings),
}
_MANIFEST_RULES: dict[str, Rule] = {
    **_IDENTITY_RULES,
    "schema_version": _schema_version,
    "boundary": _boundary,
    "created_at": _string,
    "artifact_bytes": lambda loc, value: _integer(loc, value, 0),
    "model": _string,
    "served_model_name": _string,
    "model_revision": _string,
    "tokenizer_revision": _string,
    "engine_argv": lambda loc, value: _array(loc, value, _string),
    "process_tree": lambda loc, value: _array(loc, value, _pid, 1),
    "cuda_holders": lambda loc, value: _array(loc, value, _pid, 1),
    "external_cache_files": lambda loc, value: _array(loc, value, _pair_of_strings),
    "oracle_token_ids": lambda loc, value: _array(loc, value, lambda sub, item: _integer(sub, item, 0), 1, 1),
    "oracle_text": _string,
    "oracle_sampled_token_logprob": _finite_float,
}


def _validate_object(
    payload: Any,
    rules: dict[str, Rule],
    defaults: dict[str, Any],
    model_check: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    if type(payload) is not dict:
        raise ValidationError("", "Input should be an object")
    values: dict[str, Any] = {}
    for name, rule in rules.items():
        if name not in payload:
            if name in defaults:
                values[name] = defaults[name]
                continue
            raise ValidationError(name, "Field required")
        values[name] = rule(name, payload[name])
    for name in payload:
        if name not in rules:
            raise ValidationError(name, "Extra inputs are not permitted")
    if model_check is not None:
        model_check(values)
    return values


def _check_processes(values: dict[str, Any]) -> None:
    tree, holders = values["process_tree"], values["cuda_holders"]
    if len(set(tree)) != len(tree):
        raise ValidationError("", "Value error, process_tree contains duplicate PIDs")
    if len(set(holders)) != len(holders):
        raise ValidationError("", "Value error, cuda_holders contains duplicate PIDs")
    if not set(holders) <= set(tree):
        raise ValidationError("", "Value error, cuda_holders must be a subset of process_tree")


def identity_from_json(payload: Any) -> SnapshotRuntimeIdentity:
    return SnapshotRuntimeIdentity(**_validate_object(payload, _IDENTITY_RULES, {}))


# -- markers -
@dataclass(frozen=True)
class ReleaseMarker:
    """Release marker the controller writes; unknown keys are ignored."""

    release: bool
    host: str | None
    port: int

    @classmethod
    def validate(cls, payload: Any) -> ReleaseMarker:
        if type(payload) is not dict:
            raise ValidationError("", "Input should be an object")
        if "release" not in payload:
            raise ValidationError("release", "Field required")
        if payload["release"] is not True:
            raise ValidationError("release", "Value error, release must be JSON true")
        host = payload.get("host")
        if host is not None and type(host) is not str:
            raise ValidationError("host", "Input should be a valid string")
        if "port" not in payload:
            raise ValidationError("port", "Field required")
        port = _integer("port", payload["port"], 1, 65535)
        return cls(release=True, host=host, port=port)


@dataclass(frozen=True)
class ReadyMarker:
    """Ready marker the child writes; unknown keys are ignored."""

    token_ids: tuple[int, ...]
    text: str
    sampled_token_logprob: float

    @classmethod
    def validate(cls, payload: Any) -> ReadyMarker:
        if type(payload) is not dict:
            raise ValidationError("", "Input should be an object")
        for name in ("token_ids", "text", "sampled_token_logprob"):
            if name not in payload:
                raise ValidationError(name, "Field required")
        token_ids = _array("token_ids", payload["token_ids"], lambda loc, item: _integer(loc, item))
        text = _string("text", payload["text"])
        value = payload["sampled_token_logprob"]
        if type(value) not in (int, float):
            raise ValidationError("sampled_token_logprob", "Input should be a valid number")
        return cls(token_ids=token_ids, text=text, sampled_token_logprob=value)


def parse_json(payload: str | bytes) -> Any:
    try:
        return json.loads(payload)
    except (ValueError, RecursionError) as error:
        if isinstance(error, ValidationError):
            raise
        raise ValidationError("", "json_invalid") from error


def validation_path(error: ValidationError) -> str:
    if error.loc:
        return error.loc
    return "JSON" if str(error).endswith("json_invalid") else "root"


# -- identity -
def validate_identity(expected: SnapshotRuntimeIdentity, actual: SnapshotRuntimeIdentity) -> None:
    """Every identity field must match exactly; name all that differ."""
    expected_values = expected.model_dump(set(IDENTITY_FIELDS))
    actual_values = actual.model_dump(set(IDENTITY_FIELDS))
    differing = [name for name in IDENTITY_FIELDS if expected_values[name] != actual_values[name]]
    if differing:
        raise SnapshotCompatibilityError(f"snapshot mismatch: {', '.join(differing)}")


# -- private paths -
def _existing_path_chain(path: Path) -> Iterator[Path]:
    current = path
    while True:
        if current.exists() or current.is_symlink():
            yield current
        if current.parent == current:
            return
        current = current.parent


def validate_artifact_root(path: Path, *, creating: bool) -> None:
    """The artifact path cannot be replaced by another user: no symlinks, trusted owners, private dir."""
    path = Path(os.path.abspath(path))
    if path.is_symlink():
        raise SnapshotSecurityError(f"snapshot path is a symlink: {path}")
    if not creating and not path.exists():
        raise SnapshotSecurityError(f"snapshot path does not exist: {path}")
    euid = os.geteuid()
    for component in _existing_path_chain(path):
        info = component.lstat()
        if stat.S_ISLNK(info.st_mode):
            raise SnapshotSecurityError(f"snapshot path contains a symlink: {component}")
        if info.st_uid not in (0, euid):
            raise SnapshotSecurityError(f"snapshot path has an untrusted owner: {component}")
        sticky_root_dir = info.st_uid == 0 and stat.S_ISDIR(info.st_mode) and bool(info.st_mode & stat.S_ISVTX)
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not sticky_root_dir:
            raise SnapshotSecurityError(f"snapshot path has a group- or world-writable ancestor: {component}")
    if path.exists():
        info = path.lstat()
        if not stat.S_ISDIR(info.st_mode):
            raise SnapshotSecurityError(f"snapshot path is not a directory: {path}")
        if info.st_uid != euid:
            raise SnapshotSecurityError(f"snapshot directory is not owned by the current user: {path}")
        if stat.S_IMODE(info.st_mode) & 0o077:
            raise SnapshotSecurityError(f"snapshot directory must have mode 0700: {path}")


# -- atomic private JSON -
def _fsync_directory(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _write_json_atomic(path: Path, payload: object, *, overwrite: bool = False) -> None:
    """Compact, key-sorted JSON through `<name>.tmp` + rename (mode 0600); refuses to replace unless asked."""
    temporary = path.with_name(f"{path.name}.tmp")
    if overwrite:
        temporary.unlink(missing_ok=True)
    elif path.exists() or path.is_symlink():
        raise FileExistsError(path)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as output:
            output.write(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode())
            output.flush()
            os.fsync(output.fileno())
        os.replace(temporary, path)
        _fsync_directory(path.parent)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_manifest_atomic(path: Path, manifest: SnapshotManifest) -> None:
    path = Path(path)
    validate_artifact_root(path, creating=False)
    destination = path / "manifest.json"
    try:
        _write_json_atomic(destination, manifest.model_dump())
    except FileExistsError as error:
        raise SnapshotSecurityError(f"manifest already exists: {destination}") from error


def read_manifest(path: Path) -> SnapshotManifest:
    """Read a published snapshot's manifest (strict)."""
    path = Path(path)
    validate_artifact_root(path, creating=False)
    manifest_path = path / "manifest.json"
    if manifest_path.is_symlink():
        raise SnapshotSecurityError(f"manifest is a symlink: {manifest_path}")
    try:
        descriptor = os.open(manifest_path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError as error:
        raise SnapshotSecurityError(f"manifest does not exist: {manifest_path}") from error
    try:
        with os.fdopen(descriptor, encoding="utf-8") as source:
            payload = source.read()
    except UnicodeDecodeError as error:
        raise SnapshotCompatibilityError("invalid snapshot manifest: JSON") from error
    try:
        return SnapshotManifest.validate(parse_json(payload))
    except ValidationError as error:
        raise SnapshotCompatibilityError(f"invalid snapshot manifest: {validation_path(error)}") from error


def inspect_snapshot(path: Path) -> dict[str, object]:
    return read_manifest(path).model_dump()
