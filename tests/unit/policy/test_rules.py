"""The policy check as a pure function: what a CraftSandbox may name, and what not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from craft_operator.api.parse import parse_sandbox
from craft_operator.cli import main
from craft_operator.config import Settings
from craft_operator.policy.crd import build_policy_crd, policy_crd_yaml
from craft_operator.policy.models import TENANT_LABEL, CraftSandboxPolicySpec
from craft_operator.policy.rules import Violation, describe, evaluate
from tests.support.policy import policy, policy_validator
from tests.unit.policy.cases import CASES, USER, PolicyCase

pytestmark = pytest.mark.unit

NAMESPACE = "team-a"
REPO = Path(__file__).resolve().parents[3]
SETTINGS = Settings(
    sandbox_image="craft-sandbox:0.1.0",
    server_url="http://onyx.internal:8080",
    s3_bucket="onyx-user-files",
)


def check(
    spec: dict[str, Any],
    policy: dict[str, Any] | None = None,
    *,
    tenant: str | None = None,
    settings: Settings = SETTINGS,
) -> list[Violation]:
    sandbox = parse_sandbox(
        {
            "apiVersion": "craft.onyx.app/v1alpha1",
            "kind": "CraftSandbox",
            "metadata": {"name": "alice", "namespace": NAMESPACE, "uid": "u-1"},
            "spec": {"user": {"id": USER}, **spec},
        }
    )
    labels = {TENANT_LABEL: tenant} if tenant is not None else {}
    return evaluate(
        sandbox,
        CraftSandboxPolicySpec.model_validate(policy or {}),
        namespace_labels=labels,
        settings=settings,
    )


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_the_operator_judges_each_case_as_the_admission_policy_does(case: PolicyCase) -> None:
    violations = check(case.full_spec(), case.policy_in(NAMESPACE), tenant=case.tenant)
    if case.allowed:
        assert violations == []
    else:
        assert len(violations) == 1
        assert case.message in violations[0].message


def test_the_operators_own_defaults_are_allowed_even_when_named() -> None:
    spec = {
        "image": "craft-sandbox:0.1.0",
        "serverURL": "http://onyx.internal:8080",
        "userLibrary": {"bucket": "onyx-user-files"},
    }
    assert check(spec) == []


def test_the_operators_own_server_url_is_allowed_with_a_trailing_slash_too() -> None:
    assert check({"serverURL": "http://onyx.internal:8080/"}) == []


def test_without_a_policy_only_the_defaults_are_allowed() -> None:
    spec = {
        "image": "craft-sandbox:0.2.0",
        "serverURL": "https://onyx.example.com",
        "runtimeClassName": "gvisor",
        "priorityClassName": "low",
        "tolerations": [{"key": "a", "operator": "Exists"}],
        "nodeSelector": {"pool": "sandboxes"},
        "userLibrary": {"bucket": "elsewhere", "prefix": "shared/"},
    }
    fields = [violation.field for violation in check(spec)]
    assert fields == [
        "spec.image",
        "spec.serverURL",
        "spec.runtimeClassName",
        "spec.priorityClassName",
        "spec.tolerations[0]",
        "spec.nodeSelector",
        "spec.userLibrary.bucket",
        "spec.userLibrary.prefix",
    ]


def test_every_violation_is_in_the_one_message() -> None:
    violations = check({"image": "x:1", "userLibrary": {"bucket": "b-2"}}, tenant="acme")
    message = describe(violations)
    assert message.startswith("not allowed by the platform: ")
    assert "tenant acme" in message
    assert "spec.image x:1" in message
    assert "spec.userLibrary.bucket b-2" in message


def test_a_tenant_label_binds_even_when_the_policy_allows_everything_else() -> None:
    permissive = {"images": ["registry.example.com/"], "buckets": ["b-1"]}
    assert [v.field for v in check({}, permissive, tenant="acme")] == ["spec.user.tenantId"]


def test_the_policy_crd_is_what_the_crd_command_prints() -> None:
    committed = REPO / "crds" / "craftsandboxpolicies.craft.onyx.app.yaml"
    result = CliRunner().invoke(main, ["crd", "--policy"])
    assert result.exit_code == 0, result.output
    assert result.output == committed.read_text(encoding="utf-8") == policy_crd_yaml()
    assert build_policy_crd()["spec"]["scope"] == "Cluster"


def test_a_layout_without_the_user_is_refused_by_the_policy_crd() -> None:
    shared = policy(libraryPrefixes=[{"namespaces": ["team-a"], "prefixes": ["shared/"]}])
    messages = policy_validator().admit_create(shared).messages
    assert any("must contain {userId}" in message for message in messages)


def test_only_the_policy_named_default_is_accepted() -> None:
    other = {**policy(), "metadata": {"name": "strict"}}
    messages = policy_validator().admit_create(other).messages
    assert any("only the CraftSandboxPolicy named 'default'" in message for message in messages)
    assert policy_validator().admit_create(policy(images=["r.example.com/"])).messages == []
