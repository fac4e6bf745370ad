"""moto's S3 server over HTTP on loopback, for tests that need real S3 calls."""

from __future__ import annotations

import socket
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import pytest
from moto.server import ThreadedMotoServer


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class MotoServer(Protocol):
    """What a moto server offers: start and stop."""

    def start(self) -> None: ...
    def stop(self) -> None: ...


class KeepAliveMotoServer:
    """moto's S3 served by waitress, which keeps connections alive as S3 and MinIO do.

    ThreadedMotoServer's werkzeug closes every connection after one response, so each GET
    costs its client a new connection that S3 does not charge: the benchmarks, which
    count the operator's CPU, use this one. The tests keep werkzeug: behind waitress,
    moto never answers a PUT of an empty object.
    """

    def __init__(self, ip_address: str, port: int) -> None:
        self._address = (ip_address, port)
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Serve in a thread of its own."""
        import waitress
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

        app = DomainDispatcherApplication(create_backend_app)
        host, port = self._address
        self._server = waitress.create_server(app, host=host, port=port, threads=8)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Close the listener and every connection in the server's own loop, which then
        ends (its map is empty), and its worker threads."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return

        def close_all() -> None:
            for channel in list(server._map.values()):
                channel.close()

        server.trigger.pull_trigger(close_all)
        thread.join(timeout=10)
        server.task_dispatcher.shutdown(timeout=5)
        self._server = self._thread = None


@dataclass
class S3Server:
    """A moto S3 server on 127.0.0.1 that a test may stop and start again (an outage)."""

    port: int
    server: MotoServer
    keep_alive: bool = False

    @property
    def url(self) -> str:
        """The endpoint URL to give boto3."""
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Take S3 away (connections are refused until :meth:`start`)."""
        self.server.stop()

    def start(self) -> None:
        """Bring S3 back on the same port (moto's state starts empty again)."""
        self.server = _moto_server(self.port, keep_alive=self.keep_alive)
        self.server.start()


def use_fake_aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials for moto; never the developer's own."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)


def _moto_server(port: int, *, keep_alive: bool) -> MotoServer:
    if keep_alive:
        return KeepAliveMotoServer("127.0.0.1", port)
    return ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)


def running_s3_server(*, keep_alive: bool = False) -> Iterator[S3Server]:
    """Start a fresh moto S3 server (with ``keep_alive``, one that keeps connections
    open as S3 does: :class:`KeepAliveMotoServer`); stop it when the generator is closed."""
    port = free_port()
    server = S3Server(port, _moto_server(port, keep_alive=keep_alive), keep_alive)
    server.server.start()
    # moto keeps its state per process, not per server: start every test from nothing.
    urllib.request.urlopen(
        urllib.request.Request(f"{server.url}/moto-api/reset", method="POST"), timeout=10
    ).close()
    try:
        yield server
    finally:
        server.stop()
