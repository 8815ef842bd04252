"""Reference plumbing of the snapshot child (`python -m vllm.snapshot.server`): builds the engine the child
serves. Nothing here knows about checkpoints: CRIU freezes the child and its engine core at the capture barrier
and a restore resumes them from their frozen memory, exactly where they stopped."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from vllm.logger import set_process_label
from vllm.v1.engine.async_llm import LLMEngine


@asynccontextmanager
async def engine_client(args: argparse.Namespace) -> AsyncIterator[LLMEngine]:
    """The engine of this child, built from ``args`` (API-server process + one engine-core process)."""
    from vllm.config import create_engine_config
    from vllm.entrypoints.openai.api_server import _non_default_args
    from vllm.logger import init_logger
    from vllm.v1.engine.core_client import EngineCoreClient
    from vllm.version import __version__

    set_process_label("APIServer")
    logger = init_logger("vllm.entrypoints.openai.api_server")
    logger.info("vLLM API server version %s", __version__)
    logger.info("non-default args: %s", _non_default_args(args))
    config = create_engine_config(args)
    client = await asyncio.to_thread(EngineCoreClient, config)
    engine = LLMEngine(config, client)
    try:
        yield engine
    finally:
        engine.shutdown(timeout=5)
