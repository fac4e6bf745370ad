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
from craft_operator.reconciler.step import Pass, SkillMark, Step, Stop
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
        rendered = await _rendering(p, existing)
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


async def _rendering(p: Pass, configmap: Mapping[str, Any] | None) -> RenderedSkill:
    """The SKILL.md for the sandbox: the one its ConfigMap holds, as the operator wrote it,
    when that was rendered from the sources and template the sandbox has now (a pass over
    an unchanged sandbox renders nothing, whatever the fleet's size), else the renderer's."""
    s = p.services
    mark = p.memory.skills.get(p.run.key)
    if mark is not None and mark.inputs == await s.skills.inputs(p.sandbox):
        text = _own_text(p, configmap)
        if text is not None and _digest(text) == mark.content_hash:
            return RenderedSkill(
                text=text,
                content_hash=mark.content_hash,
                source_count=mark.source_count,
                unknown_sources=mark.unknown_sources,
                sources_hash=mark.inputs[0],
                template_hash=mark.inputs[1],
            )
    return await s.skills.render(p.sandbox)


def _own_text(p: Pass, configmap: Mapping[str, Any] | None) -> str | None:
    """The SKILL.md ``configmap`` holds, if it is the sandbox's own."""
    if configmap is None or not controlled_by(configmap, p.sandbox.metadata.uid):
        return None
    text = (configmap.get("data") or {}).get(SKILL_KEY)
    return text if isinstance(text, str) else None


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _lists_current_sources(p: Pass, configmap: Mapping[str, Any] | None) -> bool:
    """Whether ``configmap`` is the sandbox's own and holds, as the operator wrote it, a
    rendering of the sandbox's current sources: its SKILL.md's hash is the one the status
    records (which the ConfigMap's editors cannot write), so neither a ConfigMap someone
    else made under its name nor an edit of its own is kept as the last good rendering."""
    text = _own_text(p, configmap)
    recorded = p.run.old_status.skill
    if configmap is None or text is None or recorded is None:
        return False
    if _digest(text) != recorded.content_hash:
        return False
    annotations = configmap.get("metadata", {}).get("annotations") or {}
    return annotations.get(ANNOTATION_SOURCES_HASH) == sources_digest(p.sandbox.spec.sources)


def _record(p: Pass, rendered: RenderedSkill) -> None:
    """The skill's status, and what the ConfigMap now holds remembered for the next pass;
    sources not known to the operator said once per rendering."""
    p.memory.skills[p.run.key] = SkillMark(
        inputs=(rendered.sources_hash, rendered.template_hash),
        content_hash=rendered.content_hash,
        source_count=rendered.source_count,
        unknown_sources=rendered.unknown_sources,
    )
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
