"""Listings on the event loop: what boto3's paginator lists, page for page, whatever the keys
spell; S3's refusals classified as boto3's are; a bucket this signer cannot vouch for, or
whose listing S3 refuses as if its URL were wrong, listed by boto3; an answer that is not
a listing, a clear and retryable error."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial

import boto3
import pytest
from aiohttp import web

from craft_operator.library import s3_fetch
from craft_operator.library import sync as sync_module
from craft_operator.library.errors import S3BucketNotFoundError, S3Error
from craft_operator.library.plan import S3Object, SyncCaps
from craft_operator.library.s3 import S3ObjectStore, make_s3_client
from craft_operator.library.s3_fetch import ObjectFetcher
from craft_operator.library.s3_listing import parse_listing_page
from craft_operator.library.s3_presign import PROBE_KEY
from craft_operator.library.sync import _Sync

from .conftest import Bucket, Handler, fetcher_counting_presigns, s3_error

pytestmark = [pytest.mark.s3]

KEYS = [
    "a.txt",
    "dir/héllo wörld+100%.txt",
    "~tilde/*star?query#hash[br]&amp=eq;semi@at!bang$dollar'q(paren)",
    " leading and trailing space ",
    "percent%20literal%2F",
    "日本語/ファイル.pdf",
    "emoji 😀.png",
    "plus+and space.md",
]

Serve = Callable[[Handler], "asyncio.Future[str]"]


def store_for(url: str, *, page_size: int | None = None) -> S3ObjectStore:
    """The operator's store: URLs signed with the client's own credentials."""
    session = boto3.session.Session()
    client = make_s3_client(endpoint_url=url, region="us-east-1", max_attempts=1, session=session)
    return S3ObjectStore(client, credentials=session.get_credentials(), page_size=page_size)


def listing(body: str) -> web.Response:
    return web.Response(body=body.encode(), content_type="application/xml")


def page(keys: list[str], *, token: str | None = None) -> str:
    contents = "".join(
        f"<Contents><Key>{key}</Key><Size>1</Size><ETag>&quot;e&quot;</ETag>"
        "<LastModified>2026-11-27T10:00:00.000Z</LastModified></Contents>"
        for key in keys
    )
    more = (
        f"<IsTruncated>true</IsTruncated><NextContinuationToken>{token}</NextContinuationToken>"
        if token
        else "<IsTruncated>false</IsTruncated>"
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"<Name>files</Name><Prefix>p/</Prefix>{more}"
        f"{contents}</ListBucketResult>"
    )


async def test_a_listing_on_the_event_loop_is_boto3s_whatever_the_keys_spell(
    bucket: Bucket,
) -> None:
    for index, name in enumerate(KEYS):
        bucket.put(name, b"x" * index)
    bucket.put_key("elsewhere/a.txt", b"not in the prefix")
    store = store_for(bucket.client.meta.endpoint_url, page_size=3)  # type: ignore[attr-defined]
    try:
        on_loop = await store.list_objects_on_loop(bucket.name, bucket.prefix)
    finally:
        await store.close()

    by_boto3 = store.list_objects(bucket.name, bucket.prefix)
    assert on_loop is not None
    assert on_loop == by_boto3
    assert sorted(obj.key for obj in on_loop) == sorted(bucket.prefix + name for name in KEYS)


async def test_a_listing_on_the_event_loop_stops_one_object_past_its_limit(bucket: Bucket) -> None:
    for index in range(9):
        bucket.put(f"f{index}", b"x")
    store = store_for(bucket.client.meta.endpoint_url, page_size=2)  # type: ignore[attr-defined]
    try:
        found = await store.list_objects_on_loop(bucket.name, bucket.prefix, limit=3)
    finally:
        await store.close()

    assert found is not None
    assert [obj.key for obj in found] == [f"{bucket.prefix}f{i}" for i in range(4)]


async def test_a_missing_bucket_is_permanent_on_the_event_loop_too(bucket: Bucket) -> None:
    store = store_for(bucket.client.meta.endpoint_url)  # type: ignore[attr-defined]
    try:
        with pytest.raises(S3BucketNotFoundError, match="no-such-bucket") as raised:
            await store.list_objects_on_loop("no-such-bucket", "x/")
    finally:
        await store.close()
    assert raised.value.lasting


@pytest.mark.parametrize(
    "refusal",
    [
        s3_error(403, "SignatureDoesNotMatch"),
        s3_error(400, "AuthorizationHeaderMalformed"),
        s3_error(301, "PermanentRedirect"),
        web.Response(status=307, headers={"Location": "http://elsewhere.invalid/"}),
    ],
    ids=["403", "400", "301", "307"],
)
async def test_a_refused_listing_url_leaves_the_listing_to_boto3_and_is_checked_again(
    stand_in_s3: Serve, refusal: web.Response
) -> None:
    """S3 refusing the signature (or the endpoint) may mean what this signer learnt has
    moved: boto3 lists, in its words if it fails too, and the next URL is checked again."""
    answers = [refusal, listing(page(["p/a"]))]

    async def answer(request: web.Request) -> web.Response:
        return answers.pop(0)

    url = await stand_in_s3(answer)
    fetcher, presigned = fetcher_counting_presigns(url)
    try:
        assert await fetcher.list_objects("files", "p/", limit=None) is None
        found = await fetcher.list_objects("files", "p/", limit=None)
    finally:
        await fetcher.close()

    assert [obj.key for obj in found or []] == ["p/a"]
    assert presigned == [PROBE_KEY, PROBE_KEY]


async def test_a_bucket_without_credentials_at_hand_is_listed_by_boto3(stand_in_s3: Serve) -> None:
    async def answer(request: web.Request) -> web.Response:
        raise AssertionError("nothing is asked on the event loop")

    url = await stand_in_s3(answer)
    fetcher = ObjectFetcher(make_s3_client(endpoint_url=url, region="us-east-1"))
    try:
        assert await fetcher.list_objects("files", "p/", limit=None) is None
    finally:
        await fetcher.close()


@pytest.mark.parametrize(
    ("answer_body", "says"),
    [
        ("<html>502 Bad Gateway</html", "that is not XML"),
        ("<Error><Code>Odd</Code></Error>", "of 'Error', not a ListBucketResult"),
        ('<?xml version="1.0" encoding="no-such-codec"?><a/>', "that is not XML"),
        (page(["p/a"]).replace("<Size>1</Size>", "<Size>²</Size>"), "without a key or a size"),
        (page(["p/a"]).replace("<Size>1</Size>", "<Size>-1</Size>"), "without a key or a size"),
        (
            page(["p/a"], token="t")
            .replace("<NextContinuationToken>t", "<X>t")
            .replace("</NextContinuationToken>", "</X>"),
            "more pages but no token",
        ),
    ],
)
async def test_an_answer_that_is_no_listing_is_a_retryable_error_that_says_so(
    stand_in_s3: Serve, answer_body: str, says: str
) -> None:
    async def answer(request: web.Request) -> web.Response:
        return listing(answer_body)

    store = store_for(await stand_in_s3(answer))
    try:
        with pytest.raises(S3Error, match=says) as raised:
            await store.list_objects_on_loop("files", "p/")
    finally:
        await store.close()
    assert raised.value.retryable


async def test_a_listing_that_comes_back_to_an_earlier_page_is_stopped(stand_in_s3: Serve) -> None:
    async def answer(request: web.Request) -> web.Response:
        return listing(page(["p/a"], token="same-again"))

    store = store_for(await stand_in_s3(answer))
    try:
        with pytest.raises(S3Error, match="repeated a continuation token") as raised:
            await store.list_objects_on_loop("files", "p/")
    finally:
        await store.close()
    assert raised.value.retryable


async def test_a_listing_of_empty_pages_with_new_tokens_for_ever_is_stopped(
    stand_in_s3: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3_fetch, "LISTING_EMPTY_PAGES", 5)
    asked: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        asked.append(request.query.get("continuation-token", ""))
        return listing(page([], token=f"t{len(asked)}"))

    store = store_for(await stand_in_s3(answer))
    try:
        with pytest.raises(S3Error, match="5 listing pages of bucket 'files' without") as raised:
            await store.list_objects_on_loop("files", "p/")
    finally:
        await store.close()
    assert raised.value.retryable
    assert asked == ["", "t1", "t2", "t3", "t4"]


async def test_empty_pages_before_the_objects_are_followed(
    stand_in_s3: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S3 answers some where it passes over many delete markers."""
    monkeypatch.setattr(s3_fetch, "LISTING_EMPTY_PAGES", 5)
    pages = [page([], token="t1"), page([], token="t2"), page(["p/a"], token="t3"), page([])]

    async def answer(request: web.Request) -> web.Response:
        return listing(pages.pop(0))

    store = store_for(await stand_in_s3(answer))
    try:
        found = await store.list_objects_on_loop("files", "p/")
    finally:
        await store.close()
    assert [obj.key for obj in found or []] == ["p/a"]


