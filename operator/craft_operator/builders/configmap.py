"""The ``<name>-skills`` ConfigMap holding the rendered company-search SKILL.md."""

from __future__ import annotations

from typing import Any

from craft_operator.api.models import CraftSandbox
from craft_operator.builders.naming import (
    ANNOTATION_SKILL_HASH,
    SKILL_KEY,
    child_metadata,
    skills_configmap_name,
)


def build_skills_configmap(
    sandbox: CraftSandbox, *, text: str, content_hash: str
) -> dict[str, Any]:
    """The ConfigMap mounted at ``/workspace/skills/company-search/``."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(
            sandbox,
            skills_configmap_name(sandbox),
            annotations={ANNOTATION_SKILL_HASH: content_hash},
        ),
        "data": {SKILL_KEY: text},
    }
