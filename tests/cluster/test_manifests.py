"""The kustomizations in ``manifests/`` as a real API server takes them.

``kubectl apply --dry-run=server`` sends every object through the real server's decoding
(strict field validation), defaulting, validation and admission (Pod Security included)
without storing it. "Cleanly" means every object of the kustomization is admitted and the
server warns about nothing: a pod template that breaks the namespace's ``restricted`` Pod
Security profile, a deprecated API or an unknown field would each come back as a warning.

The session's cluster has the CRDs and ``manifests/base`` applied already (server-side, by
``tests/cluster/conftest.py``), so a client-side apply of the base is a re-apply here, and
kubectl notes on each object that the ``last-applied-configuration`` annotation it uses is
missing; that note alone is not a finding.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from craft_operator.api.parse import parse_sandbox
from craft_operator.builders.pod import build_pod
from craft_operator.config import Settings
from craft_operator.doctor.crd_schema import BUILDERS, stale_fields
from craft_operator.kube.client import ApiError as OperatorApiError
from craft_operator.reconciler.steps.pod_lifecycle import refused_by_limit_range
from tests.support.cluster import CRAFT, REPO, ApiError, Cluster, wait_for
from tests.support.sync_job import sample_sync_job

MANIFESTS = REPO / "manifests"
BASE = MANIFESTS / "base"
DEV = MANIFESTS / "overlays" / "dev"
ALL_NAMESPACES = MANIFESTS / "overlays" / "all-namespaces"
SANDBOX_NAMESPACE = MANIFESTS / "sandbox-namespace"
#: kubectl's note when it client-side applies an object that was applied server-side.
RE_APPLY_NOTE = "is missing the kubectl.kubernetes.io/last-applied-configuration annotation"
DRY_RUN = "(server dry run)"
CRAFT_SANDBOXES_CRD = "craftsandboxes.craft.onyx.app"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def rendered(cluster: Cluster, directory: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize <directory>``, parsed."""
    output = cluster.kubectl("kustomize", str(directory)).stdout
    return [doc for doc in yaml.safe_load_all(output) if doc]


def apply_dry_run(cluster: Cluster, *args: str, stdin: str | None = None) -> list[str]:
    """``kubectl apply --dry-run=server ARGS``: the names of the objects admitted; fails on
    any refusal or warning (but kubectl's re-apply note)."""
    result = cluster.kubectl("apply", "--dry-run=server", *args, stdin=stdin)
    warnings = [
        line for line in result.stderr.splitlines() if line.strip() and RE_APPLY_NOTE not in line
    ]
    assert warnings == [], "\n".join(warnings)
    lines = result.stdout.splitlines()
    assert all(line.endswith(DRY_RUN) for line in lines), result.stdout
    # "kind.group/name verb (server dry run)"
    return sorted(line.split()[0].split("/", 1)[1] for line in lines)


def names(objects: list[dict[str, Any]]) -> list[str]:
    """The sorted names of ``objects``."""
    return sorted(obj["metadata"]["name"] for obj in objects)


def plain_namespace(cluster: Cluster) -> str:
    """A new namespace with restricted Pod Security and nothing in it."""
    return cluster.restricted_namespace(f"team-{uuid.uuid4().hex[:6]}")


def test_the_base_is_admitted_cleanly(cluster: Cluster) -> None:
    objects = rendered(cluster, BASE)
    kinds = {obj["kind"] for obj in objects}
    assert {"Namespace", "Service", "StatefulSet", "ClusterRole"} <= kinds
    assert "CustomResourceDefinition" not in kinds, "the CRDs are applied on their own"

    assert apply_dry_run(cluster, "-k", str(BASE)) == names(objects)


def test_the_all_namespaces_overlay_is_admitted_cleanly(cluster: Cluster) -> None:
    objects = rendered(cluster, ALL_NAMESPACES)
    assert ("ClusterRole", "craft-operator-all-namespaces") in {
        (obj["kind"], obj["metadata"]["name"]) for obj in objects
    }

    assert apply_dry_run(cluster, "-k", str(ALL_NAMESPACES)) == names(objects)


def test_the_installed_base_applied_unchanged_by_another_field_manager_does_not_conflict(
    cluster: Cluster,
) -> None:
    """The session installed the base server-side; CI applying the same files under its own
    field manager must not conflict over a field the API server defaulted inside an atomic
    one (a ``fieldRef`` without ``apiVersion`` did)."""
    result = cluster.plane.kubectl(
        "apply", "--server-side", "--field-manager=ci", "--dry-run=server", "-k", str(BASE)
    )
    assert result.returncode == 0, result.stderr
    assert "conflict" not in result.stderr


def test_the_dev_overlay_is_admitted_cleanly(cluster: Cluster) -> None:
    objects = rendered(cluster, DEV)
    # A dry run cannot put objects in a namespace the same dry run only pretends to create,
    # so the overlay's namespaces are created for real first (as `kubectl apply` would).
    namespaces = [obj for obj in objects if obj["kind"] == "Namespace"]
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(namespaces))

    assert apply_dry_run(cluster, "-k", str(DEV)) == names(objects)


