"""HTTP to the Kubernetes API on aiohttp: requests with retries, and watch streams.

Throttling (429, honouring ``Retry-After``), server errors (5xx) and network trouble are
retried with capped exponential backoff and full jitter; every request the client makes is
idempotent (apply, merge patches, reads, deletes), so resending one is safe. A refusal
becomes the typed error of :mod:`craft_operator.client.errors` that says what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import ssl
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from craft_operator import __version__
from craft_operator.client.connection import Connection
from craft_operator.client.errors import (
    ADMISSION_DENIALS,
    AdmissionDeniedError,
    ApiError,
    ConfigurationError,
    ConflictError,
    CrdMissingError,
    FieldConflictError,
    ForbiddenError,
    InvalidError,
    NotFoundError,
    ObjectTooLargeError,
    Request,
    UnauthorizedError,
    UnreachableError,
)

USER_AGENT = f"craft-operator-client/{__version__}"
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
#: The longest single line of a watch stream (one object) the client accepts.
MAX_EVENT_BYTES = 16 * 1024 * 1024
#: Failures to connect: the request was never sent. (``ConnectionTimeoutError`` is
#: aiohttp 3.10's; before it a connect timeout was a plain timeout, which may have been sent.)
NOT_SENT: tuple[type[BaseException], ...] = (
    aiohttp.ClientConnectorError,
    getattr(aiohttp, "ConnectionTimeoutError", aiohttp.ClientConnectorError),
)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a failed request is tried again."""

    attempts: int = 6
    base_delay: float = 0.25
    max_delay: float = 10.0
    #: The longest ``Retry-After`` honoured; a server asking for more gets this.
    max_retry_after: float = 60.0

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds to wait before try ``attempt + 1`` (``attempt`` counts from 1)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        ceiling = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return rng.uniform(ceiling / 2, ceiling)


@dataclass
class _LoopSession:
    """The session of one event loop, and what closes it when that loop shuts down."""

    session: aiohttp.ClientSession
    keeper: AsyncGenerator[None, None]


