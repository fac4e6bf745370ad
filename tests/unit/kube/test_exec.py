"""AiohttpExec against a small stand-in for the API server's exec endpoint
(:mod:`tests.support.exec_api`): the whole websocket path, from the handshake to the status
message on the error channel, and the pure helpers of ``kube/exec.py``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import kopf
import pytest

from craft_operator.credentials.tokens import generate_token
from craft_operator.kube.client import KubeClient
from craft_operator.kube.exec import (
    WITHHELD,
    ExecError,
    ExecForbiddenError,
    ExecOutputTooLargeError,
    ExecProtocolError,
    ExecResult,
    ExecTimeoutError,
    ExecUnavailableError,
    classify_handshake,
    parse_exec_status,
)
from craft_operator.kube.exec_aiohttp import AiohttpExec, framed
from tests.support.exec_api import FakeApiServer, aiohttp_exec

pytestmark = [pytest.mark.unit]


async def test_runs_the_argv_and_returns_exit_code_stdout_and_stderr(
    transport: AiohttpExec, api_server: FakeApiServer
) -> None:
    script = 'echo "out:$1"; echo "err:$2" >&2; exit 3'
    argv = ["sh", "-c", script, "sh", "a b; $(x)", "c"]

    result = await transport.run("ns", "pod", "main", argv, timeout=30)

    assert (result.exit_code, result.stdout, result.stderr) == (3, b"out:a b; $(x)\n", b"err:c\n")
    assert api_server.requests == [argv]


async def test_stdin_is_streamed_in_frames_and_closed_so_the_command_ends(
    transport: AiohttpExec, api_server: FakeApiServer
) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for index in range(5):
            yield bytes([index]) * 100_000

    result = await transport.run("ns", "pod", "main", ["wc", "-c"], stdin=chunks(), timeout=30)

    assert result.exit_code == 0
    assert int(result.stdout) == 500_000
    assert max(api_server.frames) <= 16 * 1024


async def test_stdin_in_many_small_pieces_travels_in_few_frames(
    transport: AiohttpExec, api_server: FakeApiServer
) -> None:
    async def tar_like() -> AsyncIterator[bytes]:
        for index in range(100):
            yield b"h" * 512  # a header
            yield bytes([index]) * 300  # a small file
            yield b"\0" * 212  # its padding

    result = await transport.run("ns", "pod", "main", ["wc", "-c"], stdin=tar_like(), timeout=30)

    assert int(result.stdout) == 102_400
    assert api_server.frames == [16 * 1024] * 6 + [4 * 1024]


@pytest.mark.parametrize(
    "pieces",
    [
        [b""],
        [b"abc"],
        [b"a", b"bcdef", b"", b"ghij"],
        [b"0123456789abcdef"],
        [b"x" * 9, b"y" * 3, b"z" * 30],
    ],
)
async def test_frames_keep_every_byte_in_order_and_are_full_but_the_last(
    pieces: list[bytes],
) -> None:
    async def source() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    frames = [bytes(frame) async for frame in framed(source(), 4)]

    assert b"".join(frames) == b"".join(pieces)
    assert all(len(frame) == 4 for frame in frames[:-1])
    assert all(0 < len(frame) <= 4 for frame in frames)


async def test_bytes_stdin_reaches_the_command(transport: AiohttpExec) -> None:
    result = await transport.run("ns", "pod", "main", ["cat"], stdin=b"hello\x00\xff", timeout=30)

    assert result.stdout == b"hello\x00\xff"


async def test_without_the_v5_protocol_stdin_is_refused_clearly(
    transport: AiohttpExec, api_server: FakeApiServer
) -> None:
    api_server.protocols = ("v4.channel.k8s.io",)

    with pytest.raises(ExecProtocolError, match=r"v5\.channel\.k8s\.io"):
        await transport.run("ns", "pod", "main", ["cat"], stdin=b"x", timeout=30)


async def test_a_missing_pod_is_retryable_and_a_forbidden_exec_is_not(
    transport: AiohttpExec,
) -> None:
    with pytest.raises(ExecUnavailableError, match="ns/missing was not found") as missing:
        await transport.run("ns", "missing", "main", ["true"], timeout=30)
    with pytest.raises(ExecForbiddenError, match="pods/exec") as forbidden:
        await transport.run("ns", "forbidden", "main", ["true"], timeout=30)

    assert missing.value.retryable
    assert not forbidden.value.retryable


async def test_a_command_that_outlives_its_timeout_is_abandoned(transport: AiohttpExec) -> None:
    with pytest.raises(ExecTimeoutError):
        await transport.run("ns", "pod", "main", ["sleep", "5"], timeout=0.5)


class SourceBrokeError(Exception):
    """A stdin source's own failure."""


