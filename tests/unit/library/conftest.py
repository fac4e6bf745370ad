"""Fixtures of the user-library tests: moto's S3 server over HTTP, buckets, a local pod."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from aiohttp import web

from craft_operator.kube.exec_local import LocalExec
from craft_operator.library.s3 import S3ObjectStore, make_s3_client, make_s3_store
from craft_operator.library.s3_fetch import ObjectFetcher
from tests.support.s3 import S3Server, running_s3_server, use_fake_aws_credentials


@pytest.fixture(autouse=True)
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials for moto; never the developer's own."""
    use_fake_aws_credentials(monkeypatch)


@pytest.fixture
def s3_server() -> Iterator[S3Server]:
    """A fresh moto S3 server for one test."""
    yield from running_s3_server()


@dataclass
class Bucket:
    """A bucket on the moto server with helpers to shape a user library in it."""

    name: str
    prefix: str
    client: object
    store: S3ObjectStore

    def put(self, relative: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.name, Key=self.prefix + relative, Body=data)  # type: ignore[attr-defined]

    def put_key(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.name, Key=key, Body=data)  # type: ignore[attr-defined]

    def delete(self, relative: str) -> None:
        self.client.delete_object(Bucket=self.name, Key=self.prefix + relative)  # type: ignore[attr-defined]


@pytest.fixture
def bucket(s3_server: S3Server) -> Bucket:
    """An empty bucket; the library prefix is Onyx's default layout for a random user."""
    client = make_s3_client(endpoint_url=s3_server.url, region="us-east-1", max_attempts=1)
    name = f"lib-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    prefix = f"public/knowledge/{uuid.uuid4()}/user_library/"
    store = make_s3_store(endpoint_url=s3_server.url, region="us-east-1", max_attempts=1)
    return Bucket(name=name, prefix=prefix, client=client, store=store)


@pytest.fixture
async def pods(tmp_path: Path) -> AsyncIterator[LocalExec]:
    """The local stand-in for pod exec, with pods' /workspace under tmp_path; the commands
    a test abandoned (a stopped shell, say) are ended before the next test."""
    local = LocalExec(root=tmp_path / "pods")
    yield local
    await local.settled()


Handler = Callable[[web.Request], web.StreamResponse]


@pytest.fixture
async def stand_in_s3(unused_tcp_port: int) -> AsyncIterator[Callable[[Handler], str]]:
    """An S3 endpoint whose answers a test writes; returns its URL."""
    runners: list[web.AppRunner] = []

    async def serve(handler: Handler) -> str:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
        runners.append(runner)
        return f"http://127.0.0.1:{unused_tcp_port}"

    yield serve  # type: ignore[misc]
    for runner in runners:
        await runner.cleanup()


def s3_error(status: int, code: str) -> web.Response:
    body = f"<?xml version='1.0'?><Error><Code>{code}</Code><Message>{code} here</Message></Error>"
    return web.Response(status=status, body=body, content_type="application/xml")


def fetcher_counting_presigns(url: str) -> tuple[ObjectFetcher, list[str]]:
    """The operator's reader of the S3 at ``url`` (URLs signed with the client's own
    credentials), and the keys botocore presigns for it, as it presigns them."""
    session = boto3.session.Session()
    client = make_s3_client(endpoint_url=url, region="us-east-1", session=session)
    presigned: list[str] = []
    botocore_presign = client.generate_presigned_url

    def counted(*args: object, **kwargs: dict[str, str]) -> str:
        presigned.append(kwargs["Params"]["Key"])
        return str(botocore_presign(*args, **kwargs))

    client.generate_presigned_url = counted  # type: ignore[method-assign]
    fetcher = ObjectFetcher(client, credentials=session.get_credentials(), retry_pause=0.01)
    return fetcher, presigned
