"""Prometheus metrics: what a scrape of the served endpoint shows, and that every label
value stays in a fixed set (never a user, a name or a token)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import logging
import socket
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import aiohttp.web
import kmock
import kopf
import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

import craft_operator.metrics.server as metrics_server
from craft_operator.api.models import KIND, CraftSandboxStatus, Phase
from craft_operator.config import Settings
from craft_operator.handlers.streams import watch_streams
from craft_operator.kube.cache import ObjectCache
from craft_operator.kube.client import CONFIGMAPS, PODS, KubeClient
from craft_operator.kube.events import EventRecorder
from craft_operator.kube.kinds import KINDS
from craft_operator.kube.watch import WatchStream
from craft_operator.metrics import (
    ColdStartReason,
    Metrics,
    MetricsPortError,
    MetricsServer,
    MintReason,
    ProvisioningPhase,
    count_sandboxes,
    mint_reason,
    start_from_settings,
    start_metrics_server,
    time_to_ready,
)
from craft_operator.reconciler.queue import Backoff, WorkQueue
from craft_operator.runtime import build_context
from tests.support.emulator import KubeEmulator, declare_core_resources
from tests.support.operator import eventually

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
READY = CraftSandboxStatus(phase=Phase.READY)
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


_VERSIONS = itertools.count(1)  # every body is a newer version, as the API server's would be


def sandbox(
    name: str,
    phase: str | None,
    *,
    created: datetime = NOW,
    ready: tuple[str, datetime] | None = None,
    deleting: bool = False,
    woke: datetime | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "team-a",
        "creationTimestamp": stamp(created),
        "resourceVersion": str(next(_VERSIONS)),
    }
    if deleting:
        metadata["deletionTimestamp"] = stamp(NOW)
    body: dict[str, Any] = {"kind": KIND, "metadata": metadata}
    if phase is not None:
        body["status"] = {"phase": phase}
    if ready is not None:
        status, since = ready
        body.setdefault("status", {})["conditions"] = [
            {
                "type": "Ready",
                "status": status,
                "reason": "SandboxReady" if status == "True" else "PodStarting",
                "lastTransitionTime": stamp(since),
            }
        ]
    if woke is not None:
        body.setdefault("status", {})["wokeAt"] = stamp(woke)
    return body


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(CollectorRegistry())


@pytest.fixture
async def server(metrics: Metrics) -> AsyncIterator[MetricsServer]:
    running = await start_metrics_server(metrics.registry, 0, host="127.0.0.1")
    try:
        yield running
    finally:
        await running.stop()


async def fetch(url: str, accept: str | None = None) -> tuple[int, str, str]:
    headers = {"Accept": accept} if accept else {}
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as response:
        return response.status, response.headers["Content-Type"], await response.text()


async def scrape(server: MetricsServer) -> Samples:
    status, _, text = await fetch(server.url)
    assert status == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def label_values(samples: Samples, name: str, label: str) -> set[str]:
    return {dict(key)[label] for metric, key in samples if metric == name and label in dict(key)}


# -- the endpoint ------------------------------------------------------------------------------


async def test_the_endpoint_serves_the_text_exposition_until_stopped(
    metrics: Metrics,
) -> None:
    server = await start_metrics_server(metrics.registry, 0, host="127.0.0.1")
    assert server.port != 0
    status, content_type, text = await fetch(server.url)
    assert status == 200
    assert content_type.startswith("text/plain; version=0.0.4")
    assert "# TYPE craft_sandbox_time_to_ready_seconds histogram" in text
    await server.stop()
    with pytest.raises(aiohttp.ClientConnectionError):
        await fetch(server.url)


async def test_openmetrics_is_served_to_a_scraper_that_asks_for_it(server: MetricsServer) -> None:
    _, content_type, text = await fetch(server.url, accept="application/openmetrics-text")
    assert content_type.startswith("application/openmetrics-text")
    assert text.rstrip().endswith("# EOF")


async def test_a_port_in_use_is_an_error_not_a_silent_second_server(
    metrics: Metrics, server: MetricsServer
) -> None:
    with pytest.raises(OSError, match=r"(?i)in use"):
        await start_metrics_server(metrics.registry, server.port, host="127.0.0.1")


async def test_a_taken_metrics_port_is_one_line_naming_the_setting(
    metrics: Metrics, tmp_path: Any
) -> None:
    with listening("0.0.0.0") as port, pytest.raises(MetricsPortError) as raised:
        await start_from_settings(metrics, Settings(metrics_port=port, state_dir=tmp_path))
    message = str(raised.value)
    assert f"port {port} (CRAFT_METRICS_PORT)" in message
    assert "in use" in message
    assert "\n" not in message


@contextlib.contextmanager
def listening(host: str, family: int = socket.AF_INET) -> Iterator[int]:
    """A port something else listens on, on ``host``."""
    with socket.socket(family, socket.SOCK_STREAM) as holder:
        holder.bind((host, 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def has_ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.parametrize("host", [None, "::"], ids=["default", "ipv6-wildcard"])
async def test_the_wildcard_serves_ipv4_and_ipv6_scrapers_on_one_port(
    metrics: Metrics, host: str | None
) -> None:
    if not has_ipv6():
        pytest.skip("this machine has no IPv6 loopback")
    server = await start_metrics_server(metrics.registry, 0, host=host)
    try:
        over_ipv4 = await fetch(f"http://127.0.0.1:{server.port}/metrics")
        over_ipv6 = await fetch(f"http://[::1]:{server.port}/metrics")
    finally:
        await server.stop()
    assert over_ipv4[0] == over_ipv6[0] == 200
    assert server.url == f"http://127.0.0.1:{server.port}/metrics"


@pytest.mark.parametrize(
    "no_ipv6",
    [(12345, "::"), (socket.AF_INET6, "2001:db8::1")],
    ids=["family-not-supported", "address-not-available"],
)
async def test_without_ipv6_the_wildcard_serves_ipv4_alone(
    metrics: Metrics, monkeypatch: pytest.MonkeyPatch, no_ipv6: tuple[int, str]
) -> None:
    # A kernel without IPv6 refuses the family; one with IPv6 turned off, the address.
    monkeypatch.setattr(metrics_server, "_DUAL_STACK", no_ipv6)
    server = await start_metrics_server(metrics.registry, 0)
    try:
        status, _, _ = await fetch(server.url)
        if has_ipv6():
            with pytest.raises(aiohttp.ClientConnectionError):
                await fetch(f"http://[::1]:{server.port}/metrics")
    finally:
        await server.stop()
    assert status == 200


async def test_a_port_taken_on_the_wildcard_is_an_error_not_a_fallback_to_ipv4(
    metrics: Metrics,
) -> None:
    with listening("0.0.0.0") as port, pytest.raises(OSError, match=r"(?i)in use") as raised:
        await start_metrics_server(metrics.registry, port)
    assert raised.value.errno == errno.EADDRINUSE


async def test_metrics_port_zero_disables_the_endpoint(metrics: Metrics, tmp_path: Any) -> None:
    settings = Settings(metrics_port=0, state_dir=tmp_path)
    assert await start_from_settings(metrics, settings) is None


async def test_each_metrics_object_has_its_own_registry_not_the_global_one(
    server: MetricsServer,
) -> None:
    other = Metrics()
    other.pat_reused()
    samples = await scrape(server)
    assert value(samples, "craft_pat_reuses_total") == 0
    assert not [name for name in REGISTRY._names_to_collectors if name.startswith("craft_")]


# -- events the reconciler reports -------------------------------------------------------------


async def test_time_to_ready_lands_in_the_bucket_of_its_duration(
    metrics: Metrics, server: MetricsServer
) -> None:
    metrics.observe_ready(42.0)
    metrics.observe_ready(400.0)
    samples = await scrape(server)
    name = "craft_sandbox_time_to_ready_seconds_bucket"
    assert value(samples, name, le="30.0") == 0
    assert value(samples, name, le="45.0") == 1
    assert value(samples, name, le="420.0") == 2
    assert value(samples, "craft_sandbox_time_to_ready_seconds_count") == 2
    assert value(samples, "craft_sandbox_time_to_ready_seconds_sum") == 442.0


async def test_phase_durations_are_labelled_by_phase(
    metrics: Metrics, server: MetricsServer
) -> None:
    metrics.observe_phase(ProvisioningPhase.POD_READY, 12.5)
    metrics.observe_phase("credentials", 0.02)
    samples = await scrape(server)
    name = "craft_provisioning_phase_duration_seconds_count"
    assert value(samples, name, phase="pod_ready") == 1
    assert value(samples, name, phase="credentials") == 1
    assert value(samples, name, phase="cli_validation") == 0
    assert label_values(samples, name, "phase") == {phase.value for phase in ProvisioningPhase}


def test_an_unknown_phase_is_a_programming_error(metrics: Metrics) -> None:
    with pytest.raises(ValueError, match="team-a/alice"):
        metrics.observe_phase("team-a/alice", 1.0)


async def test_pat_mints_are_counted_by_a_bounded_reason_and_reuses_separately(
    metrics: Metrics, server: MetricsServer
) -> None:
    metrics.pat_minted("no credential stored")
    metrics.pat_minted("PAT 81723 was rejected")
    metrics.pat_minted(MintReason.RENEWAL)
    metrics.pat_minted("something new in a later operator for user 3f1c-alice")
    metrics.pat_reused()
    metrics.pat_reused()
    samples = await scrape(server)
    name = "craft_pat_mints_total"
    assert value(samples, name, reason="new") == 1
    assert value(samples, name, reason="rejected") == 1
    assert value(samples, name, reason="renewal") == 1
    assert value(samples, name, reason="other") == 1
    assert value(samples, "craft_pat_reuses_total") == 2
    assert label_values(samples, name, "reason") == {reason.value for reason in MintReason}


@pytest.mark.parametrize(
    ("explanation", "reason"),
    [
        ("no credential stored", MintReason.NEW),
        ("PAT 7, which the sandbox held, is no longer stored: revoked by ...", MintReason.REVOKED),
        ("a new PAT was requested", MintReason.REQUESTED),
        ("PAT 12 was rejected", MintReason.REJECTED),
        ("the credential belongs to an earlier sandbox of that name", MintReason.RECREATED),
        ("the sandbox's user changed", MintReason.USER_CHANGED),
        ("the sandbox's tenant changed", MintReason.TENANT_CHANGED),
        ("the PAT is revoked", MintReason.REVOKED),
        ("the PAT is expired", MintReason.EXPIRED),
        ("the PAT is missing", MintReason.MISSING),
        ("the PAT never expires", MintReason.LIFETIME),
        ("the PAT is inside its renewal window", MintReason.RENEWAL),
        ("the PAT outlives the sandbox's credential lifetime", MintReason.LIFETIME),
        ("the stored token does not match its PAT", MintReason.TOKEN_MISMATCH),
        (None, MintReason.OTHER),
    ],
)
def test_every_explanation_of_the_credential_store_has_its_own_mint_reason(
    explanation: str | None, reason: MintReason
) -> None:
    assert mint_reason(explanation) is reason


async def test_failure_reasons_outside_the_known_set_are_counted_as_other(
    metrics: Metrics, server: MetricsServer
) -> None:
    metrics.sync_failed("S3AccessDenied")
    metrics.sync_failed("bucket alice-private is gone")
    metrics.pat_failed("DatabaseUnavailable")
    metrics.pat_failed("user 0b7c… is odd")
    samples = await scrape(server)
    assert value(samples, "craft_user_library_sync_errors_total", reason="S3AccessDenied") == 1
    assert value(samples, "craft_user_library_sync_errors_total", reason="Other") == 1
    assert value(samples, "craft_pat_errors_total", reason="DatabaseUnavailable") == 1
    assert value(samples, "craft_pat_errors_total", reason="Other") == 1
    _, _, text = await fetch(server.url)
    assert "alice" not in text
    assert "0b7c" not in text


async def test_a_successful_sync_adds_its_bytes_and_duration(
    metrics: Metrics, server: MetricsServer
) -> None:
    metrics.sync_finished(52_311, 1.5)
    metrics.sync_finished(0, 0.04)
    samples = await scrape(server)
    assert value(samples, "craft_user_library_sync_bytes_total") == 52_311
    assert value(samples, "craft_user_library_sync_duration_seconds_count") == 2
    assert value(samples, "craft_user_library_sync_duration_seconds_bucket", le="0.05") == 1


# -- state read at scrape time -----------------------------------------------------------------


async def test_sandboxes_by_phase_follow_the_cache_at_every_scrape(
    metrics: Metrics, server: MetricsServer
) -> None:
    cache = ObjectCache()
    metrics.track(cache=cache, clock=lambda: NOW)
    cache.put(KIND, sandbox("alice", "Ready"))
    cache.put(KIND, sandbox("bob", "Ready"))
    cache.put(KIND, sandbox("carol", None))
    cache.put(KIND, sandbox("dave", "Ready", deleting=True))
    cache.put("Pod", {"metadata": {"name": "alice", "namespace": "team-a"}})
    samples = await scrape(server)
    assert value(samples, "craft_sandboxes", phase="Ready") == 2
    assert value(samples, "craft_sandboxes", phase="Pending") == 1
    assert value(samples, "craft_sandboxes", phase="Terminating") == 1
    assert label_values(samples, "craft_sandboxes", "phase") == {phase.value for phase in Phase}

    cache.put(KIND, sandbox("bob", "Sleeping"))
    cache.forget(KIND, "team-a", "dave")
    samples = await scrape(server)
    assert value(samples, "craft_sandboxes", phase="Ready") == 1
    assert value(samples, "craft_sandboxes", phase="Sleeping") == 1
    assert value(samples, "craft_sandboxes", phase="Terminating") == 0


def test_the_oldest_waiting_sandbox_counts_from_when_it_lost_ready() -> None:
    bodies = [
        sandbox("new", None, created=NOW - timedelta(seconds=30)),
        sandbox(
            "replaced",
            "Provisioning",
            created=NOW - timedelta(days=3),
            ready=("False", NOW - timedelta(seconds=400)),
        ),
        sandbox("failed", "Failed", created=NOW - timedelta(days=1)),
        sandbox("fine", "Ready", created=NOW - timedelta(days=2), ready=("True", NOW)),
    ]
    counts = count_sandboxes(bodies, NOW)
    assert counts.oldest_not_ready_seconds == 400
    assert count_sandboxes([], NOW).oldest_not_ready_seconds == 0


def test_a_status_written_by_hand_or_by_another_version_is_counted_never_refused() -> None:
    created = (NOW - timedelta(seconds=50)).strftime("%Y-%m-%dT%H:%M:%SZ")
    bodies = [
        {"metadata": {"name": name, "creationTimestamp": created}, "status": status}
        for name, status in [
            ("string", "Ready"),
            ("unknown-phase", {"phase": "Exploded"}),
            ("conditions-not-a-list", {"phase": "Provisioning", "conditions": "Ready"}),
            ("junk-conditions", {"phase": "Provisioning", "conditions": [7, None, "x"]}),
            (
                "bad-time",
                {
                    "phase": "Provisioning",
                    "conditions": [
                        {"type": "Ready", "status": "False", "lastTransitionTime": "soon"}
                    ],
                },
            ),
            ("time-not-a-string", {"phase": "Provisioning", "wokeAt": 1764500000}),
        ]
    ]

    counts = count_sandboxes(bodies, NOW)

    assert counts.by_phase["Pending"] == 2
    assert counts.by_phase["Provisioning"] == 4
    assert counts.oldest_not_ready_seconds == 50


async def test_the_oldest_waiting_sandbox_is_a_gauge(
    metrics: Metrics, server: MetricsServer
) -> None:
    cache = ObjectCache()
    cache.put(KIND, sandbox("slow", "Provisioning", created=NOW - timedelta(minutes=20)))
    metrics.track(cache=cache, clock=lambda: NOW)
    samples = await scrape(server)
    assert value(samples, "craft_sandbox_oldest_not_ready_seconds") == 1200


def test_time_to_ready_is_measured_only_on_the_pass_that_makes_a_sandbox_ready() -> None:
    created = sandbox("alice", "Provisioning", created=NOW - timedelta(seconds=95))
    assert time_to_ready(created, READY, NOW) == 95
    assert time_to_ready(created, CraftSandboxStatus(phase=Phase.PROVISIONING), NOW) is None
    ready = sandbox("alice", "Ready", ready=("True", NOW - timedelta(hours=1)))
    assert time_to_ready(ready, READY, NOW) is None
    woken = sandbox(
        "alice",
        "Provisioning",
        created=NOW - timedelta(days=5),
        ready=("False", NOW - timedelta(seconds=12)),
    )
    assert time_to_ready(woken, READY, NOW) == 12


def test_a_sandbox_woken_from_a_long_sleep_waits_from_its_wake() -> None:
    """Asleep, Ready stays False (since it fell asleep, days ago); it wakes and waits for a
    pod: 20 seconds of waiting, not three days (CraftSandboxStuckNotReady would page)."""
    woken = sandbox(
        "alice",
        "Provisioning",
        created=NOW - timedelta(days=10),
        ready=("False", NOW - timedelta(days=3)),
        woke=NOW - timedelta(seconds=20),
    )
    assert count_sandboxes([woken], NOW).oldest_not_ready_seconds == 20
    assert time_to_ready(woken, READY, NOW) == 20


def test_a_sandbox_that_lost_its_pod_after_waking_waits_from_losing_it() -> None:
    replaced = sandbox(
        "alice",
        "Provisioning",
        created=NOW - timedelta(days=10),
        ready=("False", NOW - timedelta(minutes=10)),
        woke=NOW - timedelta(hours=2),
    )
    assert count_sandboxes([replaced], NOW).oldest_not_ready_seconds == 600
    assert time_to_ready(replaced, READY, NOW) == 600


def test_a_sandbox_woken_and_ready_in_one_pass_counts_from_that_wake() -> None:
    """A woken sandbox may claim a warm pod and be Ready in the very pass that woke it: the
    body that pass started from still says it sleeps."""
    asleep = sandbox(
        "alice",
        "Sleeping",
        created=NOW - timedelta(days=10),
        ready=("False", NOW - timedelta(days=3)),
    )
    woken_now = CraftSandboxStatus(phase=Phase.READY, woke_at=NOW - timedelta(seconds=4))
    assert time_to_ready(asleep, woken_now, NOW) == 4


def test_a_sandbox_fixed_after_it_failed_waits_from_its_recovery() -> None:
    """Failed for two hours (Ready False all along), then its spec fixed: 30 seconds of
    provisioning, not two hours (CraftSandboxStuckNotReady would page)."""
    fixed = sandbox(
        "alice",
        "Provisioning",
        created=NOW - timedelta(days=1),
        ready=("False", NOW - timedelta(hours=2)),
    )
    fixed["status"]["recoveredAt"] = stamp(NOW - timedelta(seconds=30))
    assert count_sandboxes([fixed], NOW).oldest_not_ready_seconds == 30
    assert time_to_ready(fixed, READY, NOW) == 30
    failed = sandbox("alice", "Failed", ready=("False", NOW - timedelta(hours=2)))
    fixed_and_ready = CraftSandboxStatus(phase=Phase.READY, recovered_at=NOW - timedelta(seconds=3))
    assert time_to_ready(failed, fixed_and_ready, NOW) == 3


def test_a_start_written_to_the_second_is_read_to_the_millisecond_the_operator_saw() -> None:
    """creationTimestamp (or Ready's first transition) is whole seconds: a warm claim Ready
    300 ms after its creation at 11:59:59.5 would read as 0.8 s. The moment the operator saw
    it created stands for it when it falls within that second, and only then."""
    created = sandbox("alice", "Provisioning", created=NOW - timedelta(seconds=0.8))
    created["metadata"]["creationTimestamp"] = "2026-11-23T11:59:59Z"
    seen = NOW - timedelta(seconds=0.3)
    assert time_to_ready(created, READY, NOW, seen) == pytest.approx(0.3)
    assert time_to_ready(created, READY, NOW) == pytest.approx(1.0)
    long_before = NOW - timedelta(seconds=5)
    assert time_to_ready(created, READY, NOW, long_before) == pytest.approx(1.0)


def test_a_time_written_without_a_zone_is_read_as_utc() -> None:
    body = sandbox("alice", "Provisioning", created=NOW - timedelta(days=1))
    body["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-23T11:58:20"}
    ]
    assert count_sandboxes([body], NOW).oldest_not_ready_seconds == 100
    assert time_to_ready(body, READY, NOW) == 100
    body["status"]["wokeAt"] = "2026-11-23T11:59:30"
    assert count_sandboxes([body], NOW).oldest_not_ready_seconds == 30
    naive_wake = CraftSandboxStatus.model_validate(
        {"phase": "Ready", "wokeAt": "2026-11-23T11:59:50"}
    )
    asleep = sandbox("alice", "Sleeping", created=NOW - timedelta(days=1))
    assert time_to_ready(asleep, naive_wake, NOW) == 10


def test_a_body_that_cannot_be_read_is_left_out_and_named_the_others_counted() -> None:
    bodies = [
        sandbox("slow", "Provisioning", created=NOW - timedelta(seconds=70)),
        {"kind": KIND, "metadata": ["not", "an", "object"], "status": {"phase": "Provisioning"}},
        sandbox("fine", "Ready", ready=("True", NOW)),
    ]
    counts = count_sandboxes(bodies, NOW)
    assert counts.by_phase["Provisioning"] == 1
    assert counts.by_phase["Ready"] == 1
    assert counts.oldest_not_ready_seconds == 70
    assert counts.unreadable == ("<a sandbox without metadata>",)


class Bodies:
    """A watch cache holding whatever bodies it is given, readable or not."""

    def __init__(self, *bodies: dict[str, Any]) -> None:
        self.bodies = list(bodies)

    def items(self, kind: str) -> Iterator[tuple[Any, dict[str, Any]]]:
        return iter(
            [(index, body) for index, body in enumerate(self.bodies)] if kind == KIND else []
        )


async def test_one_unreadable_sandbox_never_fails_the_scrape_and_is_logged_once(
    metrics: Metrics, server: MetricsServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A failed scrape is ``up`` 0: CraftOperatorDown would page for one odd status."""
    naive = sandbox("naive", "Provisioning", created=NOW - timedelta(days=1))
    naive["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-23T11:55:00"}
    ]
    unreadable = {"kind": KIND, "metadata": "junk", "status": {"phase": "Pending"}}
    cache = Bodies(naive, unreadable, sandbox("new", None))
    metrics.track(cache=cache, clock=lambda: NOW)

    with caplog.at_level(logging.WARNING, logger="craft_operator.metrics"):
        first = await scrape(server)
        second = await scrape(server)

    assert value(first, "craft_sandbox_oldest_not_ready_seconds") == 300
    assert value(first, "craft_sandboxes", phase="Provisioning") == 1
    assert value(first, "craft_sandboxes", phase="Pending") == 1
    assert value(first, "craft_sandboxes_unreadable") == 1
    assert value(second, "craft_sandboxes_unreadable") == 1
    [logged] = [record.getMessage() for record in caplog.records]
    assert "left out of the metrics" in logged
    cache.bodies.remove(unreadable)
    assert value(await scrape(server), "craft_sandboxes_unreadable") == 0


