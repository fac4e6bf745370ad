"""What both exec transports promise (the real one over the stand-in API server's websocket,
and the local double): a stalled call is abandoned, the stdin source is closed however the
call ends and its own errors pass unchanged, a missing program is a permanent ExecError,
and an abandoned command, as under the kubelet, sees its stdin end and runs on. Then what
only the websocket has: pings, the 401 that has the credentials read again, and failures
to connect named without the URL."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import kopf
import pytest
from aiohttp.client_reqrep import ConnectionKey

from craft_operator.kube.client import KubeClient
from craft_operator.kube.exec import (
    ExecError,
    ExecStalledError,
    ExecTimeoutError,
    ExecTransport,
    ExecUnavailableError,
)
from craft_operator.kube.exec_aiohttp import AiohttpExec, connection_failure
from craft_operator.kube.exec_local import LocalExec
from tests.support.exec_api import FakeApiServer, aiohttp_exec, serve_exec_api

pytestmark = [pytest.mark.unit]


@dataclass
class Subject:
    """A transport under test, and how to wait for the commands it abandoned to end."""

    transport: ExecTransport
    settled: Callable[[], Awaitable[Any]]
    missing_pod: str = "missing"


@pytest.fixture(params=["websocket", "local"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@contextlib.asynccontextmanager
async def opened(kind: str, tmp_path: Path, **options: Any) -> AsyncIterator[Subject]:
    """The ``kind`` of transport, with ``options`` (e.g. ``idle_timeout``)."""
    if kind == "local":
        local = LocalExec(root=tmp_path / "pods", missing_pods={"ns/missing"}, **options)
        yield Subject(local, local.settled)
        return
    async with serve_exec_api() as server, aiohttp_exec(server, **options) as transport:
        yield Subject(transport, lambda: asyncio.wait_for(server.settled.wait(), 10))


class SourceBrokeError(Exception):
    """A stdin source's own failure."""


@dataclass
class Source:
    """A stdin source that records whether it was closed."""

    chunks: int = 1_000_000
    pause: float = 0.0
    closed: bool = False

    async def __call__(self) -> AsyncGenerator[bytes, None]:
        try:
            for _ in range(self.chunks):
                yield b"x" * 65536
                await asyncio.sleep(self.pause)
        finally:
            self.closed = True


async def test_a_command_working_silently_once_its_stdin_is_taken_is_not_stalled(
    kind: str, tmp_path: Path
) -> None:
    # A library upload's moves, or onyx-cli waiting for its server: no output for a while.
    script = "cat >/dev/null; sleep 1.2; echo done"
    async with opened(kind, tmp_path, idle_timeout=0.4) as subject:
        result = await subject.transport.run(
            "ns", "pod", "main", ["sh", "-c", script], stdin=b"x" * 1000, timeout=30
        )

    assert result.stdout == b"done\n"


async def test_a_call_without_stdin_is_bounded_by_its_timeout_alone(
    kind: str, tmp_path: Path
) -> None:
    async with opened(kind, tmp_path, idle_timeout=0.3) as subject:
        result = await subject.transport.run("ns", "pod", "main", ["sh", "-c", "sleep 1; echo x"])

    assert result.stdout == b"x\n"


async def test_a_pod_that_stops_reading_its_stdin_stalls_the_call(
    kind: str, tmp_path: Path
) -> None:
    source = Source()
    async with opened(kind, tmp_path, idle_timeout=0.5) as subject:
        with pytest.raises(ExecStalledError, match="made no progress for 0s") as raised:
            await subject.transport.run(
                "ns", "pod", "main", ["sleep", "30"], stdin=source(), timeout=30
            )

    assert raised.value.retryable
    assert source.closed


async def test_a_pod_that_prints_while_it_holds_its_stdin_still_stalls_the_call(
    kind: str, tmp_path: Path
) -> None:
    # The agent controls the pod: output now and then must not keep a call alive that
    # takes none of its stdin (a library upload would hold its slot up to its timeout).
    script = "while :; do echo still here; sleep 0.1; done"
    async with opened(kind, tmp_path, idle_timeout=0.5) as subject:
        with pytest.raises(ExecStalledError, match="made no progress"):
            await subject.transport.run(
                "ns", "pod", "main", ["sh", "-c", script], stdin=Source()(), timeout=30
            )


