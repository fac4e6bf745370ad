"""The sustained-rate run of the load benchmark (``operator_load.py --rate R --duration S``).

CraftSandboxes are created at a steady ``R`` per second for ``S`` seconds, on the real
control plane (kwok pods, the real exec path) or on KMock's emulator, with the operator in
its own process as in production. The run shows whether the operator keeps up: latency from
each CR's creation to its pod (and, on the real server, to Ready) over the whole run and
minute by minute, and the operator's RSS and work-queue backlog sampled through the run
(they must not grow while the load is steady). Counts per sandbox (writes, events, reads,
exec calls) and operator CPU per sandbox come with it. A run the operator cannot keep up
with waits a while after its last creation (a quarter of the run, 60 to 300 s), then
reports what is unfinished: those sandboxes count as never done in the percentiles, and
the CPU is divided by the finished ones (their share of unfinished work included).
"""

from __future__ import annotations

import asyncio
import math
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from prometheus_client.parser import text_string_to_metric_families
from tests.support.s3 import free_port

#: The metrics the sampler reads from the operator's endpoint.
BACKLOG = "craft_workqueue_backlog"
PASSES = "craft_reconcile_passes_total"


@dataclass
class Sample:
    """The operator's state at one moment of the run."""

    at: float
    rss_mib: float
    cpu_s: float
    backlog: float
    created: int
    pods: int
    ready: int


@dataclass
class Samples:
    """Samples taken every ``every`` seconds by a thread until stopped."""

    every: float
    taken: list[Sample] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)


def scrape(port: int, names: tuple[str, ...] = (BACKLOG, PASSES)) -> dict[str, float]:
    """The named metrics' values (summed over labels) from the operator's endpoint."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in names:
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


def cpu_seconds(process: psutil.Process) -> float:
    """The process's user and system CPU time."""
    times = process.cpu_times()
    return float(times.user + times.system)


def percentile(values: list[float], share: float) -> float:
    """The ``share`` quantile of ``values`` (nan if there are none)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def start_sampler(
    samples: Samples,
    process: psutil.Process,
    metrics_port: int,
    counts: Callable[[], tuple[int, int, int]],
) -> threading.Thread:
    """Sample RSS, CPU, the backlog and the driver's counts every ``samples.every`` s."""

    def run() -> None:
        started = time.perf_counter()
        while not samples.stop.wait(samples.every):
            created, pods, ready = counts()
            samples.taken.append(
                Sample(
                    at=time.perf_counter() - started,
                    rss_mib=process.memory_info().rss / 2**20,
                    cpu_s=cpu_seconds(process),
                    backlog=scrape(metrics_port).get(BACKLOG, math.nan),
                    created=created,
                    pods=pods,
                    ready=ready,
                )
            )

    thread = threading.Thread(target=run, daemon=True, name="sampler")
    thread.start()
    return thread


def paced(rate: float, seconds: float, create: Callable[[int], None], clients: int = 16) -> float:
    """Call ``create(i)`` ``rate`` times a second for ``seconds``; the rate achieved.

    Creations are issued on schedule by ``clients`` threads, so a slow answer does not
    slow the offered load (up to that many requests in flight).
    """
    total = int(rate * seconds)
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        for index in range(total):
            delay = started + index / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            pool.submit(create, index)
    return total / (time.perf_counter() - started)


