"""What one /metrics scrape costs with many sandboxes in the operator's cache.

The sandbox gauges are computed from the cache at every scrape (so they never drift), in
the operator's event loop; this prints how long that blocks the loop.

    .venv/bin/python bench/metrics_scrape.py [SANDBOXES]
"""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import UTC, datetime, timedelta

import aiohttp
from prometheus_client import CollectorRegistry

from craft_operator.api.models import KIND, Phase
from craft_operator.kube.cache import ObjectCache
from craft_operator.metrics import Metrics, start_metrics_server

PHASES = [phase.value for phase in Phase]


def fill(cache: ObjectCache, count: int) -> None:
    now = datetime.now(UTC)
    for index in range(count):
        stamp = (now - timedelta(seconds=index)).strftime("%Y-%m-%dT%H:%M:%SZ")
        cache.put(
            KIND,
            {
                "metadata": {
                    "name": f"sandbox-{index}",
                    "namespace": f"team-{index % 50}",
                    "creationTimestamp": stamp,
                    "resourceVersion": str(index + 1),
                },
                "status": {
                    "phase": PHASES[index % len(PHASES)],
                    "conditions": [
                        {"type": "Ready", "status": "False", "lastTransitionTime": stamp}
                    ],
                },
            },
        )


async def main(count: int) -> None:
    cache = ObjectCache()
    fill(cache, count)
    metrics = Metrics(CollectorRegistry())
    metrics.track(cache=cache)
    for index in range(1000):
        metrics.observe_ready(index % 600)
        metrics.observe_phase("pod_ready", index % 60)
    server = await start_metrics_server(metrics.registry, 0, host="127.0.0.1")
    rounds = 20
    try:
        async with aiohttp.ClientSession() as session:
            start = time.perf_counter()
            for _ in range(rounds):
                async with session.get(server.url) as response:
                    body = await response.read()
            elapsed = (time.perf_counter() - start) / rounds
        collect_start = time.perf_counter()
        for _ in range(rounds):
            list(metrics.registry.collect())
        collect = (time.perf_counter() - collect_start) / rounds
    finally:
        await server.stop()
    print(f"sandboxes in cache:        {count}")
    print(f"scrape over HTTP:          {elapsed * 1000:.1f} ms ({len(body)} bytes)")
    print(f"collect (loop blocked):    {collect * 1000:.1f} ms")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000))
