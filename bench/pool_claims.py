"""Claim latency of warm pool pods on the real control plane, the cold path beside it.

The stack of ``bench/real_cluster.py`` (a control plane of its own with kwok pods and the
real exec path, the stand-in Onyx API, ``craft-operator run`` as the ServiceAccount in its
own process), plus moto's S3 server (behind waitress, which keeps connections alive as S3
does) holding a user library of 10 files and a CraftSandboxPool. Each phase creates
CraftSandboxes at a fixed rate (open loop: on schedule, whatever the operator does) and
takes, for each, the time from its create request until the driver's watch sees it Ready:
the PAT delivered into the pod and onyx-cli validated (exec), the SKILL.md present (written
by exec into a claimed pod), the 10 files synced from S3 (exec). A phase's sandboxes either
all name the pool (``pool``) or none does (``cold``: a new pod each, as without pools); at
each rate the pool phase runs first, then the cold one, in the same run. Between phases the
sandboxes are deleted and the operator goes quiet.

Per phase it prints p50/p99 of that latency, how many pool sandboxes actually got a pool
pod (the others started cold: pool empty or lost races), the operator's CPU per sandbox
(its own process, from the phase's first create until it is quiet again with the pool
refilled, so a claim's share of the refill is in), and its API requests per sandbox from
the audit log: writes (refill pod creations and pool status included), events, execs.

    .venv/bin/python bench/pool_claims.py                       # 1/s for 30 s, 75/s for 300 s
    .venv/bin/python bench/pool_claims.py --rate 8 --seconds 60 --pool 200
    BENCH_LOG=1 ...                                             # print the operator's log end
    BENCH_WRITES=1 ...                                          # each phase's writes by kind
    BENCH_PROFILE=/tmp/profile.txt ...                          # record it with py-spy (raw)

Targets (issue 15): p99 under 100 ms of the operator's own latency at 75 claims/s, <= 3 ms
operator CPU and <= 6 API writes per claim.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import logging
import math
import os
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import psutil
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.real_cluster import (
    NAMESPACE,
    USER_ID,
    Arrivals,
    Requests,
    Stack,
    counted_as,
    cpu_seconds,
    machine_cpu,
    machine_cpu_per,
    percentile,
    ready,
    start_profiler,
    stop_profiler,
    wait_cpu_quiet,
    wait_for_operator,
    watch,
)
from tests.support.cluster import CRAFT, Cluster, audited_requests
from tests.support.s3 import S3Server, free_port, running_s3_server

POOL = "warm"
POOLS = f"{CRAFT}/craftsandboxpools"
SANDBOXES = f"{CRAFT}/craftsandboxes"
BUCKET = "bench-library"
PREFIX = f"public/knowledge/{USER_ID}/user_library/"
LIBRARY_FILES = 10
#: The operator's own histograms whose mean a phase reports: (sample, label filter).
CLAIM_SECONDS = ("craft_pool_claim_duration_seconds", {})
CLI_SECONDS = ("craft_provisioning_phase_duration_seconds", {"phase": "cli_validation"})
SYNC_SECONDS = ("craft_user_library_sync_duration_seconds", {})
#: The sandbox reconciler's passes (the pool's are not counted there).
PASSES = "craft_reconcile_passes_total"
Sample = tuple[str, tuple[tuple[str, str], ...]]


def scrape(port: int) -> dict[Sample, float]:
    """Every sample the operator's metrics endpoint serves now."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def mean_ms(before: dict[Sample, float], after: dict[Sample, float], which: Any) -> float:
    """The mean of a histogram's observations between two scrapes, in ms (nan: none)."""
    name, labels = which

    def total(suffix: str, metrics: dict[Sample, float]) -> float:
        return sum(
            value
            for (sample, have), value in metrics.items()
            if sample == name + suffix and set(labels.items()) <= set(have)
        )

    count = total("_count", after) - total("_count", before)
    return (total("_sum", after) - total("_sum", before)) / count * 1000 if count else math.nan


def increase(before: dict[Sample, float], after: dict[Sample, float], name: str) -> float:
    """How much an unlabelled counter grew between two scrapes."""
    return after.get((name, ()), 0.0) - before.get((name, ()), 0.0)