async def test_a_command_that_writes_now_and_then_is_not_stalled(kind: str, tmp_path: Path) -> None:
    script = "for i in 1 2 3 4 5; do echo $i; sleep 0.3; done"
    async with opened(kind, tmp_path, idle_timeout=1.0) as subject:
        result = await subject.transport.run("ns", "pod", "main", ["sh", "-c", script])

    assert result.stdout == b"1\n2\n3\n4\n5\n"


async def test_a_slow_stdin_source_is_not_the_pods_stall(kind: str, tmp_path: Path) -> None:
    # wc prints nothing before its stdin ends: only the source's pace is slow.
    source = Source(chunks=3, pause=0.8)
    async with opened(kind, tmp_path, idle_timeout=0.5) as subject:
        result = await subject.transport.run("ns", "pod", "main", ["wc", "-c"], stdin=source())

    assert int(result.stdout) == 3 * 65536


async def test_the_time_spent_waiting_for_the_stdin_source_is_not_counted_against_the_timeout(
    kind: str, tmp_path: Path
) -> None:
    # A library of many small files: S3's latency per GET, not the pod, sets the upload's pace.
    source = Source(chunks=4, pause=0.5)
    async with opened(kind, tmp_path) as subject:
        result = await subject.transport.run(
            "ns", "pod", "main", ["wc", "-c"], stdin=source(), timeout=1.0
        )

    assert int(result.stdout) == 4 * 65536


async def test_the_pods_own_time_still_counts_against_the_timeout_beside_a_slow_source(
    kind: str, tmp_path: Path
) -> None:
    source = Source(chunks=2, pause=0.5)
    async with opened(kind, tmp_path) as subject:
        with pytest.raises(ExecTimeoutError, match="timed out"):
            await subject.transport.run(
                "ns",
                "pod",
                "main",
                ["sh", "-c", "cat >/dev/null; sleep 30"],
                stdin=source(),
                timeout=1.5,
            )
        await subject.settled()


async def test_the_stdin_source_is_closed_when_the_command_exits_early(
    kind: str, tmp_path: Path
) -> None:
    # A library upload's source holds S3 reads open: they must not wait for the GC.
    source = Source()
    async with opened(kind, tmp_path) as subject:
        result = await subject.transport.run(
            "ns", "pod", "main", ["sh", "-c", "exit 3"], stdin=source(), timeout=30
        )

        assert result.exit_code == 3
        assert source.closed


async def test_the_stdin_source_is_closed_when_the_pod_cannot_be_reached(
    kind: str, tmp_path: Path
) -> None:
    stream = Source()()
    async with opened(kind, tmp_path) as subject:
        with pytest.raises(ExecUnavailableError):
            await subject.transport.run("ns", "missing", "main", ["cat"], stdin=stream)

        # Never started, so nothing of it ran; closed, so nothing of it ever will.
        assert await anext(stream, None) is None


async def test_a_timeout_raised_by_the_stdin_source_is_its_own_and_passes_unchanged(
    kind: str, tmp_path: Path
) -> None:
    error = TimeoutError("the S3 read timed out")

    async def source() -> AsyncIterator[bytes]:
        yield b"some"
        raise error

    async with opened(kind, tmp_path) as subject:
        with pytest.raises(TimeoutError) as raised:
            await subject.transport.run("ns", "pod", "main", ["cat"], stdin=source(), timeout=30)

    assert raised.value is error


async def test_a_program_missing_from_the_image_is_a_permanent_exec_error(
    kind: str, tmp_path: Path
) -> None:
    async with opened(kind, tmp_path) as subject:
        with pytest.raises(ExecError, match="executable file not found") as raised:
            await subject.transport.run("ns", "pod", "main", ["no-such-program-here"])

    assert not raised.value.retryable


