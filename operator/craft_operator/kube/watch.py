"""A watch stream of one kind in one namespace (or all), kept open for the operator's life.

kopf hands each watch event to a worker of its own per object, which builds the event's
causes, handler state, patch and logger before calling the handler: about a millisecond of
CPU per event, for handlers that only put the object in the cache. The children of the
sandboxes and pools stream many events (a claim and its refill about seven), so they are
watched here, the way client-go's reflector does it, and each event is one function call:

- the first watch of a stream has no ``resourceVersion``: the API server starts it with an
  ``ADDED`` event per existing object (from its watch cache), so no separate list is needed;
- each event, and each ``BOOKMARK`` (``allowWatchBookmarks``), moves the version the stream
  resumes from; the server ends a watch after ``timeoutSeconds`` and the next one resumes
  there without any event being lost or replayed;
- a version the server no longer has (410 Gone, as a status or as an ``ERROR`` event)
  means events were missed: the stream lists the objects afresh (``ADDED`` for each), says
  ``DELETED`` for each object it had handed over that the list no longer holds (with the
  list's version: a newer object of the same name in the cache stays), and watches on from
  the list's version;
- any other failure (refused, unreachable, a garbled line) is logged and retried after a
  backoff that grows with consecutive failures, resuming where the stream was;
- a stream silent for longer than ``client_timeout`` (bookmarks come about once a minute)
  is taken as stalled and reopened.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

import aiohttp

from craft_operator.kube.client import LIST_PAGE_SIZE, ApiError, Kind, KubeClient, api_error

logger = logging.getLogger(__name__)

#: ``(event type, object)``: ``ADDED``, ``MODIFIED`` or ``DELETED``.
EventHandler = Callable[[str, dict[str, Any]], None]

#: The longest line (one object) a stream accepts; etcd keeps objects of at most 1.5 MiB.
MAX_LINE_BYTES = 8 * 1024 * 1024


class Expired(Exception):  # noqa: N818 (the API server's name for it)
    """The version a watch was to resume from is gone from the server: start over."""


class WatchStream:
    """Streams the events of ``kind`` (in ``namespace``, or all) to ``on_event``."""

    def __init__(
        self,
        kube: KubeClient,
        kind: Kind,
        namespace: str | None,
        on_event: EventHandler,
        *,
        label_selector: str | None = None,
        server_timeout: int = 300,
        client_timeout: float = 330.0,
        backoff: Callable[[int], float] | None = None,
    ) -> None:
        """One stream; :meth:`run` keeps it open until cancelled."""
        self._kube = kube
        self._kind = kind
        self._namespace = namespace
        self._on_event = on_event
        self._selector = label_selector
        self._server_timeout = server_timeout
        self._client_timeout = client_timeout
        self._backoff = backoff or _default_backoff
        #: The version the next watch resumes from; ``None``: from the current state.
        self.resource_version: str | None = None
        #: The objects handed over and not deleted since, as (namespace, name).
        self._live: set[tuple[str, str]] = set()
        self._relist_needed = False
        #: Watches opened (for tests and the curious).
        self.watches = 0

    @property
    def name(self) -> str:
        """What is watched, for logs."""
        scope = self._namespace or "all namespaces"
        return f"{self._kind.plural} in {scope}"

    async def run(self) -> None:
        """Watch until cancelled; never returns or raises otherwise."""
        await self._kube.connected.wait()
        failures = 0
        while True:
            try:
                if self._relist_needed:
                    await self._relist()
                    self._relist_needed = False
                await self._watch()
                failures = 0
            except Expired:
                logger.info("watch of %s: version expired, listing afresh", self.name)
                self.resource_version = None
                self._relist_needed = True
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                delay = self._backoff(failures)
                logger.warning(
                    "watch of %s failed (%s: %s); again in %.1fs",
                    self.name,
                    type(exc).__name__,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)

    async def _relist(self) -> None:
        """List the objects (a page at a time): each one ``ADDED``, each one handed over
        before and missing now ``DELETED``; the next watch starts at the list's version."""
        params = {"limit": str(LIST_PAGE_SIZE)}
        if self._selector:
            params["labelSelector"] = self._selector
        path = self._kind.path(self._namespace)
        before, self._live = self._live, set()
        token, version = "", ""
        while True:
            page = await self._kube.request(
                "GET", path, params={**params, "continue": token} if token else params
            )
            meta = page.get("metadata") or {}
            version = str(meta.get("resourceVersion") or version)
            for obj in page.get("items") or []:
                self._deliver("ADDED", obj)
            token = meta.get("continue") or ""
            if not token:
                break
        for namespace, name in sorted(before - self._live):
            gone = {"namespace": namespace, "name": name, "resourceVersion": version}
            self._deliver("DELETED", {"metadata": gone})
        self.resource_version = version or None

    def _deliver(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if kind == "DELETED":
            self._live.discard(key)
        else:
            self._live.add(key)
        try:
            self._on_event(kind, obj)
        except Exception:  # a handler's bug must not stop the stream, nor replay it
            logger.exception("watch of %s: the %s event's handler failed", self.name, kind)

    async def _watch(self) -> None:
        """One watch, from :attr:`resource_version`, until the server ends it."""
        params = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self._server_timeout),
        }
        if self._selector:
            params["labelSelector"] = self._selector
        if self.resource_version:
            params["resourceVersion"] = self.resource_version
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=self._client_timeout)
        session = self._kube.watch_session()
        self._kube.requests["WATCH"] += 1
        self.watches += 1
        async with session.get(
            self._kind.path(self._namespace).lstrip("/"), params=params, timeout=timeout
        ) as response:
            if response.status == 410:
                raise Expired(await response.text())
            if response.status >= 400:
                raise api_error(response.status, await response.text())
            buffer = bytearray()
            async for chunk in response.content.iter_any():
                buffer += chunk
                while (end := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    if line.strip():
                        self._dispatch(line)
                if len(buffer) > MAX_LINE_BYTES:
                    raise ApiError(0, "InvalidResponse", "a watch event longer than 8 MiB")
            if buffer.strip():
                self._dispatch(bytes(buffer))

    def _dispatch(self, line: bytes) -> None:
        event = json.loads(line)
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Expired(str(obj.get("message", "")))
            raise ApiError(
                int(obj.get("code") or 0),
                str(obj.get("reason") or "Error"),
                str(obj.get("message") or "")[:1000],
            )
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self._deliver(kind, obj)
        if version:
            self.resource_version = str(version)


def _default_backoff(failures: int) -> float:
    return float(min(60, 2 ** min(failures - 1, 6)))
