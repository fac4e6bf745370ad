"""One client used from many event loops (``asyncio.run`` per task): no session left open."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import aiohttp
import pytest

from craft_operator.client import AsyncSandboxClient, Connection
from tests.unit.client.conftest import FAST, NAMESPACE, USER_ID


@pytest.fixture
def sessions(monkeypatch: pytest.MonkeyPatch) -> list[aiohttp.ClientSession]:
    """Every aiohttp session made while the test runs."""
    made: list[aiohttp.ClientSession] = []
    original = aiohttp.ClientSession

    def recorded(*args: Any, **kwargs: Any) -> aiohttp.ClientSession:
        made.append(original(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(aiohttp, "ClientSession", recorded)
    return made


async def test_each_asyncio_run_closes_the_session_it_used(
    connection: Connection, sessions: list[aiohttp.ClientSession]
) -> None:
    client = AsyncSandboxClient(connection, retry=FAST)

    def tasks() -> None:
        asyncio.run(client.ensure(NAMESPACE, "alice", user_id=USER_ID))
        for _ in range(3):
            asyncio.run(client.status(NAMESPACE, "alice"))

    await asyncio.to_thread(tasks)

    assert len(sessions) == 4, "a session per loop"
    assert all(session.closed for session in sessions)
    assert client._http._sessions == {}
    await client.close()


# Its connections cannot be closed on a closed loop: the garbage collector closes their
# sockets, with the ResourceWarning Python gives for every transport of an abandoned loop.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
async def test_a_session_left_by_a_loop_closed_by_hand_is_closed_by_the_next_loop(
    connection: Connection, sessions: list[aiohttp.ClientSession]
) -> None:
    client = AsyncSandboxClient(connection, retry=FAST)

    def tasks() -> None:
        loop = asyncio.new_event_loop()
        loop.run_until_complete(client.ensure(NAMESPACE, "alice", user_id=USER_ID))
        loop.close()  # without shutdown_asyncgens(): nothing closed the session
        assert not sessions[0].closed
        asyncio.run(client.status(NAMESPACE, "alice"))

    await asyncio.to_thread(tasks)
    gc.collect()

    assert len(sessions) == 2
    assert all(session.closed for session in sessions)
    assert client._http._sessions == {}


async def test_close_closes_the_session_of_its_loop(
    connection: Connection, sessions: list[aiohttp.ClientSession]
) -> None:
    client = AsyncSandboxClient(connection, retry=FAST)
    await client.ensure(NAMESPACE, "alice", user_id=USER_ID)
    await client.status(NAMESPACE, "alice")

    await client.close()

    assert len(sessions) == 1
    assert sessions[0].closed
