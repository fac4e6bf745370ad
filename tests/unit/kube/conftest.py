"""Fixtures of the kube/ tests, also used by the reconciler's (its conftest imports them).

A KMock emulator and the operator's client bound to it: the emulator is the integration
tier's (``tests.support.emulator``), with the Kubernetes schema check on every write. And
for ``kube/exec_aiohttp.py``: a stand-in for the API server's exec endpoint with the real
``AiohttpExec`` bound to it (``tests.support.exec_api``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import kmock
import kopf
import pytest

from craft_operator.kube.client import KubeClient
from craft_operator.kube.exec_aiohttp import AiohttpExec
from tests.support.emulator import KubeEmulator, declare_core_resources
from tests.support.exec_api import FakeApiServer, aiohttp_exec, serve_exec_api
from tests.support.schemas import core_schema_validator

NAMESPACE = "craft-sandboxes"


def configmap(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    """A ConfigMap body in NAMESPACE."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels or {}},
        "data": data,
    }


@pytest.fixture
async def emulator() -> AsyncIterator[KubeEmulator]:
    """A running emulator serving the core kinds, checking writes against the schemas."""
    async with KubeEmulator() as handler, kmock.Server(handler):
        declare_core_resources(handler)
        handler.validators.append(core_schema_validator)
        yield handler


@pytest.fixture
async def kube(emulator: KubeEmulator) -> AsyncIterator[KubeClient]:
    """The operator's client, configured for the emulator."""
    client = KubeClient(request_timeout=10)
    client.configure(kopf.ConnectionInfo(server=str(emulator.url).rstrip("/"), insecure=True))
    yield client
    await client.close()


@pytest.fixture
async def api_server() -> AsyncIterator[FakeApiServer]:
    """The stand-in exec endpoint, serving on 127.0.0.1."""
    async with serve_exec_api() as server:
        yield server


@pytest.fixture
async def transport(api_server: FakeApiServer) -> AsyncIterator[AiohttpExec]:
    """The operator's real exec transport, talking to ``api_server``."""
    async with aiohttp_exec(api_server) as exec_transport:
        yield exec_transport
