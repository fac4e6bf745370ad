"""The benchmarks' figures: what a request counts as, per-sandbox shares and percentiles.

The benchmarks report the operator's API writes, CPU and latency per sandbox against the
issue's targets; a slip in how they are counted would move a figure and no run would show
it. These are their pure parts, held on made-up readings.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bench import operator_load, pool_claims, real_cluster, sustained_load
from bench.pool_claims import CLAIM_SECONDS, CLI_SECONDS, Phase, Sample
from bench.real_cluster import Requests

from tests.support.cluster import OPERATOR_USER

PERCENTILES = [real_cluster.percentile, operator_load.percentile, sustained_load.percentile]


@dataclass
class AuditedPlane:
    """A control plane as far as the audit log goes."""

    audit_log: Path


@dataclass
class StackOf:
    """A benchmark's stack as far as its control plane goes."""

    plane: Any


def audit_event(verb: str, resource: str, subresource: str = "", user: str = OPERATOR_USER) -> str:
    reference: dict[str, Any] = {"resource": resource}
    if subresource:
        reference["subresource"] = subresource
    return json.dumps({"user": {"username": user}, "verb": verb, "objectRef": reference})


def plane_with(tmp_path: Path, *lines: str) -> Any:
    log = tmp_path / "audit.log"
    log.write_text("".join(f"{line}\n" for line in lines))
    return AuditedPlane(log)


def test_each_audited_request_of_the_operator_counts_once_as_what_it_is(tmp_path: Path) -> None:
    plane = plane_with(
        tmp_path,
        audit_event("create", "pods", "exec"),
        audit_event("get", "pods", "exec"),
        audit_event("get", "pods"),
        audit_event("list", "secrets"),
        audit_event("watch", "craftsandboxes"),
        # The start-up access check asks a question and stores nothing.
        audit_event("create", "selfsubjectaccessreviews"),
        audit_event("create", "events"),
        audit_event("patch", "events"),
        audit_event("create", "pods"),
        audit_event("patch", "craftsandboxes", "status"),
        audit_event("delete", "secrets"),
        audit_event("update", "configmaps"),
        audit_event("create", "pods", user="system:serviceaccount:load:someone-else"),
    )

    counted = Requests.of(plane)

    assert counted == Requests(reads=4, writes=4, events=2, execs=2)


def test_the_requests_of_a_phase_are_those_after_its_start_field_by_field() -> None:
    before = Requests(reads=10, writes=20, events=30, execs=40)
    after = Requests(reads=11, writes=23, events=35, execs=47)

    assert after.minus(before) == Requests(reads=1, writes=3, events=5, execs=7)


def test_the_writes_by_kind_add_up_to_the_writes_a_phase_reports(tmp_path: Path) -> None:
    """``BENCH_WRITES=1`` breaks a phase's writes down: its counts must be those writes."""
    plane = plane_with(
        tmp_path,
        audit_event("create", "pods"),  # before the phase: skipped
        audit_event("create", "selfsubjectaccessreviews"),
        audit_event("create", "events"),
        audit_event("get", "pods"),
        audit_event("create", "pods", "exec"),
        audit_event("create", "pods"),
        audit_event("create", "pods"),
        audit_event("patch", "craftsandboxes", "status"),
    )

    listed = pool_claims.writes_by_kind(StackOf(plane), skip=1)

    assert listed == "create pods 2, patch craftsandboxes/status 1"
    assert sum(int(part.rsplit(" ", 1)[1]) for part in listed.split(", ")) == (
        Requests.of(plane).writes - 1
    )


@pytest.mark.parametrize("percentile", PERCENTILES)
def test_a_p99_is_never_below_99_percent_of_the_latencies(percentile: Any) -> None:
    latencies = [float(value) for value in reversed(range(1, 1001))]  # not in order

    p99 = percentile(latencies, 0.99)

    assert sum(value <= p99 for value in latencies) >= 0.99 * len(latencies)
    assert p99 in latencies


