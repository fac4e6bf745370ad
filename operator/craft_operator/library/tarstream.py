"""A tar archive produced as a stream, with file bodies read from S3 as it goes.

Large files are streamed a chunk at a time, so a 500 MB file costs a megabyte of memory,
not 500. Small files (up to ``prefetch_bytes``) are fetched ahead, ``prefetch`` at a time,
because for them the latency of each GET, not bandwidth, sets the pace; the memory this
takes is bounded by ``prefetch * prefetch_bytes``. A small member may come with an
asynchronous ``fetch`` (a GET on the event loop), used instead of a blocking body in a
worker thread. Headers are POSIX pax (long and
non-ASCII names survive GNU tar and BusyBox tar in any locale). A body that is shorter or
longer than its listed size stops the stream with
:class:`~craft_operator.library.errors.S3ObjectChangedError`; the receiving ``tar`` then
sees a truncated archive and fails before anything is moved into place.
"""

from __future__ import annotations

import asyncio
import tarfile
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

from craft_operator.daemon_threads import in_daemon_thread
from craft_operator.library.errors import S3ObjectChangedError
from craft_operator.library.s3 import ObjectBody

BLOCK = tarfile.BLOCKSIZE
CHUNK_BYTES = 1024 * 1024
#: Members up to this size are read whole, ahead of their turn.
PREFETCH_BYTES = 8 * 1024 * 1024
FILE_MODE = 0o644
SANDBOX_UID = 1000


@dataclass(frozen=True)
class TarMember:
    """One regular file of the archive: in-memory ``data``, a body opened on demand, or
    (a small file) its whole content fetched on demand, at most one byte past ``size``."""

    name: str
    size: int
    mtime: float = 0.0
    data: bytes | None = None
    open: Callable[[], ObjectBody] | None = None
    label: str = ""
    fetch: Callable[[], Awaitable[bytes]] | None = None


@dataclass
class ByteCounter:
    """Counts the bytes a stream has produced."""

    value: int = 0


def header(member: TarMember) -> bytes:
    """The pax header block(s) of ``member``."""
    info = tarfile.TarInfo(member.name)
    info.size = member.size
    info.mtime = int(member.mtime)
    info.mode = FILE_MODE
    info.uid = info.gid = SANDBOX_UID
    info.type = tarfile.REGTYPE
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "strict")


def padding(size: int) -> bytes:
    """Zero bytes that round ``size`` up to a whole block."""
    return b"\0" * (-size % BLOCK)


def archive_size(members: Sequence[TarMember]) -> int:
    """The exact length of the stream :func:`tar_stream` produces for ``members``."""
    total = 2 * BLOCK
    for member in members:
        total += len(header(member)) + member.size + len(padding(member.size))
    return total


def _read_whole(member: TarMember) -> bytes:
    """Fetch a small member's body in one go (blocking); at most one byte past its size."""
    assert member.open is not None
    body = member.open()
    try:
        parts: list[bytes] = []
        received = 0
        while received <= member.size and (chunk := body.read(CHUNK_BYTES)):
            parts.append(chunk)
            received += len(chunk)
        return b"".join(parts)
    finally:
        body.close()


async def _read_ahead(member: TarMember) -> bytes:
    if member.fetch is not None:
        return await member.fetch()
    return await in_daemon_thread(_read_whole, member)


async def _body(
    member: TarMember, chunk_bytes: int, prefetched: asyncio.Future[bytes] | None
) -> AsyncIterator[bytes]:
    if member.data is not None:
        yield member.data
        return
    if prefetched is not None:
        yield await prefetched
        return
    if member.fetch is not None:
        yield await member.fetch()
        return
    assert member.open is not None
    body = await in_daemon_thread(member.open)
    try:
        while chunk := await in_daemon_thread(body.read, chunk_bytes):
            yield chunk
    finally:
        await in_daemon_thread(body.close)


class _Prefetcher:
    """Starts fetching the next small members while earlier ones are being sent."""

    def __init__(self, members: Sequence[TarMember], window: int, max_bytes: int) -> None:
        self._members = members
        self._window = window
        self._max_bytes = max_bytes
        self._started: dict[int, asyncio.Future[bytes]] = {}
        self._next = 0

    def _eligible(self, member: TarMember) -> bool:
        readable = member.open is not None or member.fetch is not None
        return member.data is None and readable and member.size <= self._max_bytes

    def take(self, index: int) -> asyncio.Future[bytes] | None:
        """The fetch of member ``index`` (if prefetched), after topping up the window."""
        if self._window <= 0:
            return None
        self._next = max(self._next, index)
        while self._next < len(self._members) and len(self._started) < self._window + 1:
            member = self._members[self._next]
            if self._eligible(member):
                self._started[self._next] = asyncio.ensure_future(_read_ahead(member))
            self._next += 1
        return self._started.pop(index, None)

    async def close(self) -> None:
        """Abandon fetches nobody will send; wait for them so no error goes unretrieved."""
        pending = list(self._started.values())
        self._started.clear()
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


async def tar_stream(
    members: Sequence[TarMember],
    counter: ByteCounter | None = None,
    *,
    chunk_bytes: int = CHUNK_BYTES,
    prefetch: int = 8,
    prefetch_bytes: int = PREFETCH_BYTES,
) -> AsyncGenerator[bytes, None]:
    """Yield the archive of ``members`` in chunks, adding their length to ``counter``."""
    counter = counter if counter is not None else ByteCounter()
    prefetcher = _Prefetcher(members, prefetch, prefetch_bytes)
    try:
        async for chunk in _archive(members, counter, chunk_bytes, prefetcher):
            yield chunk
    finally:
        await prefetcher.close()


async def _archive(
    members: Sequence[TarMember],
    counter: ByteCounter,
    chunk_bytes: int,
    prefetcher: _Prefetcher,
) -> AsyncIterator[bytes]:
    for index, member in enumerate(members):
        prefetched = prefetcher.take(index)
        head = header(member)
        counter.value += len(head)
        yield head
        sent = 0
        async for chunk in _body(member, chunk_bytes, prefetched):
            sent += len(chunk)
            if sent > member.size:
                break
            counter.value += len(chunk)
            yield chunk
        if sent != member.size:
            raise S3ObjectChangedError(
                f"{member.label or member.name} was {member.size} bytes when listed but "
                f"{'more' if sent > member.size else sent} bytes were read; "
                "the next sync picks up the new version"
            )
        tail = padding(member.size)
        counter.value += len(tail)
        yield tail
    counter.value += 2 * BLOCK
    yield b"\0" * (2 * BLOCK)
