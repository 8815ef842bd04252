"""FlexibleArgumentParser: argparse that also accepts `--option_name` spellings and `--config FILE.yaml`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any


def _normalise(argv: Sequence[str]) -> list[str]:
    normalised: list[str] = []
    for item in argv:
        if item.startswith("--") and len(item) > 2:
            key, separator, value = item.partition("=")
            item = key.replace("_", "-") + separator + value
        normalised.append(item)
    return normalised


def _config_argv(path: str) -> list[str]:
    import yaml

    with open(path, encoding="utf-8") as source:
        loaded = yaml.safe_load(source) or {}
    if not isinstance(loaded, dict):
        raise argparse.ArgumentTypeError(f"config file must hold a mapping: {path}")
    argv: list[str] = []
    for key, value in loaded.items():
        option = f"--{str(key).replace('_', '-')}"
        if value is True:
            argv.append(option)
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            argv.extend([option, *map(str, value)])
        else:
            argv.extend([option, str(value)])
    return argv


class FlexibleArgumentParser(argparse.ArgumentParser):
    """Underscores in long options become dashes; `--config` values come first so the CLI wins."""

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        argv = _normalise(sys.argv[1:] if args is None else args)
        if "--config" in argv:
            index = argv.index("--config")
            if index + 1 < len(argv):
                argv = _config_argv(argv[index + 1]) + argv[:index] + argv[index + 2 :]
        return super().parse_args(argv, namespace)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        argv = _normalise(sys.argv[1:] if args is None else args)
        return super().parse_known_args(argv, namespace)


def add_subparser_factory() -> dict[str, Any]:
    return {"parser_class": FlexibleArgumentParser}
