"""Least privilege, judged by the real authorizer.

Every test of this tier runs the operator as the ``craft-operator`` ServiceAccount with the
default, namespaced RBAC: the ClusterRole and Role of ``manifests/base``, and the Role that
``manifests/sandbox-namespace`` puts in the test's namespace. It fails when any of its
requests was refused. This module shows the rest: a rule taken out of that Role is refused
by the API server and the operator says so in the sandbox's status; a served namespace
without the Role stops the operator at start with one line that says what to apply; and the
all-namespaces overlay grants what a cluster-wide operator uses, where the default install
would not.
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import Launch
from tests.cluster.test_provisioning import sandbox
from tests.support.cluster import CRAFT, OPERATOR_USER, Cluster, audited_requests, wait_for
from tests.support.operator_process import OperatorProcess
from tests.support.rbac import Access, Install, grants, install_rules, sandbox_role_rules

RBAC = "/apis/rbac.authorization.k8s.io/v1"
RBAC_VERSION = "rbac.authorization.k8s.io/v1"
#: Access everyone has (system:basic-user): the start-up check's SelfSubjectAccessReviews.
EVERYONE = "authorization.k8s.io"
#: The grants only the all-namespaces install holds: what a cluster-wide kopf needs.
CLUSTER_WIDE_ONLY = {("list", "apiextensions.k8s.io", "customresourcedefinitions"),
                     ("watch", "apiextensions.k8s.io", "customresourcedefinitions")}  # fmt: skip


def without_rule(resource: str) -> list[dict[str, Any]]:
    """The sandbox namespace Role's rules less the one for ``resource``."""
    rules = [copy.deepcopy(dict(rule)) for rule in sandbox_role_rules()]
    kept = [rule for rule in rules if resource not in rule["resources"]]
    assert len(kept) == len(rules) - 1, f"no single rule for {resource}"
    return kept


def used_access(cluster: Cluster, user: str) -> set[Access]:
    """What ``user``'s requests needed, as (verb, group, resource[/subresource])."""
    used = set()
    for event in audited_requests(cluster.plane, user):
        ref = event.get("objectRef") or {}
        if not ref.get("resource") or ref.get("apiGroup") == EVERYONE:
            continue
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        used.add((event["verb"], ref.get("apiGroup", ""), resource))
    return used


def refused(cluster: Cluster, user: str) -> list[dict[str, Any]]:
    """``user``'s requests the authorizer refused."""
    return [
        event
        for event in audited_requests(cluster.plane, user)
        if event["annotations"].get("authorization.k8s.io/decision") == "forbid"
    ]


def account_with_cluster_roles(cluster: Cluster, rules: list[Any]) -> tuple[str, str, str]:
    """A ServiceAccount in craft-system bound to a ClusterRole of ``rules``: (namespace,
    name, user name)."""
    name = f"craft-operator-{uuid.uuid4().hex[:6]}"
    meta = {"name": name}
    cluster.create(
        "/api/v1/serviceaccounts",
        "craft-system",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
    )
    cluster.create(
        f"{RBAC}/clusterroles",
        None,
        {"apiVersion": RBAC_VERSION, "kind": "ClusterRole", "metadata": meta, "rules": rules},
    )
    cluster.create(
        f"{RBAC}/clusterrolebindings",
        None,
        {
            "apiVersion": RBAC_VERSION,
            "kind": "ClusterRoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "craft-system"}],
        },
    )  # fmt: skip
    return "craft-system", name, f"system:serviceaccount:craft-system:{name}"


def wait_until_ready(cluster: Cluster, namespace: str, name: str, process: OperatorProcess) -> None:
    """Wait for phase Ready (the operator's log tail on failure)."""
    wait_for(
        lambda: (
            ((cluster.sandbox(namespace, name) or {}).get("status") or {}).get("phase") == "Ready"
        ),
        within=90,
        what=lambda: (
            f"{name} Ready; status {cluster.sandbox(namespace, name)}\n" + process.log_tail()
        ),
    )


