"""Small S3 objects read whole, and listings, on the event loop: presigned GETs over one
aiohttp session.

A library is mostly small files, and for a small file boto3's own work is most of the
cost of reading it: about 1.4 ms of CPU per ``GetObject`` (its event hooks, request and
response models) plus a worker thread per call. Here the URL is presigned
(:mod:`craft_operator.library.s3_presign`: botocore's endpoint rules and credential chain,
no network) and aiohttp fetches it on the event loop over kept-alive connections (about
0.6 ms of CPU).
Large files keep boto3's streamed bodies (:mod:`craft_operator.library.s3`). A listing
likewise (``ListObjectsV2``, presigned here, read by :mod:`craft_operator.library.s3_listing`)
costs a fraction of botocore's paginator and no thread; a bucket whose URLs botocore signs,
or whose listing S3 refuses as if its URL were wrong, is listed by boto3 (which then says
what is wrong, in its words).

Requests go through the proxy botocore sends the client's through (:class:`_Proxies`): a
cluster whose egress to S3 is a proxy reaches S3 on both paths, or on neither.

The ETag the plan was made from is sent as ``If-Match``, so an object replaced since the
listing is refused (412) as with boto3. Failures are the same
:class:`~craft_operator.library.errors.S3Error` subclasses, classified by the same rules;
a failure that waiting may cure is tried once more after a short pause.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import ssl
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from craft_operator.daemon_threads import in_daemon_thread
from craft_operator.library.errors import S3Error, S3UnavailableError
from craft_operator.library.plan import S3Object
from craft_operator.library.s3 import classify_response, classify_s3_error
from craft_operator.library.s3_listing import ListingPage, parse_listing_page
from craft_operator.library.s3_presign import CredentialSource, UrlSigner

if TYPE_CHECKING:
    import aiohttp
    from mypy_boto3_s3.client import S3Client

_T = TypeVar("_T")

#: Seconds a presigned URL stays valid: it is used at once, once.
URL_LIFETIME = 300
#: An error body is read up to this many bytes for its code and message.
ERROR_BODY_BYTES = 16 * 1024
#: The most bytes a listing page may take: 1,000 keys of 1,024 characters, URL-encoded.
LISTING_PAGE_BYTES = 8 * 1024 * 1024
#: The most listing pages without an object, each with a new continuation token, that a
#: listing follows: S3 answers some where it passes over many delete markers, and a store
#: that answered nothing else would be listed until the sync's deadline (every page with
#: an object brings the listing closer to its limit).
LISTING_EMPTY_PAGES = 1000
READ_CHUNK = 256 * 1024
_CODE = re.compile(rb"<Code>([^<]{1,128})</Code>")
_MESSAGE = re.compile(rb"<Message>([^<]{1,512})</Message>")
_QUERY = re.compile(r"\?[^\s'\"]*")


class ObjectFetcher:
    """Reads whole objects through presigned URLs; one per S3 client, closed at shutdown."""

    def __init__(
        self,
        client: S3Client,
        *,
        credentials: CredentialSource | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        max_connections: int = 16,
        attempts: int = 2,
        retry_pause: float = 0.2,
    ) -> None:
        """Presign for ``client`` (signed here with ``credentials``, the client's, if
        given; else by botocore); at most ``max_connections`` connections at once."""
        self._signer = UrlSigner(client, credentials, lifetime=URL_LIFETIME)
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._max_connections = max_connections
        self._attempts = max(1, attempts)
        self._retry_pause = retry_pause
        self._proxies = _Proxies(client)
        self._session: aiohttp.ClientSession | None = None

    def _opened(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            import aiohttp

            connector = aiohttp.TCPConnector(limit=self._max_connections, ssl=_ssl_context())
            timeout = aiohttp.ClientTimeout(
                sock_connect=self._connect_timeout, sock_read=self._read_timeout
            )
            # botocore asks for no compression, and a compressed answer is not what S3
            # stores (a proxy's doing): identity, as botocore gets.
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=timeout,
                auto_decompress=False,
                headers={"Accept-Encoding": "identity"},
            )
        return self._session

    async def fetch(self, bucket: str, key: str, etag: str, limit: int) -> bytes:
        """The object's bytes, up to ``limit + 1`` (the caller compares with its size).

        Raises :class:`~craft_operator.library.errors.S3ObjectChangedError` if its ETag
        is no longer ``etag``, other :class:`S3Error` subclasses on other failures. A URL
        signed here that S3 refuses as if it were wrong (:data:`_SIGNER_DOUBTS`) is tried
        again at once as botocore signs it: the refusal is the error only if botocore's
        own URL gets it too.
        """
        once = partial(self._fetch_once, bucket, key, etag, limit)
        try:
            return await self._retried(partial(once, botocore=False))
        except _SignedHereRefusedError:
            return await self._retried(partial(once, botocore=True))

    async def _presign(self, bucket: str, key: str, *, botocore: bool) -> tuple[str, bool]:
        """A URL for ``key``, and whether it was signed here; ``botocore``: as botocore
        signs it (in a thread: it may wait on the network)."""
        if botocore:
            return await in_daemon_thread(self._signer.botocore_url, bucket, key), False
        return await self._url_for(bucket, partial(self._signer.presign, bucket, key))

    async def _fetch_once(
        self, bucket: str, key: str, etag: str, limit: int, *, botocore: bool
    ) -> bytes:
        import aiohttp
        from yarl import URL

        try:
            url, signed_here = await self._presign(bucket, key, botocore=botocore)
        except Exception as exc:  # botocore: no credentials, bad parameters
            raise classify_s3_error(exc, bucket=bucket, key=key) from None
        try:
            async with self._opened().get(
                URL(url, encoded=True),
                allow_redirects=False,
                **self._proxies.options(url, {"If-Match": etag}),
            ) as response:
                if response.status != 200:
                    if response.status in _SIGNER_DOUBTS:
                        self._signer.forget(bucket)
                        if signed_here:
                            raise _SignedHereRefusedError
                    body = await response.content.read(ERROR_BODY_BYTES)
                    raise _refused(response.status, body, bucket, key)
                return await _read_up_to(response.content, limit + 1)
        except (S3Error, _SignedHereRefusedError):
            raise
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            where = f"s3://{bucket}/{key}"
            raise S3UnavailableError(
                f"S3 failed while reading {where}: {type(exc).__name__}: {without_queries(exc)}"
            ) from None

    async def list_objects(
        self, bucket: str, prefix: str, *, limit: int | None, page_size: int | None = None
    ) -> list[S3Object] | None:
        """Every object under ``prefix``, all pages, at most ``limit + 1``; ``None`` if
        this bucket is to be listed by boto3 (see the module docstring).

        Raises :class:`S3Error` subclasses as boto3's listing would.
        """
        objects: list[S3Object] = []
        tokens: set[str] = set()
        token: str | None = None
        empty_pages = 0
        while True:
            params = [("prefix", prefix)]
            if token is not None:
                params.append(("continuation-token", token))
            if page_size:
                params.append(("max-keys", str(page_size)))
            page = await self._retried(partial(self._list_once, bucket, params))
            if page is None:
                return None
            objects += page.objects
            if limit is not None and len(objects) > limit:
                return objects[: limit + 1]
            if page.next_token is None:
                return objects
            empty_pages += 0 if page.objects else 1
            if empty_pages == LISTING_EMPTY_PAGES:
                raise S3Error(
                    f"S3 answered {empty_pages} listing pages of bucket {bucket!r} without an "
                    "object, each with more to come",
                    retryable=True,
                )
            if page.next_token in tokens:
                raise S3Error(
                    f"S3 repeated a continuation token while listing bucket {bucket!r}",
                    retryable=True,
                )
            token = page.next_token
            tokens.add(token)

    async def _retried(self, once: Callable[[], Awaitable[_T]]) -> _T:
        """``once()``, tried again after a short pause if it fails in a way that waiting
        may cure (:class:`S3UnavailableError`), up to the fetcher's attempts."""
        for attempt in range(1, self._attempts + 1):
            try:
                return await once()
            except S3UnavailableError:
                if attempt == self._attempts:
                    raise
            await asyncio.sleep(self._retry_pause * (0.5 + random.random()))  # noqa: S311
        raise AssertionError("unreachable")

    async def _list_once(self, bucket: str, params: list[tuple[str, str]]) -> ListingPage | None:
        import aiohttp
        from yarl import URL

        try:
            url = await self._url_for(bucket, partial(self._signer.listing_url, bucket, params))
        except Exception as exc:  # botocore: no credentials, bad parameters
            raise classify_s3_error(exc, bucket=bucket) from None
        if url is None:
            return None
        try:
            async with self._opened().get(
                URL(url, encoded=True), allow_redirects=False, **self._proxies.options(url, {})
            ) as response:
                if response.status in _SIGNER_DOUBTS:
                    self._signer.forget(bucket)
                    return None
                if response.headers.get("Content-Encoding", "identity") != "identity":
                    return None  # compressed all the same: boto3 reads what it can
                if response.status != 200:
                    body = await response.content.read(ERROR_BODY_BYTES)
                    raise _refused(response.status, body, bucket, None)
                body = await _read_up_to(response.content, LISTING_PAGE_BYTES + 1)
        except S3Error:
            raise
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            what = (
                "is unreachable for"
                if isinstance(exc, aiohttp.ClientConnectorError | TimeoutError)
                else "failed while listing"
            )
            raise S3UnavailableError(
                f"S3 {what} bucket {bucket!r}: {type(exc).__name__}: {without_queries(exc)}"
            ) from None
        if len(body) > LISTING_PAGE_BYTES:
            raise S3Error(
                f"S3 answered a listing page of bucket {bucket!r} larger than "
                f"{LISTING_PAGE_BYTES} bytes",
                retryable=True,
            )
        return parse_listing_page(body, bucket=bucket)

    async def _url_for(self, bucket: str, sign: Callable[[], _T]) -> _T:
        """``sign()``, in a thread when it may wait on the network (botocore presigning, a
        credentials refresh): the event loop runs every sandbox's work."""
        if self._signer.may_block(bucket):
            return await in_daemon_thread(sign)
        return sign()

    async def close(self) -> None:
        """Close the connections (the next fetch opens new ones)."""
        if self._session is not None:
            await self._session.close()
            self._session = None


