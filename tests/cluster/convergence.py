"""What the operator guarantees, read through the real API server and its database.

The cluster tier's counterpart of ``tests/resilience/harness.py``'s ``check_converged``: the
same promises (every sandbox Ready with exactly one pod, Secret and ConfigMap, each owned by
it; one live PAT per sandbox, the one in its Secret; nothing left of a deleted sandbox), but
read with an admin's :class:`~tests.support.cluster.Cluster` from a real control plane, and
what each operator process served on its metrics endpoint.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from craft_operator.builders.naming import SECRET_SUFFIX, SKILLS_SUFFIX
from craft_operator.credentials.tokens import hash_token
from tests.support.cluster import CRAFT, Cluster
from tests.support.credentials_db import live_pats_and_rows
from tests.support.operator_process import OperatorProcess

SANDBOXES = f"{CRAFT}/craftsandboxes"
#: Each child kind of a sandbox, and the suffix of its name.
CHILDREN = {
    "/api/v1/pods": "",
    "/api/v1/secrets": SECRET_SUFFIX,
    "/api/v1/configmaps": SKILLS_SUFFIX,
}
#: What the control plane itself puts in every namespace (root-ca-certificate-publisher).
CLUSTER_OWN = {"kube-root-ca.crt"}


def sandbox_manifest(name: str, user_id: str, **spec: Any) -> dict[str, Any]:
    """A CraftSandbox for ``user_id``."""
    return {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "metadata": {"name": name},
        "spec": {"user": {"id": user_id}, **spec},
    }


def phase(cluster: Cluster, namespace: str, name: str) -> str:
    """The sandbox's phase ("" before the first status, or when it is gone)."""
    return str(((cluster.sandbox(namespace, name) or {}).get("status") or {}).get("phase", ""))


def check_converged(
    cluster: Cluster, database_url: str, namespace: str, expected: Iterable[str]
) -> None:
    """Every expected sandbox Ready with exactly one of each child and one live PAT; no more.

    Raises ``AssertionError`` naming what is wrong.
    """
    expected = sorted(expected)
    sandboxes = {s["metadata"]["name"]: s for s in cluster.list(SANDBOXES, namespace)}
    assert sorted(sandboxes) == expected, f"sandboxes left over or missing: {sorted(sandboxes)}"
    not_ready = {
        name: (s.get("status") or {}).get("phase")
        for name, s in sandboxes.items()
        if (s.get("status") or {}).get("phase") != "Ready"
    }
    assert not not_ready, f"not Ready: {not_ready}"
    for kind, suffix in CHILDREN.items():
        children = [
            obj
            for obj in cluster.list(kind, namespace)
            if obj["metadata"]["name"] not in CLUSTER_OWN
        ]
        found = sorted(obj["metadata"]["name"] for obj in children)
        assert found == sorted(name + suffix for name in expected), f"{kind}: {found}"
        for obj in children:
            owners = obj["metadata"].get("ownerReferences") or []
            uid = sandboxes[obj["metadata"]["name"].removesuffix(suffix)]["metadata"]["uid"]
            assert [o["uid"] for o in owners] == [uid], f"{obj['metadata']['name']}: {owners}"

    live, rows = live_pats_and_rows(database_url, namespace)
    by_name = {row.name: row for row in rows}
    assert len(by_name) == len(rows), "two credential rows for one sandbox"
    assert sorted(by_name) == expected, f"credential rows: {sorted(by_name)}"
    assert sorted(live) == sorted(row.pat_id for row in rows), (
        f"{len(live)} live PATs for {len(rows)} sandboxes (orphans or missing)"
    )
    for name, row in by_name.items():
        assert row.sandbox_uid == sandboxes[name]["metadata"]["uid"], f"{name}: stale uid"
        secret = cluster.get("/api/v1/secrets", namespace, name + SECRET_SUFFIX)
        assert secret is not None, f"{name}: no Secret"
        token = base64.b64decode(secret["data"]["ONYX_PAT"]).decode()
        assert hash_token(token) == live[row.pat_id], f"{name}: its Secret holds a dead PAT"


def describe(what: str, *operators: OperatorProcess) -> Callable[[], str]:
    """``wait_for``'s ``what``: ``what``, and at a failure how each operator's log ends."""

    def described() -> str:
        return what + "".join(
            f"\n-- {operator.state.name} (alive: {operator.alive}), its log ends:\n"
            f"{operator.log_tail()}"
            for operator in operators
        )

    return described


def converged(cluster: Cluster, database_url: str, namespace: str, expected: Iterable[str]) -> bool:
    """:func:`check_converged` as a ``wait_for`` check (its ``AssertionError`` says why not)."""
    check_converged(cluster, database_url, namespace, expected)
    return True


# -- what an operator process says about itself ----------------------------------------------


def serving(operator: OperatorProcess) -> bool:
    """Whether the process is past its start-up: its metrics endpoint answers."""
    pages = len(operator.metrics)
    operator.scrape_metrics()
    return len(operator.metrics) > pages


def metrics_now(operator: OperatorProcess) -> dict[str, float]:
    """The samples the running process serves now, by name with labels (``a{b="c"}``).

    Raises ``AssertionError`` if the process does not answer (e.g. still starting).
    """
    pages = len(operator.metrics)
    operator.scrape_metrics()
    assert len(operator.metrics) > pages, "the metrics endpoint did not answer"
    return parse_metrics(operator.metrics[-1])


def parse_metrics(page: str) -> dict[str, float]:
    """A Prometheus text page as ``{'name{label="value"}': value}``."""
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


def writes(samples: dict[str, float]) -> float:
    """The writes the operator's own client sent (POST, PUT, PATCH and DELETE requests)."""
    return sum(
        samples.get(f'craft_api_requests_total{{verb="{verb}"}}', 0.0)
        for verb in ("POST", "PUT", "PATCH", "DELETE")
    )


def log_text(operator: OperatorProcess) -> str:
    """Every log line of every process this :class:`OperatorProcess` started."""
    return "\n".join(path.read_text(errors="replace") for path in operator.logs)