async def test_queue_depth_passes_and_failures_come_from_the_work_queue(
    metrics: Metrics, server: MetricsServer
) -> None:
    async def handler(key: str) -> float | None:
        if key == "broken":
            raise RuntimeError("boom")
        return None

    queue: WorkQueue[str] = WorkQueue(handler, concurrency=1, backoff=Backoff(base=3600))
    metrics.track(queue=queue, queue_backlog=lambda: 7)
    queue.add("fine")
    queue.add("later", delay=3600)
    queue.add("broken")
    queue.start()
    try:
        await eventually(lambda: queue.processed + queue.failed == 2, what="both passes")
        samples = await scrape(server)
    finally:
        await queue.stop()
    assert value(samples, "craft_reconcile_passes_total") == 2
    assert value(samples, "craft_reconcile_failures_total") == 1
    assert value(samples, "craft_workqueue_depth") == 2  # "later", and "broken" backing off
    assert value(samples, "craft_workqueue_backlog") == 7


async def test_events_are_counted_by_what_became_of_them(
    metrics: Metrics, server: MetricsServer
) -> None:
    """Events the spam filter dropped are said nowhere else but the log: on-call sees them
    here."""
    kube = KubeClient(request_timeout=10)
    recorder = EventRecorder(kube, burst=2, refill=3600)
    metrics.track(events=recorder)
    sandbox = {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "metadata": {"name": "alice", "namespace": "team-a", "uid": "u-1"},
    }
    async with KubeEmulator() as emulator, kmock.Server(emulator):
        declare_core_resources(emulator)
        kube.configure(kopf.ConnectionInfo(server=str(emulator.url).rstrip("/"), insecure=True))
        recorder.start()
        try:
            for reason in ("First", "First", "Second", "Third"):
                recorder.post(sandbox, type="Warning", reason=reason, message="m")
            await recorder.stop()
        finally:
            await kube.close()
    samples = await scrape(server)
    assert value(samples, "craft_events_total", outcome="posted") == 2
    assert value(samples, "craft_events_total", outcome="folded") == 1
    assert value(samples, "craft_events_total", outcome="filtered") == 1
    assert value(samples, "craft_events_total", outcome="dropped") == 0


