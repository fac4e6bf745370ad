"""The platform's policy on a real API server: the ValidatingAdmissionPolicy of
``manifests/policy`` refuses what the operator would refuse, in the same words, and without
it the operator refuses on its own (no PAT minted in either case).

The VAP is applied per test (and removed after), so the rest of the tier runs without it;
its verdicts come from informers, so each change is followed by a probe until the server
sees it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy.exc

from craft_operator.client import AdmissionDeniedError, ForbiddenError, SandboxClient
from craft_operator.policy.models import POLICY_NAME, TENANT_LABEL
from tests.support.backend import backend_kubeconfig
from tests.support.cluster import CRAFT, REPO, ApiError, Cluster, path_of, wait_for
from tests.support.credentials_db import live_pats_and_rows
from tests.support.operator_process import OperatorProcess
from tests.unit.policy.cases import CASES, OTHER_USER, USER

SANDBOXES = f"{CRAFT}/craftsandboxes"
POLICIES = f"{CRAFT}/craftsandboxpolicies"
POLICY_DIR = REPO / "manifests" / "policy"


def sandbox(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "metadata": {"name": name},
        "spec": {"user": {"id": USER}, **spec},
    }


def verdict(cluster: Cluster, namespace: str, spec: dict[str, Any]) -> str | None:
    """None if the API server admits a sandbox with ``spec`` (dry run), else its message."""
    try:
        cluster.create(SANDBOXES, namespace, sandbox("probe", spec), dry_run=True)
    except ApiError as error:
        if error.status != 403:
            raise
        return error.message
    return None


def create_ready(
    cluster: Cluster, namespace: str, operator: OperatorProcess, spec: dict[str, Any]
) -> None:
    """Create sandbox alice with ``spec`` and wait until it is Ready."""
    cluster.create(SANDBOXES, namespace, sandbox("alice", spec))
    wait_for(
        lambda: (
            (cluster.sandbox(namespace, "alice") or {}).get("status", {}).get("phase") == "Ready"
        ),
        within=90,
        what=lambda: f"alice Ready; operator log:\n{operator.log_tail()}",
    )


def write_policy(cluster: Cluster, namespace: str, spec: dict[str, Any]) -> None:
    """Replace the CraftSandboxPolicy's spec; return once the admission policy uses it."""
    probe = f"probe-{uuid.uuid4().hex[:8]}"
    spec = {**spec, "runtimeClassNames": [*spec.get("runtimeClassNames", []), probe]}
    current = cluster.get(POLICIES, None, POLICY_NAME)
    assert current is not None
    cluster.call("PUT", path_of(POLICIES, None, POLICY_NAME), {**current, "spec": spec})
    wait_for(
        lambda: verdict(cluster, namespace, {"runtimeClassName": probe}) is None,
        what="the admission policy reading the new CraftSandboxPolicy",
    )


@pytest.fixture
def admission_policy(cluster: Cluster, namespace: str) -> Iterator[None]:
    """manifests/policy applied (and in force), removed after the test."""
    cluster.kubectl("apply", "--server-side", "-k", str(POLICY_DIR))
    wait_for(
        lambda: verdict(cluster, namespace, {"image": "attacker/sandbox:1"}) is not None,
        what="the admission policy in force",
    )
    try:
        yield
    finally:
        cluster.kubectl("delete", "-k", str(POLICY_DIR), "--ignore-not-found")
        # The API server drops a deleted policy from its admission cache a moment later:
        # until then it may still judge sandboxes, and the next test would see that.
        wait_for(
            lambda: admitted(cluster, namespace, {"image": "attacker/sandbox:1"}),
            what="the admission policy out of force",
        )


def admitted(cluster: Cluster, namespace: str, spec: dict[str, Any]) -> bool:
    """Whether the API server admits a sandbox with ``spec`` now (dry run)."""
    try:
        cluster.create(SANDBOXES, namespace, sandbox("probe", spec), dry_run=True)
    except ApiError:
        return False
    return True


@pytest.fixture
def bound_namespace(cluster: Cluster, namespace: str) -> str:
    """A second sandbox namespace, bound to tenant acme."""
    name = cluster.sandbox_namespace(f"{namespace[:50]}-acme")
    cluster.patch(
        "/api/v1/namespaces", None, name, {"metadata": {"labels": {TENANT_LABEL: "acme"}}}
    )
    return name


