"""What a failed exec call leaves behind, and when the pod it goes to is checked.

A failed delivery waits for the sandbox's next pass (days, while it sleeps), so the error
must not keep what the pod printed: the agent decides how much that is, up to the call's
cap, in every sandbox at once. And a call may wait for one of the session's connections:
the pod it names is checked once it holds one, not only before it waited."""

from __future__ import annotations

import asyncio
import gc
import types

import kopf
import pytest

from craft_operator.kube.client import KubeClient
from craft_operator.kube.exec import ExecError, ExecOutputTooLargeError, ExecTimeoutError
from craft_operator.kube.exec_aiohttp import AiohttpExec
from craft_operator.reconciler.pod_guard import GuardedExec, PodChangedError
from tests.support.exec_api import FakeApiServer

pytestmark = [pytest.mark.unit]

#: What a kept error may hold of the pod's output at most (a delivery keeps 64 KiB of it).
KEPT = 64 * 1024
#: About a megabyte printed, under the call's cap.
PRINTED = 900_000
LIVES_ANYWAY = (type, types.ModuleType, types.FunctionType, asyncio.AbstractEventLoop)


def largest_buffer_held(root: object) -> int:
    """The size of the largest bytes-like object reachable from ``root`` through frames,
    their locals and callers: not through what lives anyway (the event loop, a function's
    and a module's globals)."""
    seen: set[int] = set()
    stack, largest = [root], 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, LIVES_ANYWAY):
            continue
        seen.add(id(obj))
        if isinstance(obj, bytes | bytearray | memoryview):
            largest = max(largest, len(obj))
        elif isinstance(obj, types.FrameType):
            stack.extend([*obj.f_locals.values(), obj.f_back])
        else:
            stack.extend(gc.get_referents(obj))
    return largest


async def failure_of(transport: AiohttpExec, script: str, seconds: float, cap: int) -> ExecError:
    """What the call raised, as a detached delivery's task keeps it."""
    argv = ["sh", "-c", script]
    call = asyncio.create_task(
        transport.run(
            "ns", "pod", "main", argv, stdin=b"t\n", timeout=seconds, max_output_bytes=cap
        )
    )
    await asyncio.wait({call})
    error = call.exception()
    assert isinstance(error, ExecError)
    return error


async def test_a_call_that_timed_out_keeps_nothing_of_what_the_pod_printed(
    transport: AiohttpExec,
) -> None:
    script = f"head -c {PRINTED} /dev/zero | tr '\\0' x >&2; sleep 30"
    error = await failure_of(transport, script, seconds=3.0, cap=2 * PRINTED)
    assert isinstance(error, ExecTimeoutError)
    gc.collect()
    assert largest_buffer_held(error) <= KEPT


async def test_a_call_that_printed_over_its_cap_keeps_nothing_of_it(
    transport: AiohttpExec,
) -> None:
    script = f"head -c {2 * PRINTED} /dev/zero | tr '\\0' x >&2; sleep 30"
    error = await failure_of(transport, script, seconds=30.0, cap=PRINTED)
    assert isinstance(error, ExecOutputTooLargeError)
    gc.collect()
    assert largest_buffer_held(error) <= KEPT


async def test_a_call_that_waited_for_a_connection_checks_its_pod_once_it_holds_one(
    api_server: FakeApiServer,
) -> None:
    kube = KubeClient(request_timeout=10, max_streams=1)
    kube.configure(kopf.ConnectionInfo(server=f"http://127.0.0.1:{api_server.port}", insecure=True))
    transport = AiohttpExec(kube)
    try:
        busy = asyncio.create_task(transport.run("ns", "other", "main", ["sleep", "1"], timeout=30))
        await api_server.started.wait()  # the session's one connection is taken
        replaced = False

        def same_pod() -> None:
            if replaced:
                raise PodChangedError("pod alice is gone or was replaced; nothing was run in it")

        delivery = asyncio.create_task(
            GuardedExec(transport, same_pod).run(
                "ns", "alice", "main", ["echo", "alice's PAT"], timeout=30
            )
        )
        await asyncio.sleep(0.2)
        replaced = True  # a namesake's pod takes the name while the delivery waits
        await busy
        with pytest.raises(PodChangedError):
            await delivery
        assert ["echo", "alice's PAT"] not in api_server.requests
    finally:
        await kube.close()
