"""The warm pools' metrics: pods by state (read from the pools' status at scrape time) and
what a claim reports (claims, cold starts by reason, claim latency).

The ``namespace`` and ``pool`` labels name the platform's pools, a handful that an
administrator creates, never a user or a sandbox (nor a pool name a sandbox gave that is
not a pool); the states and reasons are fixed sets.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from enum import StrEnum
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from craft_operator.metrics.labels import OTHER, metric_name

#: Claim latency: finding a Ready pool pod and the claim's one write, milliseconds mostly.
CLAIM_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class PoolPodState(StrEnum):
    """The ``state`` label of ``craft_pool_pods``."""

    READY = "ready"
    CREATING = "creating"
    CLAIMED = "claimed"


class ColdStartReason(StrEnum):
    """Why a sandbox started cold instead of claiming a pool pod (the ``reason`` label)."""

    NO_POOL = "NoPool"  # it names a pool that does not exist
    NO_MATCHING_POOL = "NoMatchingPool"  # no pool has its image, resources and scheduling
    POOL_EMPTY = "PoolEmpty"  # the pool had no Ready pod
    CLAIM_CONFLICT = "ClaimConflict"  # every Ready pod was claimed by another sandbox first
    CLAIM_FAILED = "ClaimFailed"  # the claim's write or delivery failed
    NOT_AS_BUILT = "PoolPodNotAsBuilt"  # the Ready pods it looked at were not the operator's make
    # A NetworkPolicy would let a claimed pod's egress out (it selects claimed pods).
    EGRESS_NOT_RESTRICTED = "EgressNotRestricted"


def cold_start_reason(reason: str) -> str:
    """``reason`` if it is a :class:`ColdStartReason`, else ``Other``."""
    return reason if reason in set(ColdStartReason) else OTHER


#: The reasons a cold start can have with a pool named: a pool that exists, whose pods
#: were missing, unlike the sandbox's, taken, or not claimable (NoPool names none: the name
#: the sandbox gave is not a pool, and a label never carries what a CR author wrote).
POOL_REASONS = (
    ColdStartReason.NO_MATCHING_POOL,
    ColdStartReason.POOL_EMPTY,
    ColdStartReason.CLAIM_CONFLICT,
    ColdStartReason.CLAIM_FAILED,
    ColdStartReason.NOT_AS_BUILT,
    ColdStartReason.EGRESS_NOT_RESTRICTED,
)


class PoolCounters:
    """The metrics a claim reports; :class:`~craft_operator.metrics.Metrics` holds one.

    Labelled by the pool's ``namespace`` and name (``pool``; empty when the cold start
    concerns no existing pool). A pool's series start at zero when its controller first
    sees it (:meth:`seen`) and go with it (:meth:`gone`).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._claims = Counter(
            metric_name("pool_claims"),
            "Sandboxes that claimed a warm pool pod, by the pool's namespace and name.",
            ["namespace", "pool"],
            registry=registry,
        )
        self._cold = Counter(
            metric_name("pool_cold_starts"),
            "Sandboxes that could have used a pool but started a pod cold, by reason, and by "
            "the pool's namespace and name (empty when no existing pool was involved).",
            ["namespace", "pool", "reason"],
            registry=registry,
        )
        self._latency = Histogram(
            metric_name("pool_claim_duration_seconds"),
            "Seconds a claim took: finding a Ready pool pod and writing the claim (the "
            "deliveries by exec that follow are in the time to Ready), by pool.",
            ["namespace", "pool"],
            buckets=CLAIM_BUCKETS,
            registry=registry,
        )
        self._declare_poolless()

    def _declare_poolless(self) -> None:
        """The cold starts that concern no existing pool are exported from the start (at
        zero), so that the first one shows in ``increase()`` after a start or a failover."""
        for reason in (ColdStartReason.NO_POOL, OTHER):
            self._cold.labels("", "", str(reason))

    def seen(self, namespace: str, pool: str) -> None:
        """The pool exists: its series are exported (at zero until something happens)."""
        self._claims.labels(namespace, pool)
        self._latency.labels(namespace, pool)
        for reason in POOL_REASONS:
            self._cold.labels(namespace, pool, str(reason))

    def gone(self, namespace: str, pool: str) -> None:
        """The pool was deleted: its series go (its name may never come back)."""
        for metric in (self._claims, self._latency):
            with contextlib.suppress(KeyError):
                metric.remove(namespace, pool)
        for reason in (*ColdStartReason, OTHER):
            with contextlib.suppress(KeyError):
                self._cold.remove(namespace, pool, str(reason))

    def forget_all(self) -> None:
        """The replica stands by: every pool's series go (a pool deleted meanwhile would
        keep its own for good); on activation each pool's come back at zero when seen."""
        for metric in (self._claims, self._latency, self._cold):
            metric.clear()
        self._declare_poolless()

    def claimed(self, namespace: str, pool: str, seconds: float | None = None) -> None:
        """A sandbox claimed a pod of ``pool`` (in ``seconds``, if given)."""
        where = _where(namespace, pool)
        self._claims.labels(*where).inc()
        if seconds is not None:
            self._latency.labels(*where).observe(max(0.0, seconds))

    def cold_start(self, reason: ColdStartReason | str, namespace: str, pool: str = "") -> None:
        """A sandbox started cold; ``reason`` outside :class:`ColdStartReason` counts as Other;
        ``pool``: the existing pool involved, if any."""
        self._cold.labels(*_where(namespace, pool), cold_start_reason(str(reason))).inc()


def _where(namespace: str, pool: str) -> tuple[str, str]:
    """The labels of a pool's series; without a pool, no namespace either: a sandbox in any
    namespace (all namespaces come and go) must not mint a series of its own."""
    return (namespace, pool) if pool else ("", "")


def _count(value: Any) -> float:
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else 0.0


def _object(value: Any) -> dict[str, Any]:
    """``value`` if it is an object, else an empty one: a pool written by hand with a status
    that is not an object shows zeros, and never fails the scrape."""
    return value if isinstance(value, dict) else {}


def pool_families(bodies: Iterable[dict[str, Any]] | None) -> Iterator[Metric]:
    """``craft_pool_pods`` (by namespace, pool and state) and ``craft_pool_replicas``, from
    the pools' own status and spec (the pool controller counts its pods each pass)."""
    pods = GaugeMetricFamily(
        metric_name("pool_pods"),
        "Pods of each warm pool, by state: ready (unclaimed, current template), creating "
        "(unclaimed, not Ready yet), claimed (now a sandbox's).",
        labels=["namespace", "pool", "state"],
    )
    replicas = GaugeMetricFamily(
        metric_name("pool_replicas"),
        "Unclaimed pods each warm pool should hold (spec.replicas).",
        labels=["namespace", "pool"],
    )
    for body in bodies or ():
        meta, status, spec = (_object(body.get(key)) for key in ("metadata", "status", "spec"))
        where = [str(meta.get("namespace", "")), str(meta.get("name", ""))]
        for state in PoolPodState:
            pods.add_metric([*where, state.value], _count(status.get(state.value)))
        replicas.add_metric(where, _count(spec.get("replicas")))
    yield pods
    yield replicas