async def test_api_requests_are_counted_by_verb_from_the_client(
    metrics: Metrics, server: MetricsServer
) -> None:
    kube = KubeClient(request_timeout=10)
    metrics.track(api_requests=kube.requests)
    async with KubeEmulator() as emulator, kmock.Server(emulator):
        declare_core_resources(emulator)
        kube.configure(kopf.ConnectionInfo(server=str(emulator.url).rstrip("/"), insecure=True))
        try:
            await kube.list(PODS, "team-a")
            await kube.list(PODS, "team-b")
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "x"}}
            await kube.create(PODS, {**pod, "spec": {"containers": [{"name": "c"}]}})
        finally:
            await kube.close()
    samples = await scrape(server)
    assert value(samples, "craft_api_requests_total", verb="GET") == 2
    assert value(samples, "craft_api_requests_total", verb="POST") == 1
    assert value(samples, "craft_api_requests_total", verb="DELETE") == 0
    assert value(samples, "craft_api_requests_total", verb="other") == 0


async def test_the_childrens_watch_streams_report_their_lists_and_failures_by_resource(
    metrics: Metrics, server: MetricsServer
) -> None:
    """A stream that keeps failing (RBAC without watch, say) leaves its cache stale: on-call
    sees it in the metrics, not only in the logs, and sees it recover."""
    kube = KubeClient(request_timeout=10)
    metrics.track(watch_outcomes=kube.watch_outcomes)
    refusing = [True]

    async def refuse_watches(request: Any) -> aiohttp.web.StreamResponse | None:
        if request.params.get("watch") not in ("true", "1") or not refusing[0]:
            return None
        return aiohttp.web.json_response({"kind": "Status", "code": 403}, status=403)

    async with KubeEmulator() as emulator, kmock.Server(emulator):
        declare_core_resources(emulator)
        emulator.before_request.append(refuse_watches)
        kube.configure(kopf.ConnectionInfo(server=str(emulator.url).rstrip("/"), insecure=True))
        stream = WatchStream(
            kube, CONFIGMAPS, "team-a", lambda *_: None, known=list, backoff=lambda _: 0.05
        )
        task = asyncio.create_task(stream.run())
        try:
            await eventually(lambda: stream.watches >= 2, what="a second watch")
            failing = await scrape(server)
            refusing[0] = False
            await eventually(
                lambda: kube.watch_outcomes[("configmaps", "failing")] == 0,
                what="a watch answered",
            )
            recovered = await scrape(server)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await kube.close()

    assert value(failing, "craft_watch_lists_total", resource="configmaps") == 1
    assert value(failing, "craft_watch_failures_total", resource="configmaps") >= 1
    assert value(failing, "craft_watch_streams_failing", resource="configmaps") == 1
    assert value(failing, "craft_watch_streams_failing", resource="pods") == 0
    assert value(recovered, "craft_watch_streams_failing", resource="configmaps") == 0
    assert value(recovered, "craft_watch_lists_total", resource="configmaps") == 1


