"""The CLI subcommand interface."""

from __future__ import annotations

import argparse
from typing import Any


class CLISubcommand:
    name: str

    @staticmethod
    def cmd(args: argparse.Namespace) -> None:
        raise NotImplementedError

    def validate(self, args: argparse.Namespace) -> None:
        return

    def subparser_init(self, subparsers: Any) -> argparse.ArgumentParser:
        raise NotImplementedError
