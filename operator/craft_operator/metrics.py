"""Prometheus metrics of the operator, on a private registry, served over HTTP.

:class:`Metrics` owns a :class:`~prometheus_client.CollectorRegistry` (never the global
one, so each test and each operator instance starts from zero). The reconciler reports
events through its methods (``observe_ready``, ``pat_minted``, ``sync_finished``, ...);
state the operator already keeps (the sandboxes in its watch cache, the work queue, the
API client's request counts) is read by a collector at scrape time, so it cannot drift.

Every label value comes from a fixed set defined here: a metric never carries a user id,
a sandbox name, a bucket or a token. Unknown reasons are counted as ``Other``.
:func:`start_metrics_server` serves ``/metrics`` with aiohttp in the operator's own event
loop: a loop that is stuck stops answering scrapes, which the ``up`` alert notices.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from craft_operator.api.models import KIND, ConditionStatus, CraftSandboxStatus, Phase
from craft_operator.api.status_codec import parse_status
from craft_operator.config import Settings
from craft_operator.policy.models import POLICY_ENFORCED

log = logging.getLogger(__name__)

PREFIX = "craft"

#: Time to Ready: 1 s to 10 min (image pulls and slow nodes make minutes normal).
READY_BUCKETS = (1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 240, 300, 420, 600)
#: One provisioning step: a database round trip (ms) up to a pod start (minutes).
PHASE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
#: One user-library sync: an empty diff (ms) up to a large library (half an hour).
SYNC_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)


class ProvisioningPhase(StrEnum):
    """The steps of provisioning whose durations are measured (the ``phase`` label)."""

    CREDENTIALS = "credentials"
    SECRET = "secret"  # noqa: S105 -- a step name, not a password
    SKILL = "skill"
    POD_CREATE = "pod_create"
    POD_READY = "pod_ready"
    CLI_VALIDATION = "cli_validation"


class MintReason(StrEnum):
    """Why a PAT was minted (the ``reason`` label of ``craft_pat_mints_total``)."""

    NEW = "new"
    RECREATED = "recreated"
    REQUESTED = "requested"
    REJECTED = "rejected"
    USER_CHANGED = "user_changed"
    TENANT_CHANGED = "tenant_changed"
    REVOKED = "revoked"
    EXPIRED = "expired"
    MISSING = "missing"
    RENEWAL = "renewal"
    LIFETIME = "lifetime"
    TOKEN_MISMATCH = "token_mismatch"  # noqa: S105 -- a label value, not a token
    UNDECRYPTABLE = "undecryptable"
    OTHER = "other"


# The credential store explains a mint in a sentence (it may name a PAT id); the metric
# needs a word from a fixed set. First match wins.
_MINT_PHRASES: tuple[tuple[str, MintReason], ...] = (
    ("no credential stored", MintReason.NEW),
    ("earlier sandbox of that name", MintReason.RECREATED),
    ("new pat was requested", MintReason.REQUESTED),
    ("was rejected", MintReason.REJECTED),
    ("user changed", MintReason.USER_CHANGED),
    ("tenant changed", MintReason.TENANT_CHANGED),
    ("is revoked", MintReason.REVOKED),
    ("is expired", MintReason.EXPIRED),
    ("is missing", MintReason.MISSING),
    ("renewal window", MintReason.RENEWAL),
    ("never expires", MintReason.LIFETIME),
    ("outlives", MintReason.LIFETIME),
    ("does not match", MintReason.TOKEN_MISMATCH),
    ("cannot be decrypted", MintReason.UNDECRYPTABLE),
)

#: Condition reasons of credential failures (see the reconciler's ``_credentials_reason``).
CREDENTIAL_ERROR_REASONS = frozenset(
    {
        "UserNotFound",
        "UserInactive",
        "DatabaseUnavailable",
        "KeyRingError",
        "DatabaseSchemaMissing",
        "CredentialsError",
        "RevokeFailed",
    }
)
#: ``LibrarySyncError.reason`` values (see ``craft_operator.library.errors``), and the
#: reconciler's reason for a Job-mode sync that failed without one.
SYNC_ERROR_REASONS = frozenset(
    {
        "SyncFailed",
        "LibraryMisconfigured",
        "FileTooLarge",
        "LibraryTooLarge",
        "S3Error",
        "S3Unavailable",
        "S3AccessDenied",
        "S3BucketNotFound",
        "LibraryChangedDuringSync",
        "DestinationFailed",
        "ExecFailed",
        "SyncJobFailed",
    }
)
OTHER = "Other"
#: HTTP methods the API client uses, as the ``verb`` label (anything else is ``other``).
API_VERBS = ("GET", "POST", "PUT", "PATCH", "DELETE")
#: Phases in which a sandbox is on its way to Ready; the oldest of them is a gauge. (Failed
#: sandboxes wait for a spec change: ``craft_sandboxes{phase="Failed"}`` counts them.)
_WAITING_PHASES = frozenset({Phase.PENDING.value, Phase.PROVISIONING.value})


def mint_reason(explanation: str | None) -> MintReason:
    """The bounded label for the credential store's explanation of a mint."""
    text = (explanation or "").lower()
    return next((reason for phrase, reason in _MINT_PHRASES if phrase in text), MintReason.OTHER)


