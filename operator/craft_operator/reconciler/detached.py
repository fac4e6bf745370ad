"""Calls that a pass waits for a little, and that outlive it when they take longer.

The PAT's delivery runs onyx-cli in the sandbox pod, which the agent controls: it may make
the call hang until its timeout (60 s). A pass that waited that long would hold one of the
reconcile workers the whole time, and some dozens of such pods could hold them all. So a
pass waits :attr:`DetachedCalls.inline` seconds (nearly every delivery ends well within),
and a call still running then goes on without it: the sandbox is woken
(:attr:`DetachedCalls.wake`) when it ends, and its next pass takes the result. At most
``limit`` calls run detached at once; beyond that a pass waits for its call as before (each
holds a connection of the exec session, which the library syncs share).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
#: A sandbox: (namespace, name).
Key = tuple[str, str]


@dataclass
class _Call(Generic[T]):
    attempt: str
    task: asyncio.Task[T]
    detached: bool = field(default=False)


class DetachedCalls(Generic[T]):
    """One call at a time per sandbox, waited for ``inline`` seconds by the pass that asks
    for it; see the module docstring."""

    def __init__(self, *, inline: float = 2.0, limit: int = 32) -> None:
        self.inline = inline
        self.limit = limit
        self._calls: dict[Key, _Call[T]] = {}
        #: Called with a sandbox's key when a call no pass waits for ends (the queue's add).
        self.wake: Callable[[Key], None] | None = None

    @property
    def detached(self) -> int:
        """Calls running that no pass waits for."""
        return sum(1 for call in self._calls.values() if call.detached and not call.task.done())

    async def result(self, key: Key, attempt: str, start: Callable[[], Awaitable[T]]) -> T | None:
        """The result of the call ``attempt`` for ``key`` (what it raised, raised): started
        unless it runs already, waited for up to ``inline`` seconds; ``None`` while it runs
        on (the sandbox is woken when it ends). A call for another attempt (another pod or
        PAT) is cancelled first."""
        call = self._calls.get(key)
        if call is not None and call.attempt != attempt:
            self._drop(key, call)
            call = None
        if call is not None and call.detached and not call.task.done():
            return None  # a pass waited for it already: the sandbox is woken when it ends
        if call is None:
            if self.detached >= self.limit:
                return await start()  # no room to run on: wait for it, as a pass once did
            call = _Call(attempt, asyncio.ensure_future(start()))
            self._calls[key] = call
            call.task.add_done_callback(lambda _: self._ended(key, call))
        done, _ = await asyncio.wait({call.task}, timeout=self.inline)
        if not done:
            call.detached = True
            return None
        if self._calls.get(key) is call:
            del self._calls[key]
        return call.task.result()

    def running(self, key: Key) -> bool:
        """Whether a call for ``key`` runs now."""
        call = self._calls.get(key)
        return call is not None and not call.task.done()

    def forget(self, key: Key) -> None:
        """The sandbox is gone: cancel its call."""
        call = self._calls.get(key)
        if call is not None:
            self._drop(key, call)

    async def drain(self, grace: float) -> None:
        """Let the calls under way end within ``grace`` seconds, then cancel the rest."""
        running = [call.task for call in self._calls.values() if not call.task.done()]
        if running and grace > 0:
            await asyncio.wait(running, timeout=grace)
        await self.close()

    async def close(self) -> None:
        """Cancel every call and forget every result (the operator stops, or stands by)."""
        calls, self._calls = list(self._calls.values()), {}
        for call in calls:
            call.task.cancel()
        await asyncio.gather(*(call.task for call in calls), return_exceptions=True)

    def _drop(self, key: Key, call: _Call[T]) -> None:
        del self._calls[key]
        call.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            call.task.add_done_callback(_consume)

    def _ended(self, key: Key, call: _Call[T]) -> None:
        if self._calls.get(key) is call and call.detached and self.wake is not None:
            self.wake(key)


def _consume(task: asyncio.Task[object]) -> None:
    """Retrieve what a cancelled or abandoned task raised (no 'never retrieved' warning)."""
    if not task.cancelled():
        task.exception()