class Transport:
    """HTTP to one API server: an aiohttp session per event loop that uses it.

    A session belongs to the loop it was made in. A caller that runs ``asyncio.run()`` per
    task (e.g. a Celery task) gets one per run, closed as that run ends: ``asyncio.run``
    closes a loop's async generators before the loop itself, and the session's keeper is
    one. A session whose loop was closed some other way is closed (as far as aiohttp can
    without its loop) the next time the client is used, or by :meth:`close`.

    A session's pool has no limit on connections (aiohttp's default is 100): a call never
    waits for a connection another call holds, so a request's timeout is always the
    network's or the server's, never the pool's.
    """

    def __init__(
        self,
        connection: Connection,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.connection = connection
        self.retry = retry or RetryPolicy()
        self._timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=min(timeout, 10.0))
        self._sessions: dict[asyncio.AbstractEventLoop, _LoopSession] = {}
        self._lock = threading.Lock()  # loops in several threads may share the client
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not security

    async def close(self) -> None:
        """Close the HTTP sessions: this loop's now, another running loop's on that loop."""
        with self._lock:
            entries = list(self._sessions.items())
            self._sessions.clear()
        current = asyncio.get_running_loop()
        for loop, entry in entries:
            if loop is current:
                await entry.keeper.aclose()
            elif loop.is_closed():
                await _close_orphan(entry)
            else:
                asyncio.run_coroutine_threadsafe(entry.keeper.aclose(), loop)

    async def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._sessions.get(loop)
            if entry is not None and not entry.session.closed:
                return entry.session
            orphans = [self._sessions.pop(old) for old in list(self._sessions) if old.is_closed()]
            session = aiohttp.ClientSession(
                base_url=self.connection.server.rstrip("/") + "/",
                headers={"Accept": JSON, "User-Agent": USER_AGENT},
                timeout=self._timeout,
                # No pool limit: a wait holds its watch's connection for minutes, and a
                # bounded pool shared with requests would let a process's waits starve its
                # other calls. Each connection serves one call a caller is making, so the
                # caller's own concurrency bounds them.
                connector=aiohttp.TCPConnector(limit=0, ssl=self.connection.ssl_context()),
            )
            entry = _LoopSession(session, self._keep(loop, session))
            self._sessions[loop] = entry
        await anext(entry.keeper)  # now the loop knows it, and closes it at its shutdown
        for orphan in orphans:
            await _close_orphan(orphan)
        return session

    async def _keep(
        self, loop: asyncio.AbstractEventLoop, session: aiohttp.ClientSession
    ) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            with self._lock:
                if (entry := self._sessions.get(loop)) is not None and entry.session is session:
                    del self._sessions[loop]
            if not session.closed:
                await session.close()

    async def backoff(self, attempt: int, retry_after: float | None = None) -> None:
        """Wait before try ``attempt + 1``, as the retry policy says."""
        await asyncio.sleep(self.retry.delay(attempt, retry_after, self._rng))

    async def request(
        self,
        method: str,
        path: str,
        what: Request,
        *,
        body: Any = None,
        content_type: str = JSON,
        params: Mapping[str, str] | None = None,
        retried: list[ApiError] | None = None,
    ) -> dict[str, Any]:
        """One API call, retried while retrying may help; the decoded answer.

        ``retried`` collects the errors of the tries that were retried.
        """
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._once(method, path, what, body, content_type, params)
            except ApiError as exc:
                if not exc.retryable or attempt >= self.retry.attempts:
                    raise
                if retried is not None:
                    retried.append(exc)
                await self.backoff(attempt, exc.retry_after)

    async def _once(
        self,
        method: str,
        path: str,
        what: Request,
        body: Any,
        content_type: str,
        params: Mapping[str, str] | None,
    ) -> dict[str, Any]:
        session = await self._session()
        data = None if body is None else json.dumps(body, separators=(",", ":"))
        headers = {**self.connection.authorization()}
        if data is not None:
            headers["Content-Type"] = content_type
        try:
            async with session.request(
                method, path.lstrip("/"), data=data, headers=headers, params=params
            ) as response:
                status, answered = response.status, response.headers
                raw, encoding = await response.read(), response.get_encoding()
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise _connection_error(exc, what, self.connection) from None
        except ValueError as exc:  # only the request's: the answer is decoded below
            raise _unsendable(exc, what, self.connection, headers) from None
        try:
            text = raw.decode(encoding)
            if status >= 400:
                raise api_error(status, text, what, answered)
            answer = json.loads(text) if text else {}
        except ValueError:
            raise UnreachableError(0, "InvalidResponse", "the answer is not JSON", what) from None
        return answer if isinstance(answer, dict) else {}

    async def watch(
        self,
        path: str,
        what: Request,
        params: Mapping[str, str],
        *,
        read_timeout: float,
        opened: Callable[[], object] | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The events of one watch connection, until the server ends it (not retried).

        ``opened()`` is called once the server accepted the watch (its response headers
        arrived, with a success status).
        """
        session = await self._session()
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=read_timeout)
        headers = self.connection.authorization()
        try:
            async with session.get(
                path.lstrip("/"),
                params={**params, "watch": "true"},
                headers=headers,
                timeout=timeout,
            ) as response:
                if response.status >= 400:
                    text = (await response.read()).decode("utf-8", "replace")
                    raise api_error(response.status, text, what, response.headers)
                if opened is not None:
                    opened()
                async for line in _lines(response.content, what):
                    yield _event(line, what)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise _connection_error(exc, what, self.connection) from None
        except ValueError as exc:  # only the request's: the stream's are UnreachableErrors
            raise _unsendable(exc, what, self.connection, headers) from None


async def _close_orphan(entry: _LoopSession) -> None:
    """Close the session of a loop closed without closing it (not by ``asyncio.run``).

    Its connections cannot be closed on their own loop any more: aiohttp drops them and the
    garbage collector closes their sockets. The keeper then has nothing left to await, so
    it is finished here rather than by the dead loop's finalizer (which would fail).
    """
    await entry.session.close()
    with contextlib.suppress(StopIteration, RuntimeError):
        entry.keeper.aclose().send(None)


def _event(line: bytes, what: Request) -> dict[str, Any]:
    """One line of a watch stream, decoded."""
    try:
        event = json.loads(line)
    except ValueError:
        message = "a watch event is not JSON"
        raise UnreachableError(0, "InvalidResponse", message, what) from None
    return event if isinstance(event, dict) else {}


async def _lines(stream: aiohttp.StreamReader, what: Request) -> AsyncIterator[bytes]:
    """Newline-delimited lines of any length up to :data:`MAX_EVENT_BYTES`."""
    buffer = bytearray()
    async for chunk in stream.iter_any():
        buffer.extend(chunk)
        while (end := buffer.find(b"\n")) >= 0:
            line = bytes(buffer[:end]).strip()
            del buffer[: end + 1]
            if line:
                yield line
        if len(buffer) > MAX_EVENT_BYTES:
            message = f"a watch event is larger than {MAX_EVENT_BYTES:,} bytes"
            raise UnreachableError(0, "InvalidResponse", message, what)
    if buffer.strip():
        yield bytes(buffer).strip()


def _connection_error(
    exc: BaseException, what: Request, connection: Connection
) -> ConfigurationError | UnreachableError:
    """What a network failure means: a server certificate the CA does not vouch for (not
    retried: it will not verify the next time either), else an unreachable server."""
    where = f"{connection.server} ({connection.source})" if connection.source else connection.server
    unverified = _verification_failure(exc)
    if unverified is not None:
        return ConfigurationError(
            f"{what.describe()}: the API server's certificate at {where} could not be "
            f"verified against {connection.ca_description()}: {unverified}; give the CA that "
            "signed it (certificate-authority or certificate-authority-data in the kubeconfig)"
        )
    detail = str(exc) or type(exc).__name__
    message = f"cannot reach the API server at {where}: {detail}"
    return UnreachableError(0, "Unreachable", message, what, sent=not isinstance(exc, NOT_SENT))


def _unsendable(
    exc: ValueError, what: Request, connection: Connection, headers: Mapping[str, str]
) -> ConfigurationError:
    """A request that cannot be sent as configured (not retried: it never can be), e.g. a
    token with a newline or other control character in it, which HTTP headers forbid. The
    cause is named, the token never: aiohttp's words, unless they quote a header."""
    detail = str(exc) or type(exc).__name__
    if any(value and value in detail for value in headers.values()):
        detail = type(exc).__name__
    where = f" ({connection.source})" if connection.source else ""
    return ConfigurationError(
        f"{what.describe()}: the request cannot be sent as configured{where}: {detail}; a "
        "token (inline or in a token file) with a newline or other control character in it "
        "is the usual cause"
    )


def _verification_failure(exc: BaseException) -> str | None:
    """OpenSSL's reason when ``exc`` is a failed verification of the server's certificate."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        exc = exc.certificate_error
    if isinstance(exc, ssl.SSLCertVerificationError):
        return exc.verify_message or exc.reason or "verification failed"
    return None


#: What etcd answers (through the API server, as a 500) to an object larger than it takes.
TOO_LARGE = "request is too large"


def api_error(
    status: int, text: str, what: Request, headers: Mapping[str, str] | None = None
) -> ApiError:
    """The typed error for an API server's refusal (a ``Status`` object, usually)."""
    reason, message = "Error", text[:500]
    details: Mapping[str, Any] = {}
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    if isinstance(payload, dict):
        reason = str(payload.get("reason") or reason)
        message = str(payload.get("message") or message)[:2000]
        details = payload.get("details") or {}
    error = _typed(status, reason, message, details, what)
    error.retry_after = _retry_after(headers or {}, details)
    return error


def _typed(
    status: int, reason: str, message: str, details: Mapping[str, Any], what: Request
) -> ApiError:
    if status == 401:
        return UnauthorizedError(status, reason, message, what)
    if status == 403:
        denied = any(marker in message for marker in ADMISSION_DENIALS)
        return (AdmissionDeniedError if denied else ForbiddenError)(status, reason, message, what)
    if status == 404:
        missing = "could not find the requested resource" in message
        return (CrdMissingError if missing else NotFoundError)(status, reason, message, what)
    if status == 409:
        causes = details.get("causes") or []
        owned = any(cause.get("reason") == "FieldManagerConflict" for cause in causes)
        return (FieldConflictError if owned else ConflictError)(status, reason, message, what)
    if status == 413 or (status == 500 and TOO_LARGE in message):
        return ObjectTooLargeError(status, reason, message, what)
    if status == 422:
        return InvalidError(status, reason, message, what)
    return ApiError(status, reason, message, what)


def _retry_after(headers: Mapping[str, str], details: Mapping[str, Any]) -> float | None:
    for value in (headers.get("Retry-After"), details.get("retryAfterSeconds")):
        try:
            return float(str(value))
        except (TypeError, ValueError):
            continue  # absent, or an HTTP date: back off as usual
    return None