async def test_every_stream_of_the_operator_reports_its_outcomes_not_only_the_childrens(
    metrics: Metrics, server: MetricsServer, tmp_path: Any
) -> None:
    """CraftChildWatchFailing promises every stream: the sandboxes', pools', policies',
    NetworkPolicies' and namespaces' as well as the children's."""
    metrics.track(
        watch_outcomes={
            ("craftsandboxes", "failing"): 1,
            ("craftsandboxes", "failure"): 4,
            ("namespaces", "list"): 2,
            ("craftsandboxpolicies", "failing"): 1,
            ("networkpolicies", "failure"): 3,
            ("craftsandboxpools", "list"): 5,
        }
    )
    samples = await scrape(server)
    assert value(samples, "craft_watch_streams_failing", resource="craftsandboxes") == 1
    assert value(samples, "craft_watch_failures_total", resource="craftsandboxes") == 4
    assert value(samples, "craft_watch_lists_total", resource="namespaces") == 2
    assert value(samples, "craft_watch_streams_failing", resource="craftsandboxpolicies") == 1
    assert value(samples, "craft_watch_failures_total", resource="networkpolicies") == 3
    assert value(samples, "craft_watch_lists_total", resource="craftsandboxpools") == 5
    assert value(samples, "craft_watch_streams_failing", resource="pods") == 0
    context = build_context(Settings(state_dir=tmp_path, server_url="http://onyx.test:8080"))
    streamed = {stream.name.split(" in ")[0] for stream in watch_streams(context)}
    assert streamed == {kind.api.plural for kind in KINDS}
    for family in ("craft_watch_streams_failing", "craft_watch_failures_total"):
        assert label_values(samples, family, "resource") == streamed


