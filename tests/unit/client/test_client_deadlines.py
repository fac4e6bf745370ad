"""A call that writes and then waits keeps its ``timeout`` as a whole: a throttled write
(429 with Retry-After, as API Priority and Fairness answers) must not stretch it, and the
error of a wait that runs out of it names the caller's timeout."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from craft_operator.client import AsyncSandboxClient, WaitTimeoutError
from tests.support.apply import FailNext
from tests.support.emulator import KubeEmulator
from tests.unit.client.conftest import NAMESPACE, SANDBOXES, USER_ID

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


#: Each call with a wait of 2 s, and the method of the write before its wait.
WRITES: dict[str, tuple[Call, str]] = {
    "wake": (lambda c: c.wake(NAMESPACE, "alice", wait=True, timeout=2), "PATCH"),
    "sleep": (lambda c: c.sleep(NAMESPACE, "alice", wait=True, timeout=2), "PATCH"),
    "notify": (
        lambda c: c.notify_library_changed(NAMESPACE, "alice", wait=True, timeout=2),
        "PATCH",
    ),
    "delete": (lambda c: c.delete(NAMESPACE, "alice", wait=True, timeout=2), "DELETE"),
}


@pytest.mark.parametrize(("call", "method"), WRITES.values(), ids=WRITES.keys())
async def test_a_wait_that_runs_out_after_a_throttled_write_names_the_callers_timeout(
    aclient: AsyncSandboxClient, emulator: KubeEmulator, call: Call, method: str
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    finalizer = {"metadata": {"finalizers": ["craft.onyx.app/finalizer"]}}
    emulator.patch(SANDBOXES, NAMESPACE, "alice", finalizer)  # a deletion waits for it
    # The write lands after a second's Retry-After; the operator never answers.
    emulator.before_request.insert(0, FailNext(method, 429, retry_after="1"))

    with pytest.raises(WaitTimeoutError) as timed_out:
        await call(aclient)

    assert timed_out.value.seconds == 2
    assert "did not happen within 2 s" in str(timed_out.value)


@pytest.mark.parametrize(("call", "method"), WRITES.values(), ids=WRITES.keys())
async def test_a_wait_after_a_throttled_write_has_only_what_is_left_of_the_timeout(
    aclient: AsyncSandboxClient,
    emulator: KubeEmulator,
    call: Call,
    method: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The write takes a second of the two: the wait after it gets at most the other one,
    so the call ends when its timeout says, not a second later."""
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    finalizer = {"metadata": {"finalizers": ["craft.onyx.app/finalizer"]}}
    emulator.patch(SANDBOXES, NAMESPACE, "alice", finalizer)  # a deletion waits for it
    emulator.before_request.insert(0, FailNext(method, 429, retry_after="1"))
    waits: list[float] = []
    until = aclient._watcher.until

    async def recorded(*args: Any, **kwargs: Any) -> Any:
        waits.append(args[3])  # the wait's own timeout
        return await until(*args, **kwargs)

    monkeypatch.setattr(aclient._watcher, "until", recorded)

    with pytest.raises(WaitTimeoutError):
        await call(aclient)

    # However slow the machine, what is left after a 1 s Retry-After is at most 1 s.
    assert len(waits) == 1
    assert waits[0] <= 1.0