@pytest.mark.parametrize("percentile", PERCENTILES)
def test_one_stall_in_a_thousand_claims_is_the_maximum_not_the_p99(percentile: Any) -> None:
    latencies = [0.05] * 999 + [30.0]

    assert percentile(latencies, 0.99) == 0.05
    assert percentile(latencies, 0.50) == 0.05


@pytest.mark.parametrize("percentile", PERCENTILES)
def test_the_p50_of_an_odd_number_of_latencies_is_their_median(percentile: Any) -> None:
    assert percentile([0.9, 0.1, 0.5, 0.3, 0.7], 0.50) == 0.5


def test_a_sandbox_that_never_got_its_pod_makes_the_sustained_p99_infinite() -> None:
    """Left out, it would flatter the run: the one that never came is the slowest."""
    created = {f"s-{index}": float(index) for index in range(10)}
    pods = {name: at + 0.1 for name, at in created.items() if name != "s-3"}

    result = sustained_load.summary(created, pods, None, sustained_load.Samples(every=1.0))

    assert result["p99_ms"] == math.inf
    assert result["pod_p99_by_minute"] == [math.inf]
    assert result["p50_ms"] == pytest.approx(100.0)


def test_the_sustained_p99_is_taken_minute_by_minute_of_creation() -> None:
    # By the driver's clock (time.perf_counter: any origin), from the first creation.
    created = {"a": 1000.5, "b": 1030.5, "c": 1061.5, "d": 1150.5}
    arrived = {"a": 1000.7, "b": 1030.9, "c": 1062.5, "d": 1150.6}

    assert sustained_load.by_minute(created, arrived) == pytest.approx([400.0, 1000.0, 100.0])


def histogram(name: str, count: float, total: float, **labels: str) -> dict[Sample, float]:
    have = tuple(sorted(labels.items()))
    return {(f"{name}_count", have): count, (f"{name}_sum", have): total}


def test_a_histograms_mean_is_of_the_observations_between_two_scrapes_only() -> None:
    name = CLAIM_SECONDS[0]
    before = histogram(name, 100, 50.0)  # 500 ms each before the phase
    after = histogram(name, 104, 50.2)  # four claims of 50 ms in it

    assert pool_claims.mean_ms(before, after, CLAIM_SECONDS) == pytest.approx(50.0)


def test_a_histograms_mean_takes_only_the_samples_of_its_labels() -> None:
    name, labels = CLI_SECONDS
    after = {
        **histogram(name, 2, 0.4, phase=labels["phase"], outcome="ok"),
        **histogram(name, 1, 0.1, phase=labels["phase"], outcome="error"),
        **histogram(name, 5, 50.0, phase="library_sync", outcome="ok"),
    }

    assert pool_claims.mean_ms({}, after, CLI_SECONDS) == pytest.approx(500 / 3)


def test_a_histogram_with_nothing_observed_in_the_phase_has_no_mean() -> None:
    before = histogram(CLAIM_SECONDS[0], 3, 0.3)

    assert math.isnan(pool_claims.mean_ms(before, before, CLAIM_SECONDS))


def test_passes_are_what_the_counter_grew_by_in_the_phase() -> None:
    before: dict[Sample, float] = {(pool_claims.PASSES, ()): 40.0}
    after: dict[Sample, float] = {(pool_claims.PASSES, ()): 65.0}

    assert pool_claims.increase(before, after, pool_claims.PASSES) == 25.0
    assert pool_claims.increase({}, after, pool_claims.PASSES) == 65.0


def test_the_machines_cpu_is_per_sandbox_and_by_what_each_role_spent_in_the_phase() -> None:
    before = {"operator": 10.0, "etcd": 5.0}
    after = {"operator": 10.5, "etcd": 5.25, "podexec (+ sh, tar, onyx-cli)": 0.25}

    line = real_cluster.machine_cpu_per(before, after, 10)

    assert line == ("100 ms per sandbox: operator 50, etcd 25, podexec (+ sh, tar, onyx-cli) 25")


def test_a_phase_creates_its_rate_times_its_seconds_and_never_none() -> None:
    assert Phase("fast-pool", 75.0, 300.0, pooled=True).count == 22500
    assert Phase("slow-cold", 1.0, 0.2, pooled=False).count == 1
