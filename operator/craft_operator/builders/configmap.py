"""The ``<name>-skills`` ConfigMap holding the rendered company-search SKILL.md."""

from __future__ import annotations

from typing import Any

from craft_operator.api.models import CraftSandbox
from craft_operator.builders.naming import (
    ANNOTATION_SKILL_HASH,
    ANNOTATION_SOURCES_HASH,
    SKILL_KEY,
    child_metadata,
    skills_configmap_name,
)


def build_skills_configmap(
    sandbox: CraftSandbox, *, text: str, content_hash: str, sources_hash: str | None = None
) -> dict[str, Any]:
    """The ConfigMap mounted at ``/workspace/skills/company-search/``; ``sources_hash`` is
    the digest of the sources ``text`` was rendered for."""
    annotations = {ANNOTATION_SKILL_HASH: content_hash}
    if sources_hash is not None:
        annotations[ANNOTATION_SOURCES_HASH] = sources_hash
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(
            sandbox,
            skills_configmap_name(sandbox),
            annotations=annotations,
        ),
        "data": {SKILL_KEY: text},
    }
