"""Updates of a stored CraftSandbox: who the sandbox belongs to never changes.

``user.id`` and ``user.tenantId`` are guarded by CEL transition rules (``oldSelf``); every
other field may change, and the usual rules still apply to the new values.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.crd_validation import craftsandbox_validator, validate_create, validate_update
from tests.unit.api.cases import ALLOWED_CHANGES, RENAMED, TENANT_IMMUTABLE, USER_ID_IMMUTABLE
from tests.unit.api.samples import EXAMPLES_DIR, OTHER_USER_ID, USER_ID, load_yaml, sandbox

pytestmark = pytest.mark.unit


def updated(old: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """``old`` with top-level spec fields replaced."""
    new = copy.deepcopy(old)
    new["spec"].update(spec)
    return new


def test_changing_the_user_id_is_rejected() -> None:
    old = sandbox()
    new = updated(old, user={"id": OTHER_USER_ID})
    assert validate_update(old, new) == [USER_ID_IMMUTABLE]


def test_changing_the_tenant_is_rejected() -> None:
    old = sandbox({"user": {"id": USER_ID, "tenantId": "acme"}})
    new = updated(old, user={"id": USER_ID, "tenantId": "globex"})
    assert validate_update(old, new) == [TENANT_IMMUTABLE]


def test_changing_user_and_tenant_reports_both() -> None:
    old = sandbox({"user": {"id": USER_ID, "tenantId": "acme"}})
    new = updated(old, user={"id": OTHER_USER_ID, "tenantId": "globex"})
    assert validate_update(old, new) == [USER_ID_IMMUTABLE, TENANT_IMMUTABLE]


def test_the_comparison_is_textual_so_recasing_the_uuid_is_a_change() -> None:
    old = sandbox()
    new = updated(old, user={"id": USER_ID.upper()})
    assert validate_update(old, new) == [USER_ID_IMMUTABLE]


def test_a_defaulted_tenant_may_be_left_out_of_the_update() -> None:
    old = sandbox()  # stored with the default tenantId: public
    new = updated(old, suspend=True)
    assert "tenantId" not in new["spec"]["user"]
    assert validate_update(old, new) == []


def test_a_defaulted_tenant_may_be_spelt_out_in_the_update() -> None:
    old = sandbox()
    new = updated(old, user={"id": USER_ID, "tenantId": "public"})
    assert validate_update(old, new) == []


def test_a_defaulted_tenant_cannot_be_replaced() -> None:
    old = sandbox()
    new = updated(old, user={"id": USER_ID, "tenantId": "acme"})
    assert validate_update(old, new) == [TENANT_IMMUTABLE]


def test_the_same_spec_with_only_a_new_email_is_accepted() -> None:
    old = sandbox({"user": {"id": USER_ID, "email": "old@example.com"}})
    new = updated(old, user={"id": USER_ID, "email": "new@example.com"})
    assert validate_update(old, new) == []


@pytest.mark.parametrize("change", ALLOWED_CHANGES, ids=lambda change: next(iter(change)))
def test_changing_any_other_field_is_accepted(change: dict[str, Any]) -> None:
    old = load_yaml(EXAMPLES_DIR / "full.yaml")
    assert validate_update(old, updated(old, **change)) == []


def test_an_update_must_still_satisfy_the_other_rules() -> None:
    old = sandbox()
    new = updated(old, idleTimeout="10s")
    assert validate_update(old, new) == [
        'spec.idleTimeout: Invalid value: "10s": idleTimeout must be at least 1m'
    ]


def test_the_transition_rules_do_not_run_on_create() -> None:
    # On create there is no oldSelf: a rule comparing with it must not fail the object.
    assert validate_create(sandbox()) == []


def test_the_object_cannot_be_renamed() -> None:
    # An update is a PUT to the stored object's URL: another name there is a bad request.
    old = sandbox()
    new = copy.deepcopy(old)
    new["metadata"]["name"] = "bob"
    result = craftsandbox_validator().admit_update(old, new)
    assert result.messages == [RENAMED]
    assert result.status == 400


def test_status_sent_to_the_main_resource_is_ignored() -> None:
    # With the status subresource, only PUT .../status writes status.
    old = sandbox()
    old["status"] = {"phase": "Ready"}
    new = copy.deepcopy(old)
    new["status"] = {"phase": "NotAPhase"}
    result = craftsandbox_validator().admit_update(old, new)
    assert result.accepted
    assert result.object["status"] == {"phase": "Ready"}
