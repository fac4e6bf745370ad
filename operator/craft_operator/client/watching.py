"""Waiting on one CraftSandbox by watch: read it once, then follow its changes.

The watch starts at the version read and is resumed from the last version seen when the
server ends it or the connection drops; a ``410 Gone`` (the version is too old to resume
from) reads the object afresh. Nothing is polled.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from craft_operator.client.errors import ApiError, Request, WaitTimeoutError
from craft_operator.client.objects import sandbox_path
from craft_operator.client.readiness import progress_of
from craft_operator.client.transport import Transport

#: Seconds one watch request stays open before the client resumes it.
WATCH_SECONDS = 240
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
    ) -> T:
        """What ``decide`` returns first; :class:`WaitTimeoutError` after ``timeout`` s."""
        last: list[Object | None] = [None]
        try:
            async with asyncio.timeout(timeout):
                return await self._follow(namespace, name, decide, last)
        except TimeoutError:
            seen = last[0]
            shown = progress_of(seen).message if seen is not None else "not found"
            where = f'CraftSandbox "{name}" in namespace "{namespace}"'
            raise WaitTimeoutError(f"{where}: {what}", timeout, shown) from None

    async def _follow(
        self, namespace: str, name: str, decide: Decide[T], last: list[Object | None]
    ) -> T:
        failures = 0
        version: str | None = None
        while True:
            if version is None:  # first, or after an expired watch: read afresh
                last[0] = await self._read(namespace, name)
                result = await decide(last[0])
                if result is not None:
                    return result
                version = (last[0] or {}).get("metadata", {}).get("resourceVersion") or "0"
            events = 0
            try:
                async for kind, obj in self._events(namespace, name, version):
                    events += 1
                    if kind == "ERROR":  # 410 Expired, sent as an event: read afresh
                        version = None
                        break
                    version = obj.get("metadata", {}).get("resourceVersion") or version
                    if kind == "BOOKMARK" or obj.get("metadata", {}).get("name") != name:
                        continue
                    last[0] = None if kind == "DELETED" else obj
                    result = await decide(last[0])
                    if result is not None:
                        return result
            except ApiError as exc:
                if exc.status == 410:
                    version = None
                    continue
                failures += 1
                if not exc.retryable or failures >= self._http.retry.attempts:
                    raise
                await self._http.backoff(failures, exc.retry_after)
                continue
            # Ended by the server: resume at once, unless it keeps ending with nothing.
            failures = 0 if events else failures + 1
            if failures:
                await self._http.backoff(min(failures, self._http.retry.attempts))

    async def _events(
        self, namespace: str, name: str, version: str
    ) -> AsyncIterator[tuple[str, Object]]:
        self._requests["watch"] += 1
        params = {
            "fieldSelector": f"metadata.name={name}",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_SECONDS),
        }
        stream = self._http.watch(
            sandbox_path(namespace),
            Request("watch", namespace, name),
            params,
            read_timeout=WATCH_SECONDS + 30,
        )
        async for event in stream:
            yield str(event.get("type") or ""), dict(event.get("object") or {})