def account_with_role(cluster: Cluster, namespace: str) -> tuple[str, str, str]:
    """A ServiceAccount in craft-system with a copy of the sandbox Role in ``namespace`` and
    the install's ClusterRole: (namespace, name, user name). The Role is named like the
    account."""
    name = f"craft-operator-{uuid.uuid4().hex[:6]}"
    meta = {"name": name}
    cluster.create(
        "/api/v1/serviceaccounts",
        "craft-system",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
    )
    rules = [dict(rule) for rule in sandbox_role_rules()]
    cluster.create(
        f"{RBAC}/roles",
        namespace,
        {"apiVersion": RBAC_VERSION, "kind": "Role", "metadata": meta, "rules": rules},
    )
    cluster.create(
        f"{RBAC}/rolebindings",
        namespace,
        {
            "apiVersion": RBAC_VERSION,
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "craft-system"}],
        },
    )
    # The install's cluster-scoped reads (the policy, namespaces' labels, peering).
    cluster.create(
        f"{RBAC}/clusterrolebindings",
        None,
        {
            "apiVersion": RBAC_VERSION,
            "kind": "ClusterRoleBinding",
            "metadata": meta,
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "craft-operator",
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "craft-system"}],
        },
    )
    return "craft-system", name, f"system:serviceaccount:craft-system:{name}"


@pytest.fixture
def operator_losing_exec(cluster: Cluster, namespace: str, launch: Launch, state: Path) -> str:
    """An operator that started with its Role complete (it checks at start), whose Role then
    loses ``pods/exec``; the ServiceAccount's user name."""
    account = account_with_role(cluster, namespace)
    process = launch()
    process.kubeconfig_path = cluster.service_account_kubeconfig(
        state / "reduced.kubeconfig", account[:2]
    )
    process.start()
    wait_for(
        lambda: "active: reconciling" in process.log_tail(),
        what=lambda: "the operator's first listing\n" + process.log_tail(),
    )
    cluster.call(
        "PATCH",
        f"{RBAC}/namespaces/{namespace}/roles/{account[1]}",
        {"rules": without_rule("pods/exec")},
        content_type="application/merge-patch+json",
    )
    return account[2]


def test_without_pods_exec_the_real_authorizer_refuses_validation_and_the_status_says_so(
    cluster: Cluster, namespace: str, operator_losing_exec: str
) -> None:
    cluster.create(f"{CRAFT}/craftsandboxes", namespace, sandbox("alice"))

    validated = wait_for(
        lambda: (
            cluster.condition(namespace, "alice", "CLIValidated").get("reason") == "ExecFailed"
            and cluster.condition(namespace, "alice", "CLIValidated")
        ),
        within=60,
        what=lambda: f"CLIValidated to fail; status: {cluster.sandbox(namespace, 'alice')}",
    )
    assert validated["status"] == "Unknown"
    assert "not allowed to exec into pod" in validated["message"]
    assert "pods/exec" in validated["message"]
    assert cluster.condition(namespace, "alice", "Ready")["status"] != "True"
    # The pod itself was created: only the missing rule is refused.
    assert cluster.get("/api/v1/pods", namespace, "alice") is not None
    denied = refused(cluster, operator_losing_exec)
    assert denied, "the API server never refused the reduced operator"
    assert {event["objectRef"].get("subresource") for event in denied} == {"exec"}
    assert json.dumps(denied).count(namespace) >= len(denied)


@pytest.mark.usefixtures("namespace")
def test_a_served_namespace_without_the_operators_role_stops_it_at_start_saying_what_to_apply(
    cluster: Cluster, launch: Launch
) -> None:
    bare = cluster.restricted_namespace(f"no-role-{uuid.uuid4().hex[:6]}")
    process = launch()
    process.namespace = bare
    process.start()
    assert process.child is not None
    code = process.child.wait(60)

    log = process.log_tail()
    assert code != 0
    lines = [line for line in log.splitlines() if line.startswith("craft-operator: ")]
    assert len(lines) == 1, log
    assert f"the operator's Role is missing or incomplete in namespace(s) {bare}" in lines[0]
    assert f"apply manifests/sandbox-namespace in {bare}" in lines[0]
    assert "list craftsandboxes.craft.onyx.app" in lines[0]
    # It asked before it watched: not one request of its own was refused.
    assert [e for e in refused(cluster, OPERATOR_USER) if bare in json.dumps(e)] == []


