"""The snapshot child (`python -m vllm.snapshot.server`), head behaviour: SnapshotSession prepare -> capture
barrier -> recover with a private canary -> bind HTTP and serve; failures leave `error.json` and never
bind."""

from __future__ import annotations

import argparse
import asyncio
import sys

from vllm.logger import init_logger
from vllm.snapshot.barrier import (
    ControlArgs,
    detach_snapshot_streams,
    parse_control_args,
    parse_vllm_args,
    wait_for_release_marker,
    write_ready_atomic,
)
from vllm.snapshot.engine import SnapshotSession
from vllm.snapshot.manifest import _write_json_atomic

logger = init_logger(__name__)


def prepare_server_args(args: argparse.Namespace) -> None:
    """Server-argument checks that must pass before the engine is built."""
    if args.uds:
        raise ValueError("snapshot server requires a TCP listener")


async def run_vllm_snapshot_child(control: ControlArgs, args: argparse.Namespace) -> None:
    from vllm._vsnapref.snapshot_child import engine_client
    from vllm.entrypoints.openai.api_server import bind_server_socket, serve_http

    args.enable_sleep_mode = True
    prepare_server_args(args)
    async with engine_client(args) as engine:
        error_file = control.ready_file.with_name("error.json")
        session = SnapshotSession(engine, timeout_s=control.release_timeout_s)
        phase = "prepare"
        try:
            oracle = await session.prepare()
            phase = "capture barrier"
            detach_snapshot_streams()
            write_ready_atomic(control.ready_file, oracle)
            # CRIU dumps the tree while it waits here; a restored tree continues from this wait.
            listener = await wait_for_release_marker(control.release_file, timeout_s=control.release_timeout_s)
            args.host = listener.host
            args.port = listener.port
            phase = "recover"
            error_file.unlink(missing_ok=True)
            await session.recover()
            phase = "serve"
            listen_address, sock = bind_server_socket(args, reuse_port=False)
            try:
                serve_http(engine, sock, listen_address, args)
            finally:
                sock.close()
        except BaseException as error:
            # Restored stdout/stderr point at /dev/null: keep the primary failure before shutting down.
            try:
                _write_json_atomic(
                    error_file,
                    {
                        "phase": session.phase if session.state == "failed" else phase,
                        "error_type": type(error).__name__,
                        "error": str(error),
                    },
                )
            except Exception:
                logger.exception("Could not record snapshot child failure")
            try:
                engine.shutdown(timeout=0)
            except Exception:
                logger.exception("Could not shut down failed snapshot engine")
            raise


def main(argv: list[str] | None = None) -> None:
    control, remaining = parse_control_args(sys.argv[1:] if argv is None else argv)
    args = parse_vllm_args(remaining)
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    asyncio.run(run_vllm_snapshot_child(control, args))


if __name__ == "__main__":
    main()
