"""The real exec transport: the Kubernetes exec API's websocket, on the event loop.

:class:`AiohttpExec` opens ``/api/v1/namespaces/{ns}/pods/{pod}/exec`` with aiohttp's
``ws_connect`` on the operator's own API client (:meth:`KubeClient.stream_session`: the
credentials kopf logged in with, one SSL context, a pool of connections of its own) and
speaks the channel protocol: one byte of channel, then data. ``v5.channel.k8s.io`` is
needed when there is stdin (its ``255, 0`` message closes stdin, so ``tar`` sees the end of
its input); ``v4.channel.k8s.io`` is enough without. A call is two tasks on the loop, one
sending stdin in frames and one receiving output, each waiting on the socket's own flow
control: a pod that does not read its stdin stops the sender, and output is taken only as
fast as it is collected, up to the call's cap. A call whose stdin the pod stops taking,
with no output either, is abandoned after the idle timeout. No thread, no ``kubernetes``
client.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from http import HTTPStatus
from typing import Any

import aiohttp

from craft_operator.kube.client import ApiError, KubeClient
from craft_operator.kube.exec import (
    BEFORE_START,
    CLOSE_CHANNEL,
    ERROR_CHANNEL,
    STATUS_MAX_BYTES,
    STDERR_CHANNEL,
    STDIN_CHANNEL,
    STDOUT_CHANNEL,
    V4_CHANNEL_PROTOCOL,
    V5_CHANNEL_PROTOCOL,
    ExecError,
    ExecOutputTooLargeError,
    ExecProtocolError,
    ExecResult,
    ExecTimeoutError,
    ExecUnavailableError,
    Progress,
    Stdin,
    classify_handshake,
    close_stdin,
    one_line,
    parse_exec_status,
    stdin_chunks,
)

#: Seconds a call may go, while its stdin is sent, without the pod taking any of it, by
#: default. No websocket pings: behind stdin that a pod does not read, a ping
#: waits in the same stream, and the API server, its reads paused by that backpressure,
#: never answers it in time (a stalled pod looked like a broken connection). A connection
#: that dies while stdin is sent stalls the call; after, the call's own timeout ends it.
IDLE_TIMEOUT = 60.0
_Socket = aiohttp.ClientWebSocketResponse
_END = (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED)


class _Output:
    """Collects stdout and stderr up to a limit (the pod is not trusted to be brief)."""

    def __init__(self, limit: int) -> None:
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.status = bytearray()
        self.limit = limit

    def clear(self) -> None:
        """Let go of what was collected."""
        self.stdout.clear()
        self.stderr.clear()
        self.status.clear()

    def take(self, frame: bytes) -> None:
        channel, data = frame[:1], frame[1:]
        if channel == bytes([STDOUT_CHANNEL]):
            self.stdout += data
        elif channel == bytes([STDERR_CHANNEL]):
            self.stderr += data
        elif channel == bytes([ERROR_CHANNEL]):
            # Over the cap, the status is cut (and so unreadable): never held whole.
            self.status += data[: STATUS_MAX_BYTES + 1 - len(self.status)]
        if len(self.stdout) + len(self.stderr) > self.limit:
            raise ExecOutputTooLargeError(
                f"the command wrote more than {self.limit} bytes of output", limit=self.limit
            )


class AiohttpExec:
    """:class:`~craft_operator.kube.exec.ExecTransport` over the Kubernetes exec API."""

    def __init__(
        self,
        kube: KubeClient,
        *,
        frame_bytes: int = 32 * 1024,
        max_output_bytes: int = 64 * 1024 * 1024,
        close_grace: float = 2.0,
        idle_timeout: float | None = IDLE_TIMEOUT,
    ) -> None:
        """Exec through ``kube``'s stream session (so with its credentials, once logged in).

        ``frame_bytes`` is the most stdin per websocket message; ``close_grace`` how long an
        abandoned call waits for the server to answer its close before it drops the
        connection. A call that, while its stdin is sent, for ``idle_timeout`` seconds gets
        none of it taken is abandoned (:class:`ExecStalledError`), whatever its own timeout
        and whatever the command prints meanwhile.
        """
        self._kube = kube
        #: A call holds one from before its pod is checked (``BEFORE_START``) to its close,
        #: so that it never waits for one of the session's connections after the check.
        self._streams = asyncio.Semaphore(kube.max_streams)
        self._frame_bytes = frame_bytes
        self._max_output_bytes = max_output_bytes
        self._close_grace = close_grace
        self._idle_timeout = idle_timeout

    async def run(
        self,
        namespace: str,
        pod: str,
        container: str,
        argv: Sequence[str],
        *,
        stdin: Stdin = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the ExecTransport interface
        max_output_bytes: int | None = None,
    ) -> ExecResult:
        """Run ``argv`` in the container; see :meth:`ExecTransport.run`."""
        limit = min(max_output_bytes or self._max_output_bytes, self._max_output_bytes)
        chunks = stdin_chunks(stdin)
        deadline = asyncio.timeout(timeout)
        try:
            try:
                async with deadline, self._streams:
                    check = BEFORE_START.get()
                    if check is not None:
                        check()
                    ws = await self._open(namespace, pod, container, argv, stdin is not None)
                    try:
                        stdin_source = chunks if stdin is not None else None
                        return await self._exchange(
                            ws, stdin_source, limit, f"{namespace}/{pod}", deadline
                        )
                    finally:
                        await self._close(ws)
            except TimeoutError:
                if not deadline.expired():
                    raise  # the stdin source's own
                raise ExecTimeoutError(f"exec in pod {namespace}/{pod} timed out") from None
        except ExecError as exc:
            raise exc.unburdened() from None
        finally:
            await close_stdin(chunks)
            await close_stdin(stdin)  # also when it was never started

    async def _open(
        self, namespace: str, pod: str, container: str, argv: Sequence[str], stdin: bool
    ) -> _Socket:
        """The websocket of a new exec call; an :class:`ExecError` if it cannot be opened."""
        params = [
            *(("command", arg) for arg in argv),
            ("container", container),
            ("stdin", "true" if stdin else "false"),
            ("stdout", "true"),
            ("stderr", "true"),
        ]
        where = f"pod {namespace}/{pod}"
        try:
            ws = await self._kube.stream_session().ws_connect(
                f"api/v1/namespaces/{namespace}/pods/{pod}/exec",
                params=params,
                protocols=(V5_CHANNEL_PROTOCOL, V4_CHANNEL_PROTOCOL),
                autoping=True,
                timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=self._close_grace),
            )
        except aiohttp.WSServerHandshakeError as exc:
            if exc.status == 401:
                self._kube.unauthorized.set()  # read the credentials again (kube.relogin)
            raise classify_handshake(
                exc.status, _reason(exc.status), namespace=namespace, pod=pod
            ) from None
        except ApiError as exc:
            raise ExecUnavailableError(f"cannot exec into {where}: {exc.reason}") from None
        except (aiohttp.ClientError, OSError) as exc:
            # The exception's own text names the URL, and so the argv: keep to its kind.
            raise ExecUnavailableError(
                f"cannot exec into {where}: {connection_failure(exc)}"
            ) from None
        if stdin and ws.protocol != V5_CHANNEL_PROTOCOL:
            await self._close(ws)
            raise ExecProtocolError(
                f"the API server spoke {ws.protocol or 'an old protocol'}, not "
                f"{V5_CHANNEL_PROTOCOL}; stdin cannot be closed (Kubernetes >= 1.30 needed)"
            )
        return ws

    async def _exchange(
        self,
        ws: _Socket,
        chunks: AsyncIterator[bytes] | None,
        limit: int,
        where: str,
        deadline: asyncio.Timeout,
    ) -> ExecResult:
        """Send stdin and receive the output at once, until the server ends the call (or
        the call stalls: :class:`ExecStalledError`); ``deadline`` stands still while stdin
        is read from its source."""
        progress = Progress(self._idle_timeout if chunks is not None else None, deadline)
        output = _Output(limit)
        receiver = asyncio.create_task(_receive(ws, output, where))
        tasks: list[asyncio.Task[Any]] = [receiver]
        if chunks is not None:
            tasks.append(asyncio.create_task(self._send(ws, chunks, progress)))
        try:
            pending = set(tasks)
            while receiver in pending:
                done, pending = await asyncio.wait(
                    pending, timeout=progress.left(), return_when=asyncio.FIRST_COMPLETED
                )
                sender_failed = [task.exception() for task in done if task is not receiver]
                for error in sender_failed:
                    if error is not None:
                        raise error  # the stdin source's own, unchanged
                if not done and progress.stalled():
                    raise progress.stalled_error(where)
            return receiver.result()
        finally:
            await _stop(tasks)
            output.clear()  # (a copy was returned) what a failed call's frames still hold

    async def _send(self, ws: _Socket, chunks: AsyncIterator[bytes], progress: Progress) -> None:
        """Stdin in frames, then v5's close of the stdin channel; what the source raises
        propagates as it is."""
        prefix = bytes([STDIN_CHANNEL])
        async with contextlib.aclosing(framed(chunks, self._frame_bytes)) as frames:
            while True:
                with progress.sourcing():
                    frame = await anext(frames, None)
                if frame is None:
                    break
                if not await _sent(ws, prefix + frame):
                    return
                progress.moved()
        await _sent(ws, bytes([CLOSE_CHANNEL, STDIN_CHANNEL]))
        progress.sent_all()

    async def _close(self, ws: _Socket) -> None:
        """Close the socket; if the server does not answer in time, drop the connection."""
        # aiohttp closes the connection itself when its close handshake is cancelled.
        with contextlib.suppress(TimeoutError, ConnectionError, aiohttp.ClientError):
            async with asyncio.timeout(self._close_grace):
                await ws.close()


async def framed(chunks: AsyncIterator[bytes], size: int) -> AsyncGenerator[bytes, None]:
    """``chunks`` regrouped into frames of ``size`` bytes, the last one shorter.

    A tar stream is mostly small pieces (a header and a padding per file); one frame each
    cost a websocket message, a TLS record and a write to the socket apiece, on the
    operator and again on the API server and the kubelet.
    """
    pending = bytearray()
    async for chunk in chunks:
        start = 0
        if pending:
            start = size - len(pending)
            pending += chunk[:start]
            if len(pending) < size:
                continue
            yield bytes(pending)
            pending.clear()
        while len(chunk) - start >= size:
            yield chunk[start : start + size]
            start += size
        pending += chunk[start:]
    if pending:
        yield bytes(pending)


async def _sent(ws: _Socket, frame: bytes) -> bool:
    """Send ``frame``; ``False`` if the server has closed (the command exited early: its
    status, still to be received, says why)."""
    try:
        await ws.send_bytes(frame)
    except (ConnectionError, aiohttp.ClientError):
        return False
    return True


async def _receive(ws: _Socket, output: _Output, where: str) -> ExecResult:
    """Output until the server closes, then the exit status from channel 3."""
    while True:
        message = await ws.receive()
        if message.type is aiohttp.WSMsgType.BINARY:
            output.take(message.data)
        elif message.type is aiohttp.WSMsgType.ERROR:
            raise ExecUnavailableError(
                f"the exec connection to pod {where} broke: {connection_failure(message.data)}"
            )
        elif message.type in _END:
            break
    code = parse_exec_status(bytes(output.status))
    return ExecResult(code, bytes(output.stdout), bytes(output.stderr))


async def _stop(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel the tasks still running, wait for them, and consume what they raised."""
    running = [task for task in tasks if not task.done()]
    for task in running:
        task.cancel()
    if running:
        await asyncio.wait(running)
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def connection_failure(exc: BaseException | None) -> str:
    """A transport failure in words that do not change between retries: its kind and the
    reason it gives, never its own text (that names the URL, and so the argv)."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        said = _ssl_reason(exc.certificate_error)
        return f"the API server's TLS certificate was not accepted ({said})"
    if isinstance(exc, aiohttp.ClientConnectorSSLError):
        return f"the TLS handshake with the API server failed ({_ssl_reason(exc.os_error)})"
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        said = _os_reason(exc.os_error)
        return f"the API server's host name could not be resolved ({said})"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return _os_reason(exc.os_error)
    if isinstance(exc, asyncio.TimeoutError):
        return "the API server did not answer in time"
    return type(exc).__name__ if exc is not None else "unknown"


def _ssl_reason(error: BaseException) -> str:
    """What an SSL error says went wrong (e.g. "certificate has expired"), in one line."""
    for said in (getattr(error, "verify_message", None), getattr(error, "reason", None)):
        if isinstance(said, str) and said:
            return one_line(said, limit=100)
    return type(error).__name__


def _os_reason(error: OSError) -> str:
    """The system's words for an OS error ("Connection refused", "Name or service not
    known"), from its number (its own text may name the address); its kind without one."""
    if isinstance(error, socket.gaierror) and isinstance(error.strerror, str):
        return one_line(error.strerror, limit=100)  # gai_strerror(): no host in it
    if isinstance(error.errno, int) and error.errno > 0:
        return os.strerror(error.errno)
    return type(error).__name__
