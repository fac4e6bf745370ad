"""Specification of the operator's own watch streams (the children's events): against the
KMock emulator, and against a stand-in server for answers the emulator never gives."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp.web
import kopf
import pytest
from kmock._internal import rendering

from craft_operator.kube.cache import ObjectCache
from craft_operator.kube.client import CONFIGMAPS, KubeClient
from craft_operator.kube.watch import WatchStream
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.unit.kube.conftest import NAMESPACE, configmap

pytestmark = pytest.mark.unit

MANAGED = "app.kubernetes.io/managed-by=craft-operator"
LABELS = {"app.kubernetes.io/managed-by": "craft-operator"}


class Seen:
    """A consumer: the events a stream handed over, as (type, name, data), and the objects
    it holds from them (plus any it was given otherwise, as the cache holds its writes)."""

    def __init__(self, *held: str) -> None:
        self.events: list[tuple[str, str, dict[str, str]]] = []
        self.changed = asyncio.Event()
        self.held = {(NAMESPACE, name) for name in held}

    def __call__(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self.events.append((kind, meta["name"], dict(obj.get("data") or {})))
        key = (str(meta.get("namespace") or ""), meta["name"])
        if kind == "DELETED":
            self.held.discard(key)
        else:
            self.held.add(key)
        self.changed.set()

    def known(self) -> set[tuple[str, str]]:
        return set(self.held)

    def stream(self, kube: KubeClient, **options: Any) -> WatchStream:
        """A stream of the test namespace's ConfigMaps to this consumer."""
        return WatchStream(kube, CONFIGMAPS, NAMESPACE, self, known=self.known, **options)

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


def lists(emulator: KubeEmulator) -> list[rendering.Request]:
    return [r for r in emulator.served if r.method == "GET" and "watch" not in r.params]


async def test_a_stream_lists_every_existing_object_then_follows_every_change_from_the_list(
    emulator: KubeEmulator, kube: KubeClient
) -> None:
    emulator.create("v1/configmaps", configmap("a", LABELS, v="1"))
    emulator.create("v1/configmaps", configmap("b", LABELS, v="1"))
    emulator.create("v1/configmaps", configmap("not-ours", v="1"))
    seen = Seen()
    task = await running(seen.stream(kube, label_selector=MANAGED))
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
    assert len(lists(emulator)) == 1
    assert watch_requests(emulator)[0].params.get("resourceVersion")  # the list's


async def test_a_stream_with_a_selector_hands_over_only_what_it_selects_while_it_watches(
    emulator: KubeEmulator, kube: KubeClient
) -> None:
    """Not only its list: an object outside the selector (a pod whose managed-by label was
    removed, another tool's ConfigMap) created while it watches is never handed over."""
    seen = Seen()
    task = await running(seen.stream(kube, label_selector=MANAGED))
    await eventually(lambda: watch_requests(emulator), what="a watch")
    emulator.create("v1/configmaps", configmap("theirs"))
    emulator.create("v1/configmaps", configmap("ours", LABELS))
    await seen.until(1)
    await asyncio.sleep(0.2)
    await stopped(task)

    assert [name for _, name, _ in seen.events] == ["ours"]


async def test_a_stream_says_deleted_for_what_its_consumer_holds_and_the_list_has_not(
    emulator: KubeEmulator, kube: KubeClient
) -> None:
    """The consumer may hold objects the stream never gave it (the cache keeps what the
    operator wrote): the list is the truth, and what it lacks is gone."""
    emulator.create("v1/configmaps", configmap("there", LABELS))
    seen = Seen("written-then-deleted")
    task = await running(seen.stream(kube))
    await seen.until(2)
    await stopped(task)

    assert [(kind, name) for kind, name, _ in seen.events] == [
        ("ADDED", "there"),
        ("DELETED", "written-then-deleted"),
    ]
    assert seen.held == {(NAMESPACE, "there")}