def bounded(value: str, allowed: Iterable[str]) -> str:
    """``value`` if it is one of ``allowed``, else ``Other`` (labels must stay bounded)."""
    return value if value in allowed else OTHER


class SandboxCache(Protocol):
    """The part of the operator's watch cache the collector reads."""

    def items(self, kind: str) -> Iterator[tuple[Any, dict[str, Any]]]:
        """All cached objects of ``kind``."""
        ...


class QueueStats(Protocol):
    """The part of the work queue the collector reads."""

    processed: int
    failed: int

    def __len__(self) -> int: ...


@dataclass(frozen=True)
class SandboxCounts:
    """Sandboxes by phase, and how long the longest-waiting one has not been Ready."""

    by_phase: Mapping[str, int]
    oldest_not_ready_seconds: float
    #: Sandboxes kept running while the CraftSandboxPolicy is missing or unreadable.
    without_policy: int = 0


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def not_ready_since(body: Mapping[str, Any]) -> datetime | None:
    """When a sandbox last stopped being Ready (or was created), if it is not Ready now."""
    status, _ = parse_status(body.get("status"))
    for condition in status.conditions:
        if condition.type == "Ready":
            if condition.status == ConditionStatus.TRUE:
                return None
            if condition.last_transition_time is not None:
                return condition.last_transition_time
    return _parse_time((body.get("metadata") or {}).get("creationTimestamp"))


def time_to_ready(
    old_body: Mapping[str, Any], new_status: CraftSandboxStatus, now: datetime
) -> float | None:
    """Seconds to observe with :meth:`Metrics.observe_ready` when a reconcile pass turns a
    sandbox Ready, else ``None``: measured from :func:`not_ready_since` of the body as the
    pass found it (its creation, or when it lost Ready: pod replaced, woken from sleep)."""
    if new_status.phase != Phase.READY:
        return None
    if parse_status(old_body.get("status"))[0].phase == Phase.READY:
        return None
    since = not_ready_since(old_body)
    return None if since is None else max(0.0, (now - since).total_seconds())


def count_sandboxes(bodies: Iterable[Mapping[str, Any]], now: datetime) -> SandboxCounts:
    """Count sandboxes by ``status.phase`` (no status yet: Pending; being deleted:
    Terminating) and find the oldest one on its way to Ready (Pending or Provisioning)."""
    counts = {phase.value: 0 for phase in Phase}
    oldest = 0.0
    without_policy = 0
    for body in bodies:
        status, _ = parse_status(body.get("status"))
        if any(
            c.type == POLICY_ENFORCED and c.status == ConditionStatus.FALSE
            for c in status.conditions
        ):
            without_policy += 1
        phase = (status.phase or Phase.PENDING).value
        if (body.get("metadata") or {}).get("deletionTimestamp"):
            phase = Phase.TERMINATING.value
        counts[phase] += 1
        if phase in _WAITING_PHASES:
            since = not_ready_since(body)
            if since is not None:
                oldest = max(oldest, (now - since).total_seconds())
    return SandboxCounts(
        by_phase=counts, oldest_not_ready_seconds=oldest, without_policy=without_policy
    )


def _name(metric: str) -> str:
    return f"{PREFIX}_{metric}"