async def test_a_listing_page_past_its_size_is_refused_before_it_is_parsed(
    stand_in_s3: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3_fetch, "LISTING_PAGE_BYTES", 1024)

    async def answer(request: web.Request) -> web.Response:
        return listing(page([f"p/{index:04d}" for index in range(100)]))

    store = store_for(await stand_in_s3(answer))
    try:
        with pytest.raises(S3Error, match="larger than 1024 bytes"):
            await store.list_objects_on_loop("files", "p/")
    finally:
        await store.close()


@pytest.mark.unit
def test_keys_are_url_decoded_only_when_the_answer_says_they_are_encoded() -> None:
    encoded = page(["p/a+b%2Bc%09d"]).replace("<Name>", "<EncodingType>url</EncodingType><Name>")
    plain = page(["p/a+b"]).replace(' xmlns="http://s3.amazonaws.com/doc/2006-03-01/"', "")

    assert [o.key for o in parse_listing_page(encoded.encode(), bucket="b").objects] == [
        "p/a b+c\td"
    ]
    assert [o.key for o in parse_listing_page(plain.encode(), bucket="b").objects] == ["p/a+b"]


class ThreadOnlyStore:
    """A store that lists only in a thread (no loop listing)."""

    def list_objects(self, bucket: str, prefix: str, *, limit: int | None = None) -> list[S3Object]:
        return [S3Object(key=f"{prefix}a", size=1, etag='"e"')]