async def test_a_watch_the_server_ends_is_resumed_where_it_was_without_replays_or_losses(
    emulator: KubeEmulator, kube: KubeClient
) -> None:
    seen = Seen()
    task = await running(seen.stream(kube, server_timeout=1))
    for index in range(3):
        emulator.create("v1/configmaps", configmap(f"c{index}", LABELS))
        await seen.until(index + 1)
        await asyncio.sleep(1.2)  # the server ends the watch; the next resumes
    await stopped(task)

    assert [name for _, name, _ in seen.events] == ["c0", "c1", "c2"]
    resumed = [r.params.get("resourceVersion") for r in watch_requests(emulator)]
    assert len(resumed) >= 3
    assert all(resumed)
    assert len(lists(emulator)) == 1


async def test_a_cut_connection_is_retried_and_resumed(
    emulator: KubeEmulator, kube: KubeClient
) -> None:
    seen, delays = Seen(), Delays()
    stream = seen.stream(kube, backoff=delays)
    task = await running(stream)
    await eventually(lambda: watch_requests(emulator), what="a watch")
    emulator.create("v1/configmaps", configmap("before", LABELS))
    await seen.until(1)
    assert emulator.cut_watches() == 1
    await asyncio.sleep(0.1)
    emulator.create("v1/configmaps", configmap("after", LABELS))
    await seen.until(2)
    await stopped(task)

    assert [name for _, name, _ in seen.events] == ["before", "after"]
    assert stream.watches >= 2
    assert stream.lists == 1


async def test_watches_cut_after_the_server_answered_them_never_grow_the_backoff(
    emulator: KubeEmulator, kube: KubeClient
) -> None:
    """A connection cut every few seconds (a flaky load balancer) is not a server refusing
    the stream: each reconnection waits the first step, not a minute after six cuts."""
    seen, delays = Seen(), Delays()
    stream = seen.stream(kube, backoff=delays)
    task = await running(stream)
    for index in range(4):
        await eventually(lambda n=index: len(watch_requests(emulator)) > n, what="a watch")
        emulator.create("v1/configmaps", configmap(f"c{index}", LABELS))
        await seen.until(index + 1)
        assert emulator.cut_watches() == 1
    await eventually(lambda: len(delays.failures) == 4, what="four reconnections")
    await stopped(task)

    assert delays.failures == [1, 1, 1, 1]
    assert stream.lists == 1


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
    stream = seen.stream(kube, label_selector=MANAGED, backoff=Delays())
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
    assert stream.lists == 2
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
    seen, delays = Seen(), Delays()
    stream = seen.stream(kube, backoff=delays)
    task = await running(stream)
    await eventually(lambda: stream.watches >= 4, what="a fourth watch")
    emulator.create("v1/configmaps", configmap("a", LABELS))
    await seen.until(1)
    await stopped(task)

    assert answered == [403, 403, 403]
    assert delays.failures == [1, 2, 3]
    assert stream.lists == 1
    assert "watch of configmaps in craft-sandboxes failed (ApiError" in caplog.text


