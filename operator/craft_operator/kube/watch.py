"""A watch stream of one kind in one namespace (or all), kept open for the operator's life.

kopf hands each watch event to a worker of its own per object, which builds the event's
causes, handler state, patch and logger before calling the handler: about a millisecond of
CPU per event, for handlers that only put the object in the cache. The children of the
sandboxes and pools stream many events (a claim and its refill about seven), so they are
watched here, the way client-go's reflector does it, and each event is one function call:

- a stream starts with a list (a page at a time): ``ADDED`` for each object, ``DELETED``
  for each object the consumer holds (``known``) that the list does not, with the list's
  version (a newer object of the same name, written after the list, is kept by the cache);
  the watch then starts at the list's version, so nothing between the two is lost; the
  consumer is told when a list begins and ends (``list_begins``, ``list_ends``): what it
  held from before is replaced by the list's, whatever the versions (etcd restored from a
  backup has older ones);
- each event, and each ``BOOKMARK`` (``allowWatchBookmarks``), moves the version the stream
  resumes from; the server ends a watch after ``timeoutSeconds`` (jittered, so that the
  streams do not all reconnect at once) and the next one resumes there;
- a version the server no longer has (410 Gone, as a status or as an ``ERROR`` event)
  means the events between are unknown: the stream lists afresh, as at the start (after a
  backoff if the refused version is that of a list just made: a server doing that on every
  list would loop);
- a version the server does not have yet ("too large resource version", 504: a server
  behind the others) is watched again after a backoff; after three such answers in a row
  (etcd restored from a backup: it never will have it) the stream lists afresh;
- a consumer that fails on an event has missed it: the stream lists afresh when the watch
  it is on ends (not at once: a consumer failing on every listing would loop);
- any other failure (refused, unreachable, a garbled line, a watch ended at once without a
  line, a list whose continue token expired) is logged and retried after a backoff that
  grows with consecutive failures, resuming where the stream was; a watch cut after the
  server answered it starts the backoff again from its first step;
- a stream silent for longer than ``client_timeout`` (bookmarks come about once a minute)
  is taken as stalled and reopened.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any

import aiohttp

from craft_operator.kube import jsonio
from craft_operator.kube.client import LIST_PAGE_SIZE, ApiError, Kind, KubeClient, api_error

logger = logging.getLogger(__name__)

#: ``(event type, object)``: ``ADDED``, ``MODIFIED`` or ``DELETED``.
EventHandler = Callable[[str, dict[str, Any]], None]

#: The ``(namespace, name)`` of each object the consumer holds from the stream.
KnownKeys = Callable[[], Iterable[tuple[str, str]]]

#: The longest line (one object) a stream accepts; etcd keeps objects of at most 1.5 MiB.
MAX_LINE_BYTES = 8 * 1024 * 1024

#: A watch the server ends sooner than this without sending a line is a failure (backoff),
#: not the normal end of a watch: a server doing it on every watch would be hammered.
EMPTY_WATCH_SECONDS = 1.0

#: A watch resumed after a failure replays what it missed (a NetworkPolicy deleted during
#: an outage) at once, as a burst that may take several reads, or sends an ERROR 410 inside
#: its 200 (the stream then lists afresh); nothing marks the end of a replay. So the
#: stream's view counts as current again once the watch has been quiet this long after its
#: last read ...
REPLAY_QUIET_SECONDS = 0.25
#: ... or this long after its answer if it sent nothing ...
REPLAY_SILENCE_SECONDS = 1.0
#: ... and at the latest this long after its answer (a namespace that is never quiet).
REPLAY_LIMIT_SECONDS = 5.0


#: The outcomes counted in ``KubeClient.watch_outcomes``: a list made (at the start, and
#: whenever events may have been missed), a watch or list failed (retried after a backoff),
#: and (up and down) the streams failing now.
LIST = "list"
FAILURE = "failure"
FAILING = "failing"

#: Watches in a row answered "too large resource version" before the stream lists afresh.
TOO_LARGE_TRIES = 3


class Expired(Exception):  # noqa: N818 (the API server's name for it)
    """The version a watch was to resume from is gone from the server: list afresh."""


class TooLarge(Expired):
    """The version is newer than the server's: a server behind the one it came from (its
    cache catches up), or etcd restored from a backup (it never will)."""


def expiry(code: int, message: str) -> type[Expired] | None:
    """What an API error says of the watch's version: gone (410), not there yet (504 "Too
    large resource version"), or nothing."""
    if code == 410:
        return Expired
    if code == 504 and "too large resource version" in message.lower():
        return TooLarge
    return None