#: Answers that may mean a URL was signed with credentials, or for an endpoint, that are
#: no longer right (403 also answers a missing key to a reader without ListBucket: a probe
#: more, 0.2 ms, and a GET more).
_SIGNER_DOUBTS = frozenset({301, 307, 400, 403})


class _Proxies:
    """The proxy each URL goes through, by botocore's rules for ``client``: its config's
    ``proxies`` if given, else the environment's (``HTTPS_PROXY``, ``HTTP_PROXY``) unless
    ``NO_PROXY`` names the client's endpoint, read once as botocore reads them when it makes
    the client; the URL's scheme picks the proxy, with botocore's ``Proxy-Authorization``
    for a proxy URL's ``user:password@``.

    Not aiohttp's ``trust_env``: it checks ``NO_PROXY`` against each URL's host rather than
    the endpoint's, reads the environment at each request, and sends a ``~/.netrc`` login
    for the host as ``Authorization``, which S3 refuses beside a presigned URL's own.
    """

    def __init__(self, client: S3Client) -> None:
        from botocore.httpsession import ProxyConfiguration
        from botocore.utils import get_environ_proxies

        proxies = getattr(client.meta.config, "proxies", None)
        if proxies is None:
            proxies = get_environ_proxies(client.meta.endpoint_url)
        self._config = ProxyConfiguration(proxies=proxies)

    def options(self, url: str, headers: dict[str, str]) -> dict[str, Any]:
        """aiohttp's options for a request to ``url`` with ``headers``: the proxy botocore
        sends it through, if any, and the proxy's credentials where botocore (urllib3) puts
        them: in the ``CONNECT`` of a tunnel for HTTPS, else in the request itself (aiohttp
        sends its ``proxy_headers`` only in a ``CONNECT``)."""
        from yarl import URL

        proxy = self._config.proxy_url_for(url)
        if not proxy:
            return {"headers": headers}
        try:
            address = URL(proxy).with_user(None)
        except ValueError:
            # Its text may hold the proxy's password.
            raise S3Error("the proxy URL for S3 requests cannot be parsed") from None
        credentials = self._config.proxy_headers_for(proxy)
        if urlsplit(url).scheme == "https":
            return {"headers": headers, "proxy": address, "proxy_headers": credentials}
        return {"headers": {**headers, **credentials}, "proxy": address}