class _StateCollector(Collector):
    """Reads the operator's own state at scrape time: cache, queue and API client."""

    def __init__(self) -> None:
        self.cache: SandboxCache | None = None
        self.queue: QueueStats | None = None
        self.queue_backlog: Callable[[], int] | None = None
        self.api_requests: Mapping[str, int] | None = None
        self.active: Callable[[], bool] | None = None
        self.clock: Callable[[], datetime] = lambda: datetime.now(UTC)

    def describe(self) -> Iterable[Metric]:
        """The metric names, so the registry can refuse a duplicate."""
        return list(self._families(with_samples=False))

    def collect(self) -> Iterable[Metric]:
        """The current values."""
        return list(self._families(with_samples=True))

    def _families(self, *, with_samples: bool) -> Iterator[Metric]:
        phases = GaugeMetricFamily(
            _name("sandboxes"), "CraftSandboxes known to the operator, by phase.", labels=["phase"]
        )
        oldest = GaugeMetricFamily(
            _name("sandbox_oldest_not_ready_seconds"),
            "Seconds the longest-waiting Pending or Provisioning sandbox has not been Ready "
            "(0 when none waits).",
        )
        without_policy = GaugeMetricFamily(
            _name("sandboxes_without_policy"),
            "Sandboxes admitted before that keep running while the CraftSandboxPolicy is "
            "missing or unreadable (condition PolicyEnforced False).",
        )
        if with_samples and self.cache is not None:
            bodies = (body for _, body in self.cache.items(KIND))
            counts = count_sandboxes(bodies, self.clock())
            for phase, count in counts.by_phase.items():
                phases.add_metric([phase], count)
            oldest.add_metric([], counts.oldest_not_ready_seconds)
            without_policy.add_metric([], counts.without_policy)
        yield phases
        yield oldest
        yield without_policy

        depth = GaugeMetricFamily(
            _name("workqueue_depth"),
            "Sandboxes in the work queue, due now or later (periodic revisits included).",
        )
        backlog = GaugeMetricFamily(
            _name("workqueue_backlog"),
            "Sandboxes whose reconcile is due but not started yet (workers busy).",
        )
        passes = CounterMetricFamily(
            _name("reconcile_passes"), "Reconcile passes run (successful or not)."
        )
        failures = CounterMetricFamily(
            _name("reconcile_failures"),
            "Reconcile passes that failed and were retried with backoff.",
        )
        if with_samples and self.queue is not None:
            depth.add_metric([], len(self.queue))
            passes.add_metric([], self.queue.processed + self.queue.failed)
            failures.add_metric([], self.queue.failed)
        if with_samples and self.queue_backlog is not None:
            backlog.add_metric([], self.queue_backlog())
        yield depth
        yield backlog
        yield passes
        yield failures

        requests = CounterMetricFamily(
            _name("api_requests"),
            "Requests the operator's own client sent to the Kubernetes API, by HTTP verb "
            "(kopf's watches are not included).",
            labels=["verb"],
        )
        if with_samples and self.api_requests is not None:
            snapshot = dict(self.api_requests)
            for verb in API_VERBS:
                requests.add_metric([verb], snapshot.pop(verb, 0))
            requests.add_metric(["other"], sum(snapshot.values()))
        yield requests

        active = GaugeMetricFamily(
            _name("replica_active"),
            "1 while this replica reconciles, 0 while it is the standby of an active/standby pair.",
        )
        if with_samples and self.active is not None:
            active.add_metric([], 1.0 if self.active() else 0.0)
        yield active


