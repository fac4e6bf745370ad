"""A stand-in for the API server's exec endpoint, and the operator's real exec transport
(:class:`AiohttpExec` on a :class:`KubeClient`) bound to it.

The stand-in speaks the websocket channel protocol the way the API server does (one byte of
channel, then data; ``v5`` adds the close-channel message 255) and runs the argv locally,
so the transport's whole path is exercised: the handshake and its refusals (404, 403, 400),
stdin frames, closing stdin, stdout and stderr, and the status message on the error channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import kopf
from aiohttp import WSMsgType, web

from craft_operator.kube.client import KubeClient
from craft_operator.kube.exec_aiohttp import AiohttpExec
from tests.support.s3 import free_port


@dataclass
class FakeApiServer:
    """The exec subresource of a fake API server, on 127.0.0.1."""

    port: int
    protocols: tuple[str, ...] = ("v5.channel.k8s.io", "v4.channel.k8s.io")
    requests: list[list[str]] = field(default_factory=list)
    frames: list[int] = field(default_factory=list)
    #: The argv of each call whose client went away before the command ended.
    abandoned: list[list[str]] = field(default_factory=list)
    #: Set when a command starts (after the upgrade), and when one is abandoned.
    started: asyncio.Event = field(default_factory=asyncio.Event)
    gone: asyncio.Event = field(default_factory=asyncio.Event)
    #: Whether a command's end is reported on channel 3 (a broken server does not).
    status: bool = True

    async def handle(self, request: web.Request) -> web.StreamResponse:
        pod = request.match_info["pod"]
        if pod == "missing":
            raise web.HTTPNotFound(
                text='{"kind":"Status","message":"pods \\"missing\\" not found"}'
            )
        if pod == "forbidden":
            raise web.HTTPForbidden(text='{"kind":"Status","reason":"Forbidden"}')
        if pod == "pending":
            raise web.HTTPBadRequest(text="container not found or not running")
        argv = request.query.getall("command")
        self.requests.append(argv)
        wants_stdin = request.query.get("stdin", "").lower() == "true"
        ws = web.WebSocketResponse(protocols=self.protocols)
        await ws.prepare(request)
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if wants_stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # so that ending it ends its children too (`sh -c yes`)
        )
        self.started.set()

        async def receive() -> None:
            async for message in ws:
                if message.type != WSMsgType.BINARY or process.stdin is None:
                    continue
                channel, data = message.data[0], message.data[1:]
                with contextlib.suppress(ConnectionError):  # the command no longer reads
                    if channel == 0:
                        self.frames.append(len(data))
                        process.stdin.write(data)
                        await process.stdin.drain()
                    elif channel == 255 and data[:1] == b"\x00":
                        process.stdin.close()
            # The client went away: like the kubelet, end the command.
            end_command()

        ended = False

        def end_command() -> None:
            # Both the receiver and the pumps can see the client go: the command ends once.
            nonlocal ended
            if process.returncode is None and not ended:
                ended = True
                self.abandoned.append(argv)
                self.gone.set()
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)

        async def pump(stream: asyncio.StreamReader | None, channel: int) -> None:
            assert stream is not None
            while data := await stream.read(65536):
                await ws.send_bytes(bytes([channel]) + data)

        receiver = asyncio.create_task(receive())
        try:
            await asyncio.gather(pump(process.stdout, 1), pump(process.stderr, 2))
            code = await process.wait()
            if self.status:
                await ws.send_bytes(b"\x03" + json.dumps(exit_status(code)).encode())
            await ws.close()
        except ConnectionError:  # the client went away while the command wrote
            end_command()
        finally:
            await process.wait()
            receiver.cancel()
        return ws


def exit_status(code: int) -> dict[str, object]:
    """The status message the API server sends on channel 3 for a command's exit code."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


@contextlib.asynccontextmanager
async def serve_exec_api() -> AsyncIterator[FakeApiServer]:
    """A :class:`FakeApiServer` listening on a free port of 127.0.0.1 while the block runs."""
    server = FakeApiServer(port=free_port())
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{namespace}/pods/{pod}/exec", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", server.port)
    await site.start()
    try:
        yield server
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def aiohttp_exec(server: FakeApiServer) -> AsyncIterator[AiohttpExec]:
    """The operator's real exec transport, talking to ``server``, in 16 KiB stdin frames."""
    kube = KubeClient(request_timeout=10)
    kube.configure(kopf.ConnectionInfo(server=f"http://127.0.0.1:{server.port}", insecure=True))
    try:
        yield AiohttpExec(kube, frame_bytes=16 * 1024)
    finally:
        await kube.close()
