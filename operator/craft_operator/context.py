"""What the handlers share (kopf's ``memo``): the services, the reconciler, the queue."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from craft_operator.config import Settings
from craft_operator.kube import kinds
from craft_operator.kube.cache import ObjectCache
from craft_operator.kube.client import KubeClient
from craft_operator.kube.events import EventRecorder
from craft_operator.peering.gate import ActivityGate
from craft_operator.reconciler.api_away import ApiRefusedError, ApiServerAwayError
from craft_operator.reconciler.deps import Services
from craft_operator.reconciler.orphan_sweep import OrphanSweeper
from craft_operator.reconciler.pool import (
    POOL_WORKERS,
    PoolKey,
    PoolReconciler,
    PoolRetryLaterError,
)
from craft_operator.reconciler.queue import WorkQueue
from craft_operator.reconciler.sandbox import RetryLaterError, SandboxReconciler

SandboxKey = tuple[str, str]


@dataclass
class OperatorContext:
    """Passed to every handler as ``memo``; kopf shallow-copies it, so all share these.

    It holds the one :class:`Services` object the reconciler and its steps receive, and
    builds the reconciler from it, so there is no second copy of the settings, the client
    or the cache to fall out of step.
    """

    services: Services
    #: The event recorder the start-up and clean-up handlers start and stop: the same
    #: object as ``services.events``, kept with its concrete type for its lifecycle.
    events: EventRecorder
    reconciler: SandboxReconciler = field(init=False)
    queue: WorkQueue[SandboxKey] = field(init=False)
    #: The warm pools' reconciler and its own queue (a refill never takes a sandbox's worker).
    pool_reconciler: PoolReconciler = field(init=False)
    pool_queue: WorkQueue[PoolKey] = field(init=False)
    #: Whether this replica acts (always, unless it is a standby in an active/standby pair).
    gate: ActivityGate = field(init=False)
    #: Revokes PATs of deleted sandboxes (started with the workers), if configured.
    sweeper: OrphanSweeper | None = None
    #: Tasks the start-up handler started, cancelled by the clean-up handler.
    background: set[asyncio.Task[None]] = field(default_factory=set)
    #: Set once a stop is asked for (a signal, the caller's stop flag): the drain gives the
    #: passes in progress their grace, so the clean-up handler stops what is left at once.
    stop_requested: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        if self.services.events is not self.events:
            raise ValueError("the memo's event recorder must be the services' event sink")
        self.reconciler = SandboxReconciler(self.services)
        self.queue = WorkQueue(
            self.reconciler.reconcile,
            concurrency=self.settings.workers,
            expected=(RetryLaterError, ApiServerAwayError, ApiRefusedError),
            waits_out=(ApiServerAwayError,),
        )
        self.pool_reconciler = PoolReconciler(self.services)
        self.pool_queue = WorkQueue(
            self.pool_reconciler.reconcile,
            concurrency=POOL_WORKERS,
            expected=(PoolRetryLaterError, ApiServerAwayError, ApiRefusedError),
        )
        self.gate = ActivityGate(kube=self.kube, cache=self.cache, queue=self.queue)
        self.gate.followers.append((self.pool_queue, kinds.POOL.name))
        pool = self.services.library_pool
        pool.wake = self.queue.wake
        self.gate.stop_also.append(pool.close)
        deliveries = self.services.deliveries
        deliveries.wake = self.queue.wake
        self.gate.stop_also.append(deliveries.close)
        self.gate.stop_also.append(self.reconciler.forget_all)
        self.gate.stop_also.append(self.pool_reconciler.forget_all)
        self.gate.stop_also.append(self.services.metrics.pools_forgotten)

    @property
    def settings(self) -> Settings:
        """The operator's settings (the services')."""
        return self.services.settings

    @property
    def kube(self) -> KubeClient:
        """The Kubernetes client (the services')."""
        return self.services.kube

    @property
    def cache(self) -> ObjectCache:
        """The object cache the watches fill (the services')."""
        return self.services.cache

    def echo_check(self, meta: Mapping[str, Any]) -> Callable[[], bool]:
        """Whether the object version ``meta`` names came from the operator's own write:
        asked when the pass running as its event arrived ends (``WorkQueue.add``)."""
        uid, version = str(meta.get("uid", "")), str(meta.get("resourceVersion", ""))
        return lambda: self.kube.wrote(uid, version)
