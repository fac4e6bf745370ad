"""What the handlers share (kopf's ``memo``): settings, the cache, the queue, the services."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from craft_operator.config import Settings
from craft_operator.kube.cache import ObjectCache
from craft_operator.kube.client import KubeClient
from craft_operator.kube.events import EventRecorder
from craft_operator.peering.gate import ActivityGate
from craft_operator.reconciler.orphan_sweep import OrphanSweeper
from craft_operator.reconciler.queue import WorkQueue
from craft_operator.reconciler.sandbox import RetryLaterError, SandboxReconciler

SandboxKey = tuple[str, str]


@dataclass
class OperatorContext:
    """Passed to every handler as ``memo``; kopf shallow-copies it, so all share these."""

    settings: Settings
    kube: KubeClient
    cache: ObjectCache
    reconciler: SandboxReconciler
    events: EventRecorder
    queue: WorkQueue[SandboxKey] = field(init=False)
    #: Whether this replica acts (always, unless it is a standby in an active/standby pair).
    gate: ActivityGate = field(init=False)
    #: Revokes PATs of deleted sandboxes (started with the workers), if configured.
    sweeper: OrphanSweeper | None = None
    #: Tasks the start-up handler started, cancelled by the clean-up handler.
    background: set[asyncio.Task[None]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.queue = WorkQueue(
            self.reconciler.reconcile,
            concurrency=self.settings.workers,
            expected=(RetryLaterError,),
        )
        self.gate = ActivityGate(kube=self.kube, cache=self.cache, queue=self.queue)
        pool = self.reconciler.s.library_pool
        pool.wake = self.queue.add
        self.gate.stop_also.append(pool.close)
