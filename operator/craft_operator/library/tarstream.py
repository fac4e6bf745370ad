"""A tar archive produced as a stream, with file bodies read from S3 as it goes.

Only one chunk of one file is in memory at a time, so a 500 MB file costs a megabyte of
memory, not 500. Headers are POSIX pax (long and non-ASCII names survive GNU tar and
BusyBox tar in any locale). A body that is shorter or longer than its listed size stops
the stream with :class:`~craft_operator.library.errors.S3ObjectChangedError`; the receiving
``tar`` then sees a truncated archive and fails before anything is moved into place.
"""

from __future__ import annotations

import asyncio
import tarfile
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

from craft_operator.library.errors import S3ObjectChangedError
from craft_operator.library.s3 import ObjectBody

BLOCK = tarfile.BLOCKSIZE
CHUNK_BYTES = 1024 * 1024
FILE_MODE = 0o644
SANDBOX_UID = 1000


@dataclass(frozen=True)
class TarMember:
    """One regular file of the archive: in-memory ``data`` or a body opened on demand."""

    name: str
    size: int
    mtime: float = 0.0
    data: bytes | None = None
    open: Callable[[], ObjectBody] | None = None
    label: str = ""


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


async def _body(member: TarMember, chunk_bytes: int) -> AsyncIterator[bytes]:
    if member.data is not None:
        yield member.data
        return
    assert member.open is not None
    body = await asyncio.to_thread(member.open)
    try:
        while chunk := await asyncio.to_thread(body.read, chunk_bytes):
            yield chunk
    finally:
        await asyncio.to_thread(body.close)


async def tar_stream(
    members: Sequence[TarMember],
    counter: ByteCounter | None = None,
    *,
    chunk_bytes: int = CHUNK_BYTES,
) -> AsyncIterator[bytes]:
    """Yield the archive of ``members`` in chunks, adding their length to ``counter``."""
    counter = counter if counter is not None else ByteCounter()
    for member in members:
        head = header(member)
        counter.value += len(head)
        yield head
        sent = 0
        async for chunk in _body(member, chunk_bytes):
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