async def test_nothing_but_state_and_counts_reach_the_exposition(
    metrics: Metrics, server: MetricsServer
) -> None:
    token = "onyx_pat_" + "s3cr3t" * 6
    metrics.pat_minted(f"the stored token {token} does not match its PAT")
    metrics.sync_failed(f"token {token}")
    metrics.pat_failed(token)
    cache = ObjectCache()
    body = sandbox("alice", "Ready")
    body["status"]["credentials"] = {"tokenDisplay": token[:12]}
    cache.put(KIND, body)
    metrics.track(cache=cache)
    _, _, text = await fetch(server.url)
    assert "s3cr3t" not in text
    assert "onyx_pat" not in text
    assert "alice" not in text


def kept_without_policy(name: str, *, deleting: bool = False) -> dict[str, Any]:
    """A Ready sandbox whose PolicyEnforced is False: the policy went missing after it was
    admitted."""
    kept = sandbox(name, "Ready", ready=("True", NOW), deleting=deleting)
    kept["status"]["conditions"].append(
        {"type": "PolicyEnforced", "status": "False", "reason": "PolicyMissing"}
    )
    return kept


def test_sandboxes_kept_without_the_policy_are_counted_for_the_alert() -> None:
    kept = kept_without_policy("kept")
    bodies = [kept, sandbox("fine", "Ready", ready=("True", NOW)), sandbox("new", None)]

    assert count_sandboxes(bodies, NOW).without_policy == 1
    assert count_sandboxes([], NOW).without_policy == 0


