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

The modules: :mod:`.labels` (the bounded label values and buckets), :mod:`.sandboxes`
(time to Ready and sandboxes by phase, read from bodies), :mod:`.pools` (the warm pools'
pods, claims and cold starts), :mod:`.state` (the scrape-time collector), :mod:`.recorder`
(:class:`Metrics`) and :mod:`.server` (``/metrics``).
"""

from craft_operator.metrics.labels import (
    API_VERBS,
    CREDENTIAL_ERROR_REASONS,
    OTHER,
    PHASE_BUCKETS,
    PREFIX,
    READY_BUCKETS,
    SYNC_BUCKETS,
    SYNC_ERROR_REASONS,
    MintReason,
    ProvisioningPhase,
    bounded,
    mint_reason,
)
from craft_operator.metrics.pools import CLAIM_BUCKETS, ColdStartReason, PoolPodState
from craft_operator.metrics.recorder import Metrics
from craft_operator.metrics.sandboxes import (
    SandboxCounts,
    count_sandboxes,
    not_ready_since,
    time_to_ready,
)
from craft_operator.metrics.server import (
    MetricsPortError,
    MetricsServer,
    metrics_app,
    start_from_settings,
    start_metrics_server,
)
from craft_operator.metrics.state import QueueStats, SandboxCache

__all__ = [
    "API_VERBS",
    "CLAIM_BUCKETS",
    "CREDENTIAL_ERROR_REASONS",
    "OTHER",
    "PHASE_BUCKETS",
    "PREFIX",
    "READY_BUCKETS",
    "SYNC_BUCKETS",
    "SYNC_ERROR_REASONS",
    "ColdStartReason",
    "Metrics",
    "MetricsPortError",
    "MetricsServer",
    "MintReason",
    "PoolPodState",
    "ProvisioningPhase",
    "QueueStats",
    "SandboxCache",
    "SandboxCounts",
    "bounded",
    "count_sandboxes",
    "metrics_app",
    "mint_reason",
    "not_ready_since",
    "start_from_settings",
    "start_metrics_server",
    "time_to_ready",
]
