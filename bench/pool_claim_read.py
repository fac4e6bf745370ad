"""What a claim's read of a pool costs as the pool grows: the pool's claimable pods from the
cache (what ``steps/claim.py`` reads before its one write), and a claim's and refill's cache
updates, in-process, for the operator code on ``PYTHONPATH``.

    .venv/bin/python bench/pool_claim_read.py [--sizes 180 1000 5000]
    PYTHONPATH=<older checkout>/operator .venv/bin/python bench/pool_claim_read.py  # A/B

Prints, per pool size: microseconds per read (the names in order, then the three pods a
claim tries) and per claim-and-refill update (the claimed pod leaves the pool's labels, a
new Ready pod arrives). Before the cache kept an index of them, a read scanned the pool:
about 0.5 ms at 180 pods, 2.7 ms at 1,000 and 17 ms at 5,000 on this machine.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

from craft_operator.api.pool import LABEL_POOL, LABEL_POOL_TEMPLATE_HASH, POOL_KIND
from craft_operator.kube import kinds
from craft_operator.kube.cache import ObjectCache
from craft_operator.reconciler import pool_pods


def ready_pool_pod_names(cache: ObjectCache, namespace: str, pool: str, **kw: str) -> Sequence[str]:
    """The claimable names: from the index, or by the scan of code older than it (A/B)."""
    if hasattr(pool_pods, "ready_pool_pod_names"):
        names: Sequence[str] = pool_pods.ready_pool_pod_names(cache, namespace, pool, **kw)
        return names
    return [
        pod["metadata"]["name"] for pod in pool_pods.ready_pool_pods(cache, namespace, pool, **kw)
    ]


POOL_UID = "pool-uid"


def pool_pod(index: int, version: int) -> dict[str, Any]:
    """A Ready pod of pool ``warm``, as a watch delivers it (the cache trims it)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"warm-{index:06d}",
            "namespace": "ns",
            "uid": f"uid-{index}",
            "resourceVersion": str(version),
            "creationTimestamp": f"2026-11-27T{index // 3600 % 24:02d}:"
            f"{index // 60 % 60:02d}:{index % 60:02d}Z",
            "labels": {LABEL_POOL: "warm", LABEL_POOL_TEMPLATE_HASH: "h1"},
            "ownerReferences": [
                {"kind": POOL_KIND, "name": "warm", "uid": POOL_UID, "controller": True}
            ],
        },
        "spec": {"containers": [{"name": "sandbox", "image": "registry.example.com/s:1"}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def measure(size: int, rounds: int) -> tuple[float, float]:
    """Microseconds per read and per claim-and-refill update, for a pool of ``size``."""
    cache = ObjectCache()
    cache.put(
        kinds.POOL.name,
        {
            "metadata": {
                "name": "warm",
                "namespace": "ns",
                "uid": POOL_UID,
                "resourceVersion": "1",
                "generation": 1,
            },
            "status": {"observedGeneration": 1, "templateHash": "h1"},
        },
    )
    for index in range(size):
        cache.put(kinds.POD.name, pool_pod(index, 10))
    ready_pool_pod_names(cache, "ns", "warm", template_hash="h1")  # the index is built once
    started = time.perf_counter()
    for offset in range(rounds):
        names = ready_pool_pod_names(cache, "ns", "warm", template_hash="h1")
        tried = [names[(offset + step) % len(names)] for step in range(3)]
        pods = [cache.get(kinds.POD.name, "ns", name) for name in tried]
        assert all(pods)
    read = (time.perf_counter() - started) / rounds * 1e6
    updates = [pool_pod(index, 10**6 + index) for index in range(rounds)]
    for claimed in updates:
        del claimed["metadata"]["labels"][LABEL_POOL]
    refills = [pool_pod(size + index, 10) for index in range(rounds)]
    started = time.perf_counter()
    for claimed, refill in zip(updates, refills, strict=True):
        cache.put(kinds.POD.name, claimed)
        cache.put(kinds.POD.name, refill)
    update = (time.perf_counter() - started) / rounds * 1e6
    assert len(ready_pool_pod_names(cache, "ns", "warm", template_hash="h1")) == size
    return read, update


def main() -> None:
    """Print the figures for each pool size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[180, 1000, 5000])
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    print(f"{'pool':>6} {'read us':>9} {'claim+refill update us':>23}")
    for size in args.sizes:
        read, update = measure(size, min(args.rounds, size))
        print(f"{size:>6} {read:>9.2f} {update:>23.2f}")


if __name__ == "__main__":
    main()
