"""The JSON Schema of ``results.json`` and of each evidence record, generated from the evidence model
(``vsnap_qual.model``) and the procedure's table (``vsnap_qual.procedure``: which result type each step's results
have), and shipped beside this package as ``results.schema.json``.

    python -m vsnap_qual.report.schema     # regenerate vsnap_qual/report/results.schema.json

A step record's ``results`` are checked against its own step's type: the schema says so with one ``if``/``then`` per
step of the table (and one for ``fault:<id>``), keyed by the record's ``step``. The tests hold the shipped file to a
fresh generation (``tests/report/test_schema.py``).
"""

from __future__ import annotations

import json
import sys
import types
import typing
from pathlib import Path
from typing import Literal, Union

from vsnap_qual import model, procedure

if sys.version_info >= (3, 11):
    from typing import NotRequired, Required
else:  # Python 3.10: typing has no NotRequired
    from typing_extensions import NotRequired, Required

__all__ = ["SCHEMA_FILE", "JsonSchema", "json_schema", "main", "record_schema", "schema_text", "type_schema"]

#: A JSON Schema is a JSON document (an object of JSON values); the generator writes it and never reads it back.
JsonSchema = dict[str, object]
SCHEMA_FILE = Path(__file__).parent / "results.schema.json"
_DRAFT = "https://json-schema.org/draft/2020-12/schema"


def _schema_of(tp: object, defs: dict[str, JsonSchema]) -> JsonSchema:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is typing.Any or tp is object:  # any JSON value
        return {}
    if tp is type(None):
        return {"type": "null"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp is str:
        return {"type": "string"}
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        return {"anyOf": [_schema_of(a, defs) for a in args]}
    if origin is list:
        return {"type": "array", "items": _schema_of(args[0], defs)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _schema_of(args[1], defs)}
    if origin in (NotRequired, Required):
        return _schema_of(args[0], defs)
    if isinstance(tp, type) and model.is_typeddict(tp):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}  # placeholder: recursive references resolve to the same definition
            fields = model.fields_of(tp)
            # a step record's results: an object, of the type its step names (``allOf`` below)
            properties = {
                key: {"type": "object"} if value == model.StepResults else _schema_of(value, defs)
                for key, value in fields.types.items()
            }
            schema: JsonSchema = {
                "type": "object",
                "properties": properties,
                "required": sorted(fields.required),
                # step results are open (documented fields are typed); records and results are closed
                "additionalProperties": fields.open,
            }
            if fields.types.get("results") == model.StepResults:
                schema["allOf"] = _results_by_step(defs)
            if tp.__doc__ and not tp.__doc__.startswith(name + "("):
                schema["description"] = " ".join(tp.__doc__.split())
            defs[name] = schema
        return {"$ref": f"#/$defs/{name}"}
    raise TypeError(f"no JSON Schema for {tp!r}")


def _results_by_step(defs: dict[str, JsonSchema]) -> list[JsonSchema]:
    """One ``if``/``then`` per step of the table, and one for every ``fault:<id>``: the record's ``results`` are
    its step's type (``procedure.Step.results``); a step the table does not name has results of any shape."""
    cases: list[tuple[JsonSchema, type]] = [({"const": name}, step.results) for name, step in procedure.STEPS.items()]
    cases.append(({"pattern": "^" + procedure.FAULT_PREFIX}, procedure.step(procedure.FAULT_PREFIX).results))
    return [
        {
            "if": {"properties": {"step": condition}, "required": ["step"]},
            "then": {"properties": {"results": _schema_of(results, defs)}},
        }
        for condition, results in cases
    ]


def json_schema() -> JsonSchema:
    """The JSON Schema (draft 2020-12) of ``results.json``, generated from :class:`model.Results`."""
    defs: dict[str, JsonSchema] = {}
    root = _schema_of(model.Results, defs)
    return {
        "$schema": _DRAFT,
        "$id": "https://vsnap-qual/results@1.schema.json",
        "title": f"vsnap-qual results.json ({model.SCHEMA})",
        **root,
        "$defs": dict(sorted(defs.items())),
    }


def record_schema(kind: str) -> JsonSchema:
    """The JSON Schema of one evidence record kind (for validating ``evidence.jsonl``)."""
    return type_schema(model.RECORD_TYPES[kind])


def type_schema(tp: type) -> JsonSchema:
    """The JSON Schema of one of the model's types (a record, a step's results or a piece of them)."""
    defs: dict[str, JsonSchema] = {}
    root = _schema_of(tp, defs)
    return {"$schema": _DRAFT, **root, "$defs": defs}


def schema_text() -> str:
    return json.dumps(json_schema(), indent=1, sort_keys=False) + "\n"


def main() -> None:
    """``python -m vsnap_qual.report.schema``: regenerate ``vsnap_qual/report/results.schema.json``."""
    SCHEMA_FILE.write_text(schema_text(), encoding="utf-8")
    print(f"wrote {SCHEMA_FILE}")


if __name__ == "__main__":
    main()
