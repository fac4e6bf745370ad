"""Fixtures for the peering tests: an emulated API server serving the peering resource, and
the operator's client bound to it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import kmock
import kopf
import pytest

from craft_operator.kube.client import KubeClient
from tests.support.emulator import KubeEmulator, declare_core_resources, declare_peering_resources


@pytest.fixture
async def emulator() -> AsyncIterator[KubeEmulator]:
    """A running emulator with the core kinds and kopf's ClusterKopfPeering."""
    async with KubeEmulator() as handler, kmock.Server(handler):
        declare_core_resources(handler)
        declare_peering_resources(handler)
        yield handler


@pytest.fixture
async def kube(emulator: KubeEmulator) -> AsyncIterator[KubeClient]:
    """The operator's client, configured for the emulator."""
    client = KubeClient(request_timeout=10)
    client.configure(kopf.ConnectionInfo(server=str(emulator.url).rstrip("/"), insecure=True))
    yield client
    await client.close()
