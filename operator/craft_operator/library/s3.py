"""Listing and reading the user library in S3 (boto3), with errors classified for retries.

boto3 is synchronous; the sync runs these calls in a worker thread, except the reads of
small files, which :class:`S3ObjectStore` does on the event loop through presigned URLs
(:mod:`craft_operator.library.s3_fetch`). Retries with backoff
belong to the caller (the reconciler): botocore itself is told to try only
``max_attempts`` times, and every failure is turned into an :class:`S3Error` subclass, all
of them retried with backoff: an outage passes, and a missing bucket or denied access is
mended on S3's side, where the operator sees no change.

boto3 and botocore are imported on first use: the operator does not carry them (about
10 MiB) until a library is synced.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from craft_operator.library.errors import (
    S3AccessDeniedError,
    S3BucketNotFoundError,
    S3Error,
    S3ObjectArchivedError,
    S3ObjectChangedError,
    S3UnavailableError,
)
from craft_operator.library.plan import S3Object

if TYPE_CHECKING:
    import boto3
    from mypy_boto3_s3.client import S3Client
    from mypy_boto3_s3.type_defs import PaginatorConfigTypeDef

    from craft_operator.library.s3_presign import CredentialSource

_DENIED = {
    "AccessDenied",
    "AllAccessDisabled",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "AccountProblem",
}
_UNAVAILABLE = {
    "SlowDown",
    "ServiceUnavailable",
    "InternalError",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "Throttling",
    "ThrottlingException",
    "503",
    "500",
    "502",
    "504",
}
_CHANGED = {"PreconditionFailed", "NoSuchKey", "412"}


class ObjectBody(Protocol):
    """A streamed object body: read it in pieces, then close it."""

    def read(self, amt: int | None = ...) -> bytes:
        """Up to ``amt`` bytes; empty at the end."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...


class ObjectStore(Protocol):
    """What the sync needs from S3. Blocking; errors are :class:`S3Error` subclasses."""

    def list_objects(self, bucket: str, prefix: str, *, limit: int | None = None) -> list[S3Object]:
        """Every object under ``prefix``, all pages; past ``limit`` objects, the listing
        stops with ``limit + 1`` (the caller refuses a library that large)."""
        ...

    def open_object(self, bucket: str, key: str, etag: str) -> ObjectBody:
        """Stream one object, failing with :class:`S3ObjectChangedError` if its ETag moved."""
        ...


def make_s3_client(
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    max_attempts: int = 2,
    connect_timeout: float = 5.0,
    read_timeout: float = 30.0,
    max_pool_connections: int = 16,
    session: boto3.session.Session | None = None,
) -> S3Client:
    """A boto3 S3 client with short timeouts and few retries (the caller backs off).

    The connection pool is large enough for the sync's parallel downloads.

    Credentials come from boto3's usual chain (environment, web identity, instance role),
    resolved by ``session`` (a new one if not given).
    """
    import boto3
    from botocore.config import Config

    config = Config(
        region_name=region,
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        retries={"total_max_attempts": max_attempts, "mode": "standard"},
        signature_version="s3v4",
        max_pool_connections=max_pool_connections,
        # AWS itself: virtual hosts name the Region (bucket.s3.<region>.amazonaws.com; a
        # bucket with dots goes path style there). botocore's default presigns for the
        # legacy global host, which Regions opened since 2019 refuse.
        s3={"addressing_style": "path" if endpoint_url else "virtual"},
    )
    client: S3Client = (session or boto3.session.Session()).client(
        "s3", endpoint_url=endpoint_url, config=config
    )
    return client


def make_s3_store(
    *, endpoint_url: str | None = None, region: str | None = None, max_attempts: int = 2
) -> S3ObjectStore:
    """An :class:`S3ObjectStore` over a new client (:func:`make_s3_client`), whose small
    files' URLs are signed with the client's own credentials."""
    import boto3

    session = boto3.session.Session()
    client = make_s3_client(
        endpoint_url=endpoint_url, region=region, max_attempts=max_attempts, session=session
    )
    return S3ObjectStore(client, credentials=session.get_credentials())


