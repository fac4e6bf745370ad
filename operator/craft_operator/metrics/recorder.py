"""The :class:`Metrics` the reconciler reports events to, on a private registry."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Histogram

from craft_operator.metrics.labels import (
    CREDENTIAL_ERROR_REASONS,
    OTHER,
    PHASE_BUCKETS,
    READY_BUCKETS,
    SYNC_BUCKETS,
    SYNC_ERROR_REASONS,
    MintReason,
    ProvisioningPhase,
    bounded,
    metric_name,
    mint_reason,
)
from craft_operator.metrics.pools import ColdStartReason, PoolCounters
from craft_operator.metrics.state import EventStats, QueueStats, SandboxCache, StateCollector

#: New sandboxes whose moment of creation is remembered until they are Ready.
SEEN_LIMIT = 4096


class Metrics:
    """The operator's metrics; the reconciler calls the methods, a server exposes them."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._declare_provisioning()
        self._declare_credentials()
        self._declare_library_sync()
        self._pools = PoolCounters(self.registry)
        self._state = StateCollector()
        self.registry.register(self._state)
        #: When the operator saw each new sandbox, by uid (see :meth:`saw_created`).
        self._seen: dict[str, datetime] = {}

    def _declare_provisioning(self) -> None:
        self._ready = Histogram(
            metric_name("sandbox_time_to_ready_seconds"),
            "Seconds until a sandbox is Ready from its creation, losing Ready (pod "
            "replaced) or waking from idle sleep, whichever came last.",
            buckets=READY_BUCKETS,
            registry=self.registry,
        )
        self._phase = Histogram(
            metric_name("provisioning_phase_duration_seconds"),
            "Seconds one provisioning step took, by phase.",
            ["phase"],
            buckets=PHASE_BUCKETS,
            registry=self.registry,
        )
        # Show every label value from the start: a rate() over a series that appears
        # only with its first increment misses that increment.
        for phase in ProvisioningPhase:
            self._phase.labels(phase.value)

    def _declare_credentials(self) -> None:
        r = self.registry
        self._minted = Counter(
            metric_name("pat_mints"),
            "PATs minted, by why a new one was needed.",
            ["reason"],
            registry=r,
        )
        self._reused = Counter(
            metric_name("pat_reuses"), "Times a sandbox's stored PAT was reused.", registry=r
        )
        self._pat_errors = Counter(
            metric_name("pat_errors"),
            "Failures to mint, reuse or revoke a PAT, by condition reason.",
            ["reason"],
            registry=r,
        )
        self._orphans_revoked = Counter(
            metric_name("orphaned_pats_revoked"),
            "PATs revoked by the orphan sweep because their CraftSandbox was gone.",
            registry=r,
        )
        for mint in MintReason:
            self._minted.labels(mint.value)
        for error in (*sorted(CREDENTIAL_ERROR_REASONS), OTHER):
            self._pat_errors.labels(error)

    def _declare_library_sync(self) -> None:
        r = self.registry
        self._sync_bytes = Counter(
            metric_name("user_library_sync_bytes"),
            "Bytes of user-library files copied into sandboxes.",
            registry=r,
        )
        self._sync_seconds = Histogram(
            metric_name("user_library_sync_duration_seconds"),
            "Seconds one successful user-library sync took.",
            buckets=SYNC_BUCKETS,
            registry=r,
        )
        self._sync_errors = Counter(
            metric_name("user_library_sync_errors"),
            "User-library syncs that failed, by condition reason.",
            ["reason"],
            registry=r,
        )
        for error in (*sorted(SYNC_ERROR_REASONS), OTHER):
            self._sync_errors.labels(error)

    # -- state read at scrape time --------------------------------------------------------------

    def track(
        self,
        *,
        cache: SandboxCache | None = None,
        queue: QueueStats | None = None,
        queue_backlog: Callable[[], int] | None = None,
        longest_running: Callable[[], float] | None = None,
        api_requests: Mapping[str, int] | None = None,
        watch_outcomes: Mapping[tuple[str, str], int] | None = None,
        active: Callable[[], bool] | None = None,
        clock: Callable[[], datetime] | None = None,
        events: EventStats | None = None,
    ) -> None:
        """Read these at each scrape: the watch cache (sandboxes by phase), the work queue
        (depth, passes, failures), a backlog callback, one for the age of the oldest pass
        running, the API client's request counts
        (``KubeClient.requests``), the watch streams' lists and failures
        (``KubeClient.watch_outcomes``), whether the replica is active and the event
        recorder's counts. Call again to replace one; ``None`` keeps the current."""
        state = self._state
        state.cache = cache if cache is not None else state.cache
        state.queue = queue if queue is not None else state.queue
        state.queue_backlog = queue_backlog if queue_backlog is not None else state.queue_backlog
        if longest_running is not None:
            state.longest_running = longest_running
        state.api_requests = api_requests if api_requests is not None else state.api_requests
        if watch_outcomes is not None:
            state.watch_outcomes = watch_outcomes
        state.active = active if active is not None else state.active
        state.clock = clock if clock is not None else state.clock
        state.events = events if events is not None else state.events

    # -- events the reconciler reports ----------------------------------------------------------

    def observe_ready(self, seconds: float) -> None:
        """A sandbox became Ready ``seconds`` after creation (or after it lost Ready)."""
        self._ready.observe(max(0.0, seconds))

    def saw_created(self, uid: str, moment: datetime) -> None:
        """The watch brought a sandbox created moments ago: ``moment`` says its creation to
        the millisecond, where its ``creationTimestamp`` says only the second (a warm claim
        is Ready in a fraction of one). Kept until it is Ready or deleted, at most
        :data:`SEEN_LIMIT`, the oldest dropped first (a sandbox whose moment was dropped is
        measured to the second)."""
        self._seen.pop(uid, None)
        self._seen[uid] = moment
        while len(self._seen) > SEEN_LIMIT:
            del self._seen[next(iter(self._seen))]

    def take_seen(self, uid: str) -> datetime | None:
        """The moment :meth:`saw_created` recorded for ``uid``, once."""
        return self._seen.pop(uid, None)

    def sandbox_gone(self, uid: str) -> None:
        """Sandbox ``uid`` was deleted: the moment it was seen goes too (it never became
        Ready, or it would have been taken)."""
        self._seen.pop(uid, None)

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

    # -- warm pools (reported by the claim) -----------------------------------------------------

    def pool_seen(self, namespace: str, pool: str) -> None:
        """The pool controller saw this pool: its claim metrics are exported from zero."""
        self._pools.seen(namespace, pool)

    def pool_gone(self, namespace: str, pool: str) -> None:
        """The pool was deleted: its claim metrics go."""
        self._pools.gone(namespace, pool)

    async def pools_forgotten(self) -> None:
        """The replica stands by: every pool's claim metrics go (see ``PoolCounters``)."""
        self._pools.forget_all()

    def pool_claimed(self, namespace: str, pool: str, seconds: float | None = None) -> None:
        """A sandbox claimed a pod of this warm pool; ``seconds``: how long the claim took."""
        self._pools.claimed(namespace, pool, seconds)

    def pool_cold_start(
        self, reason: ColdStartReason | str, namespace: str, pool: str = ""
    ) -> None:
        """A sandbox that could have used a pool started cold, for this
        :class:`~craft_operator.metrics.pools.ColdStartReason` (others count as Other);
        ``pool``: the existing pool involved, if any."""
        self._pools.cold_start(reason, namespace, pool)
