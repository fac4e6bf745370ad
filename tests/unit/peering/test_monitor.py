"""The peering monitor switches the gate as the ClusterKopfPeering's records say.

The records are written into the emulated API server as kopf writes them; the monitor's
clock is a test clock, so that records expire without waiting.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp.web
import kmock
import kopf
import pytest
from kmock._internal import rendering

from craft_operator.kube.cache import ObjectCache
from craft_operator.kube.client import KubeClient
from craft_operator.peering.gate import ActivityGate
from craft_operator.peering.monitor import PeeringMonitor, check_interval
from craft_operator.peering.options import PeeringOptions
from craft_operator.reconciler.queue import WorkQueue
from tests.integration.conftest import declare_craft_resources
from tests.support.emulator import KubeEmulator

pytestmark = pytest.mark.unit

PEERINGS = kmock.resource("kopf.dev", "v1", "clusterkopfpeerings")
NAME, ME, PREFERRED = "craft-operator", "craft-operator-1", "craft-operator-0"
START = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = START
        #: How far the wall clock has been stepped (NTP) from the time that passed.
        self.wall_step = timedelta(0)

    def __call__(self) -> datetime:
        return self.now + self.wall_step

    def steady(self) -> float:
        return (self.now - START).total_seconds()


def keepalive(priority: int, seen: datetime, lifetime: int = 60) -> dict[str, Any]:
    return {"priority": priority, "lifetime": lifetime, "lastseen": seen.isoformat()}


def write_status(emulator: KubeEmulator, status: dict[str, Any]) -> None:
    emulator.patch(PEERINGS, None, NAME, {"status": status})


@pytest.fixture
async def monitor(
    emulator: KubeEmulator, kube: KubeClient
) -> AsyncIterator[tuple[PeeringMonitor, ActivityGate, Clock]]:
    """A monitor for replica ME (priority 99) over a standby gate, with a test clock."""
    declare_craft_resources(emulator)

    async def nothing(_: tuple[str, str]) -> None:
        return None

    queue: WorkQueue[tuple[str, str]] = WorkQueue(nothing, concurrency=1)
    gate = ActivityGate(kube=kube, cache=ObjectCache(), queue=queue)
    await gate.deactivate("starting")
    clock = Clock()
    options = PeeringOptions(name=NAME, priority=99, identity=ME, lifetime=60)
    yield (
        PeeringMonitor(
            kube=kube, gate=gate, options=options, identity=ME, clock=clock, steady=clock.steady
        ),
        gate,
        clock,
    )
    await queue.stop()


@pytest.fixture
def peering(emulator: KubeEmulator) -> None:
    emulator.create(
        PEERINGS,
        {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": NAME}},
    )


@pytest.mark.usefixtures("peering")
async def test_a_replica_waits_until_its_own_keepalive_is_in_the_peering(
    emulator: KubeEmulator, monitor: tuple[PeeringMonitor, ActivityGate, Clock]
) -> None:
    watcher, gate, _ = monitor
    await watcher.check()
    assert not gate.active
    write_status(emulator, {ME: keepalive(99, START)})
    await watcher.check()
    assert gate.active


@pytest.mark.usefixtures("peering")
async def test_a_replica_whose_own_keepalive_expired_steps_down(
    emulator: KubeEmulator, monitor: tuple[PeeringMonitor, ActivityGate, Clock]
) -> None:
    # E.g. kopf cannot write it: the peers take the record for dead and one takes over.
    watcher, gate, clock = monitor
    write_status(emulator, {ME: keepalive(99, START)})
    await watcher.check()
    assert gate.active
    clock.now = START + timedelta(seconds=61)
    await watcher.check()
    assert not gate.active
    assert watcher.verdict().describe() == "its own keep-alive has expired"


@pytest.mark.usefixtures("peering")
async def test_a_live_higher_peer_keeps_it_standby_until_its_keepalive_expires(
    emulator: KubeEmulator, monitor: tuple[PeeringMonitor, ActivityGate, Clock]
) -> None:
    watcher, gate, clock = monitor
    write_status(emulator, {ME: keepalive(99, START), PREFERRED: keepalive(100, START)})
    await watcher.check()
    assert not gate.active
    assert PREFERRED in watcher.verdict().describe()

    clock.now = START + timedelta(seconds=59)
    await watcher.check()
    assert not gate.active
    clock.now = START + timedelta(seconds=61)
    body = emulator.get(PEERINGS, None, NAME)
    write_status(emulator, {**body["status"], ME: keepalive(99, clock.now)})  # kopf's refresh
    await watcher.check()
    assert gate.active


@pytest.mark.usefixtures("peering")
async def test_a_higher_peer_seen_in_a_watch_event_stops_it_at_once(
    emulator: KubeEmulator, monitor: tuple[PeeringMonitor, ActivityGate, Clock]
) -> None:
    watcher, gate, _ = monitor
    write_status(emulator, {ME: keepalive(99, START)})
    await watcher.check()
    assert gate.active
    body = emulator.get(PEERINGS, None, NAME)
    body["status"][PREFERRED] = keepalive(100, START)
    await watcher.observe(body)
    assert not gate.active


async def test_without_the_peering_object_it_does_nothing_and_says_so(
    monitor: tuple[PeeringMonitor, ActivityGate, Clock], caplog: pytest.LogCaptureFixture
) -> None:
    watcher, gate, _ = monitor
    await watcher.check()
    await watcher.check()
    assert not gate.active
    warnings = [r.getMessage() for r in caplog.records if "does not exist" in r.getMessage()]
    assert warnings == [
        "ClusterKopfPeering 'craft-operator' does not exist: this replica does nothing until "
        "it is created (manifests/base/peering.yaml)"
    ]


@pytest.mark.usefixtures("peering")
async def test_a_malformed_record_counts_as_expired_and_is_reported_once(
    emulator: KubeEmulator,
    monitor: tuple[PeeringMonitor, ActivityGate, Clock],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Anyone allowed to patch the peering object can write a record no replica wrote; the
    rule skips it, and on-call learns which one it was, not at every check."""
    watcher, gate, _ = monitor
    huge = {"priority": 100, "lifetime": 10**20, "lastseen": START.isoformat()}
    write_status(emulator, {ME: keepalive(99, START), "intruder": huge})

    await watcher.check()
    await watcher.check()

    assert gate.active
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert (
        "peering 'craft-operator': the keep-alive record(s) of intruder cannot be read"
        in (warnings[0])
    )