def minted(state: Path, namespace: str) -> tuple[dict[int, str], list[Any]]:
    """The live PATs and the namespace's credential rows in the operator's database; none
    at all while the store was never opened (its tables are made on first use)."""
    url = f"sqlite:///{state / 'craft-operator.db'}"
    try:
        return live_pats_and_rows(url, namespace)
    except sqlalchemy.exc.OperationalError as error:
        if "no such table" not in str(error):
            raise
        return {}, []


@pytest.mark.usefixtures("admission_policy")
def test_the_admission_policy_judges_every_case_as_the_operator_does(
    cluster: Cluster, namespace: str, bound_namespace: str
) -> None:
    wait_for(
        lambda: verdict(cluster, bound_namespace, {}) is not None,
        what="the admission policy seeing the tenant label",
    )
    disagreements = []
    for policy in {repr(case.policy): case for case in CASES}.values():
        write_policy(cluster, namespace, policy.policy_in(namespace))
        for case in CASES:
            if case.policy != policy.policy:
                continue
            where = bound_namespace if case.tenant == "acme" else namespace
            if case.tenant not in (None, "acme"):
                raise AssertionError(f"{case.id}: only tenant acme is set up")
            found = verdict(cluster, where, case.full_spec())
            if case.allowed and found is not None:
                disagreements.append(f"{case.id}: refused: {found}")
            if not case.allowed and (found is None or case.message not in found):
                disagreements.append(f"{case.id}: expected {case.message!r}, got {found!r}")
    assert disagreements == []


@pytest.mark.usefixtures("admission_policy")
def test_with_the_admission_policy_a_disallowed_sandbox_is_refused_and_no_token_minted(
    cluster: Cluster, namespace: str, operator: OperatorProcess, state: Path
) -> None:
    wait_for(lambda: "reconcile workers" in operator.log_tail(), what="the operator started")
    with pytest.raises(ApiError) as refused:
        cluster.create(SANDBOXES, namespace, sandbox("alice", {"image": "attacker/sandbox:1"}))

    assert refused.value.status == 403
    assert "ValidatingAdmissionPolicy 'craft-sandbox-policy'" in refused.value.message
    assert "spec.image attacker/sandbox:1 is not allowed by the CraftSandboxPolicy" in (
        refused.value.message
    )
    assert cluster.sandbox(namespace, "alice") is None
    live, rows = minted(state, namespace)
    assert (live, rows) == ({}, [])


@pytest.mark.usefixtures("admission_policy")
def test_the_backends_client_says_a_policy_denial_is_not_missing_rbac(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    """The backend must tell "the user may not have this" from "our deployment lacks its
    Role": the API server answers 403 to both."""
    kubeconfig = backend_kubeconfig(cluster, namespace, tmp_path / "backend.kubeconfig")
    with (
        SandboxClient(kubeconfig=kubeconfig) as sandboxes,
        pytest.raises(AdmissionDeniedError) as refused,
    ):
        sandboxes.ensure(namespace, "alice", user_id=USER, image="attacker/sandbox:1")

    text = str(refused.value)
    assert "is not allowed by the CraftSandboxPolicy" in text
    assert "rbac.yaml" not in text
    assert not isinstance(refused.value, ForbiddenError)


def pool_verdict(cluster: Cluster, namespace: str, spec: dict[str, Any]) -> str | None:
    """None if the API server admits a CraftSandboxPool with ``spec`` (dry run), else why."""
    body = {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandboxPool",
        "metadata": {"name": "warm"},
        "spec": {"replicas": 1, **spec},
    }
    try:
        cluster.create(f"{CRAFT}/craftsandboxpools", namespace, body, dry_run=True)
    except ApiError as error:
        if error.status != 403:
            raise
        return error.message
    return None


@pytest.mark.usefixtures("admission_policy")
def test_with_the_admission_policy_a_pools_pod_settings_are_judged_as_a_sandboxs(
    cluster: Cluster, namespace: str, bound_namespace: str
) -> None:
    refused = pool_verdict(cluster, namespace, {"image": "attacker/sandbox:1"})
    assert refused is not None
    assert "spec.image attacker/sandbox:1 is not allowed by the CraftSandboxPolicy" in refused
    runtime = pool_verdict(cluster, namespace, {"runtimeClassName": "runc-unsandboxed"})
    assert runtime is not None
    assert "spec.runtimeClassName runc-unsandboxed is not allowed" in runtime
    # A pool has no user: the tenant rule does not apply to it (its claims are judged).
    assert pool_verdict(cluster, bound_namespace, {}) is None


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"image": "attacker/sandbox:1"}, id="image"),
        pytest.param({"serverURL": "https://onyx.attacker.example"}, id="server-url"),
        pytest.param({"userLibrary": {"bucket": "someone-elses-files"}}, id="bucket"),
        pytest.param(
            {"userLibrary": {"prefix": f"public/knowledge/{OTHER_USER}/user_library/"}},
            id="prefix",
        ),
    ],
)
def test_without_the_admission_policy_the_operator_refuses_and_mints_no_token(
    cluster: Cluster, namespace: str, operator: OperatorProcess, state: Path, spec: dict[str, Any]
) -> None:
    cluster.create(SANDBOXES, namespace, sandbox("alice", spec))

    wait_for(
        lambda: (
            cluster.condition(namespace, "alice", "CredentialsReady").get("reason")
            == "PolicyDenied"
        ),
        within=60,
        what=lambda: f"PolicyDenied; operator log:\n{operator.log_tail()}",
    )
    found = cluster.sandbox(namespace, "alice")
    assert found is not None
    assert found["status"]["phase"] == "Failed"
    cluster.reasons_once_said(namespace, "alice", "PolicyDenied")
    assert cluster.get("/api/v1/pods", namespace, "alice") is None
    assert cluster.get("/api/v1/secrets", namespace, "alice-credentials") is None
    live, rows = minted(state, namespace)
    assert (live, rows) == ({}, [])


