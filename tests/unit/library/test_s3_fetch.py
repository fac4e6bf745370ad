"""Small objects read whole on the event loop (presigned GETs), against moto and against a
stand-in S3 that answers with the errors real S3 gives."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from aiohttp import web

from craft_operator.kube.exec_local import LocalExec
from craft_operator.library import SyncResult, sync_user_library_exec
from craft_operator.library import transfer as transfer_module
from craft_operator.library.errors import (
    S3AccessDeniedError,
    S3BucketNotFoundError,
    S3Error,
    S3ObjectChangedError,
    S3UnavailableError,
)
from craft_operator.library.s3 import S3ObjectStore, make_s3_client
from craft_operator.library.s3_fetch import ObjectFetcher
from craft_operator.library.s3_presign import PROBE_KEY
from tests.support.s3 import S3Server

from .conftest import Bucket, Handler, fetcher_counting_presigns, s3_error

pytestmark = [pytest.mark.s3]

CANARY_TOKEN = "canary-session-token-7f3a9c2e"


@pytest.fixture
async def fetcher(s3_server: S3Server) -> AsyncIterator[ObjectFetcher]:
    """The operator's reader: URLs signed with the client's own credentials."""
    session = boto3.session.Session()
    client = make_s3_client(endpoint_url=s3_server.url, region="us-east-1", session=session)
    reader = ObjectFetcher(client, credentials=session.get_credentials(), retry_pause=0.01)
    yield reader
    await reader.close()


def etag_of(bucket: Bucket, relative: str) -> str:
    head = bucket.client.head_object(Bucket=bucket.name, Key=bucket.prefix + relative)  # type: ignore[attr-defined]
    return str(head["ETag"])


async def test_an_object_is_read_whole_whatever_its_key_spells(
    bucket: Bucket, fetcher: ObjectFetcher
) -> None:
    name = "dir/héllo wörld+100%.txt"
    bucket.put(name, b"hello")

    data = await fetcher.fetch(bucket.name, bucket.prefix + name, etag_of(bucket, name), 5)

    assert data == b"hello"


async def test_no_more_than_one_byte_past_the_listed_size_is_read(
    bucket: Bucket, fetcher: ObjectFetcher
) -> None:
    bucket.put("grown.bin", b"x" * 100_000)

    data = await fetcher.fetch(
        bucket.name, bucket.prefix + "grown.bin", etag_of(bucket, "grown.bin"), 10
    )

    assert data == b"x" * 11


async def test_an_object_replaced_since_the_listing_is_refused_as_changed(
    bucket: Bucket, fetcher: ObjectFetcher
) -> None:
    bucket.put("a.txt", b"one")
    listed = etag_of(bucket, "a.txt")
    bucket.put("a.txt", b"two")

    with pytest.raises(S3ObjectChangedError) as raised:
        await fetcher.fetch(bucket.name, bucket.prefix + "a.txt", listed, 3)
    assert raised.value.retryable


async def test_a_missing_bucket_is_permanent(bucket: Bucket, fetcher: ObjectFetcher) -> None:
    with pytest.raises(S3BucketNotFoundError) as raised:
        await fetcher.fetch("no-such-bucket", "k", '"etag"', 1)
    assert raised.value.lasting


async def test_s3_gone_is_retryable_and_says_where_without_the_signed_url(
    bucket: Bucket,
    fetcher: ObjectFetcher,
    s3_server: S3Server,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_SESSION_TOKEN", CANARY_TOKEN)
    bucket.put("a.txt", b"one")
    etag = etag_of(bucket, "a.txt")
    client = make_s3_client(endpoint_url=s3_server.url, region="us-east-1")
    reader = ObjectFetcher(client, retry_pause=0.01)
    s3_server.stop()
    try:
        with pytest.raises(S3UnavailableError) as raised:
            await reader.fetch(bucket.name, bucket.prefix + "a.txt", etag, 3)
    finally:
        await reader.close()
        s3_server.start()

    assert raised.value.retryable
    assert f"s3://{bucket.name}/{bucket.prefix}a.txt" in str(raised.value)
    assert CANARY_TOKEN not in str(raised.value)
    assert "Signature" not in str(raised.value)


async def test_a_garbled_answer_is_retryable_and_its_message_holds_no_credentials(
    monkeypatch: pytest.MonkeyPatch, unused_tcp_port: int
) -> None:
    """aiohttp puts the whole URL in the error of a response it cannot parse; a presigned
    URL's query holds the signature and, with temporary credentials, the session token."""
    monkeypatch.setenv("AWS_SESSION_TOKEN", CANARY_TOKEN)

    async def garble(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: nope\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(garble, "127.0.0.1", unused_tcp_port)
    client = make_s3_client(endpoint_url=f"http://127.0.0.1:{unused_tcp_port}", region="us-east-1")
    reader = ObjectFetcher(client, retry_pause=0.01)
    try:
        with pytest.raises(S3UnavailableError) as raised:
            await reader.fetch("files", "k", '"e"', 1)
    finally:
        await reader.close()
        server.close()

    assert "Content-Length" in str(raised.value)
    assert CANARY_TOKEN not in str(raised.value)
    assert "Signature" not in str(raised.value)


@pytest.mark.parametrize(
    ("status", "code", "kind", "retryable"),
    [
        (403, "AccessDenied", S3AccessDeniedError, False),
        (403, "SignatureDoesNotMatch", S3AccessDeniedError, False),
        (404, "NoSuchKey", S3ObjectChangedError, True),
        (400, "InvalidArgument", S3Error, False),
        (503, "SlowDown", S3UnavailableError, True),
    ],
)
async def test_s3_error_answers_are_classified_like_boto3s(
    stand_in_s3: Callable[[Handler], asyncio.Future[str]],
    status: int,
    code: str,
    kind: type[S3Error],
    retryable: bool,
) -> None:
    async def answer(request: web.Request) -> web.Response:
        return s3_error(status, code)

    url = await stand_in_s3(answer)
    reader = ObjectFetcher(make_s3_client(endpoint_url=url, region="us-east-1"), retry_pause=0.01)
    try:
        with pytest.raises(S3Error) as raised:
            await reader.fetch("files", "k", '"e"', 1)
    finally:
        await reader.close()

    assert type(raised.value) is kind
    assert raised.value.lasting is not retryable


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (403, "SignatureDoesNotMatch"),
        (400, "AuthorizationHeaderMalformed"),
        (301, "PermanentRedirect"),
        (307, "TemporaryRedirect"),
    ],
)
async def test_a_url_signed_here_that_s3_refuses_is_sent_again_at_once_as_botocore_signs_it(
    stand_in_s3: Callable[[Handler], asyncio.Future[str]], status: int, code: str
) -> None:
    """The endpoint or credentials the signer learnt may have moved: one such answer is no
    verdict on the sync (a denial is final for its attempt). The bucket is learnt again."""
    answers = [s3_error(status, code), web.Response(body=b"data"), web.Response(body=b"next")]

    async def answer(request: web.Request) -> web.Response:
        return answers.pop(0)

    url = await stand_in_s3(answer)
    reader, presigned = fetcher_counting_presigns(url)
    try:
        assert await reader.fetch("files", "k", '"e"', 4) == b"data"
        assert await reader.fetch("files", "k2", '"e"', 4) == b"next"
    finally:
        await reader.close()

    assert presigned == [PROBE_KEY, "k", PROBE_KEY]


