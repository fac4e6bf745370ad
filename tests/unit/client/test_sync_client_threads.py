"""The synchronous client's own thread: calls from it, progress callbacks, and close()
while calls run.

Each test guards its blocking call with a generous deadline only so that a regression
(a deadlock) fails the test instead of hanging the suite; nothing here measures time.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
import threading
from collections.abc import Callable

import pytest

from craft_operator.client import (
    AsyncSandboxClient,
    Connection,
    Progress,
    SandboxClient,
    SandboxClientError,
)
from craft_operator.client.errors import WaitTimeoutError
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.unit.client.conftest import NAMESPACE, USER_ID, all_true, write_status

#: Seconds after which a call that should have returned is a deadlock.
DEADLOCK = 30.0


async def test_one_users_slow_progress_callback_does_not_hold_up_another_threads_calls(
    client: SandboxClient, emulator: KubeEmulator
) -> None:
    await asyncio.to_thread(client.ensure, NAMESPACE, "alice", user_id=USER_ID)
    await asyncio.to_thread(client.ensure, NAMESPACE, "bob", user_id=USER_ID)
    blocking, released = threading.Event(), threading.Event()
    outcomes: list[bool] = []

    def stream_to_ui(_: Progress) -> None:  # a blocking write to a slow browser
        blocking.set()
        outcomes.append(released.wait(DEADLOCK))  # False: nothing released it meanwhile

    alice = asyncio.create_task(
        asyncio.to_thread(
            client.wait_ready, NAMESPACE, "alice", timeout=DEADLOCK, on_progress=stream_to_ui
        )
    )
    await eventually(blocking.is_set, what="alice's callback blocking")
    bob = await asyncio.wait_for(asyncio.to_thread(client.get, NAMESPACE, "bob"), DEADLOCK)
    released.set()  # only once bob's call returned: before, it waited behind the callback
    write_status(emulator, "alice", "Ready", all_true())
    await asyncio.wait_for(alice, DEADLOCK)

    assert bob.metadata.name == "bob"
    assert outcomes[0] is True, "bob's get() returned only after alice's callback gave up"


def slow_ui_writer() -> tuple[Callable[[Progress], None], threading.Event]:
    """A plain progress callback whose write to a slow browser takes a second, and the
    event set while it writes."""
    writing = threading.Event()

    def stream_to_ui(_: Progress) -> None:
        writing.set()
        threading.Event().wait(1.0)
        writing.clear()

    return stream_to_ui, writing


async def test_a_wait_that_times_out_ends_only_once_its_plain_callback_has_returned(
    client: SandboxClient, emulator: KubeEmulator
) -> None:
    # The caller closes what the callback writes to (its browser stream) once the wait ends.
    await asyncio.to_thread(client.ensure, NAMESPACE, "alice", user_id=USER_ID)
    stream_to_ui, writing = slow_ui_writer()  # its write outlasts the wait's timeout

    with pytest.raises(WaitTimeoutError):
        await asyncio.wait_for(
            asyncio.to_thread(
                client.wait_ready, NAMESPACE, "alice", timeout=0.3, on_progress=stream_to_ui
            ),
            DEADLOCK,
        )
    assert not writing.is_set(), "the wait ended while its callback still wrote"


async def test_close_returns_once_the_plain_callbacks_of_the_calls_it_ended_have_returned(
    client: SandboxClient, emulator: KubeEmulator
) -> None:
    await asyncio.to_thread(client.ensure, NAMESPACE, "alice", user_id=USER_ID)
    stream_to_ui, writing = slow_ui_writer()

    waiting = asyncio.create_task(
        asyncio.to_thread(
            client.wait_ready, NAMESPACE, "alice", timeout=DEADLOCK, on_progress=stream_to_ui
        )
    )
    await eventually(writing.is_set, what="the callback writing")
    await asyncio.wait_for(asyncio.to_thread(client.close), DEADLOCK)
    assert not writing.is_set(), "close() returned while a callback still wrote"
    with pytest.raises(SandboxClientError):
        await asyncio.wait_for(waiting, DEADLOCK)


#: A process whose plain progress callback never returns (a write to a browser that never
#: answers): close() ends its wait, then the process exits. SIGALRM kills it after 20 s.
STUCK_CALLBACK = textwrap.dedent(
    """
    import signal, sys, threading
    from craft_operator.client import Connection, SandboxClient, SandboxClientError

    signal.alarm(20)
    client = SandboxClient(Connection(server=sys.argv[1], insecure=True))
    writing = threading.Event()

    def stream_to_ui(_):
        writing.set()
        threading.Event().wait()

    def wait():
        try:
            client.wait_ready(sys.argv[2], "alice", timeout=60, on_progress=stream_to_ui)
        except SandboxClientError:
            print("wait ended", flush=True)

    waiting = threading.Thread(target=wait)
    waiting.start()
    writing.wait()
    client.close()
    waiting.join()
    print("closed", flush=True)
    """
)


async def test_a_plain_progress_callback_stuck_for_good_does_not_hold_the_process_s_exit(
    aclient: AsyncSandboxClient, connection: Connection
) -> None:
    # close() leaves it to end on its own; the process must still exit (its thread, as the
    # client's own, does not keep the interpreter alive).
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        STUCK_CALLBACK,
        connection.server,
        NAMESPACE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)

    assert stdout.decode().splitlines() == ["wait ended", "closed"], stderr.decode()
    assert process.returncode == 0, "the process did not exit: SIGALRM killed it"


async def test_a_plain_progress_callback_may_call_the_sync_client(
    client: SandboxClient, emulator: KubeEmulator
) -> None:
    await asyncio.to_thread(client.ensure, NAMESPACE, "alice", user_id=USER_ID)
    write_status(emulator, "alice", "Ready", all_true(), podName="alice", podUID="u1")
    pods: list[str | None] = []

    def report(_: Progress) -> None:
        pods.append(client.pod_name(NAMESPACE, "alice"))

    waiting = asyncio.to_thread(
        client.wait_ready, NAMESPACE, "alice", timeout=DEADLOCK, on_progress=report
    )
    await asyncio.wait_for(waiting, DEADLOCK)

    assert pods == ["alice"]


async def test_reports_reach_a_plain_progress_callback_one_at_a_time_in_order(
    client: SandboxClient, emulator: KubeEmulator
) -> None:
    await asyncio.to_thread(client.ensure, NAMESPACE, "alice", user_id=USER_ID)
    phases: list[str] = []
    running = threading.Lock()
    proceed = threading.Event()

    def report(progress: Progress) -> None:
        assert running.acquire(blocking=False), "a report began before the last one ended"
        try:
            phases.append(progress.phase or "")
            proceed.wait(DEADLOCK)  # held until the test has written every status
        finally:
            running.release()

    waiting = asyncio.create_task(
        asyncio.to_thread(
            client.wait_ready, NAMESPACE, "alice", timeout=DEADLOCK, on_progress=report
        )
    )
    await eventually(lambda: phases, what="the first report")
    write_status(emulator, "alice", "Pending")
    write_status(emulator, "alice", "Provisioning")
    write_status(emulator, "alice", "Ready", all_true())
    proceed.set()
    await asyncio.wait_for(waiting, DEADLOCK)

    assert phases[-1] == "Ready"
    assert phases == sorted(phases, key=["", "Pending", "Provisioning", "Ready"].index)


async def test_an_async_progress_callback_calling_the_sync_client_gets_an_error_not_a_deadlock(
    client: SandboxClient,
) -> None:
    await asyncio.to_thread(client.ensure, NAMESPACE, "alice", user_id=USER_ID)

    async def report(_: Progress) -> None:
        client.pod_name(NAMESPACE, "alice")

    waiting = asyncio.to_thread(
        client.wait_ready, NAMESPACE, "alice", timeout=DEADLOCK, on_progress=report
    )
    with pytest.raises(SandboxClientError, match=r"pod_name\(\).*own thread"):
        await asyncio.wait_for(waiting, DEADLOCK)

    assert client.aio.requests["watch"] == 0, "failed at the first report, before watching"


async def test_an_async_progress_callback_may_await_the_clients_aio_methods(
    client: SandboxClient, emulator: KubeEmulator
) -> None:
    await asyncio.to_thread(client.ensure, NAMESPACE, "alice", user_id=USER_ID)
    write_status(emulator, "alice", "Ready", all_true(), podName="alice", podUID="u1")
    pods: list[str | None] = []

    async def report(_: Progress) -> None:
        pods.append(await client.aio.pod_name(NAMESPACE, "alice"))

    await asyncio.to_thread(client.wait_ready, NAMESPACE, "alice", timeout=30, on_progress=report)

    assert pods == ["alice"]


async def test_closing_the_sync_client_from_an_async_progress_callback_is_refused(
    client: SandboxClient,
) -> None:
    await asyncio.to_thread(client.ensure, NAMESPACE, "alice", user_id=USER_ID)

    async def report(_: Progress) -> None:
        client.close()

    waiting = asyncio.to_thread(
        client.wait_ready, NAMESPACE, "alice", timeout=DEADLOCK, on_progress=report
    )
    with pytest.raises(SandboxClientError, match=r"close\(\).*own thread"):
        await asyncio.wait_for(waiting, DEADLOCK)


async def test_close_ends_the_calls_other_threads_are_making_with_a_client_error(
    client: SandboxClient,
) -> None:
    await asyncio.to_thread(client.ensure, NAMESPACE, "alice", user_id=USER_ID)
    outcomes: list[BaseException | None] = []

    def wait() -> None:
        try:
            client.wait_ready(NAMESPACE, "alice", timeout=600)
            outcomes.append(None)
        except BaseException as exc:
            outcomes.append(exc)

    waiters = [threading.Thread(target=wait) for _ in range(2)]
    for waiter in waiters:
        waiter.start()
    await eventually(lambda: client.aio.requests["watch"] >= 2, what="both waits watching")

    await asyncio.wait_for(asyncio.to_thread(client.close), DEADLOCK)
    for waiter in waiters:
        await asyncio.to_thread(waiter.join, DEADLOCK)

    assert not any(waiter.is_alive() for waiter in waiters)
    assert len(outcomes) == 2
    for outcome in outcomes:
        assert isinstance(outcome, SandboxClientError)
        assert "closed while this call was running" in str(outcome)
    with pytest.raises(SandboxClientError, match="is closed"):
        client.status(NAMESPACE, "alice")