async def test_a_failing_handler_is_logged_and_the_stream_lists_afresh_when_its_watch_ends(
    emulator: KubeEmulator, kube: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The event the consumer failed on is lost to it: the next list brings the object
    again, but only after the watch (a consumer failing on every list must not loop)."""
    seen = Seen()
    failures = [1]

    def handler(kind: str, obj: dict[str, Any]) -> None:
        seen(kind, obj)
        if obj["metadata"]["name"] == "bad" and failures:
            failures.pop()
            raise RuntimeError("a bug")

    stream = WatchStream(kube, CONFIGMAPS, NAMESPACE, handler, known=seen.known, server_timeout=1)
    task = await running(stream)
    await eventually(lambda: stream.watches, what="a watch")
    emulator.create("v1/configmaps", configmap("bad", LABELS))
    emulator.create("v1/configmaps", configmap("good", LABELS))
    await seen.until(2)
    assert stream.lists == 1  # not at once
    await seen.until(4)
    await stopped(task)

    assert [(kind, name) for kind, name, _ in seen.events] == [
        ("ADDED", "bad"),
        ("ADDED", "good"),
        ("ADDED", "bad"),
        ("ADDED", "good"),
    ]
    assert stream.lists == 2
    said = "the ADDED event's handler failed; the stream lists afresh when its watch ends"
    assert said in caplog.text


# -- against a stand-in server -----------------------------------------------------------

Answer = Callable[[aiohttp.web.Request], Awaitable[aiohttp.web.StreamResponse]]


@dataclass
class StandIn:
    """A server answering lists and watches with the answers the test gives, one per
    request (then stalling until it shuts down), and the operator's client bound to it."""

    kube: KubeClient
    answers: list[Answer] = field(default_factory=list)
    received: list[aiohttp.web.Request] = field(default_factory=list)
    closing: asyncio.Event = field(default_factory=asyncio.Event)

    def streaming(self, *events: dict[str, Any], then_stall: bool = False) -> Answer:
        """A watch's answer streaming ``events`` (then holding the stream open)."""

        async def answer(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
            response = aiohttp.web.StreamResponse()
            await response.prepare(request)
            for event in events:
                await response.write(json.dumps(event).encode() + b"\n")
            if then_stall:
                await self.closing.wait()
            return response

        return answer

    @staticmethod
    def listing(version: str, *items: dict[str, Any], token: str = "") -> Answer:
        """A list's answer (one page; more to come if ``token``)."""

        async def answer(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
            meta = {"resourceVersion": version, **({"continue": token} if token else {})}
            body = {"kind": "ConfigMapList", "metadata": meta, "items": list(items)}
            return aiohttp.web.json_response(body)

        return answer

    @staticmethod
    def status(code: int, message: str) -> Answer:
        """A refusal."""

        async def answer(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
            body = {"kind": "Status", "code": code, "reason": "Refused", "message": message}
            return aiohttp.web.json_response(body, status=code)

        return answer

    async def stream_until(self, events: int, **options: Any) -> tuple[Seen, Delays, WatchStream]:
        """Run a stream of the test namespace against this server until it has handed over
        ``events`` events; what it handed over, the backoffs it asked for, and the stream."""
        seen, delays = Seen(), Delays()
        stream = seen.stream(self.kube, backoff=delays, **options)
        task = await running(stream)
        await seen.until(events)
        await stopped(task)
        return seen, delays, stream

    def versions_asked(self) -> list[str | None]:
        return [request.query.get("resourceVersion") for request in self.received]

    def watched(self) -> list[str | None]:
        return [request.query.get("watch") for request in self.received]


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


def cm(name: str, version: str) -> dict[str, Any]:
    obj = configmap(name)
    obj["metadata"]["resourceVersion"] = version
    return obj


def cm_event(kind: str, name: str, version: str) -> dict[str, Any]:
    return {"type": kind, "object": cm(name, version)}


async def until_asked(server: StandIn, count: int) -> None:
    await eventually(lambda: len(server.received) >= count, what=f"{count} requests")


async def test_a_bookmark_moves_the_version_and_is_no_event(stand_in: StandIn) -> None:
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "42"}}}
    stand_in.answers += [
        stand_in.listing("5"),
        stand_in.streaming(cm_event("ADDED", "a", "10"), bookmark),
    ]
    seen = Seen()
    task = await running(seen.stream(stand_in.kube))
    await seen.until(1)
    await until_asked(stand_in, 3)
    await stopped(task)

    assert seen.events == [("ADDED", "a", {})]
    assert stand_in.watched()[:3] == [None, "true", "true"]
    assert stand_in.versions_asked()[:3] == [None, "5", "42"]


async def test_watches_ask_the_server_to_end_them_at_jittered_times(stand_in: StandIn) -> None:
    """Streams started together must not all reconnect together, for ever after."""
    stand_in.answers += [stand_in.listing("5")] + [stand_in.streaming() for _ in range(8)]
    seen = Seen()
    task = await running(seen.stream(stand_in.kube, server_timeout=100, backoff=Delays()))
    await until_asked(stand_in, 9)
    await stopped(task)

    asked = [int(r.query["timeoutSeconds"]) for r in stand_in.received[1:9]]
    assert all(100 <= seconds <= 125 for seconds in asked)
    assert len(set(asked)) > 1


async def test_an_expired_error_event_lists_afresh_and_watches_on_from_the_list(
    stand_in: StandIn,
) -> None:
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    stand_in.answers += [
        stand_in.listing("5"),
        stand_in.streaming(cm_event("ADDED", "a", "10"), gone),
        stand_in.listing("95", cm("a", "90")),
        stand_in.streaming(cm_event("MODIFIED", "a", "96")),
    ]
    seen, delays, _stream = await stand_in.stream_until(3)

    assert [kind for kind, _, _ in seen.events] == ["ADDED", "ADDED", "MODIFIED"]
    assert stand_in.watched()[:4] == [None, "true", None, "true"]
    assert stand_in.versions_asked()[:4] == [None, "5", None, "95"]
    assert delays.failures == []  # no failure: no backoff


async def test_a_list_whose_version_is_refused_at_once_is_listed_again_after_a_backoff(
    stand_in: StandIn,
) -> None:
    """A server expiring every list's version as soon as it is watched (or a load balancer
    alternating between servers that are out of step) would be listed as fast as the loop
    turns."""
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    stand_in.answers += [
        stand_in.listing("5"),
        stand_in.status(410, "too old resource version: 5 (9)"),
        stand_in.listing("9"),
        stand_in.streaming(gone),
        stand_in.listing("12"),
        stand_in.streaming(cm_event("ADDED", "a", "13")),
    ]
    _seen, delays, _stream = await stand_in.stream_until(1)

    assert delays.failures == [1, 2]
    assert stand_in.versions_asked()[:6] == [None, "5", None, "9", None, "12"]


async def test_a_version_too_large_for_the_server_is_watched_again_after_a_backoff(
    stand_in: StandIn,
) -> None:
    """A server behind the one the version came from answers 504: its cache catches up,
    so the same version is asked again (no list)."""
    stand_in.answers += [
        stand_in.listing("500"),
        stand_in.status(504, "Too large resource version: 500, current: 400"),
        stand_in.streaming(cm_event("ADDED", "a", "502")),
    ]
    _seen, delays, stream = await stand_in.stream_until(1)

    assert stand_in.versions_asked()[:3] == [None, "500", "500"]
    assert delays.failures == [1]
    assert stream.lists == 1


async def test_a_version_that_stays_too_large_is_listed_afresh(stand_in: StandIn) -> None:
    """etcd restored from a backup: the server will never have the version."""
    too_large = "Too large resource version: 900, current: 400"
    stand_in.answers += [
        stand_in.listing("900"),
        *(stand_in.status(504, too_large) for _ in range(3)),
        stand_in.listing("401", cm("a", "390")),
        stand_in.streaming(cm_event("MODIFIED", "a", "402")),
    ]
    _seen, delays, _stream = await stand_in.stream_until(2)

    assert stand_in.versions_asked()[:6] == [None, "900", "900", "900", None, "401"]
    assert delays.failures == [1, 2, 3]


async def test_a_list_whose_continue_token_expired_starts_over(stand_in: StandIn) -> None:
    stand_in.answers += [
        stand_in.listing("5", cm("a", "4"), token="page-2"),
        stand_in.status(410, "The provided continue parameter is too old"),
        stand_in.listing("9", cm("a", "4"), cm("b", "8")),
        stand_in.streaming(cm_event("ADDED", "c", "10")),
    ]
    seen, delays, _stream = await stand_in.stream_until(4)

    assert [name for _, name, _ in seen.events] == ["a", "a", "b", "c"]
    assert [r.query.get("continue") for r in stand_in.received[:3]] == [None, "page-2", None]
    assert stand_in.versions_asked()[3] == "9"
    assert delays.failures == [1]  # a failure like any other: backed off


async def test_a_watch_ended_at_once_without_a_line_is_a_failure_with_a_backoff(
    stand_in: StandIn,
) -> None:
    """A server (or proxy) ending every watch at once would otherwise be asked again and
    again, as fast as the loop turns."""
    stand_in.answers += [
        stand_in.listing("5"),
        stand_in.streaming(),
        stand_in.streaming(),
        stand_in.streaming(cm_event("ADDED", "a", "6")),
    ]
    _seen, delays, _stream = await stand_in.stream_until(1)

    assert delays.failures == [1, 2]
    assert stand_in.versions_asked()[:4] == [None, "5", "5", "5"]


async def test_quiet_watches_cut_after_the_server_held_them_open_never_grow_the_backoff(
    stand_in: StandIn,
) -> None:
    """A quiet namespace's watch held open, then cut (a proxy's idle timeout): the server
    answered it, so each cut waits the first step again, not a minute after six cuts."""
    stand_in.answers += [
        stand_in.listing("5"),
        stand_in.streaming(then_stall=True),
        stand_in.streaming(then_stall=True),
        stand_in.streaming(cm_event("ADDED", "a", "6")),
    ]
    # Silent for longer than a watch that ends at once (EMPTY_WATCH_SECONDS), then cut.
    _seen, delays, _stream = await stand_in.stream_until(1, client_timeout=1.2)

    assert delays.failures == [1, 1]
    assert stand_in.versions_asked()[:4] == [None, "5", "5", "5"]


async def test_a_watch_line_without_end_is_a_failure_and_never_held_whole(
    stand_in: StandIn, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever answers in the API server's place, a line longer than any object (etcd
    keeps 1.5 MiB at most) is given up past 8 MiB, not collected until memory runs out."""
    written: list[int] = []

    async def endless(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        response = aiohttp.web.StreamResponse()
        await response.prepare(request)
        piece = b"x" * (1024 * 1024)
        with contextlib.suppress(ConnectionError):
            for _ in range(64):
                await response.write(piece)
                written.append(len(piece))
        await stand_in.closing.wait()
        return response

    stand_in.answers += [
        stand_in.listing("5"),
        endless,
        stand_in.streaming(cm_event("ADDED", "a", "6")),
    ]
    seen, delays, _stream = await stand_in.stream_until(1)

    assert [name for _, name, _ in seen.events] == ["a"]
    assert delays.failures == [1]
    assert "a watch event longer than 8 MiB" in caplog.text
    assert sum(written) < 32 * 1024 * 1024, "the stream let go long before the 64 MiB"


async def test_a_silent_stream_is_taken_as_stalled_and_reopened(
    stand_in: StandIn, caplog: pytest.LogCaptureFixture
) -> None:
    stand_in.answers += [
        stand_in.listing("5"),
        stand_in.streaming(cm_event("ADDED", "a", "10"), then_stall=True),
        stand_in.streaming(cm_event("MODIFIED", "a", "11")),
    ]
    seen, delays, _stream = await stand_in.stream_until(2, client_timeout=0.3)

    assert [kind for kind, _, _ in seen.events] == ["ADDED", "MODIFIED"]
    assert stand_in.versions_asked()[:3] == [None, "5", "10"]
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

    stand_in.answers += [
        stand_in.listing("5"),
        garbled,
        stand_in.streaming(cm_event("MODIFIED", "a", "11")),
    ]
    seen, delays, _stream = await stand_in.stream_until(2)

    assert [kind for kind, _, _ in seen.events] == ["ADDED", "MODIFIED"]
    assert delays.failures == [1]
    assert stand_in.versions_asked()[:3] == [None, "5", "10"]


async def test_events_split_across_chunks_and_sharing_one_are_each_handed_over(
    stand_in: StandIn,
) -> None:
    lines = b"".join(
        json.dumps(cm_event("ADDED", name, str(10 + index))).encode() + b"\n"
        for index, name in enumerate("abc")
    )

    async def chunked(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        response = aiohttp.web.StreamResponse()
        await response.prepare(request)
        for start in range(0, len(lines), 7):
            await response.write(lines[start : start + 7])
            await asyncio.sleep(0)
        await response.write(json.dumps(cm_event("ADDED", "d", "20")).encode())  # no newline
        return response

    stand_in.answers += [stand_in.listing("5"), chunked]
    seen = Seen()
    task = await running(seen.stream(stand_in.kube))
    await seen.until(4)
    await stopped(task)

    assert [name for _, name, _ in seen.events] == ["a", "b", "c", "d"]


async def test_a_stream_waits_for_the_login() -> None:
    kube = KubeClient()
    seen = Seen()
    task = await running(seen.stream(kube))
    await asyncio.sleep(0.05)
    assert not task.done()
    await stopped(task)
    await kube.close()


def test_streams_cut_at_once_come_back_spread_out_not_in_step() -> None:
    from craft_operator.kube.watch import _default_backoff

    for failures, base in ((1, 1), (3, 4), (7, 60), (20, 60)):
        delays = {_default_backoff(failures) for _ in range(50)}
        assert all(0.75 * base <= delay <= 1.25 * base for delay in delays)
        assert len(delays) > 1


class Failing:
    """A stream's ``on_failing`` handler: whether it says its view is out of date now, and
    what it said, in order (the cache's staleness, which holds back pods, follows it)."""

    def __init__(self) -> None:
        self.said: list[bool] = []

    def __call__(self, failing: bool) -> None:
        self.said.append(failing)

    @property
    def now(self) -> bool:
        return bool(self.said) and self.said[-1]


GONE = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}

#: How a stream comes to a 410 before its relist.
TO_A_410: dict[str, Callable[[StandIn], list[Any]]] = {
    # A restarted API server answers the watch from the old version 200, then ERROR 410.
    "after an outage": lambda stand_in: [
        stand_in.status(503, "the API server restarts"),
        stand_in.streaming(GONE),
    ],
    # A routine 410: the watch fell behind etcd's compaction.
    "on a healthy stream": lambda stand_in: [
        stand_in.streaming(cm_event("ADDED", "other", "6"), GONE),
    ],
}


@pytest.mark.parametrize("to_a_410", TO_A_410.values(), ids=TO_A_410.keys())
async def test_a_410_keeps_the_view_out_of_date_until_the_relist_is_in(
    stand_in: StandIn, to_a_410: Callable[[StandIn], list[Any]]
) -> None:
    """Until the relist is in, what the stream holds may include objects deleted since (a
    NetworkPolicy whose absence would hold pods back), so the view is not current."""
    relist_asked, relist_may_answer = asyncio.Event(), asyncio.Event()

    async def slow_relist(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        relist_asked.set()
        await relist_may_answer.wait()
        return await stand_in.listing("20")(request)

    stand_in.answers += [
        stand_in.listing("5", cm("deleted-meanwhile", "4")),
        *to_a_410(stand_in),
        slow_relist,
        stand_in.streaming(then_stall=True),
    ]
    seen, failing = Seen(), Failing()
    task = await running(seen.stream(stand_in.kube, backoff=Delays(), on_failing=failing))
    async with asyncio.timeout(5):
        await relist_asked.wait()
    await asyncio.sleep(0.05)

    assert (NAMESPACE, "deleted-meanwhile") in seen.known(), "still held: the list is not in"
    assert failing.now, "so the view is not current"

    relist_may_answer.set()
    await eventually(lambda: not failing.now, what="current once relisted")
    assert seen.known() == set()
    await stopped(task)


def cached_stream(stand_in: StandIn, cache: ObjectCache) -> WatchStream:
    """A stream of the test namespace's ConfigMaps into ``cache``, as the operator's are."""

    def into_cache(kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            cache.remove("ConfigMap", obj)
        else:
            cache.put("ConfigMap", obj)

    return WatchStream(
        stand_in.kube,
        CONFIGMAPS,
        NAMESPACE,
        into_cache,
        known=lambda: cache.keys("ConfigMap", NAMESPACE),
        backoff=Delays(),
        list_begins=lambda: cache.list_begins("ConfigMap", NAMESPACE),
        list_ends=lambda version: cache.list_ends("ConfigMap", NAMESPACE, version),
        list_event=lambda: cache.list_event("ConfigMap", NAMESPACE),
    )


async def test_what_a_list_lacks_leaves_the_cache_but_an_object_written_after_it_stays(
    stand_in: StandIn,
) -> None:
    """The cache holds the operator's own writes as they are answered: one written after
    the list was made (a pod created meanwhile) is not in the list, and is not gone."""
    cache = ObjectCache()
    cache.put("ConfigMap", cm("deleted-before", "4"))

    async def written_while_listed(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        cache.put("ConfigMap", cm("written-after", "9"))
        return await stand_in.listing("5")(request)

    stand_in.answers += [written_while_listed, stand_in.streaming(then_stall=True)]
    stream = cached_stream(stand_in, cache)
    task = await running(stream)
    await eventually(lambda: stream.lists == 1 and stream.watches == 1, what="the list")
    await stopped(task)

    assert cache.get("ConfigMap", NAMESPACE, "deleted-before") is None
    assert cache.get("ConfigMap", NAMESPACE, "written-after") is not None


async def test_after_etcd_is_restored_the_relist_replaces_the_cache_s_older_history(
    stand_in: StandIn,
) -> None:
    """etcd restored from a backup: the versions go back. The relist is the truth: what it
    lacks is gone though the cache's copy is newer, what it has is as it has it, and a name
    deleted in the lost history may be made anew."""
    cache = ObjectCache()
    too_large = "Too large resource version: 901, current: 400"
    stand_in.answers += [
        stand_in.listing("900", cm("restored", "880"), cm("ghost", "890")),
        stand_in.streaming(cm_event("DELETED", "remade", "901")),
        *(stand_in.status(504, too_large) for _ in range(3)),
        stand_in.listing("401", cm("restored", "390")),
        stand_in.streaming(then_stall=True),
    ]
    stream = cached_stream(stand_in, cache)
    task = await running(stream)
    await eventually(lambda: stream.lists == 2 and stream.watches == 5, what="the relist")
    await stopped(task)

    assert cache.get("ConfigMap", NAMESPACE, "ghost") is None
    restored = cache.get("ConfigMap", NAMESPACE, "restored")
    assert restored is not None
    assert restored["metadata"]["resourceVersion"] == "390"
    assert cache.put("ConfigMap", cm("remade", "405"))


async def test_a_watch_refused_for_its_credentials_has_them_read_again(
    stand_in: StandIn,
) -> None:
    """A rotated service-account token: the client reads its credentials again at once,
    not a minute later, while every watch of the operator is refused."""
    stand_in.answers += [stand_in.listing("5"), stand_in.status(401, "the token expired")]
    seen = Seen()
    task = await running(seen.stream(stand_in.kube, backoff=Delays()))
    await eventually(lambda: stand_in.kube.unauthorized.is_set(), what="asked to log in again")
    await stopped(task)


async def test_a_resumed_watch_is_current_only_once_what_it_missed_is_in(
    stand_in: StandIn,
) -> None:
    """The server's 200 comes before the events it replays from the version asked for, and
    a replay may take several reads: the view is whole once the watch has gone quiet."""
    answered, first, second = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def replaying(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        response = aiohttp.web.StreamResponse()
        await response.prepare(request)
        answered.set()
        await first.wait()
        await response.write(json.dumps(cm_event("MODIFIED", "other", "6")).encode() + b"\n")
        await second.wait()
        await response.write(json.dumps(cm_event("DELETED", "a", "7")).encode() + b"\n")
        await stand_in.closing.wait()
        return response

    stand_in.answers += [
        stand_in.listing("5", cm("a", "4"), cm("other", "4")),
        stand_in.status(503, "the API server restarts"),
        replaying,
    ]
    seen, failing = Seen(), Failing()
    # Quiet for 5 s, silence for 30: long beside the test's own steps on a loaded machine.
    stream = seen.stream(stand_in.kube, backoff=Delays(), on_failing=failing, replay=(5, 30, 60))
    task = await running(stream)
    async with asyncio.timeout(5):
        await answered.wait()
    await asyncio.sleep(0.05)
    assert failing.now, "answered, but what it missed is not in yet"

    first.set()
    await seen.until(3)  # the list's two, the replay's first
    await asyncio.sleep(0.05)
    assert failing.now, "one read of the replay in, another may follow"
    second.set()

    await eventually(lambda: not failing.now, what="current once the replay is in and quiet")
    assert seen.known() == {(NAMESPACE, "other")}
    await stopped(task)


async def test_a_resumed_watch_that_stays_silent_is_current_after_a_moment(
    stand_in: StandIn,
) -> None:
    """A quiet namespace has nothing to replay: its pods are held back a moment, no more."""
    stand_in.answers += [
        stand_in.listing("5", cm("a", "4")),
        stand_in.status(503, "the API server restarts"),
        stand_in.streaming(then_stall=True),
    ]
    seen, failing = Seen(), Failing()
    task = await running(seen.stream(stand_in.kube, backoff=Delays(), on_failing=failing))

    await eventually(lambda: failing.said == [True, False], what="current after the silence")
    assert seen.known() == {(NAMESPACE, "a")}
    await stopped(task)


async def test_a_resumed_watch_that_never_goes_quiet_is_current_at_the_limit(
    stand_in: StandIn,
) -> None:
    """A busy namespace's replay never ends in quiet: its pods are held back until the
    limit after the watch's answer, not for as long as its events keep coming."""

    async def busy(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        response = aiohttp.web.StreamResponse()
        await response.prepare(request)
        version = 10
        with contextlib.suppress(ConnectionError):
            while not stand_in.closing.is_set():
                event = cm_event("MODIFIED", "a", str(version))
                await response.write(json.dumps(event).encode() + b"\n")
                version += 1
                await asyncio.sleep(0.05)
        return response

    stand_in.answers += [
        stand_in.listing("5", cm("a", "4")),
        stand_in.status(503, "the API server restarts"),
        busy,
    ]
    seen, failing = Seen(), Failing()
    # Quiet for 2 s (never, at an event every 50 ms); at the latest 1 s after the answer.
    stream = seen.stream(stand_in.kube, backoff=Delays(), on_failing=failing, replay=(2, 30, 1))
    task = await running(stream)

    await eventually(lambda: failing.said == [True, False], within=5, what="current at the limit")
    assert len(seen.events) > 2, "while the events go on"
    await stopped(task)


async def test_a_relist_makes_the_view_current_at_once(stand_in: StandIn) -> None:
    """The list is the whole view: pods held back by a 410 go on as soon as it is in, not
    once the watch after it has gone quiet."""
    stand_in.answers += [
        stand_in.listing("5", cm("a", "4")),
        stand_in.streaming(cm_event("ADDED", "other", "6"), GONE),
        stand_in.listing("20", cm("a", "4")),
        stand_in.streaming(then_stall=True),
    ]
    seen, failing = Seen(), Failing()
    # The silent watch after the relist would count as current only after 30 s.
    stream = seen.stream(stand_in.kube, backoff=Delays(), on_failing=failing, replay=(5, 30, 60))
    task = await running(stream)

    await eventually(lambda: failing.said == [True, False], within=5, what="current once listed")
    await eventually(lambda: stream.watches == 2, what="the watch after the relist")
    assert seen.known() == {(NAMESPACE, "a")}
    await stopped(task)


async def test_a_resumed_watch_that_ends_after_its_replay_leaves_the_view_current(
    stand_in: StandIn,
) -> None:
    """The server ended the watch after what it replayed: nothing can follow it, so the
    view is whole then, not only once the next watch has gone quiet."""
    stand_in.answers += [
        stand_in.listing("5", cm("a", "4")),
        stand_in.status(503, "the API server restarts"),
        stand_in.streaming(cm_event("DELETED", "a", "6")),
        stand_in.streaming(then_stall=True),
    ]
    seen, failing = Seen(), Failing()
    # Quiet for 5 s, silence for 30: neither makes it current within the test.
    stream = seen.stream(stand_in.kube, backoff=Delays(), on_failing=failing, replay=(5, 30, 60))
    task = await running(stream)

    await eventually(lambda: failing.said == [True, False], within=5, what="current at its end")
    assert seen.known() == set()
    await stopped(task)
