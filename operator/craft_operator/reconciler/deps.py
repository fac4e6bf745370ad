"""The one services object: everything a reconcile pass and its steps talk to.

The reconciler receives it and hands it to each step (``policy_step``, ``library_exec``,
...); the handlers' memo (:class:`~craft_operator.context.OperatorContext`) holds the same
object, so nothing outside the reconciler reaches into it for the metrics, the sync pool or
the credentials.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from craft_operator.config import Settings
from craft_operator.kube.cache import ObjectCache
from craft_operator.kube.client import KubeClient
from craft_operator.kube.exec import ExecResult, ExecTransport
from craft_operator.metrics import Metrics
from craft_operator.reconciler.detached import DetachedCalls
from craft_operator.reconciler.library_pool import LibrarySyncPool
from craft_operator.reconciler.ports import (
    CredentialsPort,
    EventSink,
    LibraryPort,
    SkillsPort,
)


@dataclass
class Services:
    """Everything a reconcile pass talks to."""

    settings: Settings
    kube: KubeClient
    cache: ObjectCache
    credentials: CredentialsPort
    skills: SkillsPort
    exec: ExecTransport
    events: EventSink
    library: LibraryPort
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    #: Seconds of a clock that never steps, for waits kept in memory (see ``deadline``).
    steady: Callable[[], float] = time.monotonic
    metrics: Metrics = field(default_factory=Metrics)
    library_pool: LibrarySyncPool = field(default_factory=LibrarySyncPool)
    #: The PAT deliveries (onyx-cli's exec) that outlive the pass that started them.
    deliveries: DetachedCalls[ExecResult] = field(default_factory=DetachedCalls)
    #: Status fields the API server was seen to drop from a write (an older CRD installed),
    #: by kind (``("CraftSandboxPool", "status.selector")``), each said once by this process
    #: until a write keeps it, with when it was last seen dropped (``steady``'s seconds; see
    #: :mod:`craft_operator.reconciler.dropped_status`).
    dropped_status_fields: dict[tuple[str, str], float] = field(default_factory=dict)
