"""CraftSandbox manifests as the API server would judge them: examples pass, mistakes fail.

The verdicts come from the offline admission emulator (tests/support/crd_validation.py),
which applies the committed CRD's schema and CEL rules the way the API server does.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from craft_operator.api.models import CraftSandbox, LibraryMode
from craft_operator.api.parse import parse_sandbox
from tests.support.crd_validation import NOT_CHECKED, craftsandbox_validator, validate_create
from tests.unit.api.cases import INVALID, Case
from tests.unit.api.samples import EXAMPLES_DIR, load_yaml

pytestmark = pytest.mark.unit

EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml"))


def test_there_are_at_least_five_examples_and_twenty_invalid_cases() -> None:
    assert len(EXAMPLES) >= 5
    assert len(INVALID) >= 20
    assert len({case.id for case in INVALID}) == len(INVALID)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_the_example_is_accepted_by_the_api_server(path: Path) -> None:
    assert validate_create(load_yaml(path)) == []


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_the_example_parses_with_the_operator_model(path: Path) -> None:
    sandbox = parse_sandbox(load_yaml(path))
    assert isinstance(sandbox, CraftSandbox)
    assert sandbox.metadata.name == load_yaml(path)["metadata"]["name"]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_the_example_explains_itself_in_a_leading_comment(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    header = [line for line in lines[: lines.index("apiVersion: craft.onyx.app/v1alpha1")]]
    assert header
    assert all(line.startswith("#") for line in header)


@pytest.mark.parametrize(
    "path", [*EXAMPLES, *EXAMPLES_DIR.glob("pools/*.yaml")], ids=lambda path: path.name
)
def test_every_kubectl_command_in_an_examples_comment_names_its_namespace(path: Path) -> None:
    # make run's kubeconfig has a context without a namespace: without -n, "NotFound".
    commands = [
        line
        for line in path.read_text(encoding="utf-8").splitlines()
        if "#   kubectl " in line and " namespace " not in line  # namespaces: cluster-scoped
    ]
    assert all(re.search(r" -n \S+", command) for command in commands), commands


def test_the_examples_cover_the_documented_scenarios() -> None:
    sandboxes = {path.stem: parse_sandbox(load_yaml(path)) for path in EXAMPLES}
    specs = [sandbox.spec for sandbox in sandboxes.values()]
    assert any(spec.sources and spec.tolerations and spec.node_selector for spec in specs)
    assert any(spec.resources and spec.runtime_class_name for spec in specs)
    assert any(
        spec.user_library.mode is LibraryMode.JOB
        and spec.user_library.exclude
        and spec.user_library.disabled_paths
        for spec in specs
    )
    assert any(spec.suspend for spec in specs)
    assert any(spec.idle_timeout for spec in specs)
    assert any(spec.user.tenant_id != "public" for spec in specs)
    assert sandboxes["minimal"].spec.model_dump(exclude_defaults=True, by_alias=True) == {
        "user": {"id": sandboxes["minimal"].spec.user.id}
    }


def test_the_minimal_example_is_stored_with_the_schema_defaults() -> None:
    stored = craftsandbox_validator().admit_create(load_yaml(EXAMPLES_DIR / "minimal.yaml"))
    assert stored.accepted
    assert stored.object["spec"] == {
        "user": {"id": "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b", "tenantId": "public"},
        "suspend": False,
        "userLibrary": {"mode": "Exec"},
        "credentials": {"lifetime": "720h"},
    }


@pytest.mark.parametrize("case", INVALID, ids=lambda case: case.id)
def test_the_mistake_is_rejected_with_a_clear_message(case: Case) -> None:
    result = craftsandbox_validator().admit_create(case.manifest())
    assert result.status == case.status
    errors = result.messages
    assert any(case.expect in error for error in errors), errors
    expected = (case.expect, *case.also, NOT_CHECKED)
    unexpected = [error for error in errors if not any(part in error for part in expected)]
    assert unexpected == []


def test_every_error_in_one_manifest_is_reported_at_once() -> None:
    manifest: dict[str, Any] = copy.deepcopy(INVALID[0].manifest())
    manifest["spec"] = {
        "user": {"id": "alice"},
        "idleTimeout": "30s",
        "serverURL": "onyx.example.com",
    }
    errors = validate_create(manifest)
    assert len(errors) == 3
    assert sorted(error.split(":", 1)[0] for error in errors) == [
        "spec.idleTimeout",
        "spec.serverURL",
        "spec.user.id",
    ]