@pytest.mark.parametrize("error", [SourceBrokeError("S3 went away"), ConnectionResetError("S3")])
async def test_a_failing_stdin_source_aborts_with_its_own_error(
    transport: AiohttpExec, error: Exception
) -> None:
    # Even a connection error of the source's is its own, not the exec socket's.
    async def chunks() -> AsyncIterator[bytes]:
        yield b"some"
        raise error

    with pytest.raises(type(error)) as raised:
        await transport.run("ns", "pod", "main", ["cat"], stdin=chunks(), timeout=30)

    assert raised.value is error


def test_the_exit_status_message_gives_the_exit_code() -> None:
    assert parse_exec_status(b'{"metadata":{},"status":"Success"}') == 0
    failure = {
        "status": "Failure",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": "42"}]},
    }
    assert parse_exec_status(json.dumps(failure).encode()) == 42


def test_a_command_that_cannot_start_is_a_permanent_error() -> None:
    status = {
        "status": "Failure",
        "reason": "InternalError",
        "message": 'exec: "tar": executable file not found in $PATH',
    }
    with pytest.raises(ExecError, match="executable file not found") as raised:
        parse_exec_status(json.dumps(status).encode())
    assert not raised.value.retryable


def test_a_stream_without_status_is_retryable() -> None:
    with pytest.raises(ExecUnavailableError):
        parse_exec_status(b"")


@pytest.mark.parametrize(
    ("status", "kind", "retryable", "says"),
    [
        (403, ExecForbiddenError, False, "not allowed to exec into pod n/p (needs pods/exec"),
        (404, ExecUnavailableError, True, "pod n/p was not found"),
        (400, ExecUnavailableError, True, "pod n/p cannot run commands now"),
        (500, ExecUnavailableError, True, "cannot exec into pod n/p: HTTP 500 Internal Error"),
    ],
)
def test_a_refused_connection_is_classified_by_its_http_status(
    status: int, kind: type[ExecError], retryable: bool, says: str
) -> None:
    reason = "Internal Error" if status == 500 else ""
    error = classify_handshake(status, reason, namespace="n", pod="p")

    assert type(error) is kind
    assert error.retryable is retryable
    assert str(error).startswith(says)


def test_a_refusal_reads_one_plain_line_whatever_the_reason_phrase() -> None:
    error = classify_handshake(502, "Bad\r\nGateway\x1b[0m", namespace="n", pod="p")

    assert str(error) == "cannot exec into pod n/p: HTTP 502 Bad; Gateway"


def test_what_a_pod_writes_reaches_a_status_as_one_plain_line() -> None:
    hostile = (
        b"\x1b[31mred\x1b[0m alert\r\n\x1b]0;title\x07next\x00line\tend\n\n"
        b"\x1b[2J\x1b[Hcleared \x7f\xc2\x9b screen"
    )
    excerpt = ExecResult(1, b"", hostile).stderr_excerpt()

    assert excerpt == "red alert; next line end; cleared screen"
    assert all(ord(character) >= 0x20 for character in excerpt)


def test_a_long_stderr_keeps_its_end_within_the_limit() -> None:
    excerpt = ExecResult(1, b"", b"x" * 1000 + b"\nthe real error").stderr_excerpt(100)

    assert len(excerpt) == 101
    assert excerpt.endswith("; the real error")


@pytest.mark.parametrize("tenant", ["public", "acme corp"])
def test_a_token_a_pod_prints_never_reaches_a_status(tenant: str) -> None:
    token = generate_token(tenant).get_secret_value()
    printed = f"error: {token} refused\n".encode()
    # The token's tail alone, no prefix, cut by the limit: the whole excerpt is withheld
    # when the token is named; anything like a PAT is redacted when it is not.
    tail_only = b"x" * 1000 + f"\nbad token {token[40:]}".encode()

    assert ExecResult(1, b"", printed).stderr_excerpt() == "error: [redacted] refused"
    assert ExecResult(1, b"", tail_only).stderr_excerpt(60, secrets=[token]) == WITHHELD


def test_text_that_only_shares_short_runs_with_a_secret_is_left_alone() -> None:
    secret = "abcdefgh-ijklmnop"
    excerpt = ExecResult(1, b"", b"abcdefg ijklmno: onyx-cli failed").stderr_excerpt(
        secrets=[secret]
    )

    assert excerpt == "abcdefg ijklmno: onyx-cli failed"


