"""moto's S3 server over HTTP on loopback, for tests that need real S3 calls."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from moto.server import ThreadedMotoServer


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class S3Server:
    """A moto S3 server on 127.0.0.1 that a test may stop and start again (an outage)."""

    port: int
    server: ThreadedMotoServer

    @property
    def url(self) -> str:
        """The endpoint URL to give boto3."""
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Take S3 away (connections are refused until :meth:`start`)."""
        self.server.stop()

    def start(self) -> None:
        """Bring S3 back on the same port (moto's state starts empty again)."""
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()


def use_fake_aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials for moto; never the developer's own."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)


def running_s3_server() -> Iterator[S3Server]:
    """Start a fresh moto S3 server; stop it when the generator is closed."""
    port = free_port()
    server = S3Server(port, ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False))
    server.server.start()
    # moto keeps its state per process, not per server: start every test from nothing.
    urllib.request.urlopen(
        urllib.request.Request(f"{server.url}/moto-api/reset", method="POST"), timeout=10
    ).close()
    try:
        yield server
    finally:
        server.stop()