def test_a_sandbox_being_deleted_is_not_counted_as_running_without_the_policy() -> None:
    """Its passes go to the finalizer and never to the policy step, so a PolicyEnforced
    False left from an outage stays on it after the policy is back (and paged for good)."""
    counts = count_sandboxes([kept_without_policy("leaving", deleting=True)], NOW)

    assert counts.by_phase["Terminating"] == 1
    assert counts.without_policy == 0


# -- warm pools ------------------------------------------------------------------------------


def pool_body(name: str, **status: int) -> dict[str, Any]:
    return {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandboxPool",
        "metadata": {"name": name, "namespace": "team-a", "resourceVersion": str(next(_VERSIONS))},
        "spec": {"replicas": 5},
        "status": dict(status),
    }


async def test_pool_pods_by_state_follow_the_pools_status_at_every_scrape(
    metrics: Metrics, server: MetricsServer
) -> None:
    cache = ObjectCache()
    metrics.track(cache=cache)
    cache.put("CraftSandboxPool", pool_body("standard", ready=3, creating=2, claimed=7))
    cache.put("CraftSandboxPool", pool_body("fresh"))
    samples = await scrape(server)
    where = {"namespace": "team-a", "pool": "standard"}
    assert value(samples, "craft_pool_pods", **where, state="ready") == 3
    assert value(samples, "craft_pool_pods", **where, state="creating") == 2
    assert value(samples, "craft_pool_pods", **where, state="claimed") == 7
    assert value(samples, "craft_pool_replicas", **where) == 5
    assert value(samples, "craft_pool_pods", namespace="team-a", pool="fresh", state="ready") == 0
    assert label_values(samples, "craft_pool_pods", "state") == {"ready", "creating", "claimed"}

    cache.forget("CraftSandboxPool", "team-a", "fresh")
    samples = await scrape(server)
    assert label_values(samples, "craft_pool_pods", "pool") == {"standard"}


