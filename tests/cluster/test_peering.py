"""Two replicas peer on a real API server: the preferred one works, the standby waits, and
takes over when the preferred one dies.

Both replicas are ``craft-operator run --peering ...`` processes as the ServiceAccount, on
one credentials database, as the StatefulSet's two pods are. Both use the same client (the
same user and user agent), so the server cannot tell their writes apart; each process says
what it did on its own metrics endpoint (``craft_replica_active``, ``craft_api_requests``,
``craft_reconcile_passes``, ``craft_pat_mints``) and in its own log.

The test peers through a ClusterKopfPeering of its own (created as admin: the operator may
only read and patch peering objects), so that keep-alives other tests leave in the shared
``craft-operator`` object cannot pause or wake these replicas.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from craft_operator.credentials.tokens import pat_name
from tests.cluster.conftest import Launch
from tests.cluster.convergence import (
    SANDBOXES,
    converged,
    describe,
    log_text,
    metrics_now,
    phase,
    sandbox_manifest,
    writes,
)
from tests.resilience.harness import pats_minted_per_sandbox
from tests.support.cluster import Cluster, wait_for
from tests.support.operator_process import OperatorProcess

PEERINGS = "/apis/kopf.dev/v1/clusterkopfpeerings"
PREFERRED, STANDBY = "craft-operator-0", "craft-operator-1"
#: Seconds a keep-alive stays valid (kopf refreshes it every 5-10 s at this lifetime, the
#: shortest the settings allow): how long a replica that died without a goodbye keeps its
#: standby waiting.
LIFETIME = 15
USER_ID = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"


def peering_object(name: str) -> dict[str, Any]:
    """A ClusterKopfPeering as ``manifests/base/peering.yaml`` has it, by another name."""
    return {
        "apiVersion": "kopf.dev/v1",
        "kind": "ClusterKopfPeering",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "craft-operator"}},
    }


def replica(
    launch: Launch, state: Path, peering: str, identity: str, priority: int
) -> OperatorProcess:
    """A peered replica: its own logs, the test's shared credentials database."""
    process = launch(
        run_args=("--peering", peering, "--priority", str(priority)),
        POD_ID=identity,
        CRAFT_PEERING_LIFETIME=str(LIFETIME),
        CRAFT_DATABASE_URL=f"sqlite:///{state / 'craft-operator.db'}",
    )
    # Its own state directory, so that each process's log is its own.
    process.state = state / identity
    process.state.mkdir()
    return process


def peers(cluster: Cluster, peering: str) -> set[str]:
    """The identities with a keep-alive record in the peering object."""
    body = cluster.get(PEERINGS, None, peering) or {}
    return {name for name, record in (body.get("status") or {}).items() if record}


def active(process: OperatorProcess) -> bool:
    """Whether the process says it reconciles (``craft_replica_active``)."""
    return metrics_now(process)["craft_replica_active"] == 1.0


def standing_by(process: OperatorProcess) -> bool:
    """Whether the process serves and says it is a standby."""
    return metrics_now(process)["craft_replica_active"] == 0.0


def did_nothing(process: OperatorProcess) -> dict[str, Any]:
    """What a standby must not have done: its counters, all expected zero."""
    samples = metrics_now(process)
    return {
        "writes": writes(samples),
        "passes": samples["craft_reconcile_passes_total"],
        "mints": sum(v for k, v in samples.items() if k.startswith("craft_pat_mints_total")),
    }


def ready(cluster: Cluster, namespace: str, name: str, *replicas: OperatorProcess) -> None:
    """Wait until the sandbox is Ready (the replicas' logs in a failure's message)."""
    wait_for(
        lambda: phase(cluster, namespace, name) == "Ready",
        within=90,
        what=describe(f"{name} Ready", *replicas),
    )


def test_the_preferred_replica_works_the_standby_takes_over_when_it_dies_and_hands_back(
    cluster: Cluster, namespace: str, state: Path, launch: Launch
) -> None:
    peering = f"craft-operator-test-{uuid.uuid4().hex[:6]}"
    cluster.create(PEERINGS, None, peering_object(peering))
    database = f"sqlite:///{state / 'craft-operator.db'}"
    preferred = replica(launch, state, peering, PREFERRED, 100)
    standby = replica(launch, state, peering, STANDBY, 99)

    # The preferred replica starts first and works; the standby joins and waits.
    preferred.start()
    wait_for(lambda: active(preferred), within=60, what="the preferred replica active")
    standby.start()
    wait_for(lambda: peers(cluster, peering) == {PREFERRED, STANDBY}, what="both keep-alives")
    wait_for(lambda: standing_by(standby), within=60, what="the standby serving, standing by")
    cluster.create(SANDBOXES, namespace, sandbox_manifest("alice", USER_ID))
    ready(cluster, namespace, "alice", preferred, standby)

    assert active(preferred)
    assert writes(metrics_now(preferred)) > 0
    assert standing_by(standby)
    assert did_nothing(standby) == {"writes": 0, "passes": 0, "mints": 0}
    assert "active:" in log_text(preferred)
    assert "standby:" in log_text(standby)
    assert "active:" not in log_text(standby)
    assert pats_minted_per_sandbox(database) == {pat_name(namespace, "alice"): 1}

    # SIGKILL: no goodbye, its keep-alive stays until it expires; then the standby takes
    # over and converges what was created meanwhile.
    preferred.kill()
    killed = time.monotonic()
    cluster.create(SANDBOXES, namespace, sandbox_manifest("bob", USER_ID))
    # Within the lifetime (and a few seconds: the standby reads the object every second).
    wait_for(lambda: active(standby), within=LIFETIME + 10, what="the standby taking over")
    takeover = time.monotonic() - killed
    ready(cluster, namespace, "bob", standby)
    wait_for(
        lambda: converged(cluster, database, namespace, ["alice", "bob"]),
        within=30,
        what=describe("alice and bob converged", standby),
    )
    assert "active: reconciling" in log_text(standby)
    assert writes(metrics_now(standby)) > 0
    assert pats_minted_per_sandbox(database) == {
        pat_name(namespace, "alice"): 1,
        pat_name(namespace, "bob"): 1,
    }

    # The preferred replica comes back: the standby steps down and does nothing more.
    preferred.start()
    wait_for(lambda: active(preferred), within=60, what="the preferred replica active again")
    wait_for(lambda: standing_by(standby), within=30, what="the standby stepping down")
    before = did_nothing(standby)
    cluster.create(SANDBOXES, namespace, sandbox_manifest("carol", USER_ID))
    ready(cluster, namespace, "carol", preferred, standby)
    wait_for(
        lambda: converged(cluster, database, namespace, ["alice", "bob", "carol"]),
        within=30,
        what=describe("alice, bob and carol converged", preferred, standby),
    )
    assert did_nothing(standby) == before
    assert standing_by(standby)

    # A clean stop says goodbye: no record is left behind.
    assert standby.terminate() == 0
    assert preferred.terminate() == 0
    assert peers(cluster, peering) == set()
    cluster.delete(PEERINGS, None, peering)
    print(f"takeover {takeover:.1f} s after the SIGKILL (keep-alive lifetime {LIFETIME} s)")