async def test_output_over_the_calls_cap_is_abandoned_not_collected(
    transport: AiohttpExec,
) -> None:
    # A pod may print without end; the caller names how much it will read.
    with pytest.raises(ExecOutputTooLargeError) as raised:
        await transport.run(
            "ns", "pod", "main", ["sh", "-c", "yes"], timeout=30, max_output_bytes=100_000
        )

    assert raised.value.limit == 100_000
    assert not raised.value.retryable


async def test_no_call_reads_more_than_the_transports_own_cap_whatever_it_asks_for(
    api_server: FakeApiServer,
) -> None:
    # The whole stream's cap (64 MiB in the operator) bounds every caller's.
    argv = ["head", "-c", "2000000", "/dev/zero"]
    async with aiohttp_exec(api_server, max_output_bytes=100_000) as transport:
        with pytest.raises(ExecOutputTooLargeError) as raised:
            await transport.run("ns", "pod", "main", argv, timeout=30, max_output_bytes=10**9)

    assert raised.value.limit == 100_000


async def test_stdout_and_stderr_count_together_against_the_cap(transport: AiohttpExec) -> None:
    script = "head -c 60000 /dev/zero; head -c 60000 /dev/zero >&2"

    with pytest.raises(ExecOutputTooLargeError):
        await transport.run(
            "ns", "pod", "main", ["sh", "-c", script], timeout=30, max_output_bytes=100_000
        )


async def test_a_command_that_never_reads_its_stdin_times_out(
    transport: AiohttpExec, api_server: FakeApiServer
) -> None:
    async def endless() -> AsyncIterator[bytes]:
        while True:
            yield b"\x00" * 1024 * 1024

    with pytest.raises(ExecTimeoutError, match="ns/pod timed out"):
        await transport.run("ns", "pod", "main", ["sleep", "2"], stdin=endless(), timeout=1)

    # The sender was blocked by the socket's flow control, not buffering the endless stdin.
    assert sum(api_server.frames) < 8 * 1024 * 1024
    assert [task for task in asyncio.all_tasks() if "exec_aiohttp" in repr(task.get_coro())] == []


async def test_a_pod_that_is_not_running_yet_is_retryable(transport: AiohttpExec) -> None:
    with pytest.raises(ExecUnavailableError, match="ns/pending cannot run commands now") as raised:
        await transport.run("ns", "pending", "main", ["true"], timeout=30)

    assert raised.value.retryable


async def test_an_abandoned_call_closes_its_connection_so_the_command_ends(
    transport: AiohttpExec, api_server: FakeApiServer
) -> None:
    with pytest.raises(ExecOutputTooLargeError):
        await transport.run("ns", "pod", "main", ["sh", "-c", "yes"], max_output_bytes=100_000)

    await asyncio.wait_for(api_server.gone.wait(), 10)
    assert api_server.abandoned == [["sh", "-c", "yes"]]


async def test_cancelling_a_call_closes_its_connection_and_leaves_no_task_behind(
    transport: AiohttpExec, api_server: FakeApiServer
) -> None:
    call = asyncio.create_task(transport.run("ns", "pod", "main", ["sleep", "60"], stdin=b"x"))
    await api_server.started.wait()

    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call

    await asyncio.wait_for(api_server.gone.wait(), 10)
    assert api_server.abandoned == [["sleep", "60"]]
    left = [task for task in asyncio.all_tasks() if "exec_aiohttp" in repr(task.get_coro())]
    assert left == []


async def test_a_call_without_stdin_is_content_with_the_v4_protocol(
    transport: AiohttpExec, api_server: FakeApiServer
) -> None:
    api_server.protocols = ("v4.channel.k8s.io",)

    result = await transport.run("ns", "pod", "main", ["echo", "old"], timeout=30)

    assert (result.exit_code, result.stdout) == (0, b"old\n")


async def test_a_server_that_ends_the_stream_without_a_status_is_retryable(
    transport: AiohttpExec, api_server: FakeApiServer
) -> None:
    api_server.status = False

    with pytest.raises(ExecUnavailableError, match="without an exit status") as raised:
        await transport.run("ns", "pod", "main", ["true"], timeout=30)

    assert raised.value.retryable


async def test_an_api_server_that_cannot_be_reached_is_retryable_and_named_plainly() -> None:
    from tests.support.s3 import free_port

    kube = KubeClient(request_timeout=10)
    kube.configure(kopf.ConnectionInfo(server=f"http://127.0.0.1:{free_port()}", insecure=True))
    try:
        with pytest.raises(ExecUnavailableError) as raised:
            await AiohttpExec(kube).run("ns", "pod", "main", ["secret-argv"], timeout=30)
    finally:
        await kube.close()

    assert raised.value.retryable
    assert str(raised.value) == "cannot exec into pod ns/pod: Connection refused"
