"""manifests/policy: the admission policy, its binding and the CraftSandboxPolicy agree with
the operator's names for them (the CEL itself is judged by the real API server in
tests/cluster/test_policy.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from craft_operator.api import models
from craft_operator.api.pool import POOL_PLURAL
from craft_operator.policy.models import (
    POLICY_KIND,
    POLICY_NAME,
    TENANT_LABEL,
    CraftSandboxPolicy,
)

pytestmark = pytest.mark.unit

POLICY_DIR = Path(__file__).resolve().parents[3] / "manifests" / "policy"


def objects() -> dict[str, dict[str, Any]]:
    kustomization = yaml.safe_load((POLICY_DIR / "kustomization.yaml").read_text())
    found: dict[str, dict[str, Any]] = {}
    for resource in kustomization["resources"]:
        for doc in yaml.safe_load_all((POLICY_DIR / resource).read_text()):
            found[doc["kind"]] = doc
    return found


def test_the_kustomization_holds_the_policy_its_binding_and_the_default_parameters() -> None:
    assert set(objects()) == {
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        POLICY_KIND,
    }


def test_the_binding_reads_the_policy_object_the_operator_reads_and_judges_nothing_without_it() -> (
    None
):
    found = objects()
    policy, binding = found["ValidatingAdmissionPolicy"], found["ValidatingAdmissionPolicyBinding"]
    assert policy["spec"]["paramKind"] == {"apiVersion": models.API_VERSION, "kind": POLICY_KIND}
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    # Deny would refuse every write, a finalizer's removal included (see the cluster test
    # test_with_the_admission_policy_a_sandbox_is_deleted_even_while_its_policy_is_missing).
    assert binding["spec"]["paramRef"] == {"name": POLICY_NAME, "parameterNotFoundAction": "Allow"}
    parameters = CraftSandboxPolicy.model_validate(found[POLICY_KIND])
    assert parameters.metadata.name == POLICY_NAME


def test_the_admission_policy_matches_sandboxes_and_pools_and_names_the_tenant_label() -> None:
    spec = objects()["ValidatingAdmissionPolicy"]["spec"]
    assert spec["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": [models.GROUP],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": [models.PLURAL, POOL_PLURAL],
            "scope": "*",  # the server's default, spelled out (atomic under server-side apply)
        }
    ]
    assert f"'{TENANT_LABEL}'" in str(spec["variables"])


def test_the_base_leaves_the_policy_out_and_the_policy_kustomization_says_so() -> None:
    base = POLICY_DIR.parent / "base" / "kustomization.yaml"
    resources = yaml.safe_load(base.read_text())["resources"]
    assert not any("policy" in resource for resource in resources)
    header = (POLICY_DIR / "kustomization.yaml").read_text().split("apiVersion:")[0]
    assert "base includes" not in header
    assert "manifests/base (which leaves it out" in " ".join(header.replace("#", "").split())