def writes_by_kind(stack: Stack, skip: int) -> str:
    """The operator's writes after its ``skip`` first audited requests, by verb and kind:
    those the phase's ``writes`` counts (:func:`~bench.real_cluster.counted_as`)."""
    kinds: collections.Counter[str] = collections.Counter()
    for event in audited_requests(stack.plane)[skip:]:
        if counted_as(event) != "writes":
            continue
        ref = event.get("objectRef", {})
        kinds[f"{event['verb']} {ref.get('resource')}/{ref.get('subresource') or ''}"] += 1
    return ", ".join(f"{kind.rstrip('/')} {count}" for kind, count in kinds.most_common())


@dataclass(frozen=True)
class Phase:
    """One phase: sandboxes created at ``rate`` per second for ``seconds``."""

    label: str
    rate: float
    seconds: float
    pooled: bool

    @property
    def count(self) -> int:
        return max(1, round(self.rate * self.seconds))


def put_library(s3_server: S3Server) -> None:
    """The user's library: 10 files of a few KB, as Onyx uploads them."""
    s3 = boto3.client(
        "s3",
        endpoint_url=s3_server.url,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )
    s3.create_bucket(Bucket=BUCKET)
    for index in range(LIBRARY_FILES):
        body = f"# note {index}\n".encode() + os.urandom(2048).hex().encode()
        s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}notes/note-{index:02d}.md", Body=body)


def make_pool(cluster: Cluster, replicas: int) -> None:
    cluster.create(
        POOLS,
        NAMESPACE,
        {
            "apiVersion": "craft.onyx.app/v1alpha1",
            "kind": "CraftSandboxPool",
            "metadata": {"name": POOL},
            "spec": {"replicas": replicas},
        },
    )


def wait_pool_full(cluster: Cluster, replicas: int, limit: float = 1800) -> None:
    """Until the pool holds ``replicas`` Ready unclaimed pods and nothing is creating."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        status = (cluster.get(POOLS, NAMESPACE, POOL) or {}).get("status") or {}
        if status.get("ready") == replicas and status.get("creating") == 0:
            return
        time.sleep(0.5)
    raise SystemExit(f"the pool never held {replicas} Ready pods")


def sandbox(name: str, pooled: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"user": {"id": USER_ID}}
    if pooled:
        spec["poolRef"] = {"name": POOL}
    return {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "metadata": {"name": name},
        "spec": spec,
    }


def drive(cluster: Cluster, phase: Phase) -> dict[str, float]:
    """Create the phase's sandboxes on schedule; when each create request was sent."""
    sent: dict[str, float] = {}
    lock = threading.Lock()
    late = 0.0

    def create(name: str) -> None:
        with lock:
            sent[name] = time.perf_counter()
        cluster.create(SANDBOXES, NAMESPACE, sandbox(name, phase.pooled))

    with ThreadPoolExecutor(max_workers=32) as threads:
        start = time.perf_counter()
        for index in range(phase.count):
            due = start + index / phase.rate
            now = time.perf_counter()
            if due > now:
                time.sleep(due - now)
            else:
                late = max(late, now - due)
            threads.submit(create, f"{phase.label}-{index:05d}")
    if late > 1.0:
        print(f"  (the driver fell {late:.1f} s behind its schedule)", flush=True)
    return sent


def claimed_count(cluster: Cluster) -> int:
    """Sandboxes whose status says they claimed a pool pod."""
    return sum(
        1
        for body in cluster.list(SANDBOXES, NAMESPACE)
        if (body.get("status") or {}).get("claimedFrom") == POOL
    )


def delete_all(cluster: Cluster, process: psutil.Process) -> None:
    """Delete every sandbox (the operator revokes their PATs) and wait until it is quiet."""
    deadline = time.monotonic() + 1800
    while cluster.list(SANDBOXES, NAMESPACE):
        if time.monotonic() > deadline:
            raise SystemExit("the sandboxes were never deleted")
        # A collection of hundreds can outlast the client's 10 s; the server goes on anyway.
        with contextlib.suppress(OSError):
            cluster.call("DELETE", f"{CRAFT}/namespaces/{NAMESPACE}/craftsandboxes")
        time.sleep(5)
    wait_cpu_quiet(process)


