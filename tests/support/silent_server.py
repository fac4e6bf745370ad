"""A TCP server that accepts connections and never answers: a hung database.

This is what a failover that drops packets to the old primary, or a stuck pgbouncer,
looks like to a client: the connection is made, and then nothing comes back. Closing the
server ends every connection it holds, which frees whatever still waits on one.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


class SilentServer:
    """Accept on ``127.0.0.1:<port>``, hold every connection, never send a byte."""

    def __init__(self) -> None:
        """Listen on a free port; use as a context manager (it serves until closed)."""
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self._listener.settimeout(0.05)
        self.port: int = self._listener.getsockname()[1]
        self._held: list[socket.socket] = []
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="silent-server", daemon=True)

    @property
    def connections(self) -> int:
        """The connections accepted so far."""
        return len(self._held)

    def postgres_url(self, **query: str) -> str:
        """A Postgres URL that points at this server."""
        url = f"postgresql+psycopg://craft:secret@127.0.0.1:{self.port}/onyx"
        return url + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")

    def __enter__(self) -> SilentServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop accepting and drop every held connection (its client sees the end)."""
        self._stopped.set()
        self._thread.join()
        self._listener.close()
        for connection in self._held:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            self._held.append(connection)
