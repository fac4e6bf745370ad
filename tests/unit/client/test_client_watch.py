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
