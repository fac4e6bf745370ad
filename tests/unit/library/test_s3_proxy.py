"""The proxy of S3 requests: the listings and small files read on the event loop go through
the proxy boto3 sends its own requests through, by botocore's rules, or around it when
botocore goes around it."""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import pytest
from botocore.config import Config

from craft_operator.library import sync_user_library_local
from craft_operator.library.errors import S3Error
from craft_operator.library.s3 import S3ObjectStore, make_s3_client, make_s3_store
from craft_operator.library.s3_fetch import ObjectFetcher
from tests.support.s3 import S3Server

from .conftest import Bucket

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

pytestmark = [pytest.mark.s3]

#: A host name only the proxy resolves, as for a cluster whose egress to S3 is a proxy.
PROXY_ONLY = ".proxy-only.test"


@dataclass
class ForwardProxy:
    """A plain HTTP forward proxy on loopback that records what it forwards."""

    port: int
    requests: list[str] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
async def proxy() -> AsyncIterator[ForwardProxy]:
    """A forward proxy of GETs that sends each where its absolute URL says (a host under
    :data:`PROXY_ONLY` is loopback), one request per connection."""
    recorded = ForwardProxy(port=0)

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        line, *fields = head.decode().removesuffix("\r\n\r\n").split("\r\n")
        method, target, version = line.split(" ", 2)
        recorded.requests.append(f"{method} {target}")
        headers = dict(entry.split(":", 1) for entry in fields)
        by_name = {name.lower(): value.strip() for name, value in headers.items()}
        recorded.authorizations.append(by_name.get("proxy-authorization"))
        authority, _, path = target.removeprefix("http://").partition("/")
        host, _, port = authority.partition(":")
        if host.endswith(PROXY_ONLY):
            # moto serves buckets by the Host header (and checks no signature).
            host = "127.0.0.1"
            headers["Host"] = f" {host}:{port}"
        forwarded = [f"{method} /{path} {version}", "Connection: close"] + [
            f"{name}:{value}"
            for name, value in headers.items()
            if name.lower() not in ("connection", "proxy-authorization")
        ]
        upstream_reader, upstream = await asyncio.open_connection(host, int(port or 80))
        upstream.write(("\r\n".join(forwarded) + "\r\n\r\n").encode())
        # The answer, then the end of the connection: one request per connection.
        answer = await upstream_reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", answer)
        if length:
            answer += await upstream_reader.readexactly(int(length.group(1)))
        else:
            answer += await upstream_reader.read()
        writer.write(answer)
        await writer.drain()
        upstream.close()
        writer.close()

    server = await asyncio.start_server(forward, "127.0.0.1", 0)
    recorded.port = server.sockets[0].getsockname()[1]
    yield recorded
    server.close()