@pytest.mark.usefixtures("peering")
async def test_an_active_replica_whose_peering_object_is_deleted_steps_down(
    emulator: KubeEmulator, monitor: tuple[PeeringMonitor, ActivityGate, Clock]
) -> None:
    """Without the object no peer's keep-alive can be seen, nor this one's: its standby
    may take over at any moment, so it stops before it can work beside it."""
    watcher, gate, _ = monitor
    write_status(emulator, {ME: keepalive(99, START)})
    await watcher.check()
    assert gate.active

    emulator.remove(PEERINGS, None, NAME)
    await watcher.check()

    assert not gate.active


async def peering_unavailable(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
    """A before-request hook: the peering object cannot be read (503)."""
    if "clusterkopfpeerings" in request.url.path:
        return aiohttp.web.json_response({"kind": "Status", "code": 503}, status=503)
    return None


@pytest.mark.usefixtures("peering")
async def test_it_steps_down_when_the_peering_is_unreadable_for_longer_than_the_lifetime(
    emulator: KubeEmulator, monitor: tuple[PeeringMonitor, ActivityGate, Clock]
) -> None:
    watcher, gate, clock = monitor
    write_status(emulator, {ME: keepalive(99, START)})
    await watcher.check()
    assert gate.active

    emulator.before_request.append(peering_unavailable)
    clock.now = START + timedelta(seconds=30)
    await watcher.check()
    assert gate.active  # a blip: its peers still see its keep-alive
    clock.now = START + timedelta(seconds=61)
    await watcher.check()
    assert not gate.active


@pytest.mark.usefixtures("peering")
async def test_an_unreadable_peering_goes_stale_after_the_lifetime_whatever_the_wall_clock_says(
    emulator: KubeEmulator, monitor: tuple[PeeringMonitor, ActivityGate, Clock]
) -> None:
    watcher, gate, clock = monitor
    write_status(emulator, {ME: keepalive(99, START)})
    await watcher.check()

    emulator.before_request.append(peering_unavailable)
    clock.wall_step = -timedelta(hours=1)  # NTP steps the wall clock back meanwhile
    clock.now = START + timedelta(seconds=61)
    await watcher.check()

    assert not gate.active, "its peers may have taken over: it must not go on unseen"


@pytest.mark.usefixtures("peering")
async def test_started_before_the_login_it_reads_the_peering_once_logged_in_and_warns_of_nothing(
    emulator: KubeEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    # kopf runs the start-up handlers, which start the monitor, before its login.
    declare_craft_resources(emulator)
    write_status(emulator, {ME: keepalive(99, datetime.now(UTC))})
    kube = KubeClient(request_timeout=10)

    async def nothing(_: tuple[str, str]) -> None:
        return None

    queue: WorkQueue[tuple[str, str]] = WorkQueue(nothing, concurrency=1)
    gate = ActivityGate(kube=kube, cache=ObjectCache(), queue=queue)
    await gate.deactivate("starting")
    options = PeeringOptions(name=NAME, priority=99, identity=ME, lifetime=1)
    watcher = PeeringMonitor(kube=kube, gate=gate, options=options, identity=ME)
    watcher.start()
    try:
        await asyncio.sleep(3 * watcher.interval)
        assert not gate.active
        kube.configure(kopf.ConnectionInfo(server=str(emulator.url).rstrip("/"), insecure=True))
        for _ in range(100):
            if gate.active:
                break
            await asyncio.sleep(0.05)
        assert gate.active
    finally:
        await watcher.stop()
        await queue.stop()
        await kube.close()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize(("lifetime", "interval"), [(60, 5.0), (20, 2.0), (3, 0.3), (1, 0.2)])
def test_the_peering_is_read_a_tenth_of_the_lifetime_apart_within_bounds(
    lifetime: int, interval: float
) -> None:
    assert check_interval(lifetime) == pytest.approx(interval)


@pytest.mark.usefixtures("peering")
async def test_a_version_of_the_peering_older_than_the_one_applied_changes_nothing(
    emulator: KubeEmulator, monitor: tuple[PeeringMonitor, ActivityGate, Clock]
) -> None:
    """A poll answered late (read before the preferred peer came back) must not undo the
    step-down that a newer version, seen in a watch event meanwhile, caused."""
    watcher, gate, _ = monitor
    write_status(emulator, {ME: keepalive(99, START)})
    await watcher.check()
    older = emulator.get(PEERINGS, None, NAME)
    write_status(emulator, {ME: keepalive(99, START), PREFERRED: keepalive(100, START)})
    await watcher.observe(emulator.get(PEERINGS, None, NAME))
    assert not gate.active
    activations = gate.activations

    await watcher.observe(older)

    assert not gate.active
    assert gate.activations == activations


@pytest.mark.usefixtures("peering")
async def test_an_unreadable_peering_steps_it_down_once_its_own_keepalive_has_expired(
    emulator: KubeEmulator, monitor: tuple[PeeringMonitor, ActivityGate, Clock]
) -> None:
    """Its peers take it for gone a lifetime after its last keep-alive, not after this
    replica's last read of the peering: it must not work on beside the one taking over."""
    watcher, gate, clock = monitor
    write_status(emulator, {ME: keepalive(99, START)})
    clock.now = START + timedelta(seconds=50)  # read just before kopf's next keep-alive
    await watcher.check()
    assert gate.active

    emulator.before_request.append(peering_unavailable)  # keep-alives and reads fail
    clock.now = START + timedelta(seconds=61)
    await watcher.check()

    assert not gate.active


@pytest.mark.usefixtures("peering")
async def test_a_peering_read_that_hangs_counts_as_unreadable_within_the_poll_interval(
    emulator: KubeEmulator, monitor: tuple[PeeringMonitor, ActivityGate, Clock]
) -> None:
    """A connection to an API server that went away may hang a read until the client's
    request timeout: the replica must not work on that long beside the one taking over."""
    watcher, gate, clock = monitor
    write_status(emulator, {ME: keepalive(99, START)})
    await watcher.check()
    assert gate.active
    hang = asyncio.Event()

    async def hung(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        if "clusterkopfpeerings" in request.url.path:
            await hang.wait()
        return None

    emulator.before_request.append(hung)
    watcher.interval = 0.2
    clock.now = START + timedelta(seconds=61)  # its own keep-alive expired meanwhile
    try:
        await asyncio.wait_for(watcher.check(), 5)  # the client would wait 10 s
    finally:
        hang.set()
    assert not gate.active