class LoopStore(ThreadOnlyStore):
    """A store that lists on the loop, or says boto3 must (``None``)."""

    def __init__(self, on_loop: list[S3Object] | None) -> None:
        self.on_loop = on_loop

    async def list_objects_on_loop(
        self, bucket: str, prefix: str, *, limit: int | None = None
    ) -> list[S3Object] | None:
        return self.on_loop


@pytest.mark.unit
async def test_the_sync_lists_on_the_loop_and_in_a_thread_only_when_it_must(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threads: list[object] = []
    in_thread = sync_module.in_daemon_thread

    async def counted(function: Callable[..., object], /, *args: object) -> object:
        threads.append(function)
        return await in_thread(function, *args)

    monkeypatch.setattr(sync_module, "in_daemon_thread", counted)

    def listed(store: object) -> Awaitable[list[S3Object]]:
        return _Sync.of(store, "files", "p/", (), (), SyncCaps()).objects()  # type: ignore[arg-type]

    loop_listed = [S3Object(key="p/b", size=1, etag='"e"')]

    assert await listed(LoopStore(loop_listed)) == loop_listed
    assert threads == []
    assert [o.key for o in await listed(LoopStore(None))] == ["p/a"]
    assert [o.key for o in await listed(ThreadOnlyStore())] == ["p/a"]
    assert len(threads) == 2
    assert all(isinstance(f, partial) for f in threads)


async def test_a_listing_asks_for_no_compression_and_a_compressed_one_is_left_to_boto3(
    stand_in_s3: Serve,
) -> None:
    """A proxy that compresses XML would hand over what is not a listing: none is asked for,
    and one that comes all the same is listed by boto3 (which decompresses it)."""
    asked: list[str] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        asked.append(request.headers.get("Accept-Encoding", ""))
        response = listing(page(["p/a"]))
        if len(asked) > 1:
            response.enable_compression(force=web.ContentCoding.gzip)
        else:
            response.enable_compression()  # as the client asks
        return response

    store = store_for(await stand_in_s3(answer))
    try:
        first = await store.list_objects_on_loop("files", "p/")
        compressed = await store.list_objects_on_loop("files", "p/")
    finally:
        await store.close()

    assert [obj.key for obj in first or []] == ["p/a"]
    assert compressed is None
    assert asked == ["identity", "identity"]


@pytest.mark.unit
def test_a_size_with_spaces_around_it_is_read_as_botocore_reads_it() -> None:
    spaced = page(["p/a"]).replace("<Size>1</Size>", "<Size> 5 </Size>")
    (found,) = parse_listing_page(spaced.encode(), bucket="b").objects
    assert found.size == 5
