"""S3 listing against moto over HTTP, and how S3 failures are classified for retries."""

from __future__ import annotations

import asyncio
import io
import ssl
from typing import Any

import pytest
import urllib3.exceptions
from botocore.exceptions import (
    ClientError,
    EndpointConnectionError,
    HTTPClientError,
    NoCredentialsError,
)
from botocore.response import StreamingBody
from urllib3.response import HTTPResponse

from craft_operator.library.errors import (
    S3AccessDeniedError,
    S3BucketNotFoundError,
    S3Error,
    S3ObjectChangedError,
    S3UnavailableError,
)
from craft_operator.library.s3 import S3ObjectStore, classify_s3_error, make_s3_client

from .conftest import Bucket

S3 = pytest.mark.s3
UNIT = pytest.mark.unit


@S3
def test_listing_follows_every_page(bucket: Bucket) -> None:
    for index in range(7):
        bucket.put(f"f{index}", b"x" * index)
    bucket.put_key("elsewhere/f", b"not in the prefix")
    store = S3ObjectStore(bucket.client, page_size=2)  # type: ignore[arg-type]

    listing = store.list_objects(bucket.name, bucket.prefix)

    assert sorted(obj.key for obj in listing) == [f"{bucket.prefix}f{i}" for i in range(7)]
    assert {obj.size for obj in listing} == set(range(7))
    assert all(obj.etag.startswith('"') and obj.last_modified for obj in listing)


@S3
def test_a_listing_stops_one_object_past_its_limit(bucket: Bucket) -> None:
    for index in range(9):
        bucket.put(f"f{index}", b"x")
    store = S3ObjectStore(bucket.client, page_size=2)  # type: ignore[arg-type]

    listing = store.list_objects(bucket.name, bucket.prefix, limit=3)

    assert [obj.key for obj in listing] == [f"{bucket.prefix}f{i}" for i in range(4)]


@S3
def test_a_missing_bucket_is_permanent(bucket: Bucket) -> None:
    with pytest.raises(S3BucketNotFoundError, match="no-such-bucket") as raised:
        bucket.store.list_objects("no-such-bucket", "x/")
    assert raised.value.lasting


@S3
def test_reading_an_object_whose_etag_moved_is_retryable(bucket: Bucket) -> None:
    bucket.put("a", b"one")
    (listed,) = bucket.store.list_objects(bucket.name, bucket.prefix)
    bucket.put("a", b"two")

    with pytest.raises(S3ObjectChangedError) as raised:
        bucket.store.open_object(bucket.name, listed.key, listed.etag)
    assert raised.value.retryable


def client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": f"{code} happened"},
         "ResponseMetadata": {"HTTPStatusCode": status}},  # type: ignore[typeddict-item]
        "ListObjectsV2",
    )  # fmt: skip


@UNIT
@pytest.mark.parametrize(
    ("error", "kind", "retryable"),
    [
        (client_error("NoSuchBucket", 404), S3BucketNotFoundError, False),
        (client_error("AccessDenied", 403), S3AccessDeniedError, False),
        (client_error("InvalidAccessKeyId", 403), S3AccessDeniedError, False),
        (client_error("SlowDown", 503), S3UnavailableError, True),
        (client_error("InternalError", 500), S3UnavailableError, True),
        (client_error("InvalidArgument", 400), S3Error, False),
        (EndpointConnectionError(endpoint_url="http://s3"), S3UnavailableError, True),
        (NoCredentialsError(), S3AccessDeniedError, False),
        (ConnectionResetError("reset by peer"), S3UnavailableError, True),
    ],
)
def test_failures_are_classified_for_the_caller_s_retries(
    error: Exception, kind: type[S3Error], retryable: bool
) -> None:
    classified = classify_s3_error(error, bucket="files")

    assert type(classified) is kind
    assert classified.lasting is not retryable
    assert "files" in str(classified)


@UNIT
@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("PermanentRedirect", 301),
        ("IllegalLocationConstraintException", 400),
        ("AuthorizationHeaderMalformed", 400),
    ],
)
def test_a_bucket_in_another_region_is_said_to_be_a_region_setting(code: str, status: int) -> None:
    classified = classify_s3_error(client_error(code, status), bucket="files")

    assert type(classified) is S3Error
    assert classified.lasting
    assert "CRAFT_S3_REGION" in str(classified)


@UNIT
def test_a_credential_refused_as_a_header_is_said_so_never_quoted() -> None:
    """A session token with a newline (from a Secret's file) is refused as a header, and
    the refusal quotes it: that text would reach every sandbox's status and events."""
    refused = ValueError("Invalid header value b'canary-session-token\\n'")
    classified = classify_s3_error(HTTPClientError(error=refused), bucket="files")

    assert "canary" not in str(classified)
    assert isinstance(classified, S3AccessDeniedError), "no retry mends it"
    assert "AWS_SESSION_TOKEN" in str(classified)