async def test_a_refusal_of_botocores_own_url_is_the_error(
    stand_in_s3: Callable[[Handler], asyncio.Future[str]],
) -> None:
    gets: list[str] = []

    async def denying(request: web.Request) -> web.Response:
        gets.append(request.path)
        return s3_error(403, "AccessDenied")

    url = await stand_in_s3(denying)
    reader, presigned = fetcher_counting_presigns(url)
    try:
        with pytest.raises(S3AccessDeniedError) as raised:
            await reader.fetch("files", "k", '"e"', 4)
    finally:
        await reader.close()

    assert raised.value.lasting
    assert presigned == [PROBE_KEY, "k"]
    assert gets == ["/files/k", "/files/k"]


LISTING = b"""<?xml version="1.0"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
<Name>files</Name><Prefix>p/</Prefix><EncodingType>url</EncodingType>
<IsTruncated>false</IsTruncated><Contents><Key>p/a.txt</Key><Size>4</Size><ETag>"e"</ETag>
<LastModified>2024-01-01T00:00:00.000Z</LastModified></Contents></ListBucketResult>"""


async def synced_into_a_pod(
    store: S3ObjectStore, pods: LocalExec, bucket: str, prefix: str
) -> SyncResult:
    """The library under ``prefix`` synced by exec into pod craft/sandbox-a; the store is
    closed after."""
    try:
        return await sync_user_library_exec(
            store=store,
            bucket=bucket,
            prefix=prefix,
            exec_transport=pods,
            namespace="craft",
            pod="sandbox-a",
            container="sandbox",
        )
    finally:
        await store.close()