def by_minute(created: dict[str, float], arrived: dict[str, float]) -> list[float]:
    """p99 latency in ms of the objects created in each minute of the run."""
    if not created:
        return []
    first = min(created.values())
    minutes: dict[int, list[float]] = {}
    for name, at in created.items():
        latency = arrived[name] - at if name in arrived else math.inf
        minutes.setdefault(int((at - first) // 60), []).append(latency)
    return [percentile(values, 0.99) * 1000 for _, values in sorted(minutes.items())]


def drain_time(seconds: float) -> float:
    """How long a run waits, after its last creation, for the operator to catch up."""
    return min(300.0, max(60.0, seconds / 4))


def summary(
    created: dict[str, float],
    pods: dict[str, float],
    ready: dict[str, float] | None,
    samples: Samples,
) -> dict[str, Any]:
    """Latency and growth figures of a sustained run. A sandbox not there at the end
    counts as never (infinite latency): a p99 is then ``inf`` rather than flattering."""
    to_pod = [pods[name] - at if name in pods else math.inf for name, at in created.items()]
    result: dict[str, Any] = {
        "p50_ms": percentile(to_pod, 0.50) * 1000,
        "p99_ms": percentile(to_pod, 0.99) * 1000,
        "pod_p99_by_minute": by_minute(created, pods),
        "samples": samples.taken,
    }
    if ready is not None:
        to_ready = [ready[name] - at if name in ready else math.inf for name, at in created.items()]
        result["ready_p50_ms"] = percentile(to_ready, 0.50) * 1000
        result["ready_p99_ms"] = percentile(to_ready, 0.99) * 1000
        result["ready_p99_by_minute"] = by_minute(created, ready)
    return result


def run_sustained_real(rate: float, seconds: float, workers: int) -> dict[str, Any]:
    """The sustained run on the real control plane."""
    from bench.real_cluster import (
        CRAFT,
        NAMESPACE,
        USER_ID,
        Arrivals,
        Requests,
        Stack,
        ready,
        wait_cpu_quiet,
        wait_for_operator,
        watch,
    )

    with (
        tempfile.TemporaryDirectory(prefix="craft-bench-rate-") as tmp,
        Stack(Path(tmp), workers) as stack,
    ):
        pods, sandboxes, created = Arrivals(), Arrivals(), Arrivals()
        stop = threading.Event()
        watch(
            stack.plane,
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            pods,
            lambda event: event["type"] == "ADDED",
            stop,
        )
        watch(stack.plane, f"{CRAFT}/namespaces/{NAMESPACE}/craftsandboxes", sandboxes, ready, stop)
        metrics_port = free_port()
        child = stack.start_operator(extra_env={"CRAFT_METRICS_PORT": str(metrics_port)})
        process = psutil.Process(child.pid)
        samples = Samples(every=max(5.0, seconds / 20))
        try:
            wait_for_operator(stack, process)
            wait_cpu_quiet(process, quiet=1.5)
            idle_rss, idle_cpu = process.memory_info().rss, cpu_seconds(process)
            before = Requests.of(stack.plane)

            def create(index: int) -> None:
                name = f"sandbox-{index:06d}"
                stack.cluster.create(
                    f"{CRAFT}/craftsandboxes",
                    NAMESPACE,
                    {
                        "apiVersion": "craft.onyx.app/v1alpha1",
                        "kind": "CraftSandbox",
                        "metadata": {"name": name},
                        "spec": {"user": {"id": USER_ID}},
                    },
                )
                created.mark(name)

            start_sampler(
                samples,
                process,
                metrics_port,
                lambda: (len(created.seen), len(pods.seen), len(sandboxes.seen)),
            )
            achieved = paced(rate, seconds, create)
            total = len(created.seen)
            deadline = time.monotonic() + drain_time(seconds)
            while len(sandboxes.seen) < total and time.monotonic() < deadline:
                time.sleep(0.5)
            samples.stop.set()
            if len(sandboxes.seen) == total:
                wait_cpu_quiet(process)
            cpu = cpu_seconds(process) - idle_cpu
            finished = len(sandboxes.seen)
            rss = process.memory_info().rss
            counted = Requests.of(stack.plane).minus(before)
        finally:
            samples.stop.set()
            stack.stop_operator(child)
            stop.set()
    result = summary(created.seen, pods.seen, sandboxes.seen, samples)
    result.update(
        n=total,
        rate=rate,
        achieved=achieved,
        seconds=seconds,
        unfinished=total - finished,
        cpu_ms=cpu / max(finished, 1) * 1000,
        reads=counted.reads / total,
        writes=counted.writes / total,
        events=counted.events / total,
        execs=counted.execs / total,
        idle_rss_mib=idle_rss / 2**20,
        rss_mib=rss / 2**20,
    )
    return result


async def run_sustained_emulator(rate: float, seconds: float, workers: int) -> dict[str, Any]:
    """The sustained run on KMock's emulator (in this process): CR created -> pod created."""
    import kmock
    from bench.operator_load import (
        NAMESPACE,
        USER_ID,
        Traffic,
        settle,
        start_operator,
        stop,
    )
    from tests.integration.conftest import SANDBOXES, declare_craft_resources
    from tests.support.emulator import KubeEmulator, declare_core_resources
    from tests.support.sandbox_namespace import provision_sandbox_namespaces

    from craft_operator.credentials.keyring import generate_key_entry

    traffic = Traffic()
    created: dict[str, float] = {}
    pods: dict[str, float] = {}
    async with KubeEmulator() as emulator, kmock.Server(emulator):
        declare_core_resources(emulator)
        declare_craft_resources(emulator)
        provision_sandbox_namespaces(emulator)
        emulator.keep_history = False

        async def record_pod(request: Any) -> None:
            await traffic.count(request)
            if request.method.value.upper() == "POST" and request.url.path.endswith("/pods"):
                name = (request.data or {}).get("metadata", {}).get("name")
                if name:
                    pods.setdefault(name, time.perf_counter())

        emulator.before_request.append(record_pod)
        url = str(emulator.url).rstrip("/")
        with tempfile.TemporaryDirectory(prefix="craft-bench-rate-") as tmp:
            state = Path(tmp)
            metrics_port = free_port()
            keys = generate_key_entry("bench").get_secret_value()
            started = traffic.snapshot()
            child = start_operator(
                url, state, workers, keys, extra_env={"CRAFT_METRICS_PORT": str(metrics_port)}
            )
            process = psutil.Process(child.pid)
            samples = Samples(every=max(5.0, seconds / 20))
            try:
                await settle(traffic, quiet=1.0, since=started)
                idle_rss, idle_cpu = process.memory_info().rss, cpu_seconds(process)
                before = traffic.snapshot()
                start_sampler(samples, process, metrics_port, lambda: (len(created), len(pods), 0))
                loop = asyncio.get_running_loop()
                begun, total = loop.time(), int(rate * seconds)
                for index in range(total):
                    delay = begun + index / rate - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    name = f"sandbox-{index:06d}"
                    created[name] = time.perf_counter()
                    emulator.create(
                        SANDBOXES,
                        {
                            "apiVersion": "craft.onyx.app/v1alpha1",
                            "kind": "CraftSandbox",
                            "metadata": {"name": name, "namespace": NAMESPACE},
                            "spec": {"user": {"id": USER_ID}},
                        },
                    )
                achieved = total / (loop.time() - begun)
                deadline = loop.time() + drain_time(seconds)
                while len(pods) < total and loop.time() < deadline:  # noqa: ASYNC110 -- a count
                    await asyncio.sleep(0.5)
                samples.stop.set()
                if len(pods) == total:
                    await settle(traffic)
                cpu = cpu_seconds(process) - idle_cpu
                finished = len(pods)
                rss = process.memory_info().rss
                counted = traffic.snapshot()
            finally:
                samples.stop.set()
                await stop(child, state)
    result = summary(created, pods, None, samples)
    result.update(
        n=total,
        rate=rate,
        achieved=achieved,
        seconds=seconds,
        unfinished=total - finished,
        cpu_ms=cpu / max(finished, 1) * 1000,
        reads=(counted.reads - before.reads) / total,
        writes=(counted.writes - before.writes) / total,
        events=(counted.events - before.events) / total,
        idle_rss_mib=idle_rss / 2**20,
        rss_mib=rss / 2**20,
    )
    return result


def report(server: str, r: dict[str, Any]) -> list[str]:
    """The printed lines of one sustained run."""
    ready = (
        f"Ready p50 {r['ready_p50_ms']:.0f} ms, p99 {r['ready_p99_ms']:.0f} ms; "
        if "ready_p50_ms" in r
        else ""
    )
    execs = f", {r['execs']:.2f} execs" if "execs" in r else ""
    lines = [
        f"sustained {server}: {r['rate']:g}/s offered for {r['seconds']:g} s "
        f"({r['achieved']:.1f}/s achieved, {r['n']} sandboxes, {r['unfinished']} unfinished "
        f"at the end): pod p50 {r['p50_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms; {ready}"
        f"operator CPU {r['cpu_ms']:.2f} ms per finished sandbox; per created sandbox "
        f"{r['writes']:.2f} writes, {r['events']:.2f} events, {r['reads']:.2f} reads{execs}; RSS "
        f"{r['idle_rss_mib']:.0f} MiB idle, {r['rss_mib']:.0f} MiB at the end",
        "  pod p99 ms by minute: " + " ".join(f"{v:.0f}" for v in r["pod_p99_by_minute"]),
    ]
    if "ready_p99_by_minute" in r:
        lines.append(
            "  Ready p99 ms by minute: " + " ".join(f"{v:.0f}" for v in r["ready_p99_by_minute"])
        )
    taken: list[Sample] = r["samples"]
    if taken:
        lines.append(
            "  samples (s: RSS MiB, backlog, created/pods/Ready): "
            + "; ".join(
                f"{s.at:.0f}: {s.rss_mib:.0f}, {s.backlog:.0f}, {s.created}/{s.pods}/{s.ready}"
                for s in taken
            )
        )
    return lines
