"""Specification of the operator's own watch streams (the children's events): against the
KMock emulator, and against a stand-in server for answers the emulator never gives."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp.web
import kopf
import pytest
from kmock._internal import rendering

from craft_operator.kube.client import CONFIGMAPS, KubeClient
from craft_operator.kube.watch import WatchStream
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.unit.kube.conftest import NAMESPACE, configmap

pytestmark = pytest.mark.unit

MANAGED = "app.kubernetes.io/managed-by=craft-operator"
LABELS = {"app.kubernetes.io/managed-by": "craft-operator"}


class Seen:
    """The events a stream handed over, as (type, name, data)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, str]]] = []
        self.changed = asyncio.Event()

    def __call__(self, kind: str, obj: dict[str, Any]) -> None:
        self.events.append((kind, obj["metadata"]["name"], dict(obj.get("data") or {})))
        self.changed.set()

    async def until(self, count: int) -> None:
        async with asyncio.timeout(10):
            while len(self.events) < count:
                self.changed.clear()
                await self.changed.wait()


class Delays:
    """A backoff that records the delays asked for and waits almost nothing."""

    def __init__(self) -> None:
        self.failures: list[int] = []

    def __call__(self, failures: int) -> float:
        self.failures.append(failures)
        return 0.01


async def running(stream: WatchStream) -> asyncio.Task[None]:
    task = asyncio.create_task(stream.run())
    await asyncio.sleep(0)
    return task


