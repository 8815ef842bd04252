"""`vllm serve MODEL [options]`."""

from __future__ import annotations

import argparse
from typing import Any

from vllm.entrypoints.cli.types import CLISubcommand


class ServeSubcommand(CLISubcommand):
    name = "serve"

    @staticmethod
    def cmd(args: argparse.Namespace) -> None:
        if getattr(args, "model_tag", None) is not None:
            args.model = args.model_tag
        from vllm.entrypoints.openai.api_server import run_server

        run_server(args)

    def subparser_init(self, subparsers: Any) -> argparse.ArgumentParser:
        from vllm.entrypoints.common.cli_args import make_arg_parser

        parser = subparsers.add_parser(
            self.name,
            help="Launch a local OpenAI-compatible API server to serve LLM completions via HTTP.",
            description="Launch a local OpenAI-compatible API server to serve LLM completions via HTTP.",
            usage="vllm serve [model_tag] [options]",
        )
        return make_arg_parser(parser)


def cmd_init() -> list[CLISubcommand]:
    return [ServeSubcommand()]
