"""Run released vLLM code on the reference's outputs, in isolation (only pydantic is needed).

Usage: python real_vllm_check.py SOURCES manifest ARTIFACT_DIR
       python real_vllm_check.py SOURCES validate-create NAMESPACES_JSON
Prints JSON on stdout.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any


def load_manifest_module(sources: Path) -> Any:
    spec = importlib.util.spec_from_file_location("real_vllm_manifest", sources / "vllm/snapshot/manifest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def load_validate_create_args(sources: Path) -> Any:
    """The real function's code, compiled alone (its module imports the whole CLI stack)."""
    path = sources / "vllm/entrypoints/cli/snapshot.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    function = next(
        node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "validate_create_args"
    )
    namespace: dict[str, Any] = {"argparse": argparse, "os": os, "platform": platform, "Path": Path}
    exec(compile(ast.Module(body=[function], type_ignores=[]), str(path), "exec"), namespace)
    return namespace["validate_create_args"]


def main() -> None:
    sources, command, argument = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    if command == "manifest":
        module = load_manifest_module(sources)
        try:
            inspected = module.inspect_snapshot(Path(argument))
        except Exception as error:
            print(json.dumps({"ok": False, "error_type": type(error).__name__, "error": str(error)}))
            return
        print(json.dumps({"ok": True, "inspect": inspected, "rendered": json.dumps(inspected, indent=2)}))
    elif command == "validate-create":
        validate = load_validate_create_args(sources)
        results: list[str | None] = []
        for values in json.loads(Path(argument).read_text()):
            try:
                validate(argparse.Namespace(**values))
                results.append(None)
            except ValueError as error:
                results.append(str(error))
        print(json.dumps(results))
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main()
