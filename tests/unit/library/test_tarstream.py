"""The streamed tar archive: what tar reads back, exact sizes, and bodies that lie."""

from __future__ import annotations

import io
import tarfile
from functools import partial

import pytest

from craft_operator.library.errors import S3ObjectChangedError
from craft_operator.library.tarstream import ByteCounter, TarMember, archive_size, tar_stream

pytestmark = [pytest.mark.unit]


class Body:
    """An object body that hands out ``data`` in small reads and records being closed."""

    def __init__(self, data: bytes) -> None:
        self.stream = io.BytesIO(data)
        self.closed = False

    def read(self, amt: int | None = None) -> bytes:
        return self.stream.read(min(amt or 1 << 30, 7_000))

    def close(self) -> None:
        self.closed = True


async def collect(members: list[TarMember], **kw: int) -> tuple[bytes, ByteCounter]:
    counter = ByteCounter()
    chunks = [chunk async for chunk in tar_stream(members, counter, **kw)]
    return b"".join(chunks), counter


@pytest.mark.parametrize("prefetch", [0, 3], ids=["streamed", "prefetched"])
async def test_tar_reads_back_every_member_with_its_name_and_content(prefetch: int) -> None:
    contents = {
        "files/plain.txt": b"plain",
        "files/" + "long/" * 40 + "name.txt": b"long name",
        "files/ünïcödé/日本.md": b"unicode",
        "files/big.bin": bytes(range(256)) * 1000,
        "files/empty": b"",
    }
    bodies = {name: Body(data) for name, data in contents.items()}
    members = [
        TarMember(name, len(data), mtime=1_700_000_000, open=partial(bodies.__getitem__, name))
        for name, data in contents.items()
    ]
    members.append(TarMember("pending", 3, data=b"abc"))

    archive, counter = await collect(members, prefetch=prefetch, prefetch_bytes=10_000)

    assert counter.value == len(archive) == archive_size(members)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        read = {info.name: tar.extractfile(info).read() for info in tar.getmembers()}  # type: ignore[union-attr]
        modes = {info.mode for info in tar.getmembers()}
    assert read == {**contents, "pending": b"abc"}
    assert modes == {0o644}
    assert all(body.closed for body in bodies.values())


@pytest.mark.parametrize(("listed", "actual"), [(10, 5), (10, 15)], ids=["shorter", "longer"])
async def test_a_body_of_the_wrong_length_stops_the_stream(listed: int, actual: int) -> None:
    body = Body(b"x" * actual)
    members = [TarMember("files/a", listed, open=lambda: body, label="s3://b/a")]

    with pytest.raises(S3ObjectChangedError, match="s3://b/a"):
        await collect(members, prefetch=0)


async def test_prefetching_stays_within_its_window() -> None:
    opened: list[str] = []

    def opener(name: str) -> Body:
        opened.append(name)
        return Body(b"y" * 10)

    members = [TarMember(f"files/{i}", 10, open=partial(opener, str(i))) for i in range(50)]
    stream = tar_stream(members, prefetch=4, prefetch_bytes=100)

    await anext(stream)  # the first header: member 0 is being sent
    await stream.aclose()

    assert len(opened) <= 5
