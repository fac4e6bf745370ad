"""The per-user company-search skill: source catalog, sanitizing and SKILL.md rendering."""

from __future__ import annotations

from craft_operator.skills.render import (
    RenderedSkill,
    SkillSource,
    render_skill,
    validate_template,
)
from craft_operator.skills.template import (
    TEMPLATE_CONFIGMAP_KEY,
    SkillTemplateError,
    builtin_template,
    template_from_configmap,
)

__all__ = [
    "TEMPLATE_CONFIGMAP_KEY",
    "RenderedSkill",
    "SkillSource",
    "SkillTemplateError",
    "builtin_template",
    "render_skill",
    "template_from_configmap",
    "validate_template",
]
