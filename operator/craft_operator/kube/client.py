"""A small async client for the Kubernetes API, on aiohttp, over plain dicts.

The operator reads and writes a handful of kinds; a thin client keeps its CPU cost per
request low (no model classes), counts every request by verb (for metrics and the
benchmarks), and maps API errors to a few typed exceptions the reconciler acts on.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import aiohttp
import kopf

from craft_operator import __version__
from craft_operator.kube import jsonio, kinds
from craft_operator.kube.connection import auth_headers, ssl_context
from craft_operator.kube.exec import holds_piece_of
from craft_operator.kube.kinds import Kind as Kind  # re-exported: the clients' callers name it
from craft_operator.pat_format import PAT_PREFIX

#: The API kinds the operator uses, from the registry (:mod:`craft_operator.kube.kinds`).
PODS = kinds.POD.api
SECRETS = kinds.SECRET.api
CONFIGMAPS = kinds.CONFIGMAP.api
PVCS = kinds.PVC.api
JOBS = kinds.JOB.api
NETWORKPOLICIES = kinds.NETWORK_POLICY.api
SANDBOXES = kinds.SANDBOX.api
POLICIES = kinds.POLICY.api
NAMESPACES = kinds.NAMESPACE.api

USER_AGENT = f"craft-operator/{__version__}"

#: Seconds a requests or watches session of an earlier login stays open for the requests
#: and watches still on it (a watch ends within about six minutes). The streams session
#: stays open for ``stream_grace`` (an exec may take as long as a library sync).
RETIRED_SESSION_GRACE = 600.0
#: Objects per page of a list: a relist of 10,000 sandboxes' objects holds one page at a
#: time, as kopf's own lists do.
LIST_PAGE_SIZE = 500
#: How many times a list starts again when its continue token expired (410) before the
#: expiry is the list's failure, which its callers back off from: a server that refuses
#: every token (an aggregated API, a proxy that keeps no state) would otherwise be listed
#: again as fast as it answers, for ever.
LIST_RESTARTS = 3


#: Answers meaning the API server is away: none (refused, cut, timed out), too busy or not
#: serving yet (429 while its storage initializes, 503), or a proxy in front of it saying so.
AWAY_STATUSES = frozenset({0, 429, 502, 503, 504})


class ApiError(Exception):
    """The API server refused a request; ``status`` and ``reason`` say how, and ``details``
    (the Status object's, e.g. ``name`` and ``kind`` of a 404) what it was about."""

    def __init__(
        self, status: int, reason: str, message: str, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.details: Mapping[str, Any] = details or {}

    @property
    def retryable(self) -> bool:
        """Whether trying again later may succeed (throttling, server or network trouble)."""
        return self.status in (0, 408, 409, 429) or self.status >= 500

    @property
    def away(self) -> bool:
        """Whether the API server was away rather than refused the request (see
        :data:`AWAY_STATUSES`)."""
        return self.status in AWAY_STATUSES


class NotFoundError(ApiError):
    """404: the object (or its namespace) does not exist."""


class ConflictError(ApiError):
    """409: it already exists, or it changed since it was read."""


class InvalidError(ApiError):
    """422: the API server rejected the object as invalid; retrying the same will not help."""


_ERRORS: dict[int, type[ApiError]] = {404: NotFoundError, 409: ConflictError, 422: InvalidError}


class KubeClient:
    """An aiohttp session bound to one API server, configured from kopf's ConnectionInfo.

    Requests share one pool of connections; long-lived streams (exec websockets) get a
    session of their own (:meth:`stream_session`) so that they never hold the connections
    requests wait for. Both use the same credentials and the same SSL context.
    """

    def __init__(
        self,
        request_timeout: float = 30.0,
        *,
        max_streams: int = 64,
        stream_grace: float = RETIRED_SESSION_GRACE,
    ) -> None:
        """A client without credentials yet (see :meth:`configure`); ``stream_grace`` is how
        long a retired streams session stays open: the longest exec (a library sync's)."""
        self._info: kopf.ConnectionInfo | None = None
        self._ssl: ssl.SSLContext | bool | None = None
        self._session: aiohttp.ClientSession | None = None
        self._streams: aiohttp.ClientSession | None = None
        self._watches: aiohttp.ClientSession | None = None
        self._max_streams = max_streams
        self._timeout = aiohttp.ClientTimeout(total=request_timeout, sock_connect=10)
        self._stream_grace = max(stream_grace, RETIRED_SESSION_GRACE)
        #: Sessions of earlier logins, with when they may be closed (monotonic seconds).
        self._retired: list[tuple[float, aiohttp.ClientSession]] = []
        self._closing: set[asyncio.Task[None]] = set()
        self.requests: collections.Counter[str] = collections.Counter()
        #: The versions the operator's own writes produced, as (uid, resourceVersion), the
        #: latest ``WRITTEN_REMEMBERED``: a watch event of one is the echo of a write (see
        #: :meth:`wrote`).
        self._written: collections.OrderedDict[tuple[str, str], None] = collections.OrderedDict()
        #: What the watch streams (:mod:`craft_operator.kube.watch`) did, by (resource plural,
        #: ``list`` or ``failure``), and how many fail now (``failing``): read by the metrics
        #: at scrape time.
        self.watch_outcomes: collections.Counter[tuple[str, str]] = collections.Counter()
        #: Set once the login handler has handed over the credentials.
        self.connected = asyncio.Event()
        #: Set when the API server refused the credentials (401): read them again now
        #: (:mod:`craft_operator.kube.relogin`).
        self.unauthorized = asyncio.Event()

    @property
    def info(self) -> kopf.ConnectionInfo | None:
        """The credentials in use (``None`` before the login)."""
        return self._info

    def configure(self, info: kopf.ConnectionInfo) -> None:
        """Use these credentials from now on (called by the login handler, also on re-login)."""
        self._info = info
        self._ssl = None
        self.connected.set()
        # In-flight work may still use the old sessions: they are closed once their grace is
        # over, at a later login (see _close_retired).
        now = time.monotonic()
        graces = (
            (self._session, RETIRED_SESSION_GRACE),
            (self._streams, self._stream_grace),
            (self._watches, RETIRED_SESSION_GRACE),
        )
        self._retired += [(now + grace, s) for s, grace in graces if s is not None]
        self._session = self._streams = self._watches = None

    async def close(self) -> None:
        """Close the HTTP sessions."""
        retired, self._retired = self._retired, []
        sessions = [
            *(session for _, session in retired),
            *(s for s in (self._session, self._streams, self._watches) if s),
        ]
        self._session, self._streams, self._watches = None, None, None
        for session in sessions:
            await session.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    def _close_retired(self) -> None:
        """Close the retired sessions whose grace is over (called on the event loop as new
        sessions open, that is after each re-login), so that re-logins over the operator's
        life do not pile up sessions and sockets."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not on the loop: they are closed with the client
        now = time.monotonic()
        due = [session for until, session in self._retired if until <= now]
        self._retired = [(until, session) for until, session in self._retired if until > now]
        for session in due:
            task = loop.create_task(session.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def _connection(self) -> tuple[kopf.ConnectionInfo, dict[str, str], ssl.SSLContext | bool]:
        """The credentials, the headers every request carries, and the SSL context (built
        once per login: loading the CA and client certificate costs milliseconds)."""
        if self._info is None:
            raise ApiError(0, "NotConfigured", "the Kubernetes client has no credentials yet")
        if self._retired:
            self._close_retired()
        if self._ssl is None:
            self._ssl = ssl_context(self._info)
        return self._info, {**auth_headers(self._info), "User-Agent": USER_AGENT}, self._ssl

    def _ensure_session(self) -> tuple[aiohttp.ClientSession, kopf.ConnectionInfo]:
        if self._session is None:
            info, headers, context = self._connection()
            self._session = aiohttp.ClientSession(
                base_url=info.server.rstrip("/") + "/",
                headers={**headers, "Accept": "application/json"},
                timeout=self._timeout,
                connector=aiohttp.TCPConnector(ssl=context, limit=64),
            )
        assert self._info is not None
        return self._session, self._info

    @property
    def max_streams(self) -> int:
        """How many streams the session of :meth:`stream_session` holds open at once."""
        return self._max_streams

    def stream_session(self) -> aiohttp.ClientSession:
        """The session for long-lived streams such as exec websockets.

        At most ``max_streams`` are open at once (more wait for a connection); no total time
        limit (a stream lasts as long as its caller lets it), but connecting and the answer
        to the upgrade are bounded. Raises :class:`ApiError` before the login.
        """
        if self._streams is None:
            info, headers, context = self._connection()
            self._streams = aiohttp.ClientSession(
                base_url=info.server.rstrip("/") + "/",
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=60),
                connector=aiohttp.TCPConnector(ssl=context, limit=self._max_streams),
            )
        return self._streams

    def watch_session(self) -> aiohttp.ClientSession:
        """The session for watch streams (:mod:`craft_operator.kube.watch`): a connection
        each, as many as there are streams, never taken from requests or exec; each
        watch sets its own read timeout. Raises :class:`ApiError` before the login."""
        if self._watches is None:
            info, headers, context = self._connection()
            self._watches = aiohttp.ClientSession(
                base_url=info.server.rstrip("/") + "/",
                headers={**headers, "Accept": "application/json"},
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
                connector=aiohttp.TCPConnector(ssl=context, limit=0),
            )
        return self._watches

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """One API request; the decoded JSON answer, or a typed :class:`ApiError`."""
        session, _ = self._ensure_session()
        self.requests[method] += 1
        data = None if body is None else jsonio.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else None
        try:
            async with session.request(
                method, path.lstrip("/"), data=data, headers=headers, params=params
            ) as response:
                raw = await response.read()
                if response.status >= 400:
                    if response.status == 401:
                        self.unauthorized.set()
                    error = api_error(response.status, raw.decode(errors="replace"))
                    raise withhold_quoted_secrets(error, path, body)
                # A deletion's answer is an object only its callers that find one use.
                answer = {} if not raw and method == "DELETE" else jsonio.loads(raw)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise ApiError(0, "Unreachable", f"{method} {path}: {type(exc).__name__}") from None
        except ValueError:
            # E.g. a proxy in the way answering with HTML, or with nothing; status 0 like
            # other transport trouble.
            raise ApiError(
                0, "InvalidResponse", f"{method} {path}: the answer is not JSON"
            ) from None
        if not isinstance(answer, dict):
            # Every answer of the API server is an object (a Status, at the least).
            raise ApiError(0, "InvalidResponse", f"{method} {path}: the answer is not an object")
        if method in WRITES:
            self._remember_written(answer)
        return answer

    def _remember_written(self, answer: Mapping[str, Any]) -> None:
        meta = answer.get("metadata")
        if not isinstance(meta, Mapping) or not meta.get("uid"):
            return  # a Status (a deletion's answer), not an object
        self._written[(str(meta["uid"]), str(meta.get("resourceVersion", "")))] = None
        if len(self._written) > WRITTEN_REMEMBERED:
            self._written.popitem(last=False)

    def wrote(self, uid: str, version: str) -> bool:
        """Whether the object ``uid`` at ``version`` is what one of the operator's own
        recent writes produced: its watch event is then an echo, with nothing new."""
        return (uid, version) in self._written

    async def get(self, kind: Kind, namespace: str | None, name: str) -> dict[str, Any]:
        """Read one object."""
        return await self.request("GET", kind.path(namespace, name))

    async def list(
        self, kind: Kind, namespace: str | None, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """List objects (of a namespace, optionally by label selector)."""
        return [obj async for obj in self.iterate(kind, namespace, label_selector=label_selector)]

    async def iterate(
        self,
        kind: Kind,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        page_size: int = LIST_PAGE_SIZE,
    ) -> AsyncIterator[dict[str, Any]]:
        """The objects of a list, fetched ``page_size`` at a time: a caller that keeps less
        than each object (the cache) never holds more than one page of whole objects.

        A continue token that expired (410) mid-way starts the list again, up to
        :data:`LIST_RESTARTS` times (then the 410 is raised); the objects already given
        are given again (in their newer version, if they changed).
        """
        params = {"limit": str(page_size)}
        if label_selector:
            params["labelSelector"] = label_selector
        token, restarts = "", 0
        while True:
            page = {**params, "continue": token} if token else params
            try:
                answer = await self.request("GET", kind.path(namespace), params=page)
            except ApiError as exc:
                if exc.status != 410 or not token or restarts == LIST_RESTARTS:
                    raise
                token, restarts = "", restarts + 1
                continue
            for obj in answer.get("items") or []:
                yield obj
            token = (answer.get("metadata") or {}).get("continue") or ""
            if not token:
                return

    async def create(self, kind: Kind, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create an object in the namespace its metadata names."""
        namespace = obj.get("metadata", {}).get("namespace")
        return await self.request("POST", kind.path(namespace), body=obj)

    async def patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """Apply a JSON merge patch (``metadata.resourceVersion`` in it makes it conditional)."""
        return await self.request(
            "PATCH",
            kind.path(namespace, name, subresource),
            body=patch,
            content_type="application/merge-patch+json",
        )

    async def delete(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> dict[str, Any] | None:
        """Delete an object (only if it still has ``uid``, and, given, ``resource_version``:
        :class:`ConflictError` if not); ``None`` if it was already gone."""
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        body["propagationPolicy"] = "Background"
        preconditions = {"uid": uid, "resourceVersion": resource_version}
        if uid or resource_version:
            body["preconditions"] = {key: value for key, value in preconditions.items() if value}
        try:
            return await self.request("DELETE", kind.path(namespace, name), body=body)
        except NotFoundError:
            return None


#: Methods whose answer is the object as written.
WRITES = frozenset({"POST", "PUT", "PATCH"})
#: How many written versions :meth:`KubeClient.wrote` remembers: enough for the writes of
#: every pass running at once, many times over.
WRITTEN_REMEMBERED = 4096


#: What a refusal of a Secret write says instead of the API server's message, when that
#: quotes a piece of the Secret's data (an admission webhook's often prints what it refused).
SECRET_QUOTED = "the API server's message is withheld: it quoted the Secret's data"  # noqa: S105


def withhold_quoted_secrets(error: ApiError, path: str, body: Any) -> ApiError:
    """``error``, or the same error without its message if it is the refusal of a Secret
    write whose message holds a piece of one of the Secret's values (in any of the forms
    the request carried them: as written, base64 or decoded). Conditions, events and logs
    quote the message; they must never quote a PAT or a key."""
    if "/secrets" not in path or not isinstance(body, Mapping):
        return error
    secrets = list(secret_values(body))
    if not any(holds_piece_of(error.message, secret) for secret in secrets):
        return error
    return type(error)(error.status, error.reason, SECRET_QUOTED, error.details)


def secret_values(body: Mapping[str, Any]) -> Iterator[str]:
    """Every value of a Secret's ``data`` (base64, and decoded) and ``stringData`` (as
    written, and base64) in a create, update or patch body."""
    for value in (body.get("data") or {}).values():
        if isinstance(value, str) and value:
            yield value
            with contextlib.suppress(ValueError):
                yield _secret_part(base64.b64decode(value, validate=True).decode("utf-8"))
    for value in (body.get("stringData") or {}).values():
        if isinstance(value, str) and value:
            yield _secret_part(value)
            yield base64.b64encode(value.encode()).decode("ascii")


def _secret_part(value: str) -> str:
    """The part of a value that is secret: a PAT's random part, not its ``onyx_pat_``
    prefix and tenant (a namespace named after the tenant is in many a refusal)."""
    if value.startswith(PAT_PREFIX):
        return value.rpartition(".")[2] if "." in value else value[len(PAT_PREFIX) :]
    return value


def api_error(status: int, text: str) -> ApiError:
    """The typed error of an answer with ``status`` and body ``text``."""
    reason, message, details = "Error", text[:500], None
    try:
        payload = jsonio.loads(text)
        reason = str(payload.get("reason") or reason)
        message = str(payload.get("message") or message)[:1000]
        found = payload.get("details")
        details = found if isinstance(found, dict) else None
    except (ValueError, AttributeError):
        pass
    return _ERRORS.get(status, ApiError)(status, reason, message, details)
