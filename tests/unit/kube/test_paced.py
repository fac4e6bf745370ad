"""A pod must take a paced stdin at the caller's pace, counting its own time only: what the
source spends reading (from S3) is never held against the pod."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass

import pytest

from craft_operator.kube.exec import ExecStalledError, ExecTooSlowError, paced

pytestmark = [pytest.mark.unit]


@dataclass
class Source:
    """``chunks`` of 1,000 bytes, each after ``pause`` seconds; records whether it was closed."""

    chunks: int
    pause: float = 0.0
    closed: bool = False

    async def __call__(self) -> AsyncGenerator[bytes, None]:
        try:
            for _ in range(self.chunks):
                await asyncio.sleep(self.pause)
                yield b"x" * 1000
        finally:
            self.closed = True


async def take(stream: AsyncGenerator[bytes, None], pause: float) -> int:
    """Take every chunk, ``pause`` seconds each (the pod's pace); the bytes taken."""
    taken = 0
    async for chunk in stream:
        await asyncio.sleep(pause)
        taken += len(chunk)
    return taken


async def test_a_pod_that_takes_its_stdin_slower_than_the_pace_is_abandoned_after_the_grace() -> (
    None
):
    source = Source(chunks=1000)
    stream = paced(source(), grace=0.2, bytes_per_second=100_000, where="ns/pod")

    with pytest.raises(ExecTooSlowError) as raised:
        await take(stream, pause=0.05)  # 20,000 bytes/s

    assert isinstance(raised.value, ExecStalledError)  # retried as a stall is
    assert raised.value.retryable
    assert "exec in pod ns/pod took" in str(raised.value)
    assert "slower than 100000 bytes/s after the first 0.2s" in str(raised.value)
    assert source.closed


async def test_a_slow_source_is_not_held_against_the_pod() -> None:
    source = Source(chunks=5, pause=0.1)
    stream = paced(source(), grace=0.05, bytes_per_second=1_000_000, where="ns/pod")

    assert await take(stream, pause=0.0) == 5000


async def test_a_pod_that_keeps_the_pace_takes_it_all() -> None:
    source = Source(chunks=20)
    stream = paced(source(), grace=0.1, bytes_per_second=1_000_000, where="ns/pod")

    assert await take(stream, pause=0.001) == 20_000
    assert source.closed


async def test_a_pod_that_keeps_the_pace_past_the_grace_takes_it_all() -> None:
    """The grace is a head start, not a limit: a big upload the pod takes at the pace goes
    on for as long as it needs."""
    source = Source(chunks=50)
    stream = paced(source(), grace=0.05, bytes_per_second=100_000, where="ns/pod")

    # 1,000 bytes every 2 ms: 500,000 bytes/s, for 0.1 s and more, twice the grace.
    assert await take(stream, pause=0.002) == 50_000
    assert source.closed
