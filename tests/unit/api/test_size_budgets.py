"""The lists a user's actions grow have a size budget, so that a CraftSandbox always fits in
etcd; it judges objects about to be stored, never one the API server already holds."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from craft_operator.api.models import CraftSandbox
from craft_operator.api.parse import parse_sandbox
from craft_operator.api.spec import DISABLED_PATHS_BUDGET, SCOPES_BUDGET
from tests.unit.api.samples import USER_ID, sandbox

pytestmark = pytest.mark.unit


def with_paths(characters: int) -> dict[str, Any]:
    """A sandbox whose disabled paths hold ``characters`` characters in all."""
    paths = ["p" * 1024] * (characters // 1024) + ["q" * (characters % 1024)]
    paths = [path for path in paths if path]
    return sandbox({"user": {"id": USER_ID}, "userLibrary": {"disabledPaths": paths}})


def with_scopes(characters: int) -> dict[str, Any]:
    """A sandbox whose sources' scopes hold ``characters`` characters in all."""
    scopes = ["c" * 200] * (characters // 200) + ["d" * (characters % 200)]
    scopes = [scope for scope in scopes if scope]
    sources = [{"name": f"s{i}", "scopes": scopes[i : i + 50]} for i in range(0, len(scopes), 50)]
    return sandbox({"user": {"id": USER_ID}, "sources": sources})


@pytest.mark.parametrize("build", [with_paths, with_scopes])
def test_a_new_object_at_its_budget_is_valid(build: Any) -> None:
    budget = DISABLED_PATHS_BUDGET if build is with_paths else SCOPES_BUDGET
    CraftSandbox.model_validate(build(budget))


@pytest.mark.parametrize(
    ("build", "budget", "says"),
    [
        (with_paths, DISABLED_PATHS_BUDGET, "disable a directory rather than each file in it"),
        (with_scopes, SCOPES_BUDGET, "only the first five of each source are shown"),
    ],
)
def test_a_new_object_over_its_budget_is_refused_with_the_remedy(
    build: Any, budget: int, says: str
) -> None:
    with pytest.raises(ValidationError, match=says):
        CraftSandbox.model_validate(build(budget + 1))


@pytest.mark.parametrize("build", [with_paths, with_scopes])
def test_a_stored_object_over_its_budget_is_still_read(build: Any) -> None:
    # Stored before the budget: the API server keeps it valid while unchanged, and the
    # operator must go on serving its sandbox rather than call it Failed.
    budget = DISABLED_PATHS_BUDGET if build is with_paths else SCOPES_BUDGET
    parsed = parse_sandbox(build(budget * 2))
    assert parsed.metadata.name == "alice"