def test_a_tenant_label_put_on_a_running_sandboxs_namespace_revokes_its_token(
    cluster: Cluster, namespace: str, operator: OperatorProcess, state: Path
) -> None:
    create_ready(cluster, namespace, operator, {})
    assert len(minted(state, namespace)[0]) == 1

    cluster.patch(
        "/api/v1/namespaces", None, namespace, {"metadata": {"labels": {TENANT_LABEL: "acme"}}}
    )

    wait_for(
        lambda: (
            cluster.get("/api/v1/pods", namespace, "alice") is None
            and cluster.get("/api/v1/secrets", namespace, "alice-credentials") is None
        ),
        within=60,
        what=lambda: f"the pod and Secret removed; operator log:\n{operator.log_tail()}",
    )
    assert minted(state, namespace)[0] == {}
    message = cluster.condition(namespace, "alice", "CredentialsReady")["message"]
    assert "spec.user.tenantId public is not allowed here" in message


def test_a_deleted_policy_object_leaves_running_sandboxes_running_with_a_warning(
    cluster: Cluster, namespace: str, operator: OperatorProcess, state: Path
) -> None:
    image = "registry.example.com/craft/sandbox:1.2"
    policy = {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandboxPolicy",
        "metadata": {"name": POLICY_NAME},
        "spec": {"images": ["registry.example.com/craft/"]},
    }
    cluster.create(POLICIES, None, policy)
    try:
        create_ready(cluster, namespace, operator, {"image": image})
    finally:
        cluster.delete(POLICIES, None, POLICY_NAME)  # a GitOps prune, say

    wait_for(
        lambda: (
            cluster.condition(namespace, "alice", "PolicyEnforced").get("reason") == "PolicyMissing"
        ),
        within=60,
        what=lambda: f"PolicyMissing; operator log:\n{operator.log_tail()}",
    )
    reasons = cluster.reasons_once_said(namespace, "alice", "PolicyMissing")
    assert "AccessWithdrawn" not in reasons
    assert cluster.get("/api/v1/pods", namespace, "alice") is not None
    assert cluster.get("/api/v1/secrets", namespace, "alice-credentials") is not None
    assert len(minted(state, namespace)[0]) == 1
    assert "is missing" in operator.log_tail()


@pytest.mark.usefixtures("admission_policy")
def test_with_the_admission_policy_a_sandbox_is_deleted_even_while_its_policy_is_missing(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    """The API server looks for the binding's parameter before it weighs matchConditions:
    had a missing CraftSandboxPolicy refused every write (parameterNotFoundAction Deny),
    the operator could not remove its finalizer and every deleted sandbox would hang in
    Terminating. The operator refuses what needs the missing policy instead."""
    create_ready(cluster, namespace, operator, {})
    cluster.delete(POLICIES, None, POLICY_NAME)  # a GitOps prune, say
    wait_for(
        lambda: admitted(cluster, namespace, {"image": "attacker/sandbox:1"}),
        what="the binding judging nothing without its CraftSandboxPolicy",
    )

    cluster.patch(
        SANDBOXES, namespace, "alice", {"metadata": {"annotations": {"example.com/note": "x"}}}
    )
    cluster.delete(SANDBOXES, namespace, "alice")

    wait_for(
        lambda: cluster.sandbox(namespace, "alice") is None,
        within=60,
        what=lambda: f"alice gone; operator log:\n{operator.log_tail()}",
    )