@pytest.mark.usefixtures("namespace")
def test_a_served_namespace_being_deleted_without_its_role_is_said_not_fatal(
    cluster: Cluster, launch: Launch
) -> None:
    """The namespace controller deletes the operator's Role with everything else: one
    namespace torn down must not keep the operator from the others after a restart."""
    doomed = cluster.restricted_namespace(f"doomed-{uuid.uuid4().hex[:6]}")
    hold = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "hold", "finalizers": ["craft.test/hold"]},
    }
    cluster.create("/api/v1/configmaps", doomed, hold)
    cluster.delete("/api/v1/namespaces", None, doomed)
    try:
        wait_for(
            lambda: (
                (cluster.get("/api/v1/namespaces", None, doomed) or {})
                .get("metadata", {})
                .get("deletionTimestamp")
            ),
            what="the namespace terminating",
        )
        process = launch()
        process.run_args = ("--standalone", "-n", doomed)
        process.start()

        wait_for(lambda: "being deleted" in process.log_tail(), what="the warning")
        assert process.alive, process.log_tail()
        assert doomed in process.log_tail()
        assert "Role is missing" not in process.log_tail()
    finally:
        cluster.patch("/api/v1/configmaps", doomed, "hold", {"metadata": {"finalizers": None}})


@pytest.mark.usefixtures("namespace")
def test_a_served_namespace_made_after_the_start_is_served_once_made(
    cluster: Cluster, launch: Launch
) -> None:
    """A typo, or GitOps making the namespace after the operator: said at start, watched all
    the same, and its sandboxes served once it is made with the operator's Role."""
    later = f"later-{uuid.uuid4().hex[:6]}"
    process = launch()
    process.run_args = ("--standalone", "-n", later)
    process.start()
    wait_for(lambda: "do not exist" in process.log_tail(), what="the warning")
    assert process.alive, process.log_tail()

    cluster.sandbox_namespace(later)
    cluster.create(f"{CRAFT}/craftsandboxes", later, sandbox("made-later"))

    wait_for(
        lambda: (cluster.sandbox(later, "made-later") or {}).get("metadata", {}).get("finalizers"),
        within=120,
        what="the sandbox served",
    )


@pytest.mark.usefixtures("namespace")
def test_serving_all_namespaces_with_the_default_install_stops_the_operator_at_start(
    cluster: Cluster, launch: Launch
) -> None:
    process = launch()
    process.namespace = None
    process.start()
    assert process.child is not None
    assert process.child.wait(60) != 0
    assert "manifests/overlays/all-namespaces" in process.log_tail()


def test_the_all_namespaces_overlay_grants_what_a_cluster_wide_operator_uses(
    cluster: Cluster, namespace: str, launch: Launch, state: Path
) -> None:
    rules = install_rules(Install.ALL_NAMESPACES)
    account = account_with_cluster_roles(cluster, [dict(rule) for rule in rules])
    process = launch()
    process.namespace = None
    process.kubeconfig_path = cluster.service_account_kubeconfig(
        state / "all-namespaces.kubeconfig", account[:2]
    )
    process.start()
    cluster.create(f"{CRAFT}/craftsandboxes", namespace, sandbox("alice"))
    wait_until_ready(cluster, namespace, "alice", process)
    cluster.delete(f"{CRAFT}/craftsandboxes", namespace, "alice")
    wait_for(lambda: cluster.sandbox(namespace, "alice") is None, within=60, what="alice deleted")

    assert process.terminate() == 0
    user = account[2]
    # A watch is audited when it ends: the operator's, when it stopped.
    used = wait_for(
        lambda: (found := used_access(cluster, user)) >= CLUSTER_WIDE_ONLY and found,
        what=lambda: f"the CRD watch in the audit log: {used_access(cluster, user)}",
    )
    assert refused(cluster, user) == []
    granted = grants(rules)
    assert used <= granted
    # What only this install grants, a cluster-wide operator uses (awaited above); the
    # namespaced default does not grant it (and its operators never ask for it).
    assert CLUSTER_WIDE_ONLY.isdisjoint(grants(install_rules(Install.NAMESPACED)))
    # The namespaced kinds are asked for cluster-wide, which only the overlay grants.
    cluster_wide = {
        event["objectRef"]["resource"]
        for event in audited_requests(cluster.plane, user)
        if event["verb"] in ("list", "watch") and not event["objectRef"].get("namespace")
    }
    assert {"craftsandboxes", "pods", "secrets", "networkpolicies"} <= cluster_wide