class _SignedHereRefusedError(Exception):
    """S3 refused a URL this signer made as if it were wrong (:data:`_SIGNER_DOUBTS`)."""


async def _read_up_to(stream: aiohttp.StreamReader, most: int) -> bytes:
    parts: list[bytes] = []
    received = 0
    while received < most and (chunk := await stream.read(min(READ_CHUNK, most - received))):
        parts.append(chunk)
        received += len(chunk)
    return b"".join(parts)


def _refused(status: int, body: bytes, bucket: str, key: str | None) -> S3Error:
    code = _CODE.search(body)
    message = _MESSAGE.search(body)
    return classify_response(
        status=status,
        code=code.group(1).decode(errors="replace") if code else "",
        message=message.group(1).decode(errors="replace") if message else "",
        bucket=bucket,
        key=key,
    )


def without_queries(exc: BaseException) -> str:
    """The error's text with every URL's query cut off: a presigned URL's query holds its
    signature and, with temporary credentials, the session token."""
    return _QUERY.sub("?...", str(exc))


def _ssl_context() -> ssl.SSLContext:
    """The certificates boto3 trusts: ``AWS_CA_BUNDLE``, else botocore's default bundle."""
    from botocore.httpsession import get_cert_path

    bundle = os.environ.get("AWS_CA_BUNDLE") or get_cert_path(True)
    return ssl.create_default_context(cafile=bundle if isinstance(bundle, str) else None)
