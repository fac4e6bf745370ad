"""A TCP proxy that can be taken down: an outage of whatever stands behind it.

The operator is pointed at the proxy instead of the database or S3. :meth:`TcpProxy.down`
refuses new connections and cuts the open ones (as a crashed server or a network partition
would); :meth:`TcpProxy.up` serves again on the same port. The server behind it keeps its
state, so what the operator wrote before the outage is still there afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib

from tests.support.s3 import free_port


class TcpProxy:
    """Forward ``127.0.0.1:<port>`` to ``target_host:target_port`` while up."""

    def __init__(self, target_host: str, target_port: int) -> None:
        """Prepare the proxy on a free port; call :meth:`up` to serve."""
        self.target = (target_host, target_port)
        self.port = free_port()
        self.outages = 0
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def is_up(self) -> bool:
        """Whether connections are being accepted."""
        return self._server is not None

    async def up(self) -> None:
        """Accept and forward connections (again)."""
        if self._server is None:
            self._server = await asyncio.start_server(
                self._accept, "127.0.0.1", self.port, reuse_address=True
            )

    async def down(self) -> None:
        """Refuse new connections and drop every open one."""
        if self._server is None:
            return
        self.outages += 1
        self._server.close()
        self._server = None
        for writer in list(self._open):
            writer.transport.abort()
        self._open.clear()

    async def close(self) -> None:
        """Take the proxy down for good and wait for its forwarding tasks."""
        await self.down()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
            except OSError:
                writer.transport.abort()
                return
            self._open |= {writer, upstream_writer}
            await asyncio.gather(
                self._pipe(reader, upstream_writer), self._pipe(upstream_reader, writer)
            )
        finally:
            self._tasks.discard(task)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._open.discard(sink)
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                sink.close()
