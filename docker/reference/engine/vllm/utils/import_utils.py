"""Import helpers."""

from __future__ import annotations

import importlib
from typing import Any


def resolve_obj_by_qualname(qualname: str) -> Any:
    """`package.module.Name` -> the object."""
    module_name, _, obj_name = qualname.rpartition(".")
    if not module_name:
        raise ValueError(f"expected a qualified name like 'package.module.Class', got {qualname!r}")
    return getattr(importlib.import_module(module_name), obj_name)
