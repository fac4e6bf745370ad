"""delete(): what it says about a sandbox it could not see deleted, and a missing CRD."""

from __future__ import annotations

from typing import Any

import aiohttp.web
import pytest
from kmock._internal import rendering

from craft_operator.client import AsyncSandboxClient, CrdMissingError
from tests.support.emulator import KubeEmulator
from tests.unit.client.conftest import NAMESPACE, USER_ID, crd_not_served


def answer_lost(emulator: KubeEmulator, status: int) -> list[str]:
    """Serve the first DELETE, then answer it with ``status`` as a gateway would; the
    requests it answered so."""
    lost: list[str] = []

    async def hook(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        if request.method.value.upper() != "DELETE" or lost:
            return None
        await emulator.serve_unhooked(request)
        lost.append(request.url.path)
        return aiohttp.web.Response(status=status, text="upstream request timeout")

    emulator.before_request.insert(0, hook)
    return lost


async def test_delete_whose_answer_was_lost_and_whose_retry_finds_nothing_says_it_deleted(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    lost = answer_lost(emulator, 504)

    assert await aclient.delete(NAMESPACE, "alice") is True
    assert len(lost) == 1


async def test_delete_of_a_sandbox_that_never_existed_is_false_even_after_a_refused_try(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    refused = answer_lost(emulator, 503)  # 503: refused, not carried out (nothing to delete)

    assert await aclient.delete(NAMESPACE, "nobody") is False
    assert len(refused) == 1


def refuse_first_connection(monkeypatch: pytest.MonkeyPatch, method: str) -> list[str]:
    """Refuse the connection for the first ``method`` request, as a server that is
    restarting would: it is never sent. The requests refused so."""
    refused: list[str] = []
    connect = aiohttp.TCPConnector.connect

    async def refusing(self: aiohttp.TCPConnector, request: Any, *args: Any, **kw: Any) -> Any:
        if request.method == method and not refused:
            refused.append(str(request.url))
            error = ConnectionRefusedError(111, "Connection refused")
            raise aiohttp.ClientConnectorError(request.connection_key, error)
        return await connect(self, request, *args, **kw)

    monkeypatch.setattr(aiohttp.TCPConnector, "connect", refusing)
    return refused


async def test_delete_of_a_sandbox_that_never_existed_is_false_after_a_refused_connection(
    aclient: AsyncSandboxClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    refused = refuse_first_connection(monkeypatch, "DELETE")

    assert await aclient.delete(NAMESPACE, "nobody") is False
    assert len(refused) == 1


async def test_delete_on_a_cluster_without_the_crd_raises_crd_missing(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    emulator.before_request.insert(0, crd_not_served)

    with pytest.raises(CrdMissingError, match="CRD is not installed"):
        await aclient.delete(NAMESPACE, "alice")
    with pytest.raises(CrdMissingError):
        await aclient.wait_ready(NAMESPACE, "alice", timeout=30)
