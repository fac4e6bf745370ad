"""The operator's API client keeps its credentials fresh itself: kopf logs in again only
after its own requests are refused, and it makes almost none."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp.web
import kopf
import pytest

from craft_operator.kube.client import ApiError, KubeClient
from craft_operator.kube.relogin import keep_fresh
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually

pytestmark = pytest.mark.unit


def token(value: str, server: str = "https://api.test:6443") -> kopf.ConnectionInfo:
    """Credentials with a bearer token."""
    return kopf.ConnectionInfo(server=server, scheme="Bearer", token=value)


class Credentials:
    """What reading the credentials gives now, and how often it was read."""

    def __init__(self, info: kopf.ConnectionInfo) -> None:
        self.info = info
        self.reads = 0

    async def read(self) -> kopf.ConnectionInfo | None:
        self.reads += 1
        return self.info


async def test_a_rotated_token_is_taken_up_at_the_next_reading() -> None:
    kube = KubeClient(request_timeout=5)
    kube.configure(token("first"))
    credentials = Credentials(token("first"))
    refresher = asyncio.create_task(keep_fresh(kube, credentials.read, every=0.02, spacing=0))
    try:
        await eventually(lambda: credentials.reads >= 2)
        assert kube.info == token("first")
        credentials.info = token("rotated")  # the kubelet rotated the projected token
        await eventually(lambda: kube.info == token("rotated"))
    finally:
        refresher.cancel()
        await kube.close()


async def test_a_refused_request_has_the_credentials_read_again_at_once(
    emulator: KubeEmulator,
) -> None:
    async def refuse_the_old_token(request: Any) -> aiohttp.web.StreamResponse | None:
        if request.headers.get("Authorization") == "Bearer expired":
            return aiohttp.web.json_response({"kind": "Status", "code": 401}, status=401)
        return None

    emulator.before_request.insert(0, refuse_the_old_token)
    server = str(emulator.url).rstrip("/")
    kube = KubeClient(request_timeout=5)
    kube.configure(kopf.ConnectionInfo(server=server, scheme="Bearer", token="expired"))
    credentials = Credentials(kopf.ConnectionInfo(server=server, scheme="Bearer", token="new"))
    refresher = asyncio.create_task(keep_fresh(kube, credentials.read, every=3600, spacing=0))
    try:
        await asyncio.sleep(0.05)
        assert credentials.reads == 0, "logged in just now: nothing to read yet"
        with pytest.raises(ApiError) as refused:
            await kube.request("GET", "/api/v1/namespaces/default/configmaps")
        assert refused.value.status == 401
        await eventually(lambda: credentials.reads == 1, within=5)
        assert (await kube.request("GET", "/api/v1/namespaces/default/configmaps"))[
            "kind"
        ] == "ConfigMapList"
    finally:
        refresher.cancel()
        await kube.close()
