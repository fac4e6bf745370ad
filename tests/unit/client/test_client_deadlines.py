"""A call that writes and then waits keeps its ``timeout`` as a whole: a throttled write
(429 with Retry-After, as API Priority and Fairness answers) must not stretch it."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import pytest

from craft_operator.client import AsyncSandboxClient, WaitTimeoutError
from tests.support.apply import FailNext
from tests.support.emulator import KubeEmulator
from tests.unit.client.conftest import NAMESPACE, USER_ID

Call = Callable[[AsyncSandboxClient], Awaitable[object]]
CALLS: dict[str, Call] = {
    "wake": lambda c: c.wake(NAMESPACE, "alice", wait=True, timeout=1.0),
    "sleep": lambda c: c.sleep(NAMESPACE, "alice", wait=True, timeout=1.0),
    "notify": lambda c: c.notify_library_changed(NAMESPACE, "alice", wait=True, timeout=1.0),
    "delete": lambda c: c.delete(NAMESPACE, "alice", wait=True, timeout=1.0),
}


@pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())
async def test_a_throttled_write_does_not_stretch_the_wait_past_its_timeout(
    aclient: AsyncSandboxClient, emulator: KubeEmulator, call: Call
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    for method in ("GET", "PATCH", "DELETE"):
        emulator.before_request.insert(0, FailNext(method, 429, count=2, retry_after="5"))
    started = time.monotonic()

    with pytest.raises(WaitTimeoutError):
        await call(aclient)

    # Honoured, it ends about a second in; stretched, after the two 5 s Retry-Afters.
    assert time.monotonic() - started < 5
