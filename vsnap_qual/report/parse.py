"""The report's JSON boundary: evidence records and ``results.json`` in, the model's types out.

Evidence is read back from disk: a killed writer tears its last line, an older harness wrote fewer fields, a
file may have been edited by hand. Every value is checked here, once, against the type the model documents for
it (``vsnap_qual.model``), so that assembly, the verdict and the views work on the typed model and never check
again, and a report still comes out of any evidence (``tests/report/test_robustness.py``). The rules:

- a value of its documented type is kept (in an open object, so are the fields the model does not name);
- an optional field, a list item or a map entry of another type is left out, as is a closed object's unknown
  field;
- a required field of another type, or missing, gets its type's empty value: None where the type allows it,
  else ``""``, ``0``, ``0.0``, ``False``, ``[]``, ``{}``, or an object of such fields;
- a required ``Literal`` field (a record's ``kind``, ``runner``, ``arm``, a step's ``outcome``, a verdict's
  ``status``) has no empty value: an object whose one is another value cannot be placed, and is left out whole
  (a record: counted with the malformed lines);
- a step record's ``results`` are checked against its own step's results type (``procedure.Step.results``:
  ``model.RestoreResults`` for a restore, ``model.FaultResults`` for ``fault:<id>``, ...); the results of a step
  the procedure does not name are kept as they are (any JSON object).
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union, cast

from vsnap_qual import model, procedure

__all__ = ["record", "results", "run_evidence"]


class _Invalid:
    """What a value that cannot take its documented type becomes."""


_INVALID = _Invalid()
#: A value in, the value as its type has it out (or ``_INVALID``).
_Conform = Callable[[object], object]
_SCALARS = (str, int, float, bool, type(None))


def record(raw: Mapping[str, object]) -> model.Record | None:
    """One evidence line as the record of its kind; None for a kind the model does not know or a record that
    cannot be placed."""
    kind = raw.get("kind")
    tp = model.RECORD_TYPES.get(kind) if isinstance(kind, str) else None
    if tp is None:
        return None
    got = _conformer(tp)(raw if isinstance(raw, dict) else dict(raw))
    return None if got is _INVALID else cast(model.Record, got)


def results(raw: object) -> model.Results:
    """A ``results.json`` (this harness's or an older one's) as :class:`model.Results`; ``ValueError`` when it
    cannot be read as one (its schema, its verdict's status)."""
    got = _conformer(model.Results)(raw)
    if got is _INVALID:
        raise ValueError("not a vsnap-qual results file: its schema or its verdict cannot be read")
    return cast(model.Results, got)


def run_evidence(raw: object) -> model.RunEvidence:
    """Assembled evidence without its verdict (what the verdict is judged from) as :class:`model.RunEvidence`."""
    got = _conformer(model.RunEvidence)(raw)
    if got is _INVALID:
        raise ValueError("not a vsnap-qual run")
    return cast(model.RunEvidence, got)


# ---- one conformer per type, built once from the model's annotations -------------------------------------------
@functools.cache
def _conformer(tp: Any) -> _Conform:
    if tp is Any or tp is object:  # any JSON value
        return lambda value: value
    if tp is type(None):
        return lambda value: value if value is None else _INVALID
    if tp is bool:
        return lambda value: value if isinstance(value, bool) else _INVALID
    if tp is int:
        return lambda value: value if isinstance(value, int) and not isinstance(value, bool) else _INVALID
    if tp is float:  # a JSON number: 3 is a float's value too
        return lambda value: value if isinstance(value, (int, float)) and not isinstance(value, bool) else _INVALID
    if tp is str:
        return lambda value: value if isinstance(value, str) else _INVALID
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        allowed = {(type(a), a) for a in args}
        return lambda value: value if isinstance(value, _SCALARS) and (type(value), value) in allowed else _INVALID
    if origin in (Union, types.UnionType):
        return _union([_conformer(a) for a in args])
    if origin is list:
        return _list(_conformer(args[0]))
    if origin is dict:
        return _map(_conformer(args[1]))
    if model.is_typeddict(tp):
        return _object(tp)
    raise TypeError(f"report.parse: no rule for {tp!r}")


def _union(alternatives: list[_Conform]) -> _Conform:
    def conform(value: object) -> object:
        # the alternative the value already is, else the first it can be made into
        first: object = _INVALID
        for alternative in alternatives:
            got = alternative(value)
            if got is not _INVALID and got == value:
                return got
            if first is _INVALID:
                first = got
        return first

    return conform


def _list(item: _Conform) -> _Conform:
    def conform(value: object) -> object:
        if not isinstance(value, list):
            return _INVALID
        return [got for entry in value if (got := item(entry)) is not _INVALID]

    return conform


def _map(item: _Conform) -> _Conform:
    def conform(value: object) -> object:
        if not isinstance(value, dict):
            return _INVALID
        return {k: got for k, v in value.items() if isinstance(k, str) and (got := item(v)) is not _INVALID}

    return conform


def _object(tp: type) -> _Conform:
    fields = model.fields_of(tp)
    required = [key for key in fields.types if key in fields.required]
    by_field: dict[str, _Conform] = {}  # filled on first use: the model's types refer to each other
    keyed = fields.types.get("results") == model.StepResults  # a step record: its results are its step's type

    def conform(value: object) -> object:
        if not isinstance(value, dict):
            return _INVALID
        if not by_field:
            by_field.update({key: _conformer(hint) for key, hint in fields.types.items()})
        out: dict[str, object] = {}
        for key, item in value.items():
            field = by_field.get(key) if isinstance(key, str) else None
            if keyed and key == "results":
                field = _step_results(value.get("step"))
            if field is None:
                if fields.open and isinstance(key, str):
                    out[key] = item
                continue
            got = field(item)
            if got is not _INVALID:
                out[key] = got
        for key in required:
            if key not in out:
                empty = _empty(fields.types[key])
                if empty is _INVALID:
                    return _INVALID
                out[key] = empty
        return out

    return conform


def _step_results(step: object) -> _Conform:
    """The conformer of a step record's results: its step's results type; any JSON object for a step the procedure
    does not name."""
    try:
        results = procedure.step(step).results if isinstance(step, str) else None
    except KeyError:
        results = None
    if results is None:
        return lambda value: value if isinstance(value, dict) else _INVALID
    return _conformer(results)


def _empty(tp: Any) -> object:
    """The value a required field of type ``tp`` gets when the evidence holds none of that type."""
    if tp is Any:
        return None
    empties: dict[Any, object] = {str: "", int: 0, float: 0.0, bool: False, type(None): None}
    if tp in empties:
        return empties[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        if type(None) in args:
            return None
        return next((e for e in map(_empty, args) if e is not _INVALID), _INVALID)
    if origin is list:
        return []
    if origin is dict:
        return {}
    if model.is_typeddict(tp):
        return _conformer(tp)({})
    return _INVALID  # a Literal: no value stands for "none"