def test_the_dev_sample_sandbox_is_admitted_in_the_dev_sandbox_namespace(
    cluster: Cluster,
) -> None:
    sample = DEV / "sample-sandbox.yaml"
    namespace = yaml.safe_load(sample.read_text())["metadata"]["namespace"]
    namespaces = [obj for obj in rendered(cluster, DEV) if obj["kind"] == "Namespace"]
    assert namespace in names(namespaces)
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(namespaces))

    assert apply_dry_run(cluster, "-f", str(sample)) == ["alice"]
    assert cluster.get(f"{CRAFT}/craftsandboxes", namespace, "alice") is None


def test_the_sandbox_namespace_kustomization_is_admitted_in_a_namespace(
    cluster: Cluster,
) -> None:
    namespace = plain_namespace(cluster)

    admitted = apply_dry_run(cluster, "-n", namespace, "-k", str(SANDBOX_NAMESPACE))

    assert admitted == names(rendered(cluster, SANDBOX_NAMESPACE))
    assert cluster.list("/apis/networking.k8s.io/v1/networkpolicies", namespace) == []


def test_applying_the_sandbox_namespace_kustomization_again_changes_nothing(
    cluster: Cluster,
) -> None:
    """Under GitOps every sync re-applies it: no object may get a new generation (an
    empty list the server drops would, and ``kubectl diff`` would never be clean)."""
    namespace = plain_namespace(cluster)
    apply = ("apply", "--server-side", "--field-manager=gitops", "-n", namespace)
    cluster.kubectl(*apply, "-k", str(SANDBOX_NAMESPACE))
    policies = "/apis/networking.k8s.io/v1/networkpolicies"
    first = {
        p["metadata"]["name"]: p["metadata"]["generation"]
        for p in cluster.list(policies, namespace)
    }

    cluster.kubectl(*apply, "-k", str(SANDBOX_NAMESPACE))

    again = {
        p["metadata"]["name"]: p["metadata"]["generation"]
        for p in cluster.list(policies, namespace)
    }
    assert len(first) == 2
    assert again == first


def test_the_overlay_documented_for_sandbox_namespaces_is_admitted(
    cluster: Cluster, tmp_path: Path
) -> None:
    # The example overlay in the kustomization's leading comment, as a team would copy it.
    comment = (SANDBOX_NAMESPACE / "kustomization.yaml").read_text().splitlines()
    start = comment.index("#   # overlays/team-a/kustomization.yaml") + 1
    end = comment.index("#", start)
    overlay = "\n".join(line.removeprefix("#   ") for line in comment[start:end])
    namespace = plain_namespace(cluster)
    base = Path(os.path.relpath(SANDBOX_NAMESPACE, tmp_path))
    (tmp_path / "kustomization.yaml").write_text(
        overlay.replace("namespace: team-a", f"namespace: {namespace}").replace(
            "../../manifests/sandbox-namespace", str(base)
        )
    )
    objects = rendered(cluster, tmp_path)
    assert {obj["metadata"]["namespace"] for obj in objects} == {namespace}
    policies = {obj["metadata"]["name"]: obj for obj in objects if obj["kind"] == "NetworkPolicy"}
    sandbox_rule = policies["craft-sandbox-egress"]["spec"]["egress"][1]
    assert sandbox_rule["ports"] == [{"protocol": "TCP", "port": 8080}]
    s3_rule = policies["craft-library-sync-egress"]["spec"]["egress"][1]
    assert "169.254.0.0/16" in s3_rule["to"][0]["ipBlock"]["except"]

    assert apply_dry_run(cluster, "-k", str(tmp_path)) == names(objects)


