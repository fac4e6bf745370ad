"""The CraftSandboxPolicy's own schema: what its CRD admits, its model reads (else the whole
policy is unreadable and only the operator's defaults are allowed)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from craft_operator.policy.models import CraftSandboxPolicy
from tests.support.policy import policy, policy_validator

pytestmark = pytest.mark.unit

#: Characters Python's and pydantic's \s match and RE2's (the CRD's) does not, and others.
ODD_SPACES = ["\v", "\x1c", "\x1f", "\x85", "\xa0", "\u2028", "\u3000"]


def model_reads(manifest: dict[str, Any]) -> bool:
    """Whether the operator reads the policy ``manifest``."""
    try:
        CraftSandboxPolicy.model_validate(manifest)
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize("space", ODD_SPACES, ids=repr)
def test_a_server_url_with_a_unicode_or_control_space_is_refused_by_the_crd_and_the_model(
    space: str,
) -> None:
    for url in (f"https://onyx{space}.example.com", f"https://onyx.example.com/a{space}b"):
        manifest = policy(serverURLs=[url])
        messages = policy_validator().admit_create(manifest).messages
        assert any("spec.serverURLs[0]" in message for message in messages), messages
        assert not model_reads(manifest)


def test_listed_server_urls_are_admitted_and_read() -> None:
    manifest = policy(serverURLs=["https://onyx.example.com", "http://onyx.internal:8080/onyx"])
    assert policy_validator().admit_create(manifest).messages == []
    assert model_reads(manifest)


def test_a_node_selector_lists_at_most_256_values() -> None:
    assert policy_validator().admit_create(policy(nodeSelectors={"k": ["v"] * 256})).messages == []
    manifest = policy(nodeSelectors={"k": ["v"] * 100_000})
    messages = policy_validator().admit_create(manifest).messages
    assert messages == [
        "spec.nodeSelectors.k: Too many: 100000: must have at most 256 items",
        "<nil>: Invalid value: null: some validation rules were not checked because the "
        "object was invalid; correct the existing errors to complete validation",
    ]
    assert not model_reads(manifest)
