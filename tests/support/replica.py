"""An operator replica in its own thread and event loop, as a separate process would be.

Two operators in one event loop cannot be told apart at shutdown: kopf cancels every task
in the loop that it did not see start, which would take the other replica down with it.
A thread per replica keeps them as separate as two pods, talking to the same emulated API
server over HTTP.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from craft_operator.kube.exec import ExecTransport
from craft_operator.peering.options import PeeringOptions
from tests.support.operator import RunningOperator, start_operator

T = TypeVar("T")
WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")


class Replica:
    """One operator replica: start it, stop it, or kill it (no clean-up, no goodbye)."""

    def __init__(
        self,
        server_url: str,
        settings: Settings,
        *,
        peering: PeeringOptions,
        exec_transport: ExecTransport | None = None,
        namespaces: tuple[str, ...] = (),
    ) -> None:
        self.server_url = server_url
        self.namespaces = namespaces
        self.settings = settings
        self.peering = peering
        self.exec_transport = exec_transport
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"replica-{peering.identity}", daemon=True
        )
        self._running: RunningOperator | None = None

    @property
    def context(self) -> OperatorContext:
        """The replica's shared state (read it only: it belongs to another thread)."""
        assert self._running is not None, "the replica is not started"
        return self._running.context

    @property
    def active(self) -> bool:
        """Whether the replica reconciles (it is not a standby)."""
        return self.context.gate.active

    def writes(self) -> int:
        """Write requests the operator's own API client has made so far."""
        requests = self.context.kube.requests
        return sum(requests[method] for method in WRITE_METHODS)

    async def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def start(self) -> Replica:
        """Start the operator in its thread and wait until it is ready."""
        self._thread.start()
        self._running = await self._call(
            start_operator(
                self.server_url,
                self.settings,
                exec_transport=self.exec_transport,
                peering=self.peering,
                namespaces=self.namespaces,
            )
        )
        return self

    async def stop(self) -> None:
        """Graceful shutdown (SIGTERM): kopf takes this replica out of the peering."""
        if self._running is not None and self._thread.is_alive():
            await self._call(self._running.stop())
        await self._end()

    async def kill(self) -> None:
        """Abrupt end (SIGKILL): in-flight work and the peering record are abandoned."""
        assert self._running is not None
        await self._call(self._running.kill())
        await self._end()

    async def _end(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            await asyncio.to_thread(self._thread.join, 30)
        if not self._loop.is_closed() and not self._loop.is_running():
            self._loop.close()