def test_a_pod_template_that_breaks_restricted_pod_security_is_not_admitted_cleanly(
    cluster: Cluster,
) -> None:
    # What "cleanly" catches: the server admits the Deployment, with a warning.
    namespace = plain_namespace(cluster)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "root", "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": "root"}},
            "template": {
                "metadata": {"labels": {"app": "root"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }

    with pytest.raises(AssertionError, match=r'would violate PodSecurity "restricted:latest"'):
        apply_dry_run(cluster, "-f", "-", stdin=yaml.safe_dump(deployment))


QUOTA = SANDBOX_NAMESPACE / "quota"


def operator_pods(namespace: str) -> dict[str, dict[str, Any]]:
    """A sandbox's pod with the default resources and its first library-sync Job's pod, as
    the operator builds them for ``namespace``."""
    body = yaml.safe_load((MANIFESTS / "examples" / "minimal.yaml").read_text())
    body["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()), generation=1)
    sandbox = parse_sandbox(body)
    settings = Settings(server_url="http://onyx.test:8080", state_dir=Path("/nonexistent"))
    job = sample_sync_job(sandbox)
    job_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "alice-library-1-abcde", "namespace": namespace},
        "spec": job["spec"]["template"]["spec"],
    }
    sandbox_pod = build_pod(sandbox, settings)
    for pod in (sandbox_pod, job_pod):
        pod["metadata"].pop("ownerReferences", None)  # no such owner here
    return {"sandbox": sandbox_pod, "job": job_pod}


def quota_status(
    cluster: Cluster, namespace: str, hard: dict[str, str], used: dict[str, str]
) -> None:
    """Set the quota's status, which admission enforces: the quota controller's part (this
    control plane runs none of its own), done here."""
    cluster.call(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/resourcequotas/craft-sandboxes/status",
        {"status": {"hard": hard, "used": used}},
        content_type="application/merge-patch+json",
    )


def test_the_optional_quota_admits_the_operators_pods_and_its_limit_range_refusal_is_known(
    cluster: Cluster,
) -> None:
    """On the real admission chain (LimitRanger, ResourceQuota): the operator's pods are
    admitted in a namespace with the quota (the limit range fills what the sync Job's
    container does not name), a pod over the limit range is refused in words the operator
    takes as permanent (PodRejected), and a quota's refusal in words it retries."""
    namespace = plain_namespace(cluster)
    cluster.kubectl("apply", "-n", namespace, "-k", str(QUOTA))
    quota = cluster.get("/api/v1/resourcequotas", namespace, "craft-sandboxes")
    assert quota is not None
    hard = quota["spec"]["hard"]
    quota_status(cluster, namespace, hard, {name: "0" for name in hard})
    pods = operator_pods(namespace)
    for pod in pods.values():
        cluster.create("/api/v1/pods", namespace, pod, dry_run=True)

    over = pods["sandbox"]
    over["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "8"
    with pytest.raises(ApiError) as limit_range:
        cluster.create("/api/v1/pods", namespace, over, dry_run=True)
    assert refused_by_limit_range(OperatorApiError(403, "Forbidden", limit_range.value.message))

    quota_status(cluster, namespace, {**hard, "pods": "0"}, {name: "0" for name in hard})
    with pytest.raises(ApiError) as full:
        cluster.create("/api/v1/pods", namespace, pods["job"], dry_run=True)
    assert "exceeded quota" in full.value.message
    assert not refused_by_limit_range(OperatorApiError(403, "Forbidden", full.value.message))


def doctor_as_the_operator(cluster: Cluster, tmp_path: Path) -> str:
    """``craft-operator doctor --standalone`` with the operator's ServiceAccount token, as
    the README has on-call run it in the operator's pod: its CRD line."""
    kubeconfig = cluster.service_account_kubeconfig(tmp_path / "operator.kubeconfig")
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "CRAFT_NAMESPACES": "default"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    result = subprocess.run(
        [str(Path(sys.executable).with_name("craft-operator")), "doctor", "--standalone"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = [line for line in result.stdout.splitlines() if " CraftSandbox API: " in line]
    assert len(lines) == 1, result.stdout + result.stderr
    return lines[0]


def test_doctor_in_the_operators_identity_fails_on_a_crd_older_than_the_operator(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The schemas the real API server publishes compare clean with ``crds/``; one field
    short (an upgrade that skipped ``kubectl apply -k crds``), doctor fails naming it, with
    no grant on CRDs (the published OpenAPI is every authenticated identity's to read)."""

    def published() -> dict[str, Any] | None:
        try:  # published a moment after the CRDs are established
            return cluster.call("GET", "/openapi/v3/apis/craft.onyx.app/v1alpha1")
        except ApiError:
            return None

    document = wait_for(published, within=60, what="the group's OpenAPI v3 document")
    assert [stale_fields(build(), document) for build in BUILDERS] == [[], [], []]
    assert doctor_as_the_operator(cluster, tmp_path).startswith("✔ CraftSandbox API: ")

    original = cluster.get(CRDS, None, CRAFT_SANDBOXES_CRD)
    assert original is not None
    older = copy.deepcopy(original)
    schema = older["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    del schema["status"]["properties"]["admittedImages"]
    cluster.call("PUT", f"{CRDS}/{CRAFT_SANDBOXES_CRD}", older)
    try:
        line = wait_for(
            lambda: (text := doctor_as_the_operator(cluster, tmp_path)).startswith("✘") and text,
            within=60,
            interval=1.0,
            what="doctor to see the older CRD",
        )
    finally:
        current = cluster.get(CRDS, None, CRAFT_SANDBOXES_CRD)
        assert current is not None
        restored = {**original, "metadata": current["metadata"]}
        cluster.call("PUT", f"{CRDS}/{CRAFT_SANDBOXES_CRD}", restored)
    assert line.startswith(
        f"✘ CraftSandbox API: {CRAFT_SANDBOXES_CRD} lacks status.admittedImages: older than"
    ), line
    assert line.endswith("— bring the CRDs up to date: kubectl apply -k crds")
