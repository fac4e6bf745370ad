"""A stand-in for the API server's exec endpoint, and the real KubernetesExec bound to it.

The stand-in speaks the websocket channel protocol the way the API server does (one byte of
channel, then data; ``v5`` adds the close-channel message 255) and runs the argv locally,
so the real ``kubernetes`` client code path is exercised: the handshake, stdin frames,
closing stdin, stdout and stderr, and the status message on the error channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

from aiohttp import WSMsgType, web

from craft_operator.kube.exec import KubernetesExec
from tests.support.s3 import free_port


@dataclass
class FakeApiServer:
    """The exec subresource of a fake API server, on 127.0.0.1."""

    port: int
    protocols: tuple[str, ...] = ("v5.channel.k8s.io", "v4.channel.k8s.io")
    requests: list[list[str]] = field(default_factory=list)
    frames: list[int] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        pod = request.match_info["pod"]
        if pod == "missing":
            raise web.HTTPNotFound(
                text='{"kind":"Status","message":"pods \\"missing\\" not found"}'
            )
        if pod == "forbidden":
            raise web.HTTPForbidden(text='{"kind":"Status","reason":"Forbidden"}')
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
        )

        async def receive() -> None:
            async for message in ws:
                if message.type != WSMsgType.BINARY or process.stdin is None:
                    continue
                channel, data = message.data[0], message.data[1:]
                if channel == 0:
                    self.frames.append(len(data))
                    process.stdin.write(data)
                    await process.stdin.drain()
                elif channel == 255 and data[:1] == b"\x00":
                    process.stdin.close()
            # The client went away: like the kubelet, end the command.
            if process.returncode is None:
                process.kill()

        async def pump(stream: asyncio.StreamReader | None, channel: int) -> None:
            assert stream is not None
            while data := await stream.read(65536):
                await ws.send_bytes(bytes([channel]) + data)

        receiver = asyncio.create_task(receive())
        await asyncio.gather(pump(process.stdout, 1), pump(process.stderr, 2))
        code = await process.wait()
        if code == 0:
            status: dict[str, object] = {"metadata": {}, "status": "Success"}
        else:
            status = {
                "metadata": {},
                "status": "Failure",
                "message": f"command terminated with non-zero exit code: {code}",
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
            }
        await ws.send_bytes(b"\x03" + json.dumps(status).encode())
        await ws.close()
        receiver.cancel()
        return ws


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


@contextlib.contextmanager
def kubernetes_exec(server: FakeApiServer) -> Iterator[KubernetesExec]:
    """The operator's real exec transport, talking to ``server``, in 16 KiB stdin frames."""
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.port}"
    api_client = client.ApiClient(configuration)
    try:
        yield KubernetesExec(api_client, frame_bytes=16 * 1024)
    finally:
        api_client.close()