def classify_s3_error(exc: Exception, *, bucket: str, key: str | None = None) -> S3Error:
    """Turn a boto3/botocore exception into the matching :class:`S3Error` subclass."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        ConnectionClosedError,
        ConnectTimeoutError,
        EndpointConnectionError,
        HTTPClientError,
        NoCredentialsError,
        PartialCredentialsError,
        ReadTimeoutError,
    )
    from botocore.exceptions import ConnectionError as BotoConnectionError
    from urllib3.exceptions import HTTPError as URLLib3HTTPError

    where = f"s3://{bucket}/{key}" if key is not None else f"bucket {bucket!r}"
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return classify_response(
            status=int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0),
            code=str(error.get("Code", "")),
            message=str(error.get("Message") or ""),
            bucket=bucket,
            key=key,
        )
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return S3AccessDeniedError(f"no usable S3 credentials to read {where}")
    if isinstance(
        exc,
        EndpointConnectionError
        | BotoConnectionError
        | ConnectTimeoutError
        | ReadTimeoutError
        | ConnectionClosedError
        | TimeoutError
        | ConnectionError,
    ):
        return S3UnavailableError(f"S3 is unreachable for {where}: {exc}")
    if isinstance(exc, HTTPClientError):
        cause = exc.kwargs.get("error")
        if isinstance(cause, ValueError) and str(cause).startswith("Invalid header"):
            # http.client refused a header, and its message quotes it: a credential with
            # whitespace (a Secret's file with a newline at its end), say. Never sent, and
            # never said.
            return S3AccessDeniedError(
                f"the S3 credentials for {where} cannot be sent: a value is not a valid HTTP "
                "header (whitespace at the end of AWS_SESSION_TOKEN or AWS_ACCESS_KEY_ID?)"
            )
        if isinstance(cause, ValueError):
            # Another refusal of the HTTP library (a proxy URL it cannot parse, say): its
            # text may quote what it refused.
            return S3Error(f"S3 request for {where} failed: {type(cause).__name__}")
        # A broken stream or connection (urllib3's ProtocolError, IncompleteRead): its text
        # says how much came, and holds no header.
        return S3UnavailableError(f"S3 failed while reading {where}: {cause or exc}")
    if isinstance(exc, BotoCoreError | OSError):
        # Broken streams (IncompleteRead, ResponseStreamingError) and socket errors.
        return S3UnavailableError(f"S3 failed while reading {where}: {exc}")
    if isinstance(exc, URLLib3HTTPError):
        # What botocore lets through from urllib3 unwrapped: a TLS error in a streamed
        # body, a read timeout on an error answer's body. Its text names the connection
        # pool or the URL, presigned query and all: its type says enough.
        return S3UnavailableError(f"S3 failed while reading {where}: {type(exc).__name__}")
    # Anything else is no error of S3's: its text is nobody's to trust with a secret.
    return S3Error(f"S3 request for {where} failed: {type(exc).__name__}")


#: What S3 answers a request sent to (or signed for) another Region than the bucket's.
_WRONG_REGION = frozenset(
    {"PermanentRedirect", "IllegalLocationConstraintException", "AuthorizationHeaderMalformed"}
)
_WRONG_REGION_HINT = "; check that CRAFT_S3_REGION is the bucket's Region"


def classify_response(
    *, status: int, code: str, message: str, bucket: str, key: str | None = None
) -> S3Error:
    """The :class:`S3Error` subclass for S3's answer ``status`` with error ``code``."""
    where = f"s3://{bucket}/{key}" if key is not None else f"bucket {bucket!r}"
    detail = message or code or str(status)
    if code == "NoSuchBucket":
        return S3BucketNotFoundError(f"S3 bucket {bucket!r} does not exist")
    if code == "InvalidObjectState":
        return S3ObjectArchivedError(
            f"{where} is archived (an Intelligent-Tiering archive tier or an archive storage "
            "class) and cannot be read until it is restored",
            key=key,
        )
    if code in _DENIED or status == 403:
        return S3AccessDeniedError(f"S3 denied access to {where}: {detail}")
    if key is not None and (code in _CHANGED or status in (404, 412)):
        return S3ObjectChangedError(
            f"{where} changed or vanished during the sync; the next sync picks it up"
        )
    if code in _UNAVAILABLE or status >= 500 or status == 429:
        return S3UnavailableError(f"S3 failed on {where}: {detail} (HTTP {status})")
    hint = _WRONG_REGION_HINT if code in _WRONG_REGION else ""
    return S3Error(f"S3 rejected a request for {where}: {detail} (HTTP {status}){hint}")


