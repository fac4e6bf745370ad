"""Waiting on one CraftSandbox by watch: read it once, then follow its changes.

The watch starts at the version read and is resumed from the last version seen when the
server ends it or the connection drops. A ``410 Gone`` (the version is too old to resume
from: an object that has not changed for a while keeps a version older than the server's
watch window) reads the object afresh, for its existence, and watches from now, without a
version: the server then sends the object's current state as ``ADDED``; 410s in a row are
backed off. Watches that fail before the server accepted them (no connection, an error
status) are retried with backoff and fail the wait once the retry policy's attempts are
spent. A watch the server accepted (its response headers arrived) and that then ended or
was cut is no such failure, whether it delivered events or not: it resets that count and
is resumed after a short pause, so neither a proxy that cuts idle or long connections nor
the server's own watch timeout fails a wait while the sandbox has no news. A server that
ends every watch at once is resumed ever more slowly, never in a tight loop. Nothing is
polled.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, TypeVar

from craft_operator.client.errors import ApiError, Request, UnreachableError, WaitTimeoutError
from craft_operator.client.objects import sandbox_path
from craft_operator.client.readiness import progress_of
from craft_operator.client.transport import Transport, api_error

#: Seconds one watch request stays open before the client resumes it.
WATCH_SECONDS = 240
#: Seconds an accepted watch must have stayed open for its end to be routine (resumed after
#: the shortest pause); one that ends sooner is resumed after a pause that grows.
STEADY_SECONDS = 1.0
T = TypeVar("T")
Object = dict[str, Any]
#: Given the sandbox (``None``: it is gone), a result to return, ``None`` to go on, or raise.
Decide = Callable[[Object | None], Awaitable[T | None]]
Read = Callable[[str, str], Awaitable[Object | None]]


class Watcher:
    """Waits on sandboxes through ``http``; ``read`` gets one (``None`` if it is gone)."""

    def __init__(self, http: Transport, read: Read, requests: collections.Counter[str]) -> None:
        self._http = http
        self._read = read
        self._requests = requests

    async def until(
        self,
        namespace: str,
        name: str,
        decide: Decide[T],
        timeout: float,  # noqa: ASYNC109 - the wait's deadline, raised as WaitTimeoutError
        what: str,
        *,
        budget: float | None = None,
    ) -> T:
        """What ``decide`` returns first; :class:`WaitTimeoutError` after ``timeout`` s.

        ``budget`` is the caller's whole timeout when the wait has only what is left of it
        (after a write): the error names it, not ``timeout``. Anything ``decide`` raises (a
        ``TimeoutError`` of the caller's progress callback too) propagates as it is.
        """
        last: list[Object | None] = [None]
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                return await self._follow(namespace, name, decide, last)
        except TimeoutError:
            if not deadline.expired():
                raise  # not the wait's deadline: raised by decide or a callback
            seen = last[0]
            shown = progress_of(seen).message if seen is not None else "not found"
            where = f'CraftSandbox "{name}" in namespace "{namespace}"'
            seconds = timeout if budget is None else budget
            raise WaitTimeoutError(f"{where}: {what}", seconds, shown) from None

    async def _follow(
        self, namespace: str, name: str, decide: Decide[T], last: list[Object | None]
    ) -> T:
        what = Request("watch", namespace, name)
        failures = 0  # consecutive watches that failed before the server accepted them
        expired = 0  # consecutive 410s: the first is routine, the next ones are backed off
        brief = 0  # consecutive accepted watches that ended, empty, within STEADY_SECONDS
        version: str | None = None  # None: read first; "": watch from now
        fresh = True
        while True:
            if version is None:
                last[0] = await self._read(namespace, name)
                result = await decide(last[0])
                if result is not None:
                    return result
                read = (last[0] or {}).get("metadata", {}).get("resourceVersion") or "0"
                # After a 410 the version read is as old as the one that expired (an
                # unchanged object keeps it): watch from now instead.
                version = read if fresh else ""
                fresh = False
            from_now = version == ""
            delivered = False
            error: ApiError | None = None
            opened: list[float] = []  # when the server accepted the watch
            try:
                watch = self._events(namespace, name, version, opened)
                async with contextlib.aclosing(watch) as events:
                    async for kind, obj in events:
                        if kind == "ERROR":
                            error = _event_error(obj, what)
                            break
                        # A watch from now opens with the current state as ADDED: not news.
                        delivered = delivered or not (from_now and kind == "ADDED")
                        version = obj.get("metadata", {}).get("resourceVersion") or version
                        if kind == "BOOKMARK" or obj.get("metadata", {}).get("name") != name:
                            continue
                        last[0] = None if kind == "DELETED" else obj
                        result = await decide(last[0])
                        if result is not None:
                            return result
            except ApiError as exc:
                error = exc
            if delivered:
                failures = expired = brief = 0
            if error is not None and error.status == 410:
                expired += 1
                version = None
                if expired > 1:
                    await self._http.backoff(min(expired - 1, self._http.retry.attempts))
                continue
            if delivered:
                if error is not None:  # dropped after delivering: resume, not in a tight loop
                    await self._http.backoff(1)
                continue
            if error is None or (opened and _cut(error)):
                # Accepted, then ended or cut with nothing to say: the server is up and the
                # sandbox has no news (an idle proxy's cut, the watch's timeoutSeconds).
                failures = expired = 0
                steady = bool(opened) and time.monotonic() - opened[0] >= STEADY_SECONDS
                brief = 0 if steady else brief + 1
                await self._http.backoff(min(brief + 1, self._http.retry.attempts))
                continue
            failures += 1
            if not error.retryable or failures >= self._http.retry.attempts:
                raise error
            await self._http.backoff(failures, error.retry_after)

    async def _events(
        self, namespace: str, name: str, version: str, opened: list[float]
    ) -> AsyncGenerator[tuple[str, Object], None]:
        self._requests["watch"] += 1
        params = {
            "fieldSelector": f"metadata.name={name}",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_SECONDS),
        }
        if version:  # unset: from now, the current state first
            params["resourceVersion"] = version
        stream = self._http.watch(
            sandbox_path(namespace),
            Request("watch", namespace, name),
            params,
            read_timeout=WATCH_SECONDS + 30,
            opened=lambda: opened.append(time.monotonic()),
        )
        async with contextlib.aclosing(stream):
            async for event in stream:
                yield str(event.get("type") or ""), dict(event.get("object") or {})


def _cut(error: ApiError) -> bool:
    """Whether ``error`` is the connection's loss (a proxy's cut, a read timeout), not an
    answer: a status, an ``ERROR`` event or a stream that is not the API's."""
    return isinstance(error, UnreachableError) and error.reason == "Unreachable"


def _event_error(status: Object, what: Request) -> ApiError:
    """The error an ``ERROR`` event reports (its object is a ``Status``; 410 Expired mostly)."""
    try:
        code = int(status.get("code") or 500)
    except (TypeError, ValueError):
        code = 500
    return api_error(code, json.dumps(status), what)
