"""Two replicas peer through one ClusterKopfPeering: one works, the other stands by.

Each replica runs in its own thread and event loop (``tests.support.replica``), against the
same emulated API server and the same credentials database, as two pods would. A replica's
writes are counted by its own API client, so the test can tell who wrote what.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import aiohttp.web
import kmock
import pytest
from kmock._internal import rendering

from craft_operator.config import Settings
from craft_operator.kube.exec import ExecResult, ExecTransport
from craft_operator.peering.options import PeeringOptions
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import NAMESPACE, condition, phase, pod, sandbox
from tests.support.emulator import KubeEmulator, RequestHook
from tests.support.operator import eventually
from tests.support.pod_exec import EmulatedPodExec, mark_pod_running
from tests.support.replica import Replica

pytestmark = pytest.mark.integration

PEERINGS = kmock.resource("kopf.dev", "v1", "clusterkopfpeerings")
PEERING = "craft-operator"
PREFERRED, STANDBY = "craft-operator-0", "craft-operator-1"
#: Short keep-alives, so that a replica that died without a goodbye expires quickly.
LIFETIME = 3
#: Enough for the standby to outwait a dead peer's record (LIFETIME) with room to spare.
TAKEOVER = 20.0


def peering_object() -> dict[str, Any]:
    return {
        "apiVersion": "kopf.dev/v1",
        "kind": "ClusterKopfPeering",
        "metadata": {"name": PEERING},
    }


def peering_options(identity: str, priority: int) -> PeeringOptions:
    return PeeringOptions(name=PEERING, priority=priority, identity=identity, lifetime=LIFETIME)


def make_replica(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec, identity: str
) -> Replica:
    priority = 100 if identity == PREFERRED else 99
    return Replica(
        str(emulator.url).rstrip("/"),
        settings,
        peering=peering_options(identity, priority),
        exec_transport=pod_exec,
    )


async def provision(emulator: KubeEmulator, name: str) -> None:
    """Create a sandbox and walk it to Ready (the test plays the kubelet)."""
    emulator.create(SANDBOXES, sandbox(name))
    await eventually(lambda: pod(emulator, name), within=TAKEOVER, what=f"the pod of {name}")
    mark_pod_running(emulator, NAMESPACE, name)
    await phase(emulator, name, "Ready", within=TAKEOVER)


def no_goodbye_from(identity: str) -> RequestHook:
    """Refuse the last keep-alive that removes a replica's record, as if it died first."""

    async def hook(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        if request.method.value.upper() == "PATCH" and request.url.path.endswith(
            f"/clusterkopfpeerings/{PEERING}"
        ):
            status = (request.data or {}).get("status") or {}
            if identity in status and status[identity] is None:
                # 404 ends kopf's attempt at once (a 5xx it would retry for a minute).
                return aiohttp.web.json_response(
                    {"kind": "Status", "code": 404, "reason": "NotFound"}, status=404
                )
        return None

    return hook


async def test_the_preferred_replica_works_the_standby_takes_over_and_hands_back(
    emulator: KubeEmulator, settings: Settings, tmp_path: Path
) -> None:
    emulator.create(PEERINGS, peering_object())
    pod_exec = EmulatedPodExec(emulator, tmp_path / "pods", scripted_cli=lambda *_: 0)
    preferred = await make_replica(emulator, settings, pod_exec, PREFERRED).start()
    standby = await make_replica(emulator, settings, pod_exec, STANDBY).start()
    started = [preferred, standby]
    try:
        # Both keep their record in the peering object; only the preferred one works.
        await eventually(
            lambda: {PREFERRED, STANDBY} <= set(emulator.get(PEERINGS, None, PEERING)["status"]),
            what="both replicas in the peering object",
        )
        await eventually(
            lambda: preferred.active and not standby.active, what="one active, one standby"
        )
        await provision(emulator, "alice")
        assert standby.writes() == 0
        assert standby.context.queue.processed == 0

        # The preferred replica dies without a goodbye: once its record expires, the
        # standby takes over and converges a new sandbox.
        goodbye_refused = no_goodbye_from(PREFERRED)
        emulator.before_request.append(goodbye_refused)
        await preferred.kill()
        started.remove(preferred)
        emulator.before_request.remove(goodbye_refused)  # the standby's clean-up goes through
        await eventually(lambda: standby.active, within=TAKEOVER, what="the standby taking over")
        await provision(emulator, "bob")
        assert standby.writes() > 0

        # The preferred replica comes back: the standby steps down and writes nothing more.
        returned = await make_replica(emulator, settings, pod_exec, PREFERRED).start()
        started.append(returned)
        await eventually(lambda: not standby.active, within=TAKEOVER, what="the standby back")
        await eventually(lambda: returned.active, within=TAKEOVER, what="the preferred again")
        writes, processed = standby.writes(), standby.context.queue.processed
        await provision(emulator, "carol")
        assert (standby.writes(), standby.context.queue.processed) == (writes, processed)
        assert returned.writes() > 0
    finally:
        for replica in started:
            await replica.stop()


async def test_a_replica_watching_some_namespaces_peers_through_the_cluster_wide_object(
    emulator: KubeEmulator, settings: Settings, tmp_path: Path
) -> None:
    emulator.create(PEERINGS, peering_object())
    emulator.add_namespace(NAMESPACE)
    pod_exec = EmulatedPodExec(emulator, tmp_path / "pods", scripted_cli=lambda *_: 0)
    replica = Replica(
        str(emulator.url).rstrip("/"),
        settings,
        peering=peering_options(PREFERRED, 100),
        exec_transport=pod_exec,
        namespaces=(NAMESPACE,),
    )
    await replica.start()
    try:
        await eventually(lambda: replica.active, within=TAKEOVER, what="the replica active")
        await provision(emulator, "alice")
        assert PREFERRED in emulator.get(PEERINGS, None, PEERING)["status"]
    finally:
        await replica.stop()
    # A graceful stop takes the replica out of the peering at once.
    assert PREFERRED not in (emulator.get(PEERINGS, None, PEERING).get("status") or {})


async def test_a_malformed_keepalive_record_neither_stops_the_replica_nor_counts_as_a_peer(
    emulator: KubeEmulator, settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Anyone allowed to patch the peering object can write a record kopf cannot read (a
    lifetime past the year 9999): kopf's peering observer raised on it, which stopped the
    operator, and again at every start while the record stayed."""
    emulator.create(PEERINGS, peering_object())
    huge = {"priority": 200, "lifetime": 10**20, "lastseen": "2026-01-01T00:00:00+00:00"}
    emulator.patch(PEERINGS, None, PEERING, {"status": {"intruder": huge}})
    pod_exec = EmulatedPodExec(emulator, tmp_path / "pods", scripted_cli=lambda *_: 0)
    replica = await make_replica(emulator, settings, pod_exec, PREFERRED).start()
    try:
        await eventually(lambda: replica.active, within=TAKEOVER, what="the replica active")
        await provision(emulator, "alice")
    finally:
        await replica.stop()

    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    warnings = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
    assert len(warnings) == 1
    assert "intruder" in warnings[0]


class HeldDelivery:
    """Exec into the emulator's pods, where the PAT's delivery (onyx-cli's exec) waits until
    released: a pass held in progress."""

    def __init__(self, inner: EmulatedPodExec) -> None:
        self.inner = inner
        self.started = threading.Event()
        self.release = threading.Event()
        self.finished_at: float | None = None

    async def run(
        self, namespace: str, pod: str, container: str, argv: Sequence[str], **kwargs: Any
    ) -> ExecResult:
        if list(argv[3:4]) not in (["deliver-pat"], ["deliver-pat-and-skill"]):
            return await self.inner.run(namespace, pod, container, argv, **kwargs)
        self.started.set()
        await asyncio.to_thread(self.release.wait, TAKEOVER)
        result = await self.inner.run(namespace, pod, container, argv, **kwargs)
        self.finished_at = time.monotonic()
        return result


def goodbyes_of(identity: str, seen: list[float]) -> RequestHook:
    """Note when the keep-alive that removes ``identity``'s record arrives (it goes through)."""

    async def hook(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        if request.method.value.upper() == "PATCH" and request.url.path.endswith(
            f"/clusterkopfpeerings/{PEERING}"
        ):
            status = (request.data or {}).get("status") or {}
            if identity in status and status[identity] is None:
                seen.append(time.monotonic())
        return None

    return hook


async def test_a_replica_stopped_mid_pass_lets_the_pass_end_before_it_leaves_the_peering(
    emulator: KubeEmulator, settings: Settings, tmp_path: Path
) -> None:
    emulator.create(PEERINGS, peering_object())
    held = HeldDelivery(EmulatedPodExec(emulator, tmp_path / "pods", scripted_cli=lambda *_: 0))
    replica = Replica(
        str(emulator.url).rstrip("/"),
        settings,
        peering=peering_options(PREFERRED, 100),
        exec_transport=cast(ExecTransport, held),
    )
    goodbyes: list[float] = []
    emulator.before_request.append(goodbyes_of(PREFERRED, goodbyes))
    await replica.start()
    try:
        await eventually(lambda: replica.active, within=TAKEOVER, what="the replica active")
        emulator.create(SANDBOXES, sandbox("alice"))
        await eventually(lambda: pod(emulator, "alice"), within=TAKEOVER, what="alice's pod")
        mark_pod_running(emulator, NAMESPACE, "alice")
        await eventually(held.started.is_set, within=TAKEOVER, what="the PAT's delivery")

        # SIGTERM while the pass delivers the PAT: the replica keeps its record (a standby
        # would otherwise take over from a half-done pass) until the pass has ended.
        stopping = asyncio.create_task(replica.stop())
        await asyncio.sleep(1.0)
        assert goodbyes == [], "the replica left the peering with a pass in progress"
        held.release.set()
        await stopping
    finally:
        held.release.set()
        await replica.stop()
    assert held.finished_at is not None
    assert goodbyes, "the replica never left the peering"
    assert held.finished_at < goodbyes[0]
    assert condition(emulator, "alice", "CLIValidated")["status"] == "True"