def run_phase(
    stack: Stack,
    process: psutil.Process,
    arrivals: Arrivals,
    phase: Phase,
    pool_size: int,
    metrics_port: int,
) -> dict[str, Any]:
    """One phase, measured; its sandboxes deleted afterwards."""
    cluster = stack.cluster
    if phase.pooled:
        wait_pool_full(cluster, pool_size)
    wait_cpu_quiet(process)
    cpu_before, before = cpu_seconds(process), Requests.of(stack.plane)
    machine_before = machine_cpu()
    audited_before, metrics_before = len(audited_requests(stack.plane)), scrape(metrics_port)
    sent = drive(cluster, phase)
    deadline = time.monotonic() + max(600, phase.count)
    while any(name not in arrivals.seen for name in sent):
        if time.monotonic() > deadline or not process.is_running():
            done = sum(name in arrivals.seen for name in sent)
            raise SystemExit(
                f"{phase.label}: {done} of {len(sent)} Ready; log:\n{stack.log_tail()}"
            )
        time.sleep(0.2)
    claimed = claimed_count(cluster) if phase.pooled else 0
    if phase.pooled:
        wait_pool_full(cluster, pool_size)
    wait_cpu_quiet(process)
    cpu = cpu_seconds(process) - cpu_before
    machine_after = machine_cpu()
    requests = Requests.of(stack.plane).minus(before)
    metrics = scrape(metrics_port)
    if os.environ.get("BENCH_WRITES"):
        print(f"  {phase.label} writes: {writes_by_kind(stack, audited_before)}", flush=True)
    delete_all(cluster, process)
    latencies = [arrivals.seen[name] - sent[name] for name in sent]
    n = len(sent)
    last_fifth = [arrivals.seen[name] - sent[name] for name in sorted(sent)[-max(1, n // 5) :]]
    return {
        "phase": phase,
        "n": n,
        "claimed": claimed,
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "max_ms": max(latencies) * 1000,
        "late_p50_ms": percentile(last_fifth, 0.50) * 1000,
        "cpu_ms": cpu / n * 1000,
        "writes": requests.writes / n,
        "events": requests.events / n,
        "execs": requests.execs / n,
        "reads": requests.reads / n,
        "passes": increase(metrics_before, metrics, PASSES) / n,
        "claim_ms": mean_ms(metrics_before, metrics, CLAIM_SECONDS),
        "cli_ms": mean_ms(metrics_before, metrics, CLI_SECONDS),
        "sync_ms": mean_ms(metrics_before, metrics, SYNC_SECONDS),
        "machine": machine_cpu_per(machine_before, machine_after, n),
    }


#: Run first, not reported: the operator's one-off costs (imports, the credential
#: database's and S3's first connections) are not a claim's.
WARM_UP = (Phase("warm-up-pool", 2.0, 1.0, True), Phase("warm-up-cold", 2.0, 1.0, False))


def print_row(r: dict[str, Any]) -> None:
    phase: Phase = r["phase"]
    path = "pool" if phase.pooled else "cold"
    claimed = f"{r['claimed']}/{r['n']}" if phase.pooled else "-"
    print(
        f"{path:>5} {phase.rate:>7.1f} {phase.seconds:>6.0f} {r['n']:>6} {claimed:>11} "
        f"{r['p50_ms']:>8.0f} {r['p99_ms']:>8.0f} {r['max_ms']:>8.0f} {r['late_p50_ms']:>8.0f} "
        f"{r['cpu_ms']:>7.1f} "
        f"{r['writes']:>7.2f} {r['events']:>7.2f} {r['execs']:>6.2f} {r['reads']:>6.2f} "
        f"{r['passes']:>6.2f} {r['claim_ms']:>6.1f} {r['cli_ms']:>6.0f} {r['sync_ms']:>6.0f}",
        flush=True,
    )
    print(f"  {phase.label} machine CPU: {r['machine']}", flush=True)


HEADER = (
    f"{'path':>5} {'rate/s':>7} {'secs':>6} {'N':>6} {'claimed':>11} {'p50 ms':>8} "
    f"{'p99 ms':>8} {'max ms':>8} {'last p50':>8} {'CPU ms':>7} {'writes':>7} {'events':>7} "
    f"{'execs':>6} {'reads':>6} {'passes':>6} {'claim':>6} {'cli':>6} {'sync':>6}"
)


LEGEND = """\
Latency: the CraftSandbox's create request sent -> the driver's watch sees it Ready (PAT
delivered and onyx-cli validated in the pod, SKILL.md there, 10 library files synced from
S3; all by exec). last p50: the p50 of the phase's last fifth (far above p50: the rate was
not sustained, a backlog grew). claimed: pool sandboxes that got a pool pod (the rest
started cold). Per sandbox, the operator's own: CPU (user+system of its process, until
quiet with the pool refilled), API writes (pool refills and status included), events, execs
and reads, from the API server's audit log; passes: the sandbox reconciler's. Means (ms) of
the operator's own histograms: claim (finding a Ready pool pod and the claim's one write),
cli (exec of onyx-cli validate-config), sync (the library's sync by exec). Machine CPU:
every process of the run per sandbox (the operator, the control plane, podexec with the
processes it runs in the pods, the benchmark with moto's S3). Two sandboxes of each path
run first, unreported: a new operator's one-off costs (imports, first connections) are not
a claim's."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=75.0, help="sustained sandboxes/s")
    parser.add_argument("--seconds", type=float, default=300.0, help="sustained duration")
    parser.add_argument("--slow-seconds", type=float, default=30.0, help="duration at 1/s")
    parser.add_argument(
        "--pool",
        type=int,
        default=0,
        help="pool replicas (default: every claim of the sustained phase, up to 500, the "
        "CRD's maximum; a pool smaller than a phase relies on refills keeping up)",
    )
    parser.add_argument("--workers", type=int, default=16, help="CRAFT_WORKERS")
    parser.add_argument("--skip-slow", action="store_true", help="only the sustained rate")
    args = parser.parse_args()
    pool_size = args.pool or min(500, math.ceil(args.rate * args.seconds))
    phases = [] if args.skip_slow else [Phase("slow-pool", 1.0, args.slow_seconds, True)]
    phases += [] if args.skip_slow else [Phase("slow-cold", 1.0, args.slow_seconds, False)]
    phases += [
        Phase("fast-pool", args.rate, args.seconds, True),
        Phase("fast-cold", args.rate, args.seconds, False),
    ]
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    logging.getLogger("waitress").setLevel(logging.ERROR)
    print(f"pool replicas {pool_size}, CRAFT_WORKERS {args.workers}, {os.cpu_count()} CPUs")
    with (
        tempfile.TemporaryDirectory(prefix="craft-bench-pool-") as tmp,
        Stack(Path(tmp), args.workers) as stack,
    ):
        s3_servers = running_s3_server(keep_alive=True)  # as S3 keeps them
        s3_server = next(s3_servers)
        try:
            put_library(s3_server)
            results = measure(stack, s3_server, phases, pool_size)
        finally:
            s3_servers.close()
    print(HEADER)
    for result in results:
        print_row(result)
    print(LEGEND)


def measure(
    stack: Stack, s3_server: S3Server, phases: list[Phase], pool_size: int
) -> list[dict[str, Any]]:
    """Run the phases on one operator; the results, printed as each phase ends."""
    arrivals, stop = Arrivals(), threading.Event()
    metrics_port = free_port()
    watch(stack.plane, f"{CRAFT}/namespaces/{NAMESPACE}/craftsandboxes", arrivals, ready, stop)
    child = stack.start_operator(
        extra_env={
            "CRAFT_S3_BUCKET": BUCKET,
            "CRAFT_S3_ENDPOINT_URL": s3_server.url,
            "CRAFT_S3_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "CRAFT_METRICS_PORT": str(metrics_port),
        }
    )
    process = psutil.Process(child.pid)
    profiler = start_profiler(child.pid)
    results = []
    try:
        wait_for_operator(stack, process)
        make_pool(stack.cluster, pool_size)
        for warm_up in WARM_UP:  # a new process's imports and first connections: once
            run_phase(stack, process, arrivals, warm_up, pool_size, metrics_port)
        print(HEADER, flush=True)
        for phase in phases:
            result = run_phase(stack, process, arrivals, phase, pool_size, metrics_port)
            print_row(result)
            results.append(result)
        if os.environ.get("BENCH_LOG"):
            print(f"--- the end of the operator's log:\n{stack.log_tail()}")
    finally:
        stop.set()
        stop_profiler(profiler)
        stack.stop_operator(child)
    return results


if __name__ == "__main__":
    main()