async def test_a_pool_whose_status_is_not_an_object_shows_zeros_and_the_scrape_goes_on(
    metrics: Metrics, server: MetricsServer
) -> None:
    cache = ObjectCache()
    metrics.track(cache=cache)
    odd = pool_body("odd")
    odd["status"], odd["spec"] = "scaling", ["5"]
    cache.put("CraftSandboxPool", odd)
    cache.put("CraftSandboxPool", pool_body("standard", ready=3))
    samples = await scrape(server)
    assert value(samples, "craft_pool_pods", namespace="team-a", pool="odd", state="ready") == 0
    assert value(samples, "craft_pool_replicas", namespace="team-a", pool="odd") == 0
    assert (
        value(samples, "craft_pool_pods", namespace="team-a", pool="standard", state="ready") == 3
    )


async def test_claims_cold_starts_and_claim_latency_are_counted(
    metrics: Metrics, server: MetricsServer
) -> None:
    metrics.pool_seen("team-a", "standard")
    metrics.pool_seen("team-a", "big")
    metrics.pool_claimed("team-a", "standard", 0.04)
    metrics.pool_claimed("team-a", "standard")
    metrics.pool_cold_start(ColdStartReason.POOL_EMPTY, "team-a", "standard")
    metrics.pool_cold_start(ColdStartReason.NO_POOL, "team-a")  # a name that is no pool
    metrics.pool_cold_start("user alice had no luck", "team-a")
    samples = await scrape(server)
    standard = {"namespace": "team-a", "pool": "standard"}
    assert value(samples, "craft_pool_claims_total", **standard) == 2
    assert value(samples, "craft_pool_claims_total", namespace="team-a", pool="big") == 0
    assert value(samples, "craft_pool_claim_duration_seconds_count", **standard) == 1
    assert value(samples, "craft_pool_claim_duration_seconds_bucket", le="0.05", **standard) == 1
    assert value(samples, "craft_pool_cold_starts_total", reason="PoolEmpty", **standard) == 1
    assert value(samples, "craft_pool_cold_starts_total", reason="NoMatchingPool", **standard) == 0
    nowhere = {"namespace": "", "pool": ""}  # no series per namespace without a pool
    assert value(samples, "craft_pool_cold_starts_total", reason="NoPool", **nowhere) == 1
    assert value(samples, "craft_pool_cold_starts_total", reason="Other", **nowhere) == 1
    assert label_values(samples, "craft_pool_cold_starts_total", "pool") == {"standard", "big", ""}

    metrics.pool_gone("team-a", "big")
    samples = await scrape(server)
    assert label_values(samples, "craft_pool_claims_total", "pool") == {"standard"}
    assert label_values(samples, "craft_pool_cold_starts_total", "pool") == {"standard", ""}

    await metrics.pools_forgotten()  # standby: a pool deleted meanwhile would stay for good
    samples = await scrape(server)
    assert label_values(samples, "craft_pool_claims_total", "pool") == set()
    metrics.pool_seen("team-a", "standard")  # active again: each pool from zero when seen
    samples = await scrape(server)
    assert value(samples, "craft_pool_claims_total", **standard) == 0
    assert value(samples, "craft_pool_cold_starts_total", reason="NoPool", **nowhere) == 0


