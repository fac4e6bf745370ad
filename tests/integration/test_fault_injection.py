"""The fault injectors do what the resilience suite relies on them to do."""

from __future__ import annotations

import asyncio
import random

import aiohttp
import pytest

from tests.support.emulator import KubeEmulator
from tests.support.faults import WRITE_FAULTS, ApiFaults
from tests.support.outage import TcpProxy

OPERATOR = {"User-Agent": "craft-operator/test"}
CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe"}}


def configmaps(emulator: KubeEmulator) -> str:
    return f"{str(emulator.url).rstrip('/')}/api/v1/namespaces/default/configmaps"


async def post(url: str, headers: dict[str, str]) -> int | str:
    """The status of a create, or the name of the connection error."""
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(url, json=CONFIGMAP, headers=headers) as response,
        ):
            return response.status
    except aiohttp.ClientError as exc:
        return type(exc).__name__


async def test_every_kind_of_write_fault_is_injected_and_a_dropped_write_may_have_applied(
    emulator: KubeEmulator,
) -> None:
    faults = ApiFaults(emulator, random.Random(7), rate=1.0)
    emulator.before_request.append(faults)
    outcomes = [await post(configmaps(emulator), OPERATOR) for _ in WRITE_FAULTS]

    assert set(faults.injected) == set(WRITE_FAULTS)
    assert sorted(o for o in outcomes if isinstance(o, int)) == [409, 429, 500]
    assert sum(isinstance(o, str) for o in outcomes) == 2  # dropped before and after
    assert emulator.find("v1/configmaps", "default", "probe") is not None  # the drop-after


async def test_a_429_says_when_to_retry_and_other_clients_are_never_failed(
    emulator: KubeEmulator,
) -> None:
    faults = ApiFaults(emulator, random.Random(1), rate=1.0)
    emulator.before_request.append(faults)
    faults._decks[False][:] = ["429"]  # the next read fault

    assert await post(configmaps(emulator), {"User-Agent": "kubectl/v1.33"}) in (200, 201)
    async with (
        aiohttp.ClientSession() as session,
        session.get(configmaps(emulator), headers=OPERATOR) as response,
    ):
        assert response.status == 429
        assert response.headers["Retry-After"] == "1"
    assert faults.injected == {"429": 1}


async def test_cutting_watches_drops_every_open_stream(emulator: KubeEmulator) -> None:
    url = configmaps(emulator) + "?watch=true&timeoutSeconds=60"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        await asyncio.sleep(0.1)
        assert emulator.cut_watches() == 1
        with pytest.raises(aiohttp.ClientError):
            await asyncio.wait_for(response.content.read(), 10)


async def test_a_proxy_outage_refuses_and_cuts_connections_until_it_is_up_again() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    proxy = TcpProxy("127.0.0.1", port)
    await proxy.up()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"ping")
        assert await reader.read(4) == b"ping"

        await proxy.down()
        assert await asyncio.wait_for(reader.read(4), 5) == b""  # the open one was cut
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", proxy.port)

        await proxy.up()
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"pong")
        assert await reader.read(4) == b"pong"
        writer.close()
    finally:
        await proxy.close()
        server.close()
