"""What one pass over a warm pool costs as the pool grows: the pool controller's pass over a
full pool from the cache (the pass that each claim's events bring: count the pods, plan,
compare the status), in-process, for the operator code on ``PYTHONPATH``.

    .venv/bin/python bench/pool_pass.py [--sizes 100 300 500] [--claimed 1000]
    PYTHONPATH=<older checkout>/operator .venv/bin/python bench/pool_pass.py  # A/B

Prints, per pool size (with ``--claimed`` pods claimed from it beside it, live sandboxes'
pods, which the pass also counts):
CPU microseconds per pass, and the API requests the passes sent (0: a full pool needs none;
the first pass's status write is left out).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from craft_operator.api.pool import (
    LABEL_CLAIMED_FROM,
    LABEL_POOL,
    parse_pool,
)
from craft_operator.builders.pool import build_pool_pod
from craft_operator.config import Settings
from craft_operator.kube import kinds
from craft_operator.kube.cache import ObjectCache
from craft_operator.metrics import Metrics
from craft_operator.reconciler.deps import Services
from craft_operator.reconciler.pool import PoolReconciler

NAMESPACE = "ns"
POOL_UID = "pool-uid"


class StatusOnlyKube:
    """The API server as far as a pass over a full pool needs it: a status patch, merged."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.requests = 0

    async def patch(
        self, api: Any, namespace: str, name: str, patch: dict[str, Any], **_: Any
    ) -> dict[str, Any]:
        """Merge a status patch into the pool."""
        self.requests += 1
        updated = copy.deepcopy(self.body)
        status = updated.setdefault("status", {})
        for key, value in patch["status"].items():
            if value is None:
                status.pop(key, None)
            else:
                status[key] = value
        meta = updated["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        self.body = updated
        return updated

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a pass over a full pool sent {name}")


def pod(index: int, built: dict[str, Any], *, claimed: bool) -> dict[str, Any]:
    """A Running, Ready pod of pool ``warm`` as the operator built it (or claimed from it),
    as a watch delivers it."""
    result = copy.deepcopy(built)
    meta = result["metadata"]
    if claimed:
        meta["labels"].pop(LABEL_POOL, None)
        meta["labels"][LABEL_CLAIMED_FROM] = "warm"
        meta["ownerReferences"] = [
            {"kind": "CraftSandbox", "name": f"s-{index}", "uid": f"s-{index}", "controller": True}
        ]
    meta.pop("generateName", None)
    meta.update(
        name=f"warm-{index:06d}",
        namespace=NAMESPACE,
        uid=f"uid-{index}",
        resourceVersion=str(10 + index),
        creationTimestamp=f"2026-11-27T{index // 3600 % 24:02d}:"
        f"{index // 60 % 60:02d}:{index % 60:02d}Z",
    )
    result["status"] = {
        "phase": "Running",
        "conditions": [
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": "True"},
            {"type": "ContainersReady", "status": "True"},
            {"type": "PodScheduled", "status": "True"},
        ],
    }
    return result


async def measure(size: int, claimed: int, passes: int) -> tuple[float, int]:
    """CPU microseconds per pass over a full pool of ``size`` (and ``claimed`` pods claimed
    from it), and the requests those passes sent."""
    settings = Settings(
        state_dir=Path("/tmp"),  # nothing is written
        sandbox_image="registry.example.com/craft/sandbox:1",
        server_url="http://onyx.internal:8080",
        allow_unrestricted_egress=True,
    )
    body: dict[str, Any] = {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandboxPool",
        "metadata": {
            "name": "warm",
            "namespace": NAMESPACE,
            "uid": POOL_UID,
            "resourceVersion": "1",
            "generation": 1,
            "creationTimestamp": "2026-11-27T00:00:00Z",
        },
        "spec": {"replicas": size},
    }
    built = build_pool_pod(parse_pool(body), settings)
    cache = ObjectCache()
    cache.put(kinds.POOL.name, body)
    for index in range(size):
        cache.put(kinds.POD.name, pod(index, built, claimed=False))
    for index in range(claimed):
        cache.put(kinds.POD.name, pod(size + index, built, claimed=True))
    kube = StatusOnlyKube(body)
    services = Services(
        settings=settings,
        kube=kube,  # type: ignore[arg-type]
        cache=cache,
        credentials=None,  # type: ignore[arg-type]  # a pool has no credentials
        skills=None,  # type: ignore[arg-type]
        exec=None,  # type: ignore[arg-type]
        events=None,  # type: ignore[arg-type]  # a full pool posts none
        library=None,  # type: ignore[arg-type]
        clock=lambda: datetime(2026, 11, 27, 12, tzinfo=UTC),
        metrics=Metrics(),
    )
    reconciler = PoolReconciler(services)
    await reconciler.reconcile((NAMESPACE, "warm"))  # the first pass writes the status
    before = kube.requests
    started = time.process_time()
    for _ in range(passes):
        await reconciler.reconcile((NAMESPACE, "warm"))
    spent = time.process_time() - started
    return spent / passes * 1e6, kube.requests - before


def main() -> None:
    """Print the figures for each pool size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 300, 500])
    parser.add_argument("--claimed", type=int, default=1000, help="pods claimed from it")
    parser.add_argument("--passes", type=int, default=200)
    args = parser.parse_args()
    print(f"{'pool':>6} {'claimed':>8} {'CPU us per pass':>16} {'requests':>9}")
    for size in args.sizes:
        cpu, requests = asyncio.run(measure(size, args.claimed, args.passes))
        print(f"{size:>6} {args.claimed:>8} {cpu:>16.0f} {requests:>9}")


if __name__ == "__main__":
    main()