@pytest.fixture
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """An environment without the developer's own proxy settings."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


def client_with_proxies(
    url: str, proxies: dict[str, str], session: boto3.session.Session
) -> S3Client:
    """The operator's S3 client of ``url`` with botocore's ``proxies`` setting."""
    client = make_s3_client(endpoint_url=url, region="us-east-1", session=session)
    config = client.meta.config.merge(Config(proxies=proxies))
    configured: S3Client = session.client("s3", endpoint_url=url, config=config)
    return configured


async def read_one_file_both_ways(store: S3ObjectStore, bucket: Bucket) -> None:
    """List and read ``a.txt`` with boto3 (in a thread), then on the event loop."""
    (listed,) = await asyncio.to_thread(store.list_objects, bucket.name, bucket.prefix)
    body = await asyncio.to_thread(store.open_object, bucket.name, listed.key, listed.etag)
    assert await asyncio.to_thread(body.read) == b"hello"
    body.close()
    assert await store.list_objects_on_loop(bucket.name, bucket.prefix) == [listed]
    assert await store.fetch_object(bucket.name, listed.key, listed.etag, 5) == b"hello"


async def test_the_event_loops_listing_and_reads_go_through_the_environments_proxy(
    bucket: Bucket, s3_server: S3Server, proxy: ForwardProxy, no_proxy_settings: pytest.MonkeyPatch
) -> None:
    bucket.put("a.txt", b"hello")
    no_proxy_settings.setenv("HTTP_PROXY", proxy.url)
    store = make_s3_store(endpoint_url=s3_server.url, region="us-east-1", max_attempts=1)
    try:
        await read_one_file_both_ways(store, bucket)
    finally:
        await store.close()

    listings = [r for r in proxy.requests if r.startswith("GET") and "list-type=2" in r]
    reads = [r for r in proxy.requests if r.startswith("GET") and r.endswith("a.txt")]
    assert len(listings) == 2, proxy.requests  # boto3's, then the event loop's
    assert any("X-Amz-Signature=" in r for r in listings), "the loop's presigned listing"
    assert len([r for r in proxy.requests if "a.txt?" in r]) == 1, "the loop's presigned GET"
    assert len(reads) == 1, "boto3's GET"


async def test_a_library_whose_s3_only_the_proxy_reaches_is_synced(
    bucket: Bucket,
    s3_server: S3Server,
    proxy: ForwardProxy,
    no_proxy_settings: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    bucket.put("a.txt", b"hello")
    no_proxy_settings.setenv("HTTP_PROXY", proxy.url)
    endpoint = f"http://s3{PROXY_ONLY}:{s3_server.port}"
    store = make_s3_store(endpoint_url=endpoint, region="us-east-1", max_attempts=1)
    try:
        result = await sync_user_library_local(
            store=store, bucket=bucket.name, prefix=bucket.prefix, dest=tmp_path / "lib"
        )
    finally:
        await store.close()

    assert result.files == 1
    assert (tmp_path / "lib" / "a.txt").read_bytes() == b"hello"


async def test_no_proxy_naming_the_endpoint_sends_both_paths_straight_to_s3(
    bucket: Bucket, s3_server: S3Server, proxy: ForwardProxy, no_proxy_settings: pytest.MonkeyPatch
) -> None:
    bucket.put("a.txt", b"hello")
    no_proxy_settings.setenv("HTTP_PROXY", proxy.url)
    no_proxy_settings.setenv("NO_PROXY", "example.com,127.0.0.1")
    store = make_s3_store(endpoint_url=s3_server.url, region="us-east-1", max_attempts=1)
    try:
        await read_one_file_both_ways(store, bucket)
    finally:
        await store.close()

    assert proxy.requests == []


async def test_the_clients_own_proxies_are_used_with_their_credentials_as_botocore_sends_them(
    bucket: Bucket, s3_server: S3Server, proxy: ForwardProxy, no_proxy_settings: pytest.MonkeyPatch
) -> None:
    """``Config(proxies=...)`` wins over the environment (a NO_PROXY that names the
    endpoint included), and the proxy URL's ``user:password@`` is sent as botocore sends
    it, never in the request line."""
    bucket.put("a.txt", b"hello")
    no_proxy_settings.setenv("NO_PROXY", "127.0.0.1")
    session = boto3.session.Session()
    client = client_with_proxies(
        s3_server.url, {"http": f"http://craft:p%40ss@127.0.0.1:{proxy.port}"}, session
    )
    store = S3ObjectStore(client, credentials=session.get_credentials())
    try:
        await read_one_file_both_ways(store, bucket)
    finally:
        await store.close()

    assert len(proxy.requests) == 4, proxy.requests
    assert not any("craft" in r for r in proxy.requests)
    expected = "Basic " + base64.b64encode(b"craft:p@ss").decode()
    assert proxy.authorizations == [expected] * 4


async def test_a_proxy_url_that_cannot_be_parsed_is_an_s3_error_that_does_not_quote_it() -> None:
    session = boto3.session.Session()
    client = client_with_proxies("http://127.0.0.1:9", {"http": "http://u:secret@[::1"}, session)
    fetcher = ObjectFetcher(client, credentials=session.get_credentials())
    try:
        with pytest.raises(S3Error) as caught:
            await fetcher.list_objects("bucket", "p/", limit=None)
    finally:
        await fetcher.close()

    assert "proxy URL" in str(caught.value)
    assert "secret" not in str(caught.value)
