"""Specification of the daemon thread pool: at most its bound of threads, idle threads end,
a shut-down pool cancels what is queued and refuses more."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator

import pytest

from craft_operator.daemon_threads import DaemonThreadPool
from craft_operator.library.tarstream import TarMember, tar_stream

pytestmark = pytest.mark.unit


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set to free the calls that hang on it (set at the end of the test in any case)."""
    event = threading.Event()
    yield event
    event.set()


def test_the_pool_runs_at_most_its_bound_of_threads_and_queues_the_rest(
    release: threading.Event,
) -> None:
    pool = DaemonThreadPool(3, name="craft-db-test")
    running: list[str] = []
    lock = threading.Lock()

    def work(number: int) -> int:
        with lock:
            running.append(threading.current_thread().name)
        release.wait()
        return number

    futures = [pool.submit(work, number) for number in range(10)]
    deadline = time.monotonic() + 5
    while len(running) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # time enough for a fourth to start, were there one
    assert (len(running), pool.threads) == (3, 3)

    release.set()
    assert [future.result(timeout=5) for future in futures] == list(range(10))
    assert len(set(running)) == 3
    assert all(name.startswith("craft-db-test-") for name in running)
    pool.shutdown()


def test_idle_threads_end_and_new_work_starts_new_ones() -> None:
    pool = DaemonThreadPool(2, name="craft-db-test", idle_seconds=0.05)
    assert pool.submit(lambda: 1).result(timeout=5) == 1
    deadline = time.monotonic() + 5
    while pool.threads and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pool.threads == 0

    assert pool.submit(lambda: 2).result(timeout=5) == 2
    pool.shutdown()


def test_a_shut_down_pool_cancels_queued_work_and_refuses_more(
    release: threading.Event,
) -> None:
    pool = DaemonThreadPool(1, name="craft-db-test")
    started = threading.Event()

    def hang() -> bool:
        started.set()
        return release.wait()

    running = pool.submit(hang)
    queued = pool.submit(lambda: "never")
    assert started.wait(5)

    pool.shutdown(wait=False, cancel_futures=True)

    assert queued.cancelled()
    assert not running.done()
    with pytest.raises(RuntimeError, match="shutdown"):
        pool.submit(lambda: None)
    release.set()
    assert running.result(timeout=5) is True


def test_a_library_read_still_running_at_stop_does_not_hold_the_event_loop_s_close(
    release: threading.Event,
) -> None:
    """An S3 body trickling in while the operator stops: the sync is cancelled and the
    loop closed (as ``asyncio.Runner`` does at exit) without waiting for the read."""
    body = TarMember(name="big.bin", size=100 * 1024 * 1024, open=lambda: SlowBody(release))
    reading = threading.Event()

    async def operator() -> None:
        async def sync() -> None:
            async for _ in tar_stream([body]):
                pass

        task = asyncio.create_task(sync())
        if await asyncio.to_thread(SlowBody.started.wait, 10):
            reading.set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    runner = asyncio.Runner()
    runner.run(operator())
    began = time.monotonic()
    runner.close()

    assert reading.is_set()
    assert time.monotonic() - began < 5, "the read would have held it until released"


class SlowBody:
    """An S3 object's body whose read returns only once the test ends."""

    started = threading.Event()

    def __init__(self, release: threading.Event) -> None:
        self._release = release

    def read(self, size: int = -1) -> bytes:
        SlowBody.started.set()
        self._release.wait(60)
        return b""

    def close(self) -> None:
        return None