async def test_one_refused_url_signed_here_does_not_fail_an_exec_sync(
    stand_in_s3: Callable[[Handler], asyncio.Future[str]], tmp_path: Path
) -> None:
    gets = 0

    async def answer(request: web.Request) -> web.Response:
        nonlocal gets
        if "list-type" in request.query:
            return web.Response(body=LISTING, content_type="application/xml")
        gets += 1
        return s3_error(403, "SignatureDoesNotMatch") if gets == 1 else web.Response(body=b"data")

    url = await stand_in_s3(answer)
    session = boto3.session.Session()
    client = make_s3_client(endpoint_url=url, region="us-east-1", session=session)
    store = S3ObjectStore(client, credentials=session.get_credentials())
    pods = LocalExec(root=tmp_path / "pods")
    result = await synced_into_a_pod(store, pods, "files", "p/")

    library = pods.workspace("craft", "sandbox-a") / "user_library"
    assert result.copied == 1
    assert (library / "a.txt").read_bytes() == b"data"


async def test_a_passing_outage_is_tried_once_more_and_the_etag_is_sent_each_time(
    stand_in_s3: Callable[[Handler], asyncio.Future[str]],
) -> None:
    seen: list[str | None] = []

    async def flaky(request: web.Request) -> web.Response:
        seen.append(request.headers.get("If-Match"))
        if len(seen) == 1:
            return s3_error(503, "SlowDown")
        return web.Response(body=b"data")

    url = await stand_in_s3(flaky)
    reader = ObjectFetcher(make_s3_client(endpoint_url=url, region="us-east-1"), retry_pause=0.01)
    try:
        assert await reader.fetch("files", "k", '"e1"', 4) == b"data"
    finally:
        await reader.close()

    assert seen == ['"e1"', '"e1"']


async def test_an_exec_sync_reads_small_files_on_the_event_loop_and_streams_large_ones(
    bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket.put("small.txt", b"s" * 100)
    bucket.put("large.bin", b"L" * 5000)
    monkeypatch.setattr(transfer_module, "PREFETCH_BYTES", 1000)
    opened: list[str] = []

    class CountingStore(S3ObjectStore):
        def open_object(self, bucket: str, key: str, etag: str):  # type: ignore[no-untyped-def]
            opened.append(key.rsplit("/", 1)[-1])
            return super().open_object(bucket, key, etag)

    store = CountingStore(bucket.client)  # type: ignore[arg-type]
    pods = LocalExec(root=tmp_path / "pods")
    result = await synced_into_a_pod(store, pods, bucket.name, bucket.prefix)

    library = pods.workspace("craft", "sandbox-a") / "user_library"
    assert (library / "small.txt").read_bytes() == b"s" * 100
    assert (library / "large.bin").read_bytes() == b"L" * 5000
    assert result.copied == 2
    assert opened == ["large.bin"]


class RefreshingCredentials:
    """botocore's refreshable credentials as a signer sees them: due for a refresh (an STS
    call) or not; each read says which thread it ran in."""

    def __init__(self, source: Any, *, due: bool) -> None:
        self.source, self.due = source, due
        self.read_in: list[int] = []

    def refresh_needed(self) -> bool:
        return self.due

    def get_frozen_credentials(self) -> Any:
        self.read_in.append(threading.get_ident())
        return self.source.get_frozen_credentials()


@pytest.mark.parametrize("due", [True, False], ids=["refresh-due", "fresh"])
async def test_credentials_due_for_a_refresh_are_read_off_the_event_loop(
    stand_in_s3: Callable[[Handler], asyncio.Future[str]], due: bool
) -> None:
    """A refresh with web identity is a call to STS: it must not stop every sandbox's work."""

    async def answer(request: web.Request) -> web.Response:
        return web.Response(body=b"data")

    url = await stand_in_s3(answer)
    session = boto3.session.Session()
    client = make_s3_client(endpoint_url=url, region="us-east-1", session=session)
    credentials = RefreshingCredentials(session.get_credentials(), due=False)
    reader = ObjectFetcher(client, credentials=credentials)
    try:
        assert await reader.fetch("files", "k", '"e"', 4) == b"data"  # the bucket's probe
        credentials.due = due
        credentials.read_in.clear()
        assert await reader.fetch("files", "k", '"e"', 4) == b"data"
    finally:
        await reader.close()

    on_loop = threading.get_ident()
    assert credentials.read_in, "the keys were read"
    assert all((thread == on_loop) is not due for thread in credentials.read_in)
