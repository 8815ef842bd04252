"""SnapshotSession: one capture/recovery cycle on an exclusively owned startup engine (head behaviour: every
phase bounded, terminal on failure, and a private canary before the engine is exposed)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from vllm.snapshot.barrier import CANARY_PROMPT, oracle_from_request_output
from vllm.snapshot.types import Oracle, oracles_match

State = Literal["new", "preparing", "prepared", "recovering", "ready", "failed"]


class SnapshotCanaryError(RuntimeError):
    """The initialized engine did not produce a valid snapshot oracle."""


async def _release_reloadable_state(engine: Any) -> None:
    await engine.sleep(level=2)


async def _restore_reloadable_state(engine: Any) -> None:
    await engine.wake_up(tags=["weights"])
    await engine.collective_rpc("reload_weights")
    await engine.wake_up(tags=["kv_cache"])


@dataclass(frozen=True)
class SnapshotMemoryPolicy:
    release: Callable[[Any], Awaitable[None]]
    restore: Callable[[Any], Awaitable[None]]


async def run_engine_canary(engine: Any) -> Oracle:
    from vllm import SamplingParams

    final = None
    params = SamplingParams(temperature=0, min_tokens=1, max_tokens=1, seed=0, logprobs=0)
    async for output in engine.generate(CANARY_PROMPT, params, request_id="vllm-snapshot-canary"):
        final = output
    if final is None:
        raise SnapshotCanaryError("canary generation returned no output")
    return oracle_from_request_output(final, SnapshotCanaryError)


class SnapshotSession:
    def __init__(self, engine: Any, *, timeout_s: float, memory_policy: SnapshotMemoryPolicy | None = None) -> None:
        if not math.isfinite(timeout_s) or timeout_s <= 0:
            raise ValueError("snapshot phase timeout must be positive and finite")
        self.engine = engine
        self.timeout_s = timeout_s
        self.memory_policy = memory_policy or SnapshotMemoryPolicy(_release_reloadable_state, _restore_reloadable_state)
        self.state: State = "new"
        self.phase = "new"
        self._oracle: Oracle | None = None

    async def prepare(self) -> Oracle:
        """Reference canary, release, rehearsal recovery, release again; returns the oracle."""
        if self.state == "prepared":
            assert self._oracle is not None
            return self._oracle
        if self.state != "new":
            raise RuntimeError(f"cannot prepare snapshot session in state {self.state}")
        self.state = "preparing"
        try:
            await asyncio.wait_for(self._prepare(), timeout=self.timeout_s)
        except BaseException:
            self.state = "failed"
            raise
        self.state = self.phase = "prepared"
        assert self._oracle is not None
        return self._oracle

    async def recover(self) -> None:
        """Communicators, memory, device sync, private generation and the canary, before serving."""
        if self.state == "ready":
            return
        if self.state != "prepared":
            raise RuntimeError(f"cannot recover snapshot session in state {self.state}")
        self.state = "recovering"
        try:
            await asyncio.wait_for(self._recover("recovery"), timeout=self.timeout_s)
        except BaseException:
            self.state = "failed"
            raise
        self.state = self.phase = "ready"

    async def _prepare(self) -> None:
        self.phase = "reference canary"
        if self.engine.get_num_unfinished_requests():
            raise RuntimeError("snapshot preparation requires an idle startup engine")
        self._oracle = await run_engine_canary(self.engine)
        await self._release()
        await self._recover("rehearsal")
        await self._release()

    async def _release(self) -> None:
        self.phase = "pause generation"
        await self.engine.pause_generation(mode="wait")
        self.phase = "release memory"
        await self.memory_policy.release(self.engine)
        self.phase = "prepare communicators"
        await self.engine.collective_rpc("checkpoint_prepare", timeout=self.timeout_s)

    async def _recover(self, stage: str) -> None:
        self.phase = f"{stage}: restore communicators"
        await self.engine.collective_rpc("checkpoint_restore", timeout=self.timeout_s)
        self.phase = f"{stage}: restore memory"
        await self.memory_policy.restore(self.engine)
        self.phase = f"{stage}: synchronize device"
        await self.engine.collective_rpc("synchronize_device", timeout=self.timeout_s)
        self.phase = f"{stage}: resume private generation"
        await self.engine.resume_generation()
        self.phase = f"{stage}: canary"
        oracle = await run_engine_canary(self.engine)
        assert self._oracle is not None
        if not oracles_match(self._oracle, oracle):
            raise SnapshotCanaryError(f"snapshot {stage} changed canary output")
