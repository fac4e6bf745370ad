"""``spec.workspace``'s admission rules: the user's data is never dropped by an edit.

The size may grow but not shrink, the storage class is fixed once chosen, and a workspace
once set cannot be removed from the spec (the messages say how to really remove it).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from craft_operator.api.models import CraftSandboxSpec
from craft_operator.api.workspace import REMOVE_MESSAGE, SHRINK_MESSAGE, STORAGE_CLASS_MESSAGE
from tests.support.crd_validation import validate_create, validate_update
from tests.unit.api.samples import USER_ID, sandbox

pytestmark = pytest.mark.unit


def with_workspace(**workspace: Any) -> dict[str, Any]:
    return sandbox({"user": {"id": USER_ID}, "workspace": workspace})


def edited(old: dict[str, Any], workspace: dict[str, Any] | None) -> dict[str, Any]:
    new = copy.deepcopy(old)
    if workspace is None:
        new["spec"].pop("workspace")
    else:
        new["spec"]["workspace"] = workspace
    return new


def test_a_sandbox_without_a_workspace_is_as_before() -> None:
    assert validate_create(sandbox()) == []
    spec = CraftSandboxSpec.model_validate({"user": {"id": USER_ID}})
    assert spec.workspace is None


def test_a_workspace_needs_a_size() -> None:
    errors = validate_create(with_workspace(retain=True))
    assert errors[0] == "spec.workspace.size: Required value"


def test_a_workspace_size_must_be_a_quantity() -> None:
    (error,) = validate_create(with_workspace(size="ten gigs"))
    assert error.startswith('spec.workspace.size: Invalid value: "ten gigs": must be a Kubernetes')


def test_a_workspace_defaults_to_deleted_with_the_sandbox() -> None:
    spec = CraftSandboxSpec.model_validate({"user": {"id": USER_ID}, "workspace": {"size": "1Gi"}})
    assert spec.workspace is not None
    assert spec.workspace.retain is False
    assert spec.workspace.storage_class_name is None


@pytest.mark.parametrize("size", ["2Gi", "1025Mi", "2G", "1Gi"])
def test_the_size_may_grow_or_stay(size: str) -> None:
    old = with_workspace(size="1Gi")
    assert validate_update(old, edited(old, {"size": size})) == []


@pytest.mark.parametrize("size", ["1023Mi", "1G", "512Mi"])
def test_the_size_may_not_shrink(size: str) -> None:
    old = with_workspace(size="1Gi")
    assert validate_update(old, edited(old, {"size": size})) == [
        f'spec.workspace.size: Invalid value: "{size}": {SHRINK_MESSAGE}'
    ]


def test_the_workspace_cannot_be_removed_and_the_message_says_how_to() -> None:
    old = with_workspace(size="1Gi")
    (error,) = validate_update(old, edited(old, None))
    assert error == f"spec: Invalid value: {REMOVE_MESSAGE}"
    assert "delete this CraftSandbox" in error
    assert "retain: true" in error


def test_a_workspace_may_be_added_later() -> None:
    old = sandbox()
    assert validate_update(old, edited(old, {"size": "1Gi"})) == []


def test_retain_may_be_switched_either_way() -> None:
    old = with_workspace(size="1Gi")
    kept = edited(old, {"size": "1Gi", "retain": True})
    assert validate_update(old, kept) == []
    assert validate_update(kept, edited(kept, {"size": "1Gi", "retain": False})) == []


@pytest.mark.parametrize(
    ("before", "after"),
    [({}, {"storageClassName": "fast"}), ({"storageClassName": "fast"}, {})],
    ids=["set later", "unset"],
)
def test_the_storage_class_is_fixed_once_the_workspace_exists(
    before: dict[str, str], after: dict[str, str]
) -> None:
    old = with_workspace(size="1Gi", **before)
    assert validate_update(old, edited(old, {"size": "1Gi", **after})) == [
        f"spec.workspace: Invalid value: {STORAGE_CLASS_MESSAGE}"
    ]