@contextmanager
def _classified(bucket: str, key: str | None = None) -> Iterator[None]:
    try:
        yield
    except S3Error:
        raise
    except Exception as exc:
        from botocore.exceptions import BotoCoreError, ClientError
        from urllib3.exceptions import HTTPError as URLLib3HTTPError

        if not isinstance(exc, BotoCoreError | ClientError | OSError | URLLib3HTTPError):
            raise
        raise classify_s3_error(exc, bucket=bucket, key=key) from exc


class _ClassifiedBody:
    """A streamed body whose read errors are classified like every other S3 error."""

    def __init__(self, body: Any, bucket: str, key: str) -> None:
        self._body = body
        self._bucket = bucket
        self._key = key

    def read(self, amt: int | None = None) -> bytes:
        with _classified(self._bucket, self._key):
            data: bytes = self._body.read(amt)
            return data

    def close(self) -> None:
        with _classified(self._bucket, self._key):
            self._body.close()


@runtime_checkable
class WholeObjectReader(Protocol):
    """A store that can also read a small object whole without a thread."""

    async def fetch_object(self, bucket: str, key: str, etag: str, limit: int) -> bytes:
        """Up to ``limit + 1`` bytes of the object, if its ETag is still ``etag``."""
        ...


@runtime_checkable
class LoopLister(Protocol):
    """A store that can also list without a thread (most of the time)."""

    async def list_objects_on_loop(
        self, bucket: str, prefix: str, *, limit: int | None = None
    ) -> list[S3Object] | None:
        """What :meth:`ObjectStore.list_objects` returns, or ``None``: list with it."""
        ...


class S3ObjectStore:
    """:class:`ObjectStore` over a boto3 S3 client, a :class:`WholeObjectReader` and a
    :class:`LoopLister` (presigned GETs on the event loop,
    :mod:`craft_operator.library.s3_fetch`)."""

    def __init__(
        self,
        client: S3Client,
        *,
        credentials: CredentialSource | None = None,
        page_size: int | None = None,
    ) -> None:
        """List and read through ``client``; ``page_size`` keys per listing request.
        ``credentials`` (the client's) let small files' URLs be signed without botocore's
        per-call machinery (:mod:`craft_operator.library.s3_presign`)."""
        from craft_operator.library.s3_fetch import ObjectFetcher

        self._client = client
        self._page_size = page_size
        self._pagination: PaginatorConfigTypeDef = {"PageSize": page_size} if page_size else {}
        self._fetcher = ObjectFetcher(client, credentials=credentials)

    async def fetch_object(self, bucket: str, key: str, etag: str, limit: int) -> bytes:
        """Up to ``limit + 1`` bytes of ``key`` (a small file), read on the event loop."""
        return await self._fetcher.fetch(bucket, key, etag, limit)

    async def list_objects_on_loop(
        self, bucket: str, prefix: str, *, limit: int | None = None
    ) -> list[S3Object] | None:
        """:meth:`list_objects` on the event loop, or ``None`` where boto3 must list."""
        return await self._fetcher.list_objects(
            bucket, prefix, limit=limit, page_size=self._page_size
        )

    async def close(self) -> None:
        """Close the connections of :meth:`fetch_object` and of the listings."""
        await self._fetcher.close()

    def list_objects(self, bucket: str, prefix: str, *, limit: int | None = None) -> list[S3Object]:
        """Every object under ``prefix`` (paginated ``ListObjectsV2``), at most
        ``limit + 1``."""
        objects: list[S3Object] = []
        with _classified(bucket):
            paginator = self._client.get_paginator("list_objects_v2")
            pages = paginator.paginate(
                Bucket=bucket, Prefix=prefix, PaginationConfig=self._pagination
            )
            for page in pages:
                for item in page.get("Contents", []):
                    objects.append(
                        S3Object(
                            key=item["Key"],
                            size=int(item["Size"]),
                            etag=str(item.get("ETag", "")),
                            last_modified=item.get("LastModified"),
                            storage_class=str(item.get("StorageClass") or "STANDARD"),
                        )
                    )
                if limit is not None and len(objects) > limit:
                    return objects[: limit + 1]
        return objects

    def open_object(self, bucket: str, key: str, etag: str) -> ObjectBody:
        """Stream ``key``; S3 answers 412 (:class:`S3ObjectChangedError`) if the ETag moved."""
        with _classified(bucket, key):
            response = self._client.get_object(Bucket=bucket, Key=key, IfMatch=etag)
        return _ClassifiedBody(response["Body"], bucket, key)
