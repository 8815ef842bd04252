"""The API-server side of the engine core: starts the engine-core process and calls it."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import IO, Any

from vllm.config import VllmConfig
from vllm.logger import init_logger

logger = init_logger(__name__)


class EngineDeadError(RuntimeError):
    pass


class EngineCoreClient:
    def __init__(
        self,
        vllm_config: VllmConfig,
        *,
        stdout: IO[bytes] | None = None,
        startup_timeout_s: float = 600.0,
    ) -> None:
        parent, child = socket.socketpair()
        command = [sys.executable, "-m", "vllm.v1.engine.core", "--engine-fd", str(child.fileno())]
        self.process: subprocess.Popen[bytes] = subprocess.Popen(
            command,
            pass_fds=(child.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT if stdout is not None else None,
        )
        child.close()
        self.connection = Connection(os.dup(parent.fileno()))
        parent.close()
        self.lock = threading.Lock()
        self.ids = itertools.count()
        self.dead = False
        self.connection.send(vllm_config.to_dict())
        if not self.connection.poll(startup_timeout_s):
            self.kill()
            raise RuntimeError("Engine core initialization timed out.")
        try:
            status, payload = self.connection.recv()
        except (EOFError, OSError):
            status, payload = "failed", None
        if status != "ready":
            code = self.process.wait()
            raise RuntimeError(
                "Engine core initialization failed. See root cause above. "
                f"Failed core proc(s): {{'EngineCore': {code}}}"
            )
        self.info: dict[str, Any] = payload

    @property
    def pid(self) -> int:
        return self.process.pid

    def call(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        with self.lock:
            if self.dead:
                raise EngineDeadError("EngineCore encountered an issue. See stack trace (above) for the root cause.")
            request_id = next(self.ids)
            try:
                self.connection.send(("call", request_id, method, args, kwargs))
                if not self.connection.poll(timeout):
                    self.dead = True
                    raise TimeoutError(f"RPC call to {method} timed out.")
                reply = self.connection.recv()
            except (EOFError, OSError) as error:
                self.dead = True
                raise EngineDeadError(
                    "EngineCore encountered an issue. See stack trace (above) for the root cause."
                ) from error
        if reply[0] == "ok":
            return reply[2]
        _, _, error_type, message, _ = reply
        raise Exception(f"Call to {method} method failed: {message}")

    def stream(self, method: str, *args: Any, **kwargs: Any) -> Iterator[tuple[str, Any]]:
        """A call whose parts arrive as the engine core makes them: yields ``("part", part)`` for each, then
        ``("done", result)``. Holds the lock to the end; closed early (the HTTP client went away), it tells the
        engine core to abort and reads up to the call's final reply, so the next call finds the socket clean."""
        with self.lock:
            if self.dead:
                raise EngineDeadError("EngineCore encountered an issue. See stack trace (above) for the root cause.")
            request_id = next(self.ids)
            finished = False
            try:
                self._send(("stream", request_id, method, args, kwargs))
                while True:
                    reply = self._receive()
                    if reply[0] == "part":
                        yield "part", reply[2]
                        continue
                    finished = True
                    if reply[0] == "ok":
                        yield "done", reply[2]
                        return
                    raise Exception(f"Call to {method} method failed: {reply[3]}")
            finally:
                if not finished and not self.dead:
                    self._send(("abort", request_id, None, (), {}))
                    while self._receive()[0] == "part":
                        pass

    def _send(self, message: tuple[Any, ...]) -> None:
        try:
            self.connection.send(message)
        except (EOFError, OSError) as error:
            self.dead = True
            raise EngineDeadError(
                "EngineCore encountered an issue. See stack trace (above) for the root cause."
            ) from error

    def _receive(self) -> Any:
        try:
            return self.connection.recv()
        except (EOFError, OSError) as error:
            self.dead = True
            raise EngineDeadError(
                "EngineCore encountered an issue. See stack trace (above) for the root cause."
            ) from error

    def kill(self) -> None:
        self.dead = True
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def shutdown(self, timeout: float | None = None) -> None:
        if self.process.poll() is None and not self.dead and timeout != 0:
            try:
                with self.lock:
                    self.connection.send(("shutdown", None, None, (), {}))
                self.process.wait(timeout=timeout or 5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def when_dead(self, callback: Callable[[], None]) -> None:
        def watch() -> None:
            self.process.wait()
            callback()

        threading.Thread(target=watch, name="engine-core-monitor", daemon=True).start()
