"""Connections to the API server: a process's waits never starve its other calls.

aiohttp's default pool holds 100 connections; a watch holds one for minutes. Were waits to
share a bounded pool with requests, 100 users waiting for their sandboxes would leave every
other call of the process waiting for a connection until its timeout, reported as an API
server that cannot be reached.
"""

from __future__ import annotations

import asyncio

from craft_operator.client import AsyncSandboxClient, Connection
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.unit.client.conftest import FAST, NAMESPACE, USER_ID

#: As many concurrent waits as aiohttp's default pool has connections.
WAITS = 100


async def test_a_hundred_waits_leave_connections_for_every_other_call(
    connection: Connection, emulator: KubeEmulator
) -> None:
    async with AsyncSandboxClient(connection, retry=FAST, timeout=2.0) as client:
        await client.ensure(NAMESPACE, "alice", user_id=USER_ID)
        waits = [
            asyncio.create_task(client.wait_ready(NAMESPACE, "alice", timeout=120))
            for _ in range(WAITS)
        ]
        try:
            await eventually(lambda: emulator.open_watches() >= WAITS, what=f"{WAITS} watches")
            await client.touch(NAMESPACE, "alice")  # the API server is fine: no UnreachableError
            assert (await client.get(NAMESPACE, "alice")).metadata.name == "alice"
        finally:
            for wait in waits:
                wait.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