class Metrics:
    """The operator's metrics; the reconciler calls the methods, a server exposes them."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self._ready = Histogram(
            _name("sandbox_time_to_ready_seconds"),
            "Seconds from a sandbox's creation (or from losing Ready: pod replaced, woken "
            "from sleep) until it is Ready.",
            buckets=READY_BUCKETS,
            registry=r,
        )
        self._phase = Histogram(
            _name("provisioning_phase_duration_seconds"),
            "Seconds one provisioning step took, by phase.",
            ["phase"],
            buckets=PHASE_BUCKETS,
            registry=r,
        )
        self._minted = Counter(
            _name("pat_mints"), "PATs minted, by why a new one was needed.", ["reason"], registry=r
        )
        self._reused = Counter(
            _name("pat_reuses"), "Times a sandbox's stored PAT was reused.", registry=r
        )
        self._pat_errors = Counter(
            _name("pat_errors"),
            "Failures to mint, reuse or revoke a PAT, by condition reason.",
            ["reason"],
            registry=r,
        )
        self._orphans_revoked = Counter(
            _name("orphaned_pats_revoked"),
            "PATs revoked by the orphan sweep because their CraftSandbox was gone.",
            registry=r,
        )
        self._sync_bytes = Counter(
            _name("user_library_sync_bytes"),
            "Bytes of user-library files copied into sandboxes.",
            registry=r,
        )
        self._sync_seconds = Histogram(
            _name("user_library_sync_duration_seconds"),
            "Seconds one successful user-library sync took.",
            buckets=SYNC_BUCKETS,
            registry=r,
        )
        self._sync_errors = Counter(
            _name("user_library_sync_errors"),
            "User-library syncs that failed, by condition reason.",
            ["reason"],
            registry=r,
        )
        # Show every label value from the start: a rate() over a series that appears
        # only with its first increment misses that increment.
        for phase in ProvisioningPhase:
            self._phase.labels(phase.value)
        for mint in MintReason:
            self._minted.labels(mint.value)
        for error in (*sorted(CREDENTIAL_ERROR_REASONS), OTHER):
            self._pat_errors.labels(error)
        for error in (*sorted(SYNC_ERROR_REASONS), OTHER):
            self._sync_errors.labels(error)
        self._state = _StateCollector()
        r.register(self._state)

    # -- state read at scrape time --------------------------------------------------------------

    def track(
        self,
        *,
        cache: SandboxCache | None = None,
        queue: QueueStats | None = None,
        queue_backlog: Callable[[], int] | None = None,
        api_requests: Mapping[str, int] | None = None,
        active: Callable[[], bool] | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        """Read these at each scrape: the watch cache (sandboxes by phase), the work queue
        (depth, passes, failures), a backlog callback, the API client's request counts
        (``KubeClient.requests``) and whether the replica is active. Call again to replace
        one; ``None`` keeps the current."""
        state = self._state
        state.cache = cache if cache is not None else state.cache
        state.queue = queue if queue is not None else state.queue
        state.queue_backlog = queue_backlog if queue_backlog is not None else state.queue_backlog
        state.api_requests = api_requests if api_requests is not None else state.api_requests
        state.active = active if active is not None else state.active
        state.clock = clock if clock is not None else state.clock

    # -- events the reconciler reports ----------------------------------------------------------

    def observe_ready(self, seconds: float) -> None:
        """A sandbox became Ready ``seconds`` after creation (or after it lost Ready)."""
        self._ready.observe(max(0.0, seconds))

    def observe_phase(self, phase: ProvisioningPhase | str, seconds: float) -> None:
        """One provisioning step took ``seconds``; ``phase`` must be a :class:`ProvisioningPhase`
        value (anything else is a programming error and raises ``ValueError``)."""
        self._phase.labels(ProvisioningPhase(phase).value).observe(max(0.0, seconds))

    def pat_minted(self, reason: MintReason | str | None) -> None:
        """A PAT was minted; ``reason`` is a :class:`MintReason` or the store's explanation
        (``IssuedCredential.reason``), which is mapped to one."""
        label = reason if isinstance(reason, MintReason) else mint_reason(reason)
        self._minted.labels(label.value).inc()

    def pat_reused(self) -> None:
        """The stored PAT was reused."""
        self._reused.inc()

    def pat_failed(self, reason: str) -> None:
        """Minting, reusing or revoking a PAT failed with this condition reason."""
        self._pat_errors.labels(bounded(reason, CREDENTIAL_ERROR_REASONS)).inc()

    def orphans_revoked(self, count: int) -> None:
        """The orphan sweep revoked ``count`` PATs."""
        self._orphans_revoked.inc(max(0, count))

    def sync_finished(self, bytes_transferred: int, seconds: float) -> None:
        """A user-library sync succeeded after copying ``bytes_transferred`` bytes."""
        self._sync_bytes.inc(max(0, bytes_transferred))
        self._sync_seconds.observe(max(0.0, seconds))

    def sync_failed(self, reason: str) -> None:
        """A user-library sync failed; ``reason`` is the error's ``LibrarySyncError.reason``."""
        self._sync_errors.labels(bounded(reason, SYNC_ERROR_REASONS)).inc()


class MetricsServer:
    """A running ``/metrics`` endpoint; :meth:`stop` closes it."""

    def __init__(self, runner: web.AppRunner, host: str, port: int) -> None:
        self._runner = runner
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        """The scrape URL (with the port actually bound)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host  # noqa: S104
        return f"http://{host}:{self.port}/metrics"

    async def stop(self) -> None:
        """Stop serving and release the port."""
        await self._runner.cleanup()


def metrics_app(registry: CollectorRegistry) -> web.Application:
    """An aiohttp application serving ``registry`` at ``/metrics`` (text or OpenMetrics)."""

    async def scrape(request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        body = encoder(registry)
        response = web.Response(body=body)
        response.headers["Content-Type"] = content_type
        return response

    app = web.Application()
    app.router.add_get("/metrics", scrape)
    return app


async def start_metrics_server(
    registry: CollectorRegistry,
    port: int,
    host: str = "0.0.0.0",  # noqa: S104 -- Prometheus scrapes the pod IP
) -> MetricsServer:
    """Serve ``registry`` on ``host:port`` in the running event loop.

    ``port=0`` binds a free port (tests use it with ``host="127.0.0.1"``); in the operator,
    :func:`start_from_settings` treats CRAFT_METRICS_PORT=0 as "disabled" instead.
    """
    runner = web.AppRunner(metrics_app(registry), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    bound = port
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            bound = int(address[1])
            break
    log.info("serving Prometheus metrics on %s:%d/metrics", host, bound)
    return MetricsServer(runner, host, bound)


async def start_from_settings(metrics: Metrics, settings: Settings) -> MetricsServer | None:
    """Serve ``metrics`` on all interfaces at CRAFT_METRICS_PORT; ``None`` when it is 0."""
    if settings.metrics_port == 0:
        log.info("Prometheus metrics are disabled (CRAFT_METRICS_PORT=0)")
        return None
    return await start_metrics_server(metrics.registry, settings.metrics_port)
