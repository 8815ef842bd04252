"""Reference plumbing of the snapshot child (`python -m vllm.snapshot.server`): builds the engine, answers the
CRIU stand-in's dump request at the capture barrier, and rebuilds itself from `images/` on restore."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from vllm._vsnapref.checkpoint import agent, restore_images, write_private
from vllm.config import VllmConfig
from vllm.logger import set_process_label
from vllm.snapshot.barrier import ControlArgs, ReleaseBudget
from vllm.v1.engine.async_llm import LLMEngine


class ChildCheckpoint:
    """Where the child is in its life (fresh or restored) and what a dump must record. One per process:
    `current()` is called first thing in the child's main(), before plugins may start threads."""

    _current: ChildCheckpoint | None = None

    @classmethod
    def current(cls, control: ControlArgs) -> ChildCheckpoint:
        if cls._current is None:
            cls._current = cls(control)
        return cls._current

    def __init__(self, control: ControlArgs) -> None:
        self.control = control
        restore = restore_images()
        self.images: Path | None = restore[0] if restore is not None else None
        self.captured_pid = restore[1] if restore is not None else os.getpid()
        self.restored = self.images is not None
        self.state: dict[str, Any] = {}
        self.captured: dict[str, Any] | None = None
        self.tree_ready = False
        self.engine: LLMEngine | None = None
        self.restored_client: Any = None
        if self.images is not None:
            self.state = json.loads((self.images / f"core-{self.captured_pid}.img").read_text())
            # Start the engine core before this process creates any thread: threads take PIDs too, and the
            # engine core must get its captured PID back.
            try:
                self.restored_client = self._restore_engine_core()
            except BaseException as error:
                # Restored stdio is /dev/null: leave the reason in the CRIU stand-in's images/restore.log.
                with (self.images / "restore.log").open("a") as log:
                    log.write(
                        f"(pid {os.getpid()}) Error: engine core restore failed: {type(error).__name__}: "
                        f"{error}\n"
                    )
                raise
        self.budget = ReleaseBudget(
            float(self.state["remaining_s"]) if self.restored else control.release_timeout_s
        )
        handlers = agent().handlers
        handlers["dump"] = self._dump
        handlers["status"] = lambda _request: {"restored": self.tree_ready, "engine_pid": self._engine_pid()}

    def _engine_pid(self) -> int | None:
        return self.engine.client.pid if self.engine is not None else None

    def capture_point(self, **captured: Any) -> None:
        """From here the process may be dumped: ``captured`` is what it needs to continue after restore."""
        self.captured = captured

    def _dump(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.captured is None or self.engine is None:
            raise RuntimeError("the snapshot child is not at the capture barrier")
        images = Path(request["images_dir"])
        state = {
            "role": "snapshot_server",
            "vllm_config": self.engine.vllm_config.to_dict(),
            "engine_pid": self.engine.client.pid,
            "captured": self.captured,
            "remaining_s": self.budget.remaining_s,
        }
        name = f"core-{os.getpid()}.img"
        write_private(images / name, json.dumps(state, sort_keys=True).encode())
        return {"files": [name]}

    def _engine_process(self) -> dict[str, Any]:
        assert self.images is not None
        tree = json.loads((self.images / "pstree.img").read_text())
        for entry in tree["processes"]:
            if entry["pid"] == self.state["engine_pid"]:
                return dict(entry)
        raise RuntimeError(f"engine core {self.state['engine_pid']} is missing from pstree.img")

    def _restore_engine_core(self) -> Any:
        from vllm.v1.engine.core_client import EngineCoreClient

        process = self._engine_process()
        with open(process["fds"].get("1") or os.devnull, "ab") as stdout:
            return EngineCoreClient(
                None,
                stdout=stdout,
                checkpoint=True,
                restore_images=self.images,
                target_pid=int(process["pid"]),
            )

    @asynccontextmanager
    async def engine_client(self, args: argparse.Namespace) -> AsyncIterator[LLMEngine]:
        """The engine of this child: built fresh from ``args``, or rebuilt from the images on restore."""
        import asyncio

        from vllm.v1.engine.core_client import EngineCoreClient

        set_process_label("APIServer")
        if not self.restored:
            from vllm.config import create_engine_config
            from vllm.entrypoints.openai.api_server import _non_default_args
            from vllm.logger import init_logger
            from vllm.version import __version__

            logger = init_logger("vllm.entrypoints.openai.api_server")
            logger.info("vLLM API server version %s", __version__)
            logger.info("non-default args: %s", _non_default_args(args))

            config = create_engine_config(args)
            client = await asyncio.to_thread(EngineCoreClient, config, checkpoint=True)
        else:
            config = VllmConfig.from_dict(self.state["vllm_config"])
            client = self.restored_client
        self.engine = LLMEngine(config, client)
        self.tree_ready = self.restored
        try:
            yield self.engine
        finally:
            self.engine.shutdown(timeout=5)
