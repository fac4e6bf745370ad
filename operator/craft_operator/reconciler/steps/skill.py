"""SkillRendered: the company-search SKILL.md, rendered for the user, in its ConfigMap."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from craft_operator.api.models import SkillStatus
from craft_operator.builders.configmap import build_skills_configmap
from craft_operator.builders.naming import (
    ANNOTATION_SOURCES_HASH,
    SKILL_KEY,
    skills_configmap_name,
)
from craft_operator.kube import kinds
from craft_operator.metrics import ProvisioningPhase
from craft_operator.reconciler.children import controlled_by
from craft_operator.reconciler.step import Pass, Step, Stop
from craft_operator.skills.render import RenderedSkill, sources_digest
from craft_operator.skills.template import SkillTemplateError
from craft_operator.status import SKILL_RENDERED, ConditionState

WAITING = "WaitingForChildren"
#: The SkillRendered reason while the custom template fails and a fallback stands in.
TEMPLATE_FALLBACK = "TemplateFallback"


async def render_skill(p: Pass) -> Stop | None:
    """Render the skill and converge its ConfigMap.

    A template that fails keeps the last good rendering in place while it lists the
    sandbox's current sources; otherwise (no rendering yet, or the sources changed) the
    shipped template renders them, so the SKILL.md never lists what the user no longer
    has. Either way the sandbox has a true SKILL.md, so the condition stays True (reason
    ``TemplateFallback``, the error in its message: a platform's broken template must not
    take every sandbox out of Ready), a Warning says it, and the template is tried again
    with backoff.
    """
    s, run = p.services, p.run
    existing = s.cache.get(
        kinds.CONFIGMAP.name, p.sandbox.metadata.namespace, skills_configmap_name(p.sandbox)
    )
    try:
        rendered: RenderedSkill = await s.skills.render(p.sandbox)
    except SkillTemplateError as exc:
        p.event("SkillTemplateError", str(exc), warning=True)
        run.revisit(backoff=TEMPLATE_FALLBACK)
        if _lists_current_sources(p, existing):
            kept = "the SKILL.md in place, rendered before, lists the current sources"
            run.set(ConditionState.true(SKILL_RENDERED, TEMPLATE_FALLBACK, f"{exc}; {kept}"))
            return None
        rendered = await s.skills.render(p.sandbox, builtin=True)
        builtin = f"the built-in template renders the {rendered.source_count} source(s)"
        run.set(ConditionState.true(SKILL_RENDERED, TEMPLATE_FALLBACK, f"{exc}; {builtin}"))
    else:
        message = f"company-search skill lists {rendered.source_count} source(s)"
        run.set(ConditionState.true(SKILL_RENDERED, "Rendered", message))
    desired = build_skills_configmap(
        p.sandbox,
        text=rendered.text,
        content_hash=rendered.content_hash,
        sources_hash=rendered.sources_hash,
    )
    failed = await p.converge_child(
        desired,
        kinds.CONFIGMAP,
        SKILL_RENDERED,
        label="ConfigMap",
        phase=ProvisioningPhase.SKILL,
        detail=f" (skill {rendered.content_hash[:12]})",
    )
    if failed:
        return Stop(WAITING)
    _record(p, rendered)
    return None


def _lists_current_sources(p: Pass, configmap: Mapping[str, Any] | None) -> bool:
    """Whether ``configmap`` is the sandbox's own and holds, as the operator wrote it, a
    rendering of the sandbox's current sources: its SKILL.md's hash is the one the status
    records (which the ConfigMap's editors cannot write), so neither a ConfigMap someone
    else made under its name nor an edit of its own is kept as the last good rendering."""
    if configmap is None or not controlled_by(configmap, p.sandbox.metadata.uid):
        return False
    recorded = p.run.old_status.skill
    text = (configmap.get("data") or {}).get(SKILL_KEY)
    if recorded is None or not isinstance(text, str):
        return False
    if hashlib.sha256(text.encode("utf-8")).hexdigest() != recorded.content_hash:
        return False
    annotations = configmap.get("metadata", {}).get("annotations") or {}
    return annotations.get(ANNOTATION_SOURCES_HASH) == sources_digest(p.sandbox.spec.sources)


def _record(p: Pass, rendered: RenderedSkill) -> None:
    """The skill's status; sources not known to the operator said once per rendering."""
    previous = p.run.old_status.skill.content_hash if p.run.old_status.skill else None
    p.run.status.skill = SkillStatus(
        source_count=rendered.source_count, content_hash=rendered.content_hash
    )
    if rendered.unknown_sources and previous != rendered.content_hash:
        p.event(
            "UnknownSource",
            "not known to this operator, listed by name only: "
            + ", ".join(rendered.unknown_sources),
            warning=True,
        )


STEP = Step(SKILL_RENDERED, render_skill)