async def stopped(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def watch_requests(emulator: KubeEmulator) -> list[rendering.Request]:
    return [r for r in emulator.served if r.params.get("watch") in ("true", "1")]


# -- against the emulator ---------------------------------------------------------------


async def test_a_stream_starts_with_every_existing_object_then_follows_every_change(
    emulator: KubeEmulator, kube: KubeClient
) -> None:
    emulator.create("v1/configmaps", configmap("a", LABELS, v="1"))
    emulator.create("v1/configmaps", configmap("b", LABELS, v="1"))
    emulator.create("v1/configmaps", configmap("not-ours", v="1"))
    seen = Seen()
    task = await running(WatchStream(kube, CONFIGMAPS, NAMESPACE, seen, label_selector=MANAGED))
    await seen.until(2)
    emulator.patch("v1/configmaps", NAMESPACE, "a", {"data": {"v": "2"}})
    emulator.remove("v1/configmaps", NAMESPACE, "b")
    await seen.until(4)
    await stopped(task)

    assert seen.events == [
        ("ADDED", "a", {"v": "1"}),
        ("ADDED", "b", {"v": "1"}),
        ("MODIFIED", "a", {"v": "2"}),
        ("DELETED", "b", {"v": "1"}),
    ]


async def test_a_watch_the_server_ends_is_resumed_where_it_was_without_replays_or_losses(
    emulator: KubeEmulator, kube: KubeClient
) -> None:
    seen = Seen()
    stream = WatchStream(kube, CONFIGMAPS, NAMESPACE, seen, server_timeout=1)
    task = await running(stream)
    for index in range(3):
        emulator.create("v1/configmaps", configmap(f"c{index}", LABELS))
        await seen.until(index + 1)
        await asyncio.sleep(1.2)  # the server ends the watch; the next resumes
    await stopped(task)

    assert [name for _, name, _ in seen.events] == ["c0", "c1", "c2"]
    resumed = [r.params.get("resourceVersion") for r in watch_requests(emulator)]
    assert resumed[0] is None
    assert len(resumed) >= 3
    assert all(resumed[1:])


async def test_a_cut_connection_is_retried_and_resumed(
    emulator: KubeEmulator, kube: KubeClient
) -> None:
    seen, delays = Seen(), Delays()
    stream = WatchStream(kube, CONFIGMAPS, NAMESPACE, seen, backoff=delays)
    task = await running(stream)
    emulator.create("v1/configmaps", configmap("before", LABELS))
    await seen.until(1)
    assert emulator.cut_watches() == 1
    await asyncio.sleep(0.1)
    emulator.create("v1/configmaps", configmap("after", LABELS))
    await seen.until(2)
    await stopped(task)

    assert [name for _, name, _ in seen.events] == ["before", "after"]
    assert stream.watches >= 2


def answer_watches_with(
    status: int, times: int
) -> tuple[Callable[[rendering.Request], Awaitable[aiohttp.web.StreamResponse | None]], list[int]]:
    """A hook answering the next ``times`` watch requests with ``status``."""
    answered: list[int] = []

    async def hook(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        if request.params.get("watch") not in ("true", "1") or len(answered) >= times:
            return None
        answered.append(status)
        body = {"kind": "Status", "apiVersion": "v1", "code": status, "reason": "Refused"}
        return aiohttp.web.json_response(body, status=status)

    return hook, answered


async def test_an_expired_version_lists_afresh_and_says_what_was_deleted_meanwhile(
    emulator: KubeEmulator, kube: KubeClient
) -> None:
    """Events were missed: the list shows what is there, and what is no longer there is
    said DELETED (with the list's version), then the watch goes on from the list."""
    seen = Seen()
    stream = WatchStream(
        kube, CONFIGMAPS, NAMESPACE, seen, label_selector=MANAGED, backoff=Delays()
    )
    emulator.create("v1/configmaps", configmap("kept", LABELS))
    emulator.create("v1/configmaps", configmap("gone", LABELS))
    task = await running(stream)
    await seen.until(2)
    hook, answered = answer_watches_with(410, times=1)
    emulator.before_request.append(hook)
    emulator.before_request.insert(0, deleting_on_first_watch(emulator, "gone"))
    emulator.cut_watches()
    await seen.until(4)
    emulator.create("v1/configmaps", configmap("later", LABELS))
    await seen.until(5)
    await stopped(task)

    assert answered == [410]
    assert seen.events[2:] == [
        ("ADDED", "kept", {}),
        ("DELETED", "gone", {}),
        ("ADDED", "later", {}),
    ]
    last_watch = watch_requests(emulator)[-1].params
    assert last_watch.get("resourceVersion")  # from the list, not from scratch


def deleting_on_first_watch(emulator: KubeEmulator, name: str) -> Any:
    """A hook that deletes ``name`` as the stream reconnects: a deletion no watch sees."""
    done: list[bool] = []

    async def hook(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        if request.params.get("watch") in ("true", "1") and not done:
            done.append(True)
            emulator.remove("v1/configmaps", NAMESPACE, name)
        return None

    return hook


async def test_a_refused_watch_is_retried_after_a_growing_backoff(
    emulator: KubeEmulator, kube: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    hook, answered = answer_watches_with(403, times=3)
    emulator.before_request.append(hook)
    emulator.create("v1/configmaps", configmap("a", LABELS))
    seen, delays = Seen(), Delays()
    task = await running(WatchStream(kube, CONFIGMAPS, NAMESPACE, seen, backoff=delays))
    await seen.until(1)
    await stopped(task)

    assert answered == [403, 403, 403]
    assert delays.failures == [1, 2, 3]
    assert "watch of configmaps in craft-sandboxes failed (ApiError" in caplog.text


async def test_a_failing_handler_is_logged_and_neither_stops_nor_replays_the_stream(
    emulator: KubeEmulator, kube: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    seen = Seen()

    def handler(kind: str, obj: dict[str, Any]) -> None:
        seen(kind, obj)
        if obj["metadata"]["name"] == "bad":
            raise RuntimeError("a bug")

    stream = WatchStream(kube, CONFIGMAPS, NAMESPACE, handler)
    task = await running(stream)
    emulator.create("v1/configmaps", configmap("bad", LABELS))
    emulator.create("v1/configmaps", configmap("good", LABELS))
    await seen.until(2)
    await asyncio.sleep(0.1)
    await stopped(task)

    assert [name for _, name, _ in seen.events] == ["bad", "good"]
    assert stream.watches == 1
    assert "the ADDED event's handler failed" in caplog.text


# -- against a stand-in server -----------------------------------------------------------

Answer = Callable[[aiohttp.web.Request], Awaitable[aiohttp.web.StreamResponse]]


@dataclass
class StandIn:
    """A server whose watch answers the test lists, one per request (then it stalls until
    it shuts down), and the operator's client bound to it."""

    kube: KubeClient
    answers: list[Answer] = field(default_factory=list)
    received: list[aiohttp.web.Request] = field(default_factory=list)
    closing: asyncio.Event = field(default_factory=asyncio.Event)

    def streaming(self, *events: dict[str, Any], then_stall: bool = False) -> Answer:
        """An answer streaming ``events`` (then holding the stream open)."""

        async def answer(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
            response = aiohttp.web.StreamResponse()
            await response.prepare(request)
            for event in events:
                await response.write(json.dumps(event).encode() + b"\n")
            if then_stall:
                await self.closing.wait()
            return response

        return answer

    def versions_asked(self) -> list[str | None]:
        return [request.query.get("resourceVersion") for request in self.received]


@pytest.fixture
async def stand_in(unused_tcp_port: int) -> AsyncIterator[StandIn]:
    kube = KubeClient(request_timeout=5)
    kube.configure(kopf.ConnectionInfo(server=f"http://127.0.0.1:{unused_tcp_port}"))
    server = StandIn(kube)

    async def serve(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        server.received.append(request)
        if server.answers:
            return await server.answers.pop(0)(request)
        await server.closing.wait()
        return aiohttp.web.Response(status=503)

    app = aiohttp.web.Application()
    app.router.add_route("GET", "/{tail:.*}", serve)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    await aiohttp.web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    yield server
    server.closing.set()
    await kube.close()
    await runner.cleanup()


def cm_event(kind: str, name: str, version: str) -> dict[str, Any]:
    obj = configmap(name)
    obj["metadata"]["resourceVersion"] = version
    return {"type": kind, "object": obj}


async def until_asked(server: StandIn, count: int) -> None:
    await eventually(lambda: len(server.received) >= count, what=f"{count} watch requests")


async def test_a_bookmark_moves_the_version_and_is_no_event(stand_in: StandIn) -> None:
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "42"}}}
    stand_in.answers.append(stand_in.streaming(cm_event("ADDED", "a", "10"), bookmark))
    seen = Seen()
    task = await running(WatchStream(stand_in.kube, CONFIGMAPS, NAMESPACE, seen))
    await seen.until(1)
    await until_asked(stand_in, 2)
    await stopped(task)

    assert seen.events == [("ADDED", "a", {})]
    assert stand_in.versions_asked()[:2] == [None, "42"]


async def test_an_expired_error_event_lists_afresh_and_watches_on_from_the_list(
    stand_in: StandIn,
) -> None:
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}

    async def listing(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        relisted = cm_event("ADDED", "a", "90")["object"]
        return aiohttp.web.json_response(
            {"kind": "ConfigMapList", "metadata": {"resourceVersion": "95"}, "items": [relisted]}
        )

    stand_in.answers += [
        stand_in.streaming(cm_event("ADDED", "a", "10"), gone),
        listing,
        stand_in.streaming(cm_event("MODIFIED", "a", "96")),
    ]
    seen, delays = Seen(), Delays()
    stream = WatchStream(stand_in.kube, CONFIGMAPS, NAMESPACE, seen, backoff=delays)
    task = await running(stream)
    await seen.until(3)
    await stopped(task)

    assert [kind for kind, _, _ in seen.events] == ["ADDED", "ADDED", "MODIFIED"]
    assert [r.query.get("watch") for r in stand_in.received[:3]] == ["true", None, "true"]
    assert stand_in.versions_asked()[:3] == [None, None, "95"]
    assert delays.failures == []  # no failure: no backoff


async def test_a_silent_stream_is_taken_as_stalled_and_reopened(
    stand_in: StandIn, caplog: pytest.LogCaptureFixture
) -> None:
    stand_in.answers += [
        stand_in.streaming(cm_event("ADDED", "a", "10"), then_stall=True),
        stand_in.streaming(cm_event("MODIFIED", "a", "11")),
    ]
    seen, delays = Seen(), Delays()
    stream = WatchStream(
        stand_in.kube, CONFIGMAPS, NAMESPACE, seen, client_timeout=0.3, backoff=delays
    )
    task = await running(stream)
    await seen.until(2)
    await stopped(task)

    assert [kind for kind, _, _ in seen.events] == ["ADDED", "MODIFIED"]
    assert stand_in.versions_asked()[:2] == [None, "10"]
    assert delays.failures == [1]
    assert "TimeoutError" in caplog.text


async def test_a_garbled_line_is_a_failure_retried_from_the_last_version(
    stand_in: StandIn,
) -> None:
    async def garbled(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        response = aiohttp.web.StreamResponse()
        await response.prepare(request)
        await response.write(json.dumps(cm_event("ADDED", "a", "10")).encode() + b"\n{not json\n")
        return response

    stand_in.answers += [garbled, stand_in.streaming(cm_event("MODIFIED", "a", "11"))]
    seen, delays = Seen(), Delays()
    task = await running(WatchStream(stand_in.kube, CONFIGMAPS, NAMESPACE, seen, backoff=delays))
    await seen.until(2)
    await stopped(task)

    assert [kind for kind, _, _ in seen.events] == ["ADDED", "MODIFIED"]
    assert delays.failures == [1]
    assert stand_in.versions_asked()[:2] == [None, "10"]


async def test_a_stream_waits_for_the_login() -> None:
    kube = KubeClient()
    seen = Seen()
    task = await running(WatchStream(kube, CONFIGMAPS, NAMESPACE, seen))
    await asyncio.sleep(0.05)
    assert not task.done()
    await stopped(task)
    await kube.close()
