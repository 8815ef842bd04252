"""The `vllm` console script."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys

_SUBCOMMAND_MODULES = {
    "serve": "vllm.entrypoints.cli.serve",
    "snapshot": "vllm.entrypoints.cli.snapshot",
}


def cli_env_setup() -> None:
    # vLLM's CLI defaults workers to `spawn` (snapshot commands skip this so the caller's VLLM_* env is kept).
    if "VLLM_WORKER_MULTIPROC_METHOD" not in os.environ:
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"


def main() -> None:
    if sys.argv[1:2] != ["snapshot"]:
        cli_env_setup()
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(
        description="vLLM CLI",
        epilog="For full list:            vllm [subcommand] --help=all",
    )
    parser.add_argument("-v", "--version", action="version", version=importlib.metadata.version("vllm"))
    subparsers = parser.add_subparsers(required=False, dest="subparser", parser_class=FlexibleArgumentParser)
    requested = sys.argv[1] if len(sys.argv) > 1 else None
    names = [requested] if requested in _SUBCOMMAND_MODULES else list(_SUBCOMMAND_MODULES)
    commands = {}
    for name in names:
        module = importlib.import_module(_SUBCOMMAND_MODULES[name])
        if name == "snapshot":
            subcommands = module.cmd_init(create_requested=sys.argv[1:3] == ["snapshot", "create"])
        else:
            subcommands = module.cmd_init()
        for command in subcommands:
            command.subparser_init(subparsers).set_defaults(dispatch_function=command.cmd)
            commands[command.name] = command
    args = parser.parse_args()
    if args.subparser in commands:
        commands[args.subparser].validate(args)
    if hasattr(args, "dispatch_function"):
        args.dispatch_function(args)
    else:
        parser.print_help()


if __name__ == "__main__":
    main()
