"""The snapshot child (`python -m vllm.snapshot.server`), base behaviour as released in vLLM 0.33.0: canary,
release/restore rehearsal, capture barrier, then restore memory and bind HTTP with no private canary (the
controller's public HTTP canary is the only check) and no error record."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from vllm.snapshot.barrier import (
    CANARY_PROMPT,
    ControlArgs,
    detach_snapshot_streams,
    oracle_from_request_output,
    parse_control_args,
    parse_vllm_args,
    wait_for_release_marker,
    write_ready_atomic,
)
from vllm.snapshot.types import Oracle, oracles_match


class SnapshotCanaryError(RuntimeError):
    """The initialized engine did not produce a valid snapshot oracle."""


async def _release_reloadable_state(engine: Any) -> None:
    await engine.sleep(level=2)


async def _restore_reloadable_state(engine: Any) -> None:
    await engine.wake_up(tags=["weights"])
    await engine.collective_rpc("reload_weights")
    await engine.wake_up(tags=["kv_cache"])


async def run_engine_canary(engine: Any) -> Oracle:
    from vllm import SamplingParams

    final = None
    params = SamplingParams(temperature=0, min_tokens=1, max_tokens=1, seed=0, logprobs=0)
    async for output in engine.generate(CANARY_PROMPT, params, request_id="vllm-snapshot-canary"):
        final = output
    if final is None:
        raise SnapshotCanaryError("canary generation returned no output")
    return oracle_from_request_output(final, SnapshotCanaryError)


async def run_vllm_snapshot_child(control: ControlArgs, args: argparse.Namespace) -> None:
    from vllm._vsnapref.snapshot_child import engine_client
    from vllm.entrypoints.openai.api_server import bind_server_socket, serve_http

    args.enable_sleep_mode = True
    async with engine_client(args) as engine:
        oracle = await run_engine_canary(engine)
        try:
            await _release_reloadable_state(engine)
            await _restore_reloadable_state(engine)
            rehearsal = await run_engine_canary(engine)
            if not oracles_match(oracle, rehearsal):
                raise SnapshotCanaryError("snapshot rehearsal changed canary output")
            await _release_reloadable_state(engine)
        except SnapshotCanaryError:
            raise
        except Exception as error:
            raise SnapshotCanaryError("snapshot rehearsal failed") from error
        detach_snapshot_streams()
        write_ready_atomic(control.ready_file, oracle)
        # CRIU dumps the tree while it waits here; a restored tree continues from this wait.
        listener = await wait_for_release_marker(control.release_file, timeout_s=control.release_timeout_s)
        args.host = listener.host
        args.port = listener.port
        await _restore_reloadable_state(engine)
        listen_address, sock = bind_server_socket(args, reuse_port=False)
        try:
            serve_http(engine, sock, listen_address, args)
        finally:
            sock.close()


def main(argv: list[str] | None = None) -> None:
    control, remaining = parse_control_args(sys.argv[1:] if argv is None else argv)
    args = parse_vllm_args(remaining)
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    asyncio.run(run_vllm_snapshot_child(control, args))


if __name__ == "__main__":
    main()
