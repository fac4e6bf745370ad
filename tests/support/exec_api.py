"""A stand-in for the API server's exec endpoint, and the operator's real exec transport
(:class:`AiohttpExec` on a :class:`KubeClient`) bound to it.

The stand-in speaks the websocket channel protocol the way the API server does (one byte of
channel, then data; ``v5`` adds the close-channel message 255) and runs the argv locally,
so the transport's whole path is exercised: the handshake and its refusals (404, 403, 400),
stdin frames, closing stdin, stdout and stderr, and the status message on the error channel.
As the kubelet, it does not kill a command whose client went away: it closes the command's
stdin and lets it run on (for a grace here, so that no test leaves processes behind).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

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
    #: How each abandoned command ended, once it has (its exit code; negative: killed).
    abandoned_exits: list[int] = field(default_factory=list)
    #: Set when a command starts (after the upgrade), when one is abandoned, and when an
    #: abandoned one has ended.
    started: asyncio.Event = field(default_factory=asyncio.Event)
    gone: asyncio.Event = field(default_factory=asyncio.Event)
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    #: Whether a command's end is reported on channel 3 (a broken server does not).
    status: bool = True
    #: Seconds an abandoned command runs on before it is killed (the kubelet never kills
    #: it; a test must not leave processes behind).
    abandon_grace: float = 5.0
    running: set[asyncio.subprocess.Process] = field(default_factory=set)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        pod = request.match_info["pod"]
        if pod == "missing":
            raise web.HTTPNotFound(
                text='{"kind":"Status","message":"pods \\"missing\\" not found"}'
            )
        if pod == "forbidden":
            raise web.HTTPForbidden(text='{"kind":"Status","reason":"Forbidden"}')
        if pod == "unauthorized":
            raise web.HTTPUnauthorized(text='{"kind":"Status","reason":"Unauthorized"}')
        if pod == "pending":
            raise web.HTTPBadRequest(text="container not found or not running")
        argv = request.query.getall("command")
        self.requests.append(argv)
        wants_stdin = request.query.get("stdin", "").lower() == "true"
        ws = web.WebSocketResponse(protocols=self.protocols)
        await ws.prepare(request)
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if wants_stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # so that ending it ends its children too (`sh -c yes`)
            )
        except FileNotFoundError:
            await ws.send_bytes(b"\x03" + json.dumps(not_found_status(argv[0])).encode())
            await ws.close()
            return ws
        self.running.add(process)
        self.started.set()
        await Command(self, process, ws, argv).converse()
        self.running.discard(process)
        return ws

    def kill_all(self) -> None:
        """Kill the commands still running (abandoned ones in their grace)."""
        for process in self.running:
            kill_group(process)


@dataclass
class Command:
    """One command run for one exec connection."""

    server: FakeApiServer
    process: asyncio.subprocess.Process
    ws: web.WebSocketResponse
    argv: list[str]
    abandoned: bool = False

    async def converse(self) -> None:
        """Stdin from the client; stdout, stderr and the exit status to it."""
        receiver = asyncio.create_task(self.receive())
        try:
            await asyncio.gather(
                self.pump(self.process.stdout, 1), self.pump(self.process.stderr, 2)
            )
            code = await self.process.wait()
            if not self.abandoned:
                if self.server.status:
                    await self.ws.send_bytes(b"\x03" + json.dumps(exit_status(code)).encode())
                await self.ws.close()
        except ConnectionError:  # the client went away while the status was sent
            self.client_gone()
        finally:
            await self.process.wait()
            receiver.cancel()
            if self.abandoned:
                self.server.abandoned_exits.append(self.process.returncode or 0)
                self.server.settled.set()

    async def receive(self) -> None:
        """Stdin frames into the command, until the client closes stdin or goes away."""
        stdin = self.process.stdin
        async for message in self.ws:
            if message.type != WSMsgType.BINARY or stdin is None:
                continue
            channel, data = message.data[0], message.data[1:]
            with contextlib.suppress(ConnectionError):  # the command no longer reads
                if channel == 0:
                    self.server.frames.append(len(data))
                    stdin.write(data)
                    await stdin.drain()
                elif channel == 255 and data[:1] == b"\x00":
                    stdin.close()
        self.client_gone()

    async def pump(self, stream: asyncio.StreamReader | None, channel: int) -> None:
        """One output stream to the client; once the client has gone, read and dropped."""
        assert stream is not None
        while data := await stream.read(65536):
            if self.abandoned:
                continue
            try:
                await self.ws.send_bytes(bytes([channel]) + data)
            except ConnectionError:
                self.client_gone()

    def client_gone(self) -> None:
        """Like the kubelet: the command's stdin is closed, and it runs on (here, for the
        server's grace at most)."""
        if self.process.returncode is not None or self.abandoned:
            return
        self.abandoned = True
        self.server.abandoned.append(self.argv)
        self.server.gone.set()
        if self.process.stdin is not None:
            self.process.stdin.close()
        loop = asyncio.get_running_loop()
        loop.call_later(self.server.abandon_grace, kill_group, self.process)


def kill_group(process: asyncio.subprocess.Process) -> None:
    """SIGKILL a command's process group, if it is still running."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def not_found_status(program: str) -> dict[str, object]:
    """The status message the API server sends on channel 3 for a program not in the image."""
    return {
        "metadata": {},
        "status": "Failure",
        "message": (
            "OCI runtime exec failed: exec failed: unable to start container process: "
            f'exec: "{program}": executable file not found in $PATH: unknown'
        ),
        "reason": "InternalError",
        "details": {"causes": [{"message": f'exec: "{program}": executable file not found'}]},
        "code": 500,
    }


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
        server.kill_all()
        await runner.cleanup()


@contextlib.asynccontextmanager
async def aiohttp_exec(server: FakeApiServer, **options: Any) -> AsyncIterator[AiohttpExec]:
    """The operator's real exec transport, talking to ``server``, in 16 KiB stdin frames
    (``options``: more of :class:`AiohttpExec`'s, such as ``idle_timeout``)."""
    kube = KubeClient(request_timeout=10)
    kube.configure(kopf.ConnectionInfo(server=f"http://127.0.0.1:{server.port}", insecure=True))
    try:
        yield AiohttpExec(kube, **{"frame_bytes": 16 * 1024, **options})
    finally:
        await kube.close()
