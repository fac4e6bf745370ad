"""A bounded pool of daemon threads for blocking calls that may never return.

:class:`concurrent.futures.ThreadPoolExecutor`'s threads are joined when the interpreter
exits, so one thread stuck in a call (a database that accepts connections and never
answers) holds the process after SIGTERM until it is killed. These are daemon threads: once
the pool is shut down without waiting, nothing waits for them.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import itertools
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

_T = TypeVar("_T")
_P = ParamSpec("_P")


@dataclass(frozen=True)
class _Work:
    future: concurrent.futures.Future[Any]
    call: Callable[[], Any]


class DaemonThreadPool(concurrent.futures.Executor):
    """An executor of at most ``max_workers`` daemon threads, started as work comes and
    ended after ``idle_seconds`` without work.

    Unlike :class:`~concurrent.futures.ThreadPoolExecutor`, whose threads the interpreter
    joins at exit, a thread stuck in a call (a database that never answers) does not hold
    the process once the pool is shut down without waiting. While every thread is busy,
    work waits in a queue; work cancelled meanwhile never runs.
    """

    def __init__(self, max_workers: int, *, name: str, idle_seconds: float = 60.0) -> None:
        self._max_workers = max_workers
        self._name = name
        self._idle_seconds = idle_seconds
        self._numbers = itertools.count()
        self._changed = threading.Condition()
        self._pending: collections.deque[_Work] = collections.deque()
        self._threads: set[threading.Thread] = set()
        self._idle = 0
        self._closed = False

    @property
    def threads(self) -> int:
        """The pool's live threads (at most ``max_workers``)."""
        return len(self._threads)

    def submit(
        self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs
    ) -> concurrent.futures.Future[_T]:
        """Run ``fn(*args, **kwargs)`` in one of the pool's threads."""
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        with self._changed:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            # Work its caller gave up on would otherwise stay queued while threads hang.
            self._pending = collections.deque(w for w in self._pending if not w.future.done())
            self._pending.append(_Work(future, functools.partial(fn, *args, **kwargs)))
            if len(self._pending) > self._idle and len(self._threads) < self._max_workers:
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}-{next(self._numbers)}", daemon=True
                )
                self._threads.add(thread)
                thread.start()
            self._changed.notify()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Take no more work; cancel the queued work if told; join the threads if told."""
        with self._changed:
            self._closed = True
            if cancel_futures:
                for work in self._pending:
                    work.future.cancel()
                self._pending.clear()
            self._changed.notify_all()
            threads = list(self._threads)
        if wait:
            for thread in threads:
                thread.join()

    def _work(self) -> None:
        """A thread's life: run the queued work until the pool closes or has none for a while."""
        while (work := self._next()) is not None:
            if work.future.set_running_or_notify_cancel():
                try:
                    result = work.call()
                except BaseException as exc:  # the caller's to see, as ThreadPoolExecutor does
                    work.future.set_exception(exc)
                else:
                    work.future.set_result(result)
            del work  # its arguments are not kept alive while the thread waits

    def _next(self) -> _Work | None:
        """The next work to run, or None when the thread should end (it is then gone)."""
        with self._changed:
            self._idle += 1
            try:
                while not self._pending:
                    if self._closed or (
                        not self._changed.wait(self._idle_seconds) and not self._pending
                    ):
                        self._threads.discard(threading.current_thread())
                        return None
                return self._pending.popleft()
            finally:
                self._idle -= 1


#: Blocking calls that may outlast the operator (an S3 body trickling in): never joined at
#: exit, unlike asyncio's default executor, which ``asyncio.Runner`` waits for.
_BLOCKING = DaemonThreadPool(min(32, (os.cpu_count() or 1) + 4), name="craft-blocking")


async def in_daemon_thread(fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """``asyncio.to_thread`` on daemon threads: a call still running when the operator
    stops (its caller cancelled) does not hold the process's exit."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_BLOCKING, functools.partial(fn, *args, **kwargs))