class WatchStream:
    """Streams the events of ``kind`` (in ``namespace``, or all) to ``on_event``."""

    def __init__(
        self,
        kube: KubeClient,
        kind: Kind,
        namespace: str | None,
        on_event: EventHandler,
        *,
        known: KnownKeys,
        label_selector: str | None = None,
        server_timeout: int = 300,
        client_timeout: float = 400.0,
        backoff: Callable[[int], float] | None = None,
        on_failing: Callable[[bool], None] | None = None,
        list_begins: Callable[[], None] | None = None,
        list_ends: Callable[[str | None], None] | None = None,
        list_event: Callable[[], AbstractContextManager[object]] | None = None,
        replay: tuple[float, float, float] = (
            REPLAY_QUIET_SECONDS,
            REPLAY_SILENCE_SECONDS,
            REPLAY_LIMIT_SECONDS,
        ),
    ) -> None:
        """One stream; :meth:`run` keeps it open until cancelled.

        ``known`` gives what the consumer holds of this kind and scope: after a list, those
        of them missing from it are handed over as ``DELETED``. ``on_failing(True)`` is
        called when the stream starts failing, ``on_failing(False)`` when its view is whole
        again: a list is in (after its events), or a resumed watch has replayed what it
        missed (``replay``: quiet, silence and limit, see :data:`REPLAY_QUIET_SECONDS`).
        ``list_begins()`` is called as a list begins, ``list_ends(version)`` once its events
        are handed over, with its version (``None``: the list failed); each of those events
        is handed over within ``list_event()``.
        """
        self._kube = kube
        self._kind = kind
        self._namespace = namespace
        self._on_event = on_event
        self._known = known
        self._selector = label_selector
        self._server_timeout = server_timeout
        self._client_timeout = client_timeout
        self._backoff = backoff or _default_backoff
        self._on_failing = on_failing
        self._list_begins = list_begins
        self._list_ends = list_ends
        self._list_event = list_event
        self._replay = replay
        #: The version the next watch starts from; ``None``: list first.
        self.resource_version: str | None = None
        self._relist_needed = False
        #: Lines received by the current (or last) watch.
        self._lines = 0
        #: Watches in a row the server answered "too large resource version".
        self._too_large = 0
        self._failing = False
        #: When the server answered the current watch (200; loop time), if it did.
        self._answered: float | None = None
        #: Lists and watches made (for tests and the curious).
        self.lists = 0
        self.watches = 0

    @property
    def name(self) -> str:
        """What is watched, for logs."""
        scope = self._namespace or "all namespaces"
        return f"{self._kind.plural} in {scope}"

    async def run(self) -> None:
        """List, then watch, until cancelled; never returns or raises otherwise."""
        await self._kube.connected.wait()
        failures = 0
        try:
            while True:
                fresh, self._answered = False, None
                try:
                    if self.resource_version is None or self._relist_needed:
                        self.resource_version, self._relist_needed = None, False
                        await self._list()
                        fresh = True
                    await self._watch()
                    failures, self._too_large = 0, 0
                except TooLarge as exc:
                    # A server behind the one the version came from: its cache catches up,
                    # so the same version is watched again after a backoff. A version that
                    # stays too large (etcd restored from a backup) is listed afresh.
                    self._too_large += 1
                    if self._too_large >= TOO_LARGE_TRIES:
                        self.resource_version, self._too_large = None, 0
                    failures += 1
                    await self._back_off(failures, f"{exc}; the version is the server's future")
                except Expired as exc:
                    self.resource_version = None
                    if fresh and self._lines == 0:
                        # The version of a list just made is already unknown to the server:
                        # listing again at once could go on as fast as the loop turns.
                        failures += 1
                        await self._back_off(failures, f"{exc} right after a list")
                    else:
                        logger.info("watch of %s: %s; listing afresh", self.name, exc)
                        failures = 0
                        # Until the list is in, what is held may include objects deleted
                        # meanwhile (a NetworkPolicy whose absence holds pods back).
                        self._set_failing(True)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    # A watch the server had answered, cut later, is a first failure: the
                    # backoff grows only while nothing is answered.
                    failures = 1 if self._was_healthy() else failures + 1
                    await self._back_off(failures, f"{type(exc).__name__}: {exc}")
        finally:
            self._set_failing(False)

    def _was_healthy(self) -> bool:
        """Whether the watch that failed had been answered and then sent a line or stayed
        open a while: its cut is a new first failure, not one more refusal in a row."""
        if self._answered is None:
            return False
        open_for = asyncio.get_running_loop().time() - self._answered
        return self._lines > 0 or open_for >= EMPTY_WATCH_SECONDS

    async def _back_off(self, failures: int, why: str) -> None:
        """Count and log a failure, then wait the backoff of ``failures`` in a row."""
        self._kube.watch_outcomes[(self._kind.plural, FAILURE)] += 1
        self._set_failing(True)
        delay = self._backoff(failures)
        logger.warning("watch of %s failed (%s); again in %.1fs", self.name, why, delay)
        await asyncio.sleep(delay)

    def _whole_again(self) -> None:
        self._set_failing(False)

    def _set_failing(self, failing: bool) -> None:
        """Keep the count of failing streams (``KubeClient.watch_outcomes``) true: a stream
        is failing from a failure until its view is whole again (its next list is in, or
        its resumed watch has replayed what it missed: see :class:`_Settling`)."""
        if failing != self._failing:
            self._failing = failing
            self._kube.watch_outcomes[(self._kind.plural, FAILING)] += 1 if failing else -1
            if self._on_failing is not None:
                try:
                    self._on_failing(failing)
                except Exception:  # a consumer's bug must not stop the stream
                    logger.exception("watch of %s: the failing handler failed", self.name)

    async def _list(self) -> None:
        """List the objects: each one ``ADDED``, each one the consumer holds and the list
        does not ``DELETED``; the next watch starts at the list's version."""
        if self._list_begins is not None:
            self._list_begins()
        version: str | None = None
        try:
            version = await self._list_pages()
        finally:
            if self._list_ends is not None:
                self._list_ends(version)
        self._set_failing(False)  # after the deletions: the view is whole again
        self.resource_version = version

    async def _list_pages(self) -> str:
        """The list's events handed over; its version."""
        params = {"limit": str(LIST_PAGE_SIZE)}
        if self._selector:
            params["labelSelector"] = self._selector
        path = self._kind.path(self._namespace)
        listed: set[tuple[str, str]] = set()
        token, version = "", ""
        while True:
            # A continue token that expired (410) is a failure like any other: the list is
            # made again from the start, after a backoff.
            page = await self._kube.request(
                "GET", path, params={**params, "continue": token} if token else params
            )
            meta = page.get("metadata") or {}
            # Every page of a list is read at the first page's version.
            version = version or str(meta.get("resourceVersion") or "")
            for obj in page.get("items") or []:
                item = obj.get("metadata") or {}
                listed.add((str(item.get("namespace") or ""), str(item.get("name") or "")))
                self._deliver_listed("ADDED", obj)
            token = meta.get("continue") or ""
            if not token:
                break
        if not version:
            raise ApiError(0, "InvalidResponse", "a list without a resourceVersion")
        self.lists += 1
        self._kube.watch_outcomes[(self._kind.plural, LIST)] += 1
        for namespace, name in sorted(set(self._known()) - listed):
            gone = {"name": name, "resourceVersion": version}
            if namespace:
                gone["namespace"] = namespace
            self._deliver_listed("DELETED", {"metadata": gone})
        return version

    def _deliver_listed(self, kind: str, obj: dict[str, Any]) -> None:
        """Hand over an event of the list, within ``list_event()``."""
        with self._list_event() if self._list_event is not None else contextlib.nullcontext():
            self._deliver(kind, obj)

    def _deliver(self, kind: str, obj: dict[str, Any]) -> None:
        try:
            self._on_event(kind, obj)
        except Exception:  # a consumer's bug must not stop the stream
            logger.exception(
                "watch of %s: the %s event's handler failed; the stream lists afresh when its "
                "watch ends",
                self.name,
                kind,
            )
            self._relist_needed = True

    async def _watch(self) -> None:
        """One watch, from :attr:`resource_version`, until the server ends it."""
        params = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(int(self._server_timeout * (1 + random.random() / 4))),  # noqa: S311
            "resourceVersion": self.resource_version or "",
        }
        if self._selector:
            params["labelSelector"] = self._selector
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=self._client_timeout)
        session = self._kube.watch_session()
        self._kube.requests["WATCH"] += 1
        self.watches += 1
        loop = asyncio.get_running_loop()
        opened, self._lines = loop.time(), 0
        async with session.get(
            self._kind.path(self._namespace).lstrip("/"), params=params, timeout=timeout
        ) as response:
            if response.status >= 400:
                text = await response.text()
                if error := expiry(response.status, text):
                    raise error(f"{response.status} {text[:200]}")
                if response.status == 401:
                    self._kube.unauthorized.set()
                raise api_error(response.status, text)
            self._answered = loop.time()
            settling = _Settling(self._whole_again, *self._replay) if self._failing else None
            try:
                await self._read(response, settling)
            finally:
                if settling is not None:
                    settling.cancel()
        if not self._lines and loop.time() - opened < EMPTY_WATCH_SECONDS:
            raise ApiError(0, "WatchEnded", "the server ended the watch at once, without a line")

    async def _read(self, response: aiohttp.ClientResponse, settling: _Settling | None) -> None:
        """Dispatch the watch's events, line by line; a resumed watch's reads keep its view
        from counting as current until it goes quiet (``settling``), or ends."""
        buffer, scanned = bytearray(), 0
        async for chunk in response.content.iter_any():
            buffer += chunk
            start = 0
            while (end := buffer.find(b"\n", max(start, scanned))) >= 0:
                line = bytes(buffer[start:end])
                start, scanned = end + 1, end + 1
                if line.strip():
                    self._dispatch(line)
                    self._lines += 1
            del buffer[:start]
            scanned = len(buffer)
            if scanned > MAX_LINE_BYTES:
                raise ApiError(0, "InvalidResponse", "a watch event longer than 8 MiB")
            if settling is not None and self._failing:
                settling.read()
        if buffer.strip():
            self._dispatch(bytes(buffer))
            self._lines += 1
        if self._lines:
            self._set_failing(False)

    def _dispatch(self, line: bytes) -> None:
        event = jsonio.loads(line)
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            code, message = int(obj.get("code") or 0), str(obj.get("message") or "")[:1000]
            if error := expiry(code, message):
                raise error(f"{code} {message[:200]}")
            raise ApiError(code, str(obj.get("reason") or "Error"), message)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self._deliver(kind, obj)
        if version:
            self.resource_version = str(version)


class _Settling:
    """Marks a stream whose watch was resumed after a failure current again once the watch
    has gone quiet: ``quiet`` seconds after its last read, ``silence`` after its answer if
    it sent nothing, at the latest ``limit`` after its answer."""

    def __init__(
        self, current: Callable[[], None], quiet: float, silence: float, limit: float
    ) -> None:
        self._current, self._quiet = current, quiet
        self._loop = asyncio.get_running_loop()
        self._deadline = self._loop.time() + limit
        self._timer = self._loop.call_later(min(silence, limit), current)

    def read(self) -> None:
        """The watch sent more: wait for quiet again (never past the limit)."""
        self._timer.cancel()
        delay = min(self._quiet, max(0.0, self._deadline - self._loop.time()))
        self._timer = self._loop.call_later(delay, self._current)

    def cancel(self) -> None:
        """The watch ended."""
        self._timer.cancel()


def _default_backoff(failures: int) -> float:
    """1, 2, 4 ... 60 s, each from 75 % to 125 % of that (up to 75 s): the streams of a
    replica (kinds times namespaces) that an API server's restart cut come back spread out."""
    return float(min(60, 2 ** min(failures - 1, 6))) * random.uniform(0.75, 1.25)  # noqa: S311
