"""How a wait follows its sandbox when watches expire, drop or fail: counted in requests."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp.web
import pytest
from kmock._internal import rendering

from craft_operator.client import (
    AsyncSandboxClient,
    Connection,
    Progress,
    RetryPolicy,
    UnreachableError,
    WaitTimeoutError,
)
from tests.support.apply import FailNext
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.unit.client.conftest import FAST, NAMESPACE, USER_ID, all_true, write_status

#: A backoff far longer than any wait of these tests: a request after one is never made.
PATIENT = RetryPolicy(attempts=4, base_delay=60.0, max_delay=60.0)


class TooOld:
    """A ``before_request`` hook: every watch from a resourceVersion gets the ERROR event 410
    Expired, as a real API server answers a version older than its watch window (that of an
    object that has not changed for a while); ``everything`` expires watches from now too."""

    def __init__(self, *, everything: bool = False) -> None:
        self.everything = everything
        #: The resourceVersion of every watch, ``None`` when it had none.
        self.watches: list[str | None] = []

    async def __call__(self, request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        if request.params.get("watch") != "true":
            return None
        version = request.params.get("resourceVersion")
        self.watches.append(version)
        if version is None and not self.everything:
            return None
        status = {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": f"too old resource version: {version} (5000)",
            "reason": "Expired",
            "code": 410,
        }
        return aiohttp.web.Response(
            text=json.dumps({"type": "ERROR", "object": status}) + "\n",
            content_type="application/json",
        )


def reported(seen: list[Progress], reason: str) -> bool:
    """Whether the last progress report has a condition with ``reason``."""
    return bool(seen) and any(c.reason == reason for c in seen[-1].conditions)


async def test_a_wait_on_an_old_sandbox_resumes_from_now_after_410_gone(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    too_old = TooOld()
    emulator.before_request.insert(0, too_old)
    waiting = asyncio.create_task(aclient.wait_ready(NAMESPACE, "alice", timeout=30))
    await eventually(lambda: aclient.requests["watch"] >= 2, what="the watch from now")

    write_status(emulator, "alice", "Ready", all_true())
    await waiting

    version = too_old.watches[0]
    assert version is not None
    assert too_old.watches == [version, None], "after the 410, one watch from now"
    assert aclient.requests["get"] == 2, "read once more, for whether it still exists"


async def test_consecutive_410s_are_backed_off(
    emulator: KubeEmulator, connection: Connection
) -> None:
    async with AsyncSandboxClient(connection, retry=PATIENT) as client:
        await client.ensure(NAMESPACE, "alice", user_id=USER_ID)
        emulator.before_request.insert(0, TooOld(everything=True))

        with pytest.raises(WaitTimeoutError):
            await client.wait_ready(NAMESPACE, "alice", timeout=1)

        # The first 410 is routine and answered at once; the second waits out the backoff.
        assert client.requests["watch"] == 2
        assert client.requests["get"] == 2


async def test_a_wait_survives_any_number_of_drops_that_each_delivered_events(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    seen: list[Progress] = []
    waiting = asyncio.create_task(
        aclient.wait_ready(NAMESPACE, "alice", timeout=60, on_progress=seen.append)
    )
    drops = 3 * FAST.attempts
    for drop in range(drops):
        await eventually(lambda n=drop: aclient.requests["watch"] > n, what="the next watch")
        reason = f"Step{drop}"
        write_status(emulator, "alice", "Provisioning", {"PodReady": ("False", reason)})
        await eventually(lambda r=reason: reported(seen, r), what="the event")
        emulator.cut_watches()  # a proxy cutting the long connection, after it delivered

    await eventually(lambda: aclient.requests["watch"] > drops, what="the last watch")
    write_status(emulator, "alice", "Ready", all_true())
    await waiting

    assert aclient.requests["watch"] == drops + 1
    assert aclient.requests["get"] == 1


async def cut_once_open(client: AsyncSandboxClient, emulator: KubeEmulator, watches: int) -> None:
    """Once the client opened its watch number ``watches`` and the server accepted it, cut
    it as a proxy with an idle timeout would: it delivered nothing."""
    await eventually(lambda: client.requests["watch"] >= watches, what=f"watch {watches}")
    await asyncio.sleep(0.05)  # its response's headers reach the client
    await eventually(emulator.cut_watches, what=f"watch {watches} to cut")


async def test_a_wait_survives_any_number_of_idle_watches_a_proxy_cuts(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    waiting = asyncio.create_task(aclient.wait_ready(NAMESPACE, "alice", timeout=60))
    cuts = 2 * FAST.attempts
    for cut in range(1, cuts + 1):
        await cut_once_open(aclient, emulator, cut)
        assert not waiting.done(), f"the wait ended after {cut} cuts: {waiting.exception()!r}"

    await eventually(lambda: aclient.requests["watch"] > cuts, what="the last watch")
    write_status(emulator, "alice", "Ready", all_true())
    await waiting

    assert aclient.requests["watch"] == cuts + 1
    assert aclient.requests["get"] == 1, "each resumed from its version"


async def test_a_server_that_ends_every_accepted_watch_at_once_is_resumed_ever_more_slowly(
    emulator: KubeEmulator, connection: Connection
) -> None:
    async def empty_watch(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        if request.params.get("watch") != "true":
            return None
        return aiohttp.web.Response(text="", content_type="application/json")

    slow = RetryPolicy(attempts=6, base_delay=0.2, max_delay=60.0)
    async with AsyncSandboxClient(connection, retry=slow) as client:
        await client.ensure(NAMESPACE, "alice", user_id=USER_ID)
        emulator.before_request.insert(0, empty_watch)

        with pytest.raises(WaitTimeoutError):
            await client.wait_ready(NAMESPACE, "alice", timeout=1.5)

        # Pauses of 0.2-0.4 s, then 0.4-0.8 s, then 0.8-1.6 s: at most 4 watches in 1.5 s
        # (the shortest pause, 0.1-0.2 s each time, would have made 8 or more).
        assert 2 <= client.requests["watch"] <= 4


async def test_watches_that_cannot_connect_fail_the_wait_once_the_attempts_are_spent(
    aclient: AsyncSandboxClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    connect = aiohttp.TCPConnector.connect

    async def refusing(self: aiohttp.TCPConnector, request: Any, *args: Any, **kw: Any) -> Any:
        if request.url.query.get("watch") == "true":
            error = ConnectionRefusedError(111, "Connection refused")
            raise aiohttp.ClientConnectorError(request.connection_key, error)
        return await connect(self, request, *args, **kw)

    monkeypatch.setattr(aiohttp.TCPConnector, "connect", refusing)

    with pytest.raises(UnreachableError, match="Connection refused"):
        await aclient.wait_ready(NAMESPACE, "alice", timeout=30)
    assert aclient.requests["watch"] == FAST.attempts


async def test_watches_that_keep_failing_without_delivering_fail_the_wait(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    emulator.before_request.insert(0, FailNext("GET", 503, count=100, watch=True))

    with pytest.raises(Exception, match="503") as failure:
        await aclient.wait_ready(NAMESPACE, "alice", timeout=30)

    assert not isinstance(failure.value, WaitTimeoutError | UnreachableError)
    assert aclient.requests["watch"] == FAST.attempts


async def test_a_timeout_error_raised_by_the_progress_callback_is_not_the_waits_timeout(
    aclient: AsyncSandboxClient,
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)

    def report(_: Progress) -> Any:
        raise TimeoutError("the caller's own deadline")

    with pytest.raises(TimeoutError, match="the caller's own deadline") as raised:
        await aclient.wait_ready(NAMESPACE, "alice", timeout=30, on_progress=report)

    assert not isinstance(raised.value, WaitTimeoutError)
