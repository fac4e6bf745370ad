"""Calls that a pass waits for a little, and that outlive it when they take longer.

The PAT's delivery runs onyx-cli in the sandbox pod, which the agent controls: it may make
the call hang until its timeout (60 s). A pass that waited that long would hold one of the
reconcile workers the whole time, and some dozens of such pods could hold them all. So a
pass waits :attr:`DetachedCalls.inline` seconds (nearly every delivery ends well within),
and a call still running then goes on without it: the sandbox is woken
(:attr:`DetachedCalls.wake`) when it ends, and its next pass takes the result. At most
``limit`` calls run at once, within their pass's wait or detached (each holds a connection
of the exec session, which the library syncs share); beyond that a call is not started,
and the sandbox waits: a detached call's end wakes the sandbox that has waited longest
(which may find the room taken again: its step also comes back on its own). A pass never
waits longer than ``inline`` seconds.

A pod that once kept its call past the pass's wait may do so again (its agent controls
it): the later calls for that pod (its ``owner``) run in a slow lane of at most
``slow_limit`` of the ``limit`` calls. However many such pods there are, the others' calls
keep the rest of the room, and a pod's first hang holds a place for at most one call.

A pass that leaves its call running ends well, which resets the work queue's backoff; so
the calls' failures are counted here (:meth:`DetachedCalls.failed`), and a failed call is
not started again before its own backoff has passed (:meth:`DetachedCalls.retry_in`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from craft_operator.reconciler.queue import Backoff

T = TypeVar("T")
#: A sandbox: (namespace, name).
Key = tuple[str, str]
#: Calls running at once by default (the PAT and SKILL.md deliveries' limit): each holds
#: one of the exec session's streams, which the operator sizes to fit them beside the
#: library syncs (``craft_operator.runtime.exec_streams``).
DEFAULT_LIMIT = 32


@dataclass
class _Call(Generic[T]):
    attempt: str
    task: asyncio.Task[T]
    #: The pod the call runs in ("": unknown); a pod whose call ran past the wait is slow.
    owner: str = ""
    #: Whether it runs in the slow lane.
    slow: bool = False
    detached: bool = field(default=False)


@dataclass(frozen=True)
class _Failures:
    #: What the failed calls were for (a pod and PAT, say).
    target: str
    count: int
    #: The event loop's time before which the attempt is not started again.
    until: float


class DetachedCalls(Generic[T]):
    """One call at a time per sandbox, waited for ``inline`` seconds by the pass that asks
    for it; see the module docstring."""

    def __init__(
        self,
        *,
        inline: float = 2.0,
        limit: int = DEFAULT_LIMIT,
        slow_limit: int | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        """``backoff`` spaces the retries of a call that failed (1 s doubling to 5 min);
        ``slow_limit`` (a quarter of ``limit`` unless given) bounds the slow lane."""
        self.inline = inline
        self.limit = limit
        self.slow_limit = max(1, limit // 4) if slow_limit is None else slow_limit
        self._backoff = backoff or Backoff()
        self._calls: dict[Key, _Call[T]] = {}
        self._failures: dict[Key, _Failures] = {}
        #: Sandboxes whose call waits for room, in the order they came (a dict as a set),
        #: each with whether its call is for the slow lane.
        self._turns: dict[Key, bool] = {}
        #: The pod of each sandbox whose call ran past the wait: its calls are slow.
        self._slow_owners: dict[Key, str] = {}
        #: Set by :meth:`drain`: the operator stops, and no call outlives a pass any more.
        self._stopping = False
        #: Called with a sandbox's key when a call no pass waits for ends (the queue's add).
        self.wake: Callable[[Key], None] | None = None

    @property
    def unfinished(self) -> int:
        """Calls running, whether a pass waits for them or not (what ``limit`` bounds)."""
        return sum(1 for call in self._calls.values() if not call.task.done())

    @property
    def unfinished_slow(self) -> int:
        """Calls running in the slow lane (what ``slow_limit`` bounds)."""
        return sum(1 for call in self._calls.values() if call.slow and not call.task.done())

    def _has_room(self, slow: bool) -> bool:
        if self.unfinished >= self.limit:
            return False
        return not slow or self.unfinished_slow < self.slow_limit

    def is_slow(self, key: Key, owner: str) -> bool:
        """Whether a call for ``key`` in the pod ``owner`` runs in the slow lane: an
        earlier one in that pod ran past its pass's wait."""
        return bool(owner) and self._slow_owners.get(key) == owner

    async def result(
        self, key: Key, attempt: str, start: Callable[[], Awaitable[T]], *, owner: str = ""
    ) -> T | None:
        """The result of the call ``attempt`` for ``key`` (what it raised, raised): started
        unless it runs already, waited for up to ``inline`` seconds; ``None`` while it runs
        on (the sandbox is woken when it ends), while it waits for room to run (see
        :meth:`waiting`; woken when there is), or if it was cancelled meanwhile (the sandbox
        is gone, or the operator stands by). A call for another attempt (another pod or PAT)
        is cancelled first, unless it runs in the same pod: the new one then waits for its
        end (``None``; the sandbox is woken then), since a cancelled exec's command runs on
        in the pod, and would write its older PAT over the new one. Once the operator
        stops, a call runs within its pass. ``owner`` is the pod the call runs in: one whose
        call ran past the wait is slow from then on (see the module docstring)."""
        call = self._calls.get(key)
        if call is not None and call.attempt != attempt:
            if owner and call.owner == owner and not call.task.done():
                call.detached = True  # (it is, or its pass ended: its end wakes the sandbox)
                return None
            self._drop(key, call)
            call = None
        if call is not None and call.detached and not call.task.done():
            return None  # a pass waited for it already: the sandbox is woken when it ends
        if call is None:
            if self._stopping:
                return await start()  # the queue's stop bounds (and cancels) the pass
            slow = self.is_slow(key, owner)
            if not self._has_room(slow):
                self._turns[key] = slow  # no room: woken when a detached call ends
                return None
            self._turns.pop(key, None)
            call = _Call(attempt, asyncio.ensure_future(start()), owner, slow)
            self._calls[key] = call
            call.task.add_done_callback(lambda _: self._ended(key, call))
        done, _ = await asyncio.wait({call.task}, timeout=self.inline)
        if not done:
            call.detached = True
            if call.owner:
                self._slow_owners[key] = call.owner
            return None
        if self._calls.get(key) is call:
            del self._calls[key]
        if call.task.cancelled():
            # Forgotten or closed while this pass waited: a CancelledError raised here
            # would end the reconcile worker, not the pass.
            return None
        return call.task.result()

    def running(self, key: Key) -> bool:
        """Whether a call for ``key`` runs now."""
        call = self._calls.get(key)
        return call is not None and not call.task.done()

    def waiting(self, key: Key) -> bool:
        """Whether ``key``'s call waits for room to run (``limit`` calls run on)."""
        return key in self._turns

    def retry_in(self, key: Key, target: str) -> float:
        """Seconds before a call for ``target`` (a pod and PAT, say) may be started again
        after it failed (0: now; another target is never held back)."""
        failed = self.failed_target(key)
        return failed[1] if failed is not None and failed[0] == target else 0.0

    def failed(self, key: Key, target: str) -> float:
        """Count a failure of a call for ``target`` (one that may pass when tried again);
        returns the seconds before it may be. A new target counts from one again."""
        previous = self._failures.get(key)
        count = 1 if previous is None or previous.target != target else previous.count + 1
        delay = self._backoff.delay(count)
        until = asyncio.get_running_loop().time() + delay
        self._failures[key] = _Failures(target, count, until)
        return delay

    def failed_target(self, key: Key) -> tuple[str, float] | None:
        """What ``key``'s last failed call was for, and the seconds left of its backoff
        (``None``: none failed, or its backoff has passed)."""
        failures = self._failures.get(key)
        if failures is None:
            return None
        left = failures.until - asyncio.get_running_loop().time()
        return (failures.target, left) if left > 0 else None

    def clear_failures(self, key: Key) -> None:
        """A call for ``key`` succeeded, or what it failed for changed (its spec was
        edited, say): its failures are forgotten."""
        self._failures.pop(key, None)

    def forget(self, key: Key) -> None:
        """The sandbox is gone: cancel its call and forget its failures and its turn."""
        self._failures.pop(key, None)
        self._turns.pop(key, None)
        self._slow_owners.pop(key, None)
        call = self._calls.get(key)
        if call is not None:
            self._drop(key, call)

    async def drain(self, grace: float) -> None:
        """The operator stops: let the calls under way end within ``grace`` seconds, then
        cancel the rest; from now on no call outlives its pass."""
        self._stopping = True
        running = [call.task for call in self._calls.values() if not call.task.done()]
        if running and grace > 0:
            await asyncio.wait(running, timeout=grace)
        await self.close()

    async def close(self) -> None:
        """Cancel every call and forget every result, failure and turn (the operator stops,
        or stands by)."""
        calls, self._calls = list(self._calls.values()), {}
        self._failures.clear()
        self._turns.clear()
        self._slow_owners.clear()
        for call in calls:
            call.task.cancel()
        await asyncio.gather(*(call.task for call in calls), return_exceptions=True)

    def _drop(self, key: Key, call: _Call[T]) -> None:
        del self._calls[key]
        call.task.cancel()
        call.task.add_done_callback(_consume)

    def _ended(self, key: Key, call: _Call[T]) -> None:
        if self._calls.get(key) is call and call.detached and self.wake is not None:
            self.wake(key)
        self._next_turn(call)

    def _next_turn(self, call: _Call[T]) -> None:
        """A detached call ended: wake the sandbox whose call waited longest for room it
        has now, the slow lane's or the rest (no place is kept for it: a sandbox that no
        longer needs its call must not hold up the others; the step comes back on its own
        too)."""
        if not call.detached or self.wake is None:
            return
        for key, slow in self._turns.items():
            if self._has_room(slow):
                del self._turns[key]
                self.wake(key)
                return


def _consume(task: asyncio.Task[object]) -> None:
    """Retrieve what a cancelled or abandoned task raised (no 'never retrieved' warning)."""
    if not task.cancelled():
        task.exception()