async def test_an_abandoned_command_sees_its_stdin_end_and_runs_on(
    kind: str, tmp_path: Path
) -> None:
    # As under the kubelet: nothing kills the command when its caller goes away. A script
    # that takes the end of its stdin for the end of its input acts on a part of it.
    witness = tmp_path / "witness"
    script = 'n=$(wc -c); echo "ran on with $n bytes" > "$1"'

    async def source() -> AsyncIterator[bytes]:
        yield b"x" * 20_000
        await asyncio.sleep(0.2)  # sent, before the source fails
        raise SourceBrokeError("S3 went away")

    async with opened(kind, tmp_path) as subject:
        with pytest.raises(SourceBrokeError):
            await subject.transport.run(
                "ns", "pod", "main", ["sh", "-c", script, "sh", str(witness)], stdin=source()
            )
        await subject.settled()

    said = witness.read_text()
    assert said.startswith("ran on with ")
    assert 0 < int(said.split()[3]) <= 20_000


async def test_a_401_on_the_handshake_has_the_credentials_read_again(
    api_server: FakeApiServer,
) -> None:
    kube = KubeClient(request_timeout=10)
    url = f"http://127.0.0.1:{api_server.port}"
    kube.configure(kopf.ConnectionInfo(server=url, insecure=True))
    try:
        with pytest.raises(ExecUnavailableError, match="HTTP 401") as raised:
            await AiohttpExec(kube).run("ns", "unauthorized", "main", ["true"], timeout=30)
    finally:
        await kube.close()

    assert raised.value.retryable
    assert kube.unauthorized.is_set()


KEY = ConnectionKey("api.example", 6443, True, True, None, None, None)


def verify_failed(verify_message: str) -> ssl.SSLCertVerificationError:
    """A certificate error as the ssl module raises it."""
    error = ssl.SSLCertVerificationError(
        1, f"[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: {verify_message}"
    )
    error.verify_message = verify_message
    error.reason = "CERTIFICATE_VERIFY_FAILED"
    return error


def handshake_failed(reason: str) -> ssl.SSLError:
    error = ssl.SSLError(1, f"[SSL: {reason}] {reason.lower()} (_ssl.c:1000)")
    error.reason = reason
    return error


@pytest.mark.parametrize(
    ("failure", "said"),
    [
        (
            aiohttp.ClientConnectorCertificateError(KEY, verify_failed("certificate has expired")),
            "the API server's TLS certificate was not accepted (certificate has expired)",
        ),
        (
            aiohttp.ClientConnectorSSLError(KEY, handshake_failed("WRONG_VERSION_NUMBER")),
            "the TLS handshake with the API server failed (WRONG_VERSION_NUMBER)",
        ),
        (
            aiohttp.ClientConnectorDNSError(KEY, socket.gaierror(-2, "Name or service not known")),
            "the API server's host name could not be resolved (Name or service not known)",
        ),
        (
            aiohttp.ClientConnectorError(
                KEY, ConnectionRefusedError(111, "Connect call failed ('10.0.0.1', 6443)")
            ),
            "Connection refused",
        ),
        (aiohttp.ClientConnectorError(KEY, OSError("Multiple exceptions: ...")), "OSError"),
    ],
)
def test_a_failure_to_connect_is_named_by_its_kind_and_reason_never_its_address(
    failure: BaseException, said: str
) -> None:
    assert connection_failure(failure) == said


async def test_stdin_a_command_never_read_is_not_counted_as_sent(tmp_path: Path) -> None:
    """What the tests measure of an upload a pod refused before reading it: a chunk still
    in this process's buffer when the command exits never reached it."""
    local = LocalExec(root=tmp_path / "pods")

    result = await local.run(
        "ns", "pod", "main", ["sh", "-c", "exit 77"], stdin=b"L" * 2_000_000, timeout=30
    )

    assert result.exit_code == 77
    assert local.calls[-1].stdin_bytes < 200_000


async def test_a_chunk_left_in_this_process_buffer_is_not_counted_as_sent(tmp_path: Path) -> None:
    """drain() returns once the buffer is under its high-water mark, not empty."""
    pipe = 64 * 1024  # Linux's default pipe capacity

    async def two_chunks() -> AsyncIterator[bytes]:
        yield b"a" * pipe  # the kernel's pipe takes it
        yield b"b" * 60_000  # stays in asyncio's buffer: nothing reads the pipe

    local = LocalExec(root=tmp_path / "pods")
    result = await local.run(
        "ns", "pod", "main", ["sh", "-c", "sleep 1; exit 77"], stdin=two_chunks(), timeout=30
    )

    assert result.exit_code == 77
    assert local.calls[-1].stdin_bytes <= pipe
