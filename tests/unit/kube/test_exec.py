"""KubernetesExec against a small stand-in for the API server's exec endpoint
(:mod:`tests.support.exec_api`): the real ``kubernetes`` client code path, from the
handshake to the status message on the error channel."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from craft_operator.kube.exec import (
    ExecError,
    ExecForbiddenError,
    ExecOutputTooLargeError,
    ExecProtocolError,
    ExecResult,
    ExecTimeoutError,
    ExecUnavailableError,
    KubernetesExec,
    classify_open_error,
    parse_exec_status,
)
from tests.support.exec_api import FakeApiServer

pytestmark = [pytest.mark.unit]


async def test_runs_the_argv_and_returns_exit_code_stdout_and_stderr(
    transport: KubernetesExec, api_server: FakeApiServer
) -> None:
    script = 'echo "out:$1"; echo "err:$2" >&2; exit 3'
    argv = ["sh", "-c", script, "sh", "a b; $(x)", "c"]

    result = await transport.run("ns", "pod", "main", argv, timeout=30)

    assert (result.exit_code, result.stdout, result.stderr) == (3, b"out:a b; $(x)\n", b"err:c\n")
    assert api_server.requests == [argv]


async def test_stdin_is_streamed_in_frames_and_closed_so_the_command_ends(
    transport: KubernetesExec, api_server: FakeApiServer
) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for index in range(5):
            yield bytes([index]) * 100_000

    result = await transport.run("ns", "pod", "main", ["wc", "-c"], stdin=chunks(), timeout=30)

    assert result.exit_code == 0
    assert int(result.stdout) == 500_000
    assert max(api_server.frames) <= 16 * 1024


async def test_bytes_stdin_reaches_the_command(transport: KubernetesExec) -> None:
    result = await transport.run("ns", "pod", "main", ["cat"], stdin=b"hello\x00\xff", timeout=30)

    assert result.stdout == b"hello\x00\xff"


async def test_without_the_v5_protocol_stdin_is_refused_clearly(
    transport: KubernetesExec, api_server: FakeApiServer
) -> None:
    api_server.protocols = ("v4.channel.k8s.io",)

    with pytest.raises(ExecProtocolError, match=r"v5\.channel\.k8s\.io"):
        await transport.run("ns", "pod", "main", ["cat"], stdin=b"x", timeout=30)


async def test_a_missing_pod_is_retryable_and_a_forbidden_exec_is_not(
    transport: KubernetesExec,
) -> None:
    with pytest.raises(ExecUnavailableError, match="ns/missing was not found") as missing:
        await transport.run("ns", "missing", "main", ["true"], timeout=30)
    with pytest.raises(ExecForbiddenError, match="pods/exec") as forbidden:
        await transport.run("ns", "forbidden", "main", ["true"], timeout=30)

    assert missing.value.retryable
    assert not forbidden.value.retryable


async def test_a_command_that_outlives_its_timeout_is_abandoned(transport: KubernetesExec) -> None:
    with pytest.raises(ExecTimeoutError):
        await transport.run("ns", "pod", "main", ["sleep", "5"], timeout=0.5)


async def test_a_failing_stdin_source_aborts_with_its_own_error(transport: KubernetesExec) -> None:
    class SourceBrokeError(Exception):
        pass

    async def chunks() -> AsyncIterator[bytes]:
        yield b"some"
        raise SourceBrokeError("S3 went away")

    with pytest.raises(SourceBrokeError):
        await transport.run("ns", "pod", "main", ["cat"], stdin=chunks(), timeout=30)


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


def test_a_handshake_failure_reads_the_same_on_every_retry() -> None:
    def refused(date: str) -> str:
        return (
            "Handshake status 500 Internal Server Error -+-+- "
            f"{{'date': '{date}', 'content-length': '120'}} -+-+- "
            'b\'{"kind":"Status","message":"error dialing backend: EOF","code":500}\''
        )

    first = classify_open_error(refused("Mon, 23 Nov 2026 12:00:00 GMT"), namespace="n", pod="p")
    again = classify_open_error(refused("Mon, 23 Nov 2026 12:00:05 GMT"), namespace="n", pod="p")

    assert str(first) == str(again)
    assert str(first) == (
        "cannot exec into pod n/p: Handshake status 500 Internal Server Error: "
        "error dialing backend: EOF"
    )


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


def test_handshake_failures_are_named() -> None:
    error = classify_open_error(
        "Handshake status 400 Bad Request -+-+- container not running", namespace="n", pod="p"
    )
    assert isinstance(error, ExecUnavailableError)
    assert "n/p" in str(error)
    other = classify_open_error("Connection refused", namespace="n", pod="p")
    assert "Connection refused" in str(other)


async def test_output_over_the_calls_cap_is_abandoned_not_collected(
    transport: KubernetesExec,
) -> None:
    # A pod may print without end; the caller names how much it will read.
    with pytest.raises(ExecOutputTooLargeError) as raised:
        await transport.run(
            "ns", "pod", "main", ["sh", "-c", "yes"], timeout=30, max_output_bytes=100_000
        )

    assert raised.value.limit == 100_000
    assert not raised.value.retryable


async def test_a_command_that_never_reads_its_stdin_times_out(transport: KubernetesExec) -> None:
    async def endless() -> AsyncIterator[bytes]:
        while True:
            yield b"\x00" * 1024 * 1024

    with pytest.raises(ExecTimeoutError):
        await transport.run("ns", "pod", "main", ["sleep", "2"], stdin=endless(), timeout=1)
