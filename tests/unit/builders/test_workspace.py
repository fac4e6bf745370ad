"""Specification of the workspace: its PVC, and the volume and mount it adds to the pod
(at /workspace/sessions, writable through the pod's fsGroup, restricted as before)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from craft_operator.api.models import CraftSandbox
from craft_operator.builders import naming
from craft_operator.builders.pod import build_pod
from craft_operator.builders.workspace import (
    LABEL_RETAINED,
    build_workspace_pvc,
    is_retained_for,
    workspace_claim_name,
)
from craft_operator.config import Settings
from tests.support.pss import restricted_violations
from tests.support.schemas import kubernetes_schema_problems
from tests.unit.builders.conftest import USER_ID

pytestmark = pytest.mark.unit

MakeSandbox = Callable[..., CraftSandbox]
OTHER_USER = "9a1d7c44-0b2e-4f3a-8c5d-6e7f8a9b0c1d"


def test_the_pvc_is_named_after_the_sandbox_owned_and_labelled(make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox(workspace={"size": "10Gi"})
    pvc = build_workspace_pvc(sandbox)
    assert workspace_claim_name(sandbox) == "alice-workspace"
    assert pvc["metadata"]["name"] == "alice-workspace"
    assert pvc["metadata"]["labels"] == naming.child_labels(sandbox)
    assert pvc["metadata"]["ownerReferences"] == [naming.owner_reference(sandbox)]
    assert kubernetes_schema_problems(pvc) == []


def test_the_pvc_asks_for_the_size_read_write_once_on_the_cluster_default_class(
    make_sandbox: MakeSandbox,
) -> None:
    spec = build_workspace_pvc(make_sandbox(workspace={"size": "10Gi"}))["spec"]
    assert spec == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "10Gi"}},
    }


def test_the_pvc_names_the_storage_class_the_spec_gives(make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox(workspace={"size": "1Gi", "storageClassName": "fast-ssd"})
    assert build_workspace_pvc(sandbox)["spec"]["storageClassName"] == "fast-ssd"


def test_without_a_workspace_the_pod_is_as_before(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    pod = build_pod(make_sandbox(), settings)
    assert "workspace" not in {volume["name"] for volume in pod["spec"]["volumes"]}
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert "/workspace/sessions" not in {mount["mountPath"] for mount in mounts}


def test_the_pod_mounts_the_workspace_claim_at_workspace_sessions(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    pod = build_pod(make_sandbox(workspace={"size": "10Gi"}), settings)
    volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
    assert volumes["workspace"]["persistentVolumeClaim"] == {"claimName": "alice-workspace"}
    [mount] = [m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "workspace"]
    assert mount == {"name": "workspace", "mountPath": "/workspace/sessions"}
    assert pod["spec"]["securityContext"]["fsGroup"] == 1000, "uid 1000 may write into it"
    assert restricted_violations(pod) == []
    assert kubernetes_schema_problems(pod) == []


def test_growing_the_workspace_does_not_change_the_pod_template(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    small = build_pod(make_sandbox(workspace={"size": "10Gi"}), settings)
    large = build_pod(make_sandbox(workspace={"size": "20Gi"}), settings)
    retained = build_pod(make_sandbox(workspace={"size": "20Gi", "retain": True}), settings)
    assert small == large == retained, "the pod keeps running while the PVC resizes"


def test_adding_a_workspace_changes_the_pod_template(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    before = build_pod(make_sandbox(), settings)
    after = build_pod(make_sandbox(workspace={"size": "10Gi"}), settings)
    hash_key = naming.ANNOTATION_TEMPLATE_HASH
    assert before["metadata"]["annotations"][hash_key] != after["metadata"]["annotations"][hash_key]


def retained_pvc(
    name: str = "alice", user: str = USER_ID, tenant: str = "public", **meta: object
) -> dict[str, object]:
    labels = {LABEL_RETAINED: name, naming.LABEL_USER_ID: user, naming.LABEL_ONYX_TENANT_ID: tenant}
    return {"metadata": {"name": f"{name}-workspace", "labels": labels, **meta}}


def test_a_retained_workspace_belongs_to_a_new_sandbox_of_the_same_name_and_user(
    make_sandbox: MakeSandbox,
) -> None:
    assert is_retained_for(retained_pvc(), make_sandbox(workspace={"size": "1Gi"}))


@pytest.mark.parametrize(
    "pvc",
    [
        retained_pvc(user=OTHER_USER),
        retained_pvc(tenant="tenant-b"),
        retained_pvc(name="bob"),
        {"metadata": {"name": "alice-workspace", "labels": {naming.LABEL_USER_ID: USER_ID}}},
        retained_pvc(ownerReferences=[{"uid": "someone", "controller": True}]),
    ],
    ids=[
        "another user",
        "the same user id in another tenant",
        "another sandbox",
        "never retained",
        "controlled by another",
    ],
)
def test_nothing_else_by_that_name_is_ever_taken_over(
    make_sandbox: MakeSandbox, pvc: dict[str, object]
) -> None:
    assert not is_retained_for(pvc, make_sandbox(workspace={"size": "1Gi"}))
