"""The collector that reads the operator's own state at scrape time (watch cache, work
queue, API client, active replica), so that those figures cannot drift."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from craft_operator.api.models import KIND
from craft_operator.api.pool import POOL_KIND
from craft_operator.kube.kinds import KINDS
from craft_operator.kube.watch import FAILING, FAILURE, LIST
from craft_operator.metrics.labels import API_VERBS, metric_name
from craft_operator.metrics.pools import pool_families
from craft_operator.metrics.sandboxes import SandboxCounts, count_sandboxes

log = logging.getLogger("craft_operator.metrics")
#: The resources of the operator's own watch streams: one per cached kind (children, the
#: sandboxes, pools, the policy, NetworkPolicies and namespaces), as their counts are keyed.
STREAMED = tuple(dict.fromkeys(kind.api.plural for kind in KINDS))


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


class EventStats(Protocol):
    """The part of the event recorder the collector reads."""

    posted: int
    folded: int
    dropped: int
    filtered: int


#: What became of the events the operator meant to post (``craft_events_total``).
EVENT_OUTCOMES = ("posted", "folded", "dropped", "filtered")


class StateCollector(Collector):
    """Reads the operator's own state at scrape time: cache, queue and API client."""

    def __init__(self) -> None:
        self.cache: SandboxCache | None = None
        self.queue: QueueStats | None = None
        self.queue_backlog: Callable[[], int] | None = None
        self.longest_running: Callable[[], float] | None = None
        self.api_requests: Mapping[str, int] | None = None
        self.watch_outcomes: Mapping[tuple[str, str], int] | None = None
        self.active: Callable[[], bool] | None = None
        self.events: EventStats | None = None
        self.clock: Callable[[], datetime] = lambda: datetime.now(UTC)
        #: The unreadable sandboxes already logged (each once, while it stays unreadable).
        self._reported: frozenset[str] = frozenset()

    def describe(self) -> Iterable[Metric]:
        """The metric names, so the registry can refuse a duplicate."""
        return list(self._families(with_samples=False))

    def collect(self) -> Iterable[Metric]:
        """The current values."""
        return list(self._families(with_samples=True))

    def _families(self, *, with_samples: bool) -> Iterator[Metric]:
        yield from self._sandbox_families(with_samples=with_samples)
        pools = self.cache.items(POOL_KIND) if with_samples and self.cache is not None else ()
        yield from pool_families(body for _, body in pools)
        yield from self._queue_families(with_samples=with_samples)
        yield self._api_requests_family(with_samples=with_samples)
        yield from self._watch_families(with_samples=with_samples)
        yield self._replica_family(with_samples=with_samples)
        yield self._events_family(with_samples=with_samples)

    def _events_family(self, *, with_samples: bool) -> Metric:
        family = CounterMetricFamily(
            metric_name("events"),
            "Events the operator meant to post, by outcome: posted, folded into a series "
            "(a repeat), dropped (the queue full, or the API server refused it) or filtered "
            "(an object past its budget of new events).",
            labels=["outcome"],
        )
        if with_samples and self.events is not None:
            for outcome in EVENT_OUTCOMES:
                family.add_metric([outcome], getattr(self.events, outcome))
        return family

    def _sandbox_families(self, *, with_samples: bool) -> Iterator[Metric]:
        phases = GaugeMetricFamily(
            metric_name("sandboxes"),
            "CraftSandboxes known to the operator, by phase.",
            labels=["phase"],
        )
        oldest = GaugeMetricFamily(
            metric_name("sandbox_oldest_not_ready_seconds"),
            "Seconds the longest-waiting Pending or Provisioning sandbox has not been Ready "
            "(0 when none waits).",
        )
        without_policy = GaugeMetricFamily(
            metric_name("sandboxes_without_policy"),
            "Sandboxes admitted before that keep running while the CraftSandboxPolicy is "
            "missing or unreadable (condition PolicyEnforced False; not those being deleted).",
        )
        unreadable = GaugeMetricFamily(
            metric_name("sandboxes_unreadable"),
            "Sandboxes left out of the other sandbox metrics because their stored status "
            "could not be read (the operator logs each once).",
        )
        if with_samples and self.cache is not None:
            bodies = (body for _, body in self.cache.items(KIND))
            counts = count_sandboxes(bodies, self.clock())
            self._report_unreadable(counts)
            for phase, count in counts.by_phase.items():
                phases.add_metric([phase], count)
            oldest.add_metric([], counts.oldest_not_ready_seconds)
            without_policy.add_metric([], counts.without_policy)
            unreadable.add_metric([], len(counts.unreadable))
        yield phases
        yield oldest
        yield without_policy
        yield unreadable

    def _report_unreadable(self, counts: SandboxCounts) -> None:
        """Log each sandbox a scrape could not read once, not at every scrape (again only
        if it was readable in between)."""
        current = frozenset(counts.unreadable)
        for name in sorted(current - self._reported):
            log.warning(
                "sandbox %s is left out of the metrics: its stored status cannot be read", name
            )
        self._reported = current

    def _queue_families(self, *, with_samples: bool) -> Iterator[Metric]:
        depth = GaugeMetricFamily(
            metric_name("workqueue_depth"),
            "Sandboxes in the work queue, due now or later (periodic revisits included).",
        )
        backlog = GaugeMetricFamily(
            metric_name("workqueue_backlog"),
            "Sandboxes whose reconcile is due but not started yet (workers busy).",
        )
        passes = CounterMetricFamily(
            metric_name("reconcile_passes"),
            "Reconcile passes of sandboxes run (successful or not; a pool's are not counted).",
        )
        failures = CounterMetricFamily(
            metric_name("reconcile_failures"),
            "Reconcile passes of sandboxes that failed and were retried with backoff.",
        )
        if with_samples and self.queue is not None:
            depth.add_metric([], len(self.queue))
            passes.add_metric([], self.queue.processed + self.queue.failed)
            failures.add_metric([], self.queue.failed)
        longest = GaugeMetricFamily(
            metric_name("workqueue_longest_running_processor_seconds"),
            "Seconds the oldest reconcile pass still running (sandboxes or pools) has run; "
            "every step is bounded (exec and database calls at 60 s), so minutes mean a "
            "stuck worker.",
        )
        if with_samples and self.queue_backlog is not None:
            backlog.add_metric([], self.queue_backlog())
        if with_samples and self.longest_running is not None:
            longest.add_metric([], self.longest_running())
        yield depth
        yield backlog
        yield longest
        yield passes
        yield failures

    def _api_requests_family(self, *, with_samples: bool) -> Metric:
        requests = CounterMetricFamily(
            metric_name("api_requests"),
            "Requests the operator's own client sent to the Kubernetes API, by HTTP verb "
            "(kopf's watches are not included).",
            labels=["verb"],
        )
        if with_samples and self.api_requests is not None:
            snapshot = dict(self.api_requests)
            for verb in API_VERBS:
                requests.add_metric([verb], snapshot.pop(verb, 0))
            requests.add_metric(["other"], sum(snapshot.values()))
        return requests

    def _watch_families(self, *, with_samples: bool) -> Iterator[Metric]:
        lists = CounterMetricFamily(
            metric_name("watch_lists"),
            "Lists made by the operator's own watch streams, by resource: one "
            "per stream at the start, then one whenever events may have been missed.",
            labels=["resource"],
        )
        failures = CounterMetricFamily(
            metric_name("watch_failures"),
            "Failed watches or lists of the operator's streams, by resource, each retried "
            "after a backoff (refused, unreachable, stalled, garbled).",
            labels=["resource"],
        )
        failing = GaugeMetricFamily(
            metric_name("watch_streams_failing"),
            "The operator's streams, by resource, whose last list or watch failed and none "
            "has been answered since (while so, the operator's view of them goes stale).",
            labels=["resource"],
        )
        if with_samples and self.watch_outcomes is not None:
            counts = dict(self.watch_outcomes)
            for resource in STREAMED:
                lists.add_metric([resource], counts.get((resource, LIST), 0))
                failures.add_metric([resource], counts.get((resource, FAILURE), 0))
                failing.add_metric([resource], counts.get((resource, FAILING), 0))
        yield lists
        yield failures
        yield failing

    def _replica_family(self, *, with_samples: bool) -> Metric:
        active = GaugeMetricFamily(
            metric_name("replica_active"),
            "1 while this replica reconciles, 0 while it is the standby of an active/standby pair.",
        )
        if with_samples and self.active is not None:
            active.add_metric([], 1.0 if self.active() else 0.0)
        return active