@UNIT
def test_another_refusal_of_the_http_library_is_not_blamed_on_the_credentials() -> None:
    """A proxy URL urllib3 cannot parse (HTTPS_PROXY=http://proxy:abc), say."""
    refused = ValueError("Failed to parse: http://canary:abc")
    classified = classify_s3_error(HTTPClientError(error=refused), bucket="files")

    assert not isinstance(classified, S3AccessDeniedError)
    assert "canary" not in str(classified)


@UNIT
def test_an_error_s3_did_not_send_is_said_by_its_type_never_its_text() -> None:
    classified = classify_s3_error(ValueError("canary-session-token"), bucket="files")
    assert "canary" not in str(classified)
    assert "ValueError" in str(classified)


@UNIT
def test_a_broken_stream_says_how_much_came() -> None:
    broken = HTTPClientError(error=OSError("IncompleteRead(1048576 bytes read, 3 more expected)"))
    classified = classify_s3_error(broken, bucket="files", key="k")
    assert isinstance(classified, S3UnavailableError)
    assert "1048576 bytes read" in str(classified)


@UNIT
def test_a_vanished_object_counts_as_changed_only_when_reading_it() -> None:
    gone = client_error("NoSuchKey", 404)

    assert isinstance(classify_s3_error(gone, bucket="b", key="k"), S3ObjectChangedError)
    assert not isinstance(classify_s3_error(gone, bucket="b"), S3ObjectChangedError)


@UNIT
@pytest.mark.parametrize(
    "error",
    [
        urllib3.exceptions.SSLError("[SSL: DECRYPTION_FAILED_OR_BAD_RECORD_MAC] canary"),
        urllib3.exceptions.ReadTimeoutError(
            None,  # type: ignore[arg-type]
            "/files/k?X-Amz-Signature=canary",
            "Read timed out. (read timeout=30)",
        ),
    ],
)
def test_urllib3s_own_errors_are_retryable_and_said_by_their_type_only(
    error: Exception,
) -> None:
    """botocore lets some through unwrapped; their text may quote a presigned URL."""
    classified = classify_s3_error(error, bucket="files", key="k")

    assert isinstance(classified, S3UnavailableError)
    assert type(error).__name__ in str(classified)
    assert "canary" not in str(classified)


class TlsBreaksAfterFourBytes(io.RawIOBase):
    """A connection whose TLS record layer fails after the first four bytes of a body."""

    def __init__(self) -> None:
        self._sent = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._sent:
            raise ssl.SSLError(1, "[SSL: DECRYPTION_FAILED_OR_BAD_RECORD_MAC]")
        self._sent = True
        buffer[:4] = b"abcd"
        return 4


@UNIT
def test_a_large_file_whose_tls_breaks_mid_read_is_s3_unavailable() -> None:
    """urllib3 raises its own SSLError there, which botocore's streamed body passes on."""
    client = make_s3_client(endpoint_url="http://127.0.0.1:9", region="us-east-1")
    raw = HTTPResponse(
        body=io.BufferedReader(TlsBreaksAfterFourBytes()),
        headers={"Content-Length": "1000"},
        status=200,
        preload_content=False,
        decode_content=False,
    )
    client.get_object = lambda **_: {"Body": StreamingBody(raw, 1000)}  # type: ignore[method-assign,assignment,misc]
    body = S3ObjectStore(client).open_object("files", "k", '"etag"')
    assert body.read(4) == b"abcd"

    with pytest.raises(S3UnavailableError) as raised:
        body.read(1024)
    assert "SSLError" in str(raised.value)


@S3
async def test_an_error_answer_whose_body_stalls_is_s3_unavailable() -> None:
    """GetObject streams its body, so botocore reads an error answer's body where urllib3's
    errors are not wrapped: a 503 whose body stalls past the read timeout raises
    urllib3's own ReadTimeoutError."""
    answered = asyncio.Event()

    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
            b"Content-Length: 500\r\n\r\n<Error><Code>SlowDown</Code>"
        )
        await writer.drain()
        await answered.wait()
        writer.close()

    server = await asyncio.start_server(stall, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = make_s3_client(
        endpoint_url=f"http://127.0.0.1:{port}", region="us-east-1", max_attempts=1, read_timeout=1
    )
    try:
        with pytest.raises(S3UnavailableError):
            await asyncio.to_thread(S3ObjectStore(client).open_object, "files", "k", '"etag"')
    finally:
        answered.set()
        server.close()
