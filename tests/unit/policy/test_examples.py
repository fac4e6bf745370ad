"""The examples in manifests/examples (its pools/ too) say what the CraftSandboxPolicy must
allow for them: the shipped, empty policy refuses exactly those that say so, and what they
say is enough."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from craft_operator.api.parse import parse_sandbox
from craft_operator.api.pool import parse_pool
from craft_operator.config import Settings
from craft_operator.policy.models import TENANT_LABEL, CraftSandboxPolicySpec
from craft_operator.policy.rules import evaluate
from craft_operator.reconciler.pool_policy import pool_violations

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "manifests" / "examples").rglob("*.yaml"))
SHIPPED = yaml.safe_load((ROOT / "manifests" / "policy" / "craftsandboxpolicy.yaml").read_text())
MARKER = '# Needs the CraftSandboxPolicy "default" to allow'
#: As the admission policy sees it: no operator default matches what an example names.
SETTINGS = Settings()


def needed(text: str) -> dict[str, Any] | None:
    """The policy spec an example's comment asks for (the ``#   `` lines after the marker)."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.startswith(MARKER):
            block = []
            for following in lines[index + 1 :]:
                if not following.startswith("#   "):
                    break
                block.append(following[1:])
            return dict(yaml.safe_load("\n".join(block)))
    return None


def violations(body: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    """What ``spec`` does not allow of a CraftSandbox, or of a CraftSandboxPool's pod settings."""
    body = {**body, "metadata": {"namespace": "craft-sandboxes", "uid": "u-1", **body["metadata"]}}
    policy = CraftSandboxPolicySpec.model_validate(spec)
    if body["kind"] == "CraftSandboxPool":
        return [item.message for item in pool_violations(parse_pool(body), policy, SETTINGS)]
    sandbox = parse_sandbox(body)
    tenant = {TENANT_LABEL: sandbox.spec.user.tenant_id}
    found = evaluate(sandbox, policy, namespace_labels=tenant, settings=SETTINGS)
    return [item.message for item in found]


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_an_example_says_what_the_policy_must_allow_for_it(path: Path) -> None:
    text = path.read_text()
    body = yaml.safe_load(text)
    spec = needed(text)

    if spec is None:
        assert violations(body, SHIPPED["spec"]) == []
    else:
        assert violations(body, SHIPPED["spec"]) != []
        assert violations(body, spec) == []


def test_the_examples_that_name_more_than_the_defaults_say_so() -> None:
    saying = {path.stem for path in EXAMPLES if needed(path.read_text()) is not None}
    assert saying == {"full", "multi-tenant", "library-job-mode", "warm-pool"}
    said = r"full\.yaml.*multi-tenant\.yaml.*library-job-mode\.yaml.*pools/warm-pool\.yaml"
    assert re.search(said, readme_note("More in `manifests/examples/`"))
    assert re.search(said, readme_note("`make run` installs no `CraftSandboxPolicy`"))


def readme_note(opening: str) -> str:
    """The README's paragraph from ``opening`` on, on one line."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index(opening)
    return " ".join(readme[start : readme.index("\n\n", start)].split())
