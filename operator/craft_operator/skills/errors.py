"""The one error of the skill's templates."""

from __future__ import annotations


class SkillTemplateError(Exception):
    """The SKILL.md template cannot be compiled or rendered; the message says why."""