async def test_cold_starts_without_a_pool_are_exported_at_zero_from_the_start(
    metrics: Metrics, server: MetricsServer
) -> None:
    """So that the first one after a start or a failover shows in increase() and rate()."""
    samples = await scrape(server)
    nowhere = {"namespace": "", "pool": ""}
    assert value(samples, "craft_pool_cold_starts_total", reason="NoPool", **nowhere) == 0
    assert value(samples, "craft_pool_cold_starts_total", reason="Other", **nowhere) == 0


async def test_the_longest_running_pass_is_exported_and_falls_to_zero_when_it_ends(
    metrics: Metrics, server: MetricsServer
) -> None:
    stuck = asyncio.Event()

    async def handler(key: str) -> float | None:
        await stuck.wait()
        return None

    queue: WorkQueue[str] = WorkQueue(handler, concurrency=2)
    metrics.track(longest_running=queue.longest_running)
    assert value(await scrape(server), "craft_workqueue_longest_running_processor_seconds") == 0
    queue.add("stuck")
    queue.start()
    try:
        await asyncio.sleep(0.3)
        running = value(await scrape(server), "craft_workqueue_longest_running_processor_seconds")
        assert running is not None
        assert running >= 0.25
        stuck.set()
        await eventually(lambda: queue.processed == 1, what="the pass to end")
        assert value(await scrape(server), "craft_workqueue_longest_running_processor_seconds") == 0
    finally:
        await queue.stop()


def test_every_reason_a_library_sync_fails_with_is_its_own_label_not_other() -> None:
    """A reason missing from the set is counted as Other, which no runbook explains."""
    import craft_operator.reconciler.library_pool  # noqa: F401  # its errors, as subclasses
    from craft_operator.library.errors import LibrarySyncError
    from craft_operator.metrics.labels import SYNC_ERROR_REASONS

    def subclasses(cls: type) -> list[type]:
        return [cls, *(sub for child in cls.__subclasses__() for sub in subclasses(child))]

    reasons = {str(cls.reason) for cls in subclasses(LibrarySyncError)}
    assert reasons <= SYNC_ERROR_REASONS, reasons - SYNC_ERROR_REASONS
    assert {"SyncTimedOut", "SyncJobFailed"} <= SYNC_ERROR_REASONS  # Job mode's outcomes
