"""Specification of the names, labels and owner reference of every child, and of the
credentials Secret and the skills ConfigMap."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import SecretStr

from craft_operator.api.models import CraftSandbox
from craft_operator.api.parse import parse_sandbox
from craft_operator.builders import naming
from craft_operator.builders.configmap import build_skills_configmap
from craft_operator.builders.secret import build_credentials_secret, encode_secret_value
from tests.support.schemas import kubernetes_schema_problems
from tests.unit.builders.conftest import NAMESPACE, UID, USER_ID, example_bodies

MakeSandbox = Callable[..., CraftSandbox]
TOKEN = SecretStr("onyx_pat_" + "x" * 256)


def test_children_are_named_after_the_sandbox_without_truncation(make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox("a-rather-long-sandbox-name-for-research")
    assert naming.secret_name(sandbox) == "a-rather-long-sandbox-name-for-research-credentials"
    assert naming.skills_configmap_name(sandbox) == "a-rather-long-sandbox-name-for-research-skills"
    assert naming.pod_name(sandbox) == "a-rather-long-sandbox-name-for-research"


def test_every_child_carries_the_design_labels_and_the_egress_proxy_labels(
    make_sandbox: MakeSandbox,
) -> None:
    sandbox = make_sandbox(user={"id": USER_ID, "tenantId": "acme"})
    assert naming.child_labels(sandbox) == {
        "app.kubernetes.io/name": "craft-sandbox",
        "app.kubernetes.io/managed-by": "craft-operator",
        "app.kubernetes.io/component": "sandbox",
        "craft.onyx.app/sandbox": "alice",
        "craft.onyx.app/user-id": USER_ID,
        "onyx.app/sandbox-id": UID,
        "onyx.app/tenant-id": "acme",
    }


def test_the_managed_selector_matches_every_child(make_sandbox: MakeSandbox) -> None:
    labels = naming.child_labels(make_sandbox())
    assert all(labels[key] == value for key, value in naming.MANAGED_SELECTOR.items())


def test_the_owner_reference_makes_the_sandbox_the_blocking_controller(
    make_sandbox: MakeSandbox,
) -> None:
    assert naming.owner_reference(make_sandbox()) == {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "name": "alice",
        "uid": UID,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_child_metadata_has_annotations_only_when_given(make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox()
    plain = naming.child_metadata(sandbox, "alice-x")
    annotated = naming.child_metadata(sandbox, "alice-x", annotations={"a": "b"})
    assert "annotations" not in plain
    assert plain["namespace"] == NAMESPACE
    assert plain["ownerReferences"] == [naming.owner_reference(sandbox)]
    assert annotated["annotations"] == {"a": "b"}


def test_child_metadata_copies_the_annotations_it_is_given(make_sandbox: MakeSandbox) -> None:
    annotations = {"a": "b"}
    metadata = naming.child_metadata(make_sandbox(), "alice-x", annotations=annotations)
    annotations["a"] = "changed"
    assert metadata["annotations"] == {"a": "b"}


def test_the_secret_holds_the_token_base64_encoded_under_onyx_pat(
    make_sandbox: MakeSandbox,
) -> None:
    secret = build_credentials_secret(make_sandbox(), token=TOKEN, pat_id=42)
    assert secret["metadata"]["name"] == "alice-credentials"
    assert secret["type"] == "Opaque"
    assert list(secret["data"]) == ["ONYX_PAT"]
    assert base64.b64decode(secret["data"]["ONYX_PAT"]).decode() == TOKEN.get_secret_value()
    assert secret["metadata"]["annotations"] == {"craft.onyx.app/pat-id": "42"}


def test_the_secret_names_the_pat_but_the_token_appears_only_in_its_data(
    make_sandbox: MakeSandbox,
) -> None:
    secret = build_credentials_secret(make_sandbox(), token=TOKEN, pat_id=7)
    without_data = {key: value for key, value in secret.items() if key != "data"}
    assert TOKEN.get_secret_value() not in repr(without_data)
    assert "x" * 32 not in repr(without_data)


def test_encode_secret_value_is_standard_base64_of_utf8() -> None:
    assert encode_secret_value(SecretStr("é/+")) == base64.b64encode("é/+".encode()).decode()


def test_the_configmap_holds_skill_md_and_its_hash(make_sandbox: MakeSandbox) -> None:
    configmap = build_skills_configmap(make_sandbox(), text="# skill\n", content_hash="abc123")
    assert configmap["metadata"]["name"] == "alice-skills"
    assert configmap["data"] == {"SKILL.md": "# skill\n"}
    assert configmap["metadata"]["annotations"] == {"craft.onyx.app/skill-hash": "abc123"}


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda s: build_credentials_secret(s, token=TOKEN, pat_id=1), id="secret"),
        pytest.param(
            lambda s: build_skills_configmap(s, text="# skill\n", content_hash="h"), id="configmap"
        ),
    ],
)
def test_children_are_valid_kubernetes_objects_owned_by_the_sandbox(
    make_sandbox: MakeSandbox, build: Callable[[CraftSandbox], dict[str, object]]
) -> None:
    sandbox = make_sandbox()
    child = build(sandbox)
    assert kubernetes_schema_problems(child) == []
    metadata = child["metadata"]
    assert isinstance(metadata, dict)
    assert metadata["labels"] == naming.child_labels(sandbox)
    assert metadata["ownerReferences"] == [naming.owner_reference(sandbox)]


#: Kubernetes label values: empty, or at most 63 characters starting and ending with an
#: alphanumeric character (the API server checks this; the OpenAPI schema does not).
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@pytest.mark.parametrize("body", example_bodies())
def test_every_example_gives_label_values_the_api_server_accepts(body: dict[str, Any]) -> None:
    labels = naming.child_labels(parse_sandbox(body))
    bad = {
        key: value
        for key, value in labels.items()
        if len(value) > 63 or not LABEL_VALUE.match(value)
    }
    assert bad == {}
