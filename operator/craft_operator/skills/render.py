"""Render the company-search SKILL.md from a sandbox's ``spec.sources``.

:func:`render_skill` is pure: the reconciler passes the sources (and, when the platform
team configured one, the custom template text) and writes the result into the
``<name>-skills`` ConfigMap only when :attr:`RenderedSkill.content_hash` changes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from craft_operator.api.models import Source
from craft_operator.skills.catalog import (
    fallback_display_name,
    is_internal,
    lookup,
    search_identifier,
)
from craft_operator.skills.sanitize import (
    ELLIPSIS,
    MAX_DESCRIPTION_CHARS,
    MAX_SCOPE_CHARS,
    identifier_text,
    inline_text,
)
from craft_operator.skills.template import builtin_template, run_template

#: How many scope examples a source line shows before the ellipsis.
MAX_SCOPE_EXAMPLES = 5
#: How many scopes of one source are read at most while looking for the examples.
MAX_SCOPES_EXAMINED = 20


@dataclass(frozen=True, slots=True)
class SkillSource:
    """One source as the template sees it; every text field is already sanitized."""

    name: str
    display_name: str
    description: str
    scopes: tuple[str, ...]
    more_scopes: bool
    known: bool

    @property
    def line(self) -> str:
        """The source's list item: ``- `name` — description (for example: a, b, …)``."""
        text = f"- `{self.name}` — {self.description}"
        if self.scopes:
            examples = ", ".join(self.scopes) + (f", {ELLIPSIS}" if self.more_scopes else "")
            text = f"{text.removesuffix('.')} (for example: {examples})"
        return text


@dataclass(frozen=True, slots=True)
class RenderedSkill:
    """A rendered SKILL.md and what the reconciler records about it."""

    text: str
    content_hash: str
    source_count: int
    unknown_sources: tuple[str, ...]
    #: :func:`sources_digest` of the sources it was rendered for.
    sources_hash: str
    #: :func:`template_digest` of the custom template it was rendered with (``None``: the
    #: built-in one).
    template_hash: str | None = None


def _scope_examples(scopes: Sequence[str] | None) -> tuple[tuple[str, ...], bool]:
    """The first distinct non-blank scopes (at most five), and whether there are more.

    Only the first :data:`MAX_SCOPES_EXAMINED` scopes are read, which bounds the work a
    spec full of blank or near-duplicate scopes can cause; unread ones count as "more".
    """
    distinct = list(dict.fromkeys(scopes or ()))
    cleaned: list[str] = []
    for scope in distinct[:MAX_SCOPES_EXAMINED]:
        text = inline_text(scope, limit=MAX_SCOPE_CHARS)
        if text and text not in cleaned:
            cleaned.append(text)
            if len(cleaned) > MAX_SCOPE_EXAMPLES:
                break
    more = len(cleaned) > MAX_SCOPE_EXAMPLES or len(distinct) > MAX_SCOPES_EXAMINED
    return tuple(cleaned[:MAX_SCOPE_EXAMPLES]), more


def skill_source(source: Source) -> SkillSource:
    """Describe ``source`` for the template: spec description, else catalog, else its name.

    It is named by the identifier ``onyx-cli search --source`` takes for it
    (:func:`~craft_operator.skills.catalog.search_identifier`: ``federated_slack`` is
    ``slack``), and described as itself (federated Slack as Slack's live search).
    """
    name = identifier_text(source.name)
    entry = lookup(name)
    display_name = entry.display_name if entry else fallback_display_name(name)
    description = inline_text(source.description or "", limit=MAX_DESCRIPTION_CHARS)
    if not description:
        description = entry.description if entry else display_name
    scopes, more_scopes = _scope_examples(source.scopes)
    return SkillSource(
        name=search_identifier(name),
        display_name=display_name,
        description=description,
        scopes=scopes,
        more_scopes=more_scopes,
        known=entry is not None,
    )


@dataclass(frozen=True, slots=True)
class _Listed:
    """A source SKILL.md lists: the identifier it is listed by, and its own name."""

    listed_as: str
    name: str
    source: Source


def _first_of_each(sources: Sequence[Source]) -> list[_Listed]:
    """The sources SKILL.md lists: the first of each identifier they are searched by
    (``slack`` and ``federated_slack`` are one), no internal ones, sorted by it."""
    chosen: dict[str, _Listed] = {}
    for source in sources:
        name = identifier_text(source.name)
        if name and not is_internal(name):
            listed_as = search_identifier(name)
            chosen.setdefault(listed_as, _Listed(listed_as, name, source))
    return [chosen[listed_as] for listed_as in sorted(chosen)]


def listed_sources(sources: Sequence[Source]) -> list[SkillSource]:
    """The sources SKILL.md lists: first occurrence of each identifier, no internal ones,
    sorted; each under the identifier Onyx searches it by."""
    return [skill_source(item.source) for item in _first_of_each(sources)]


def _unknown_names(sources: Sequence[Source]) -> tuple[str, ...]:
    unknown: set[str] = set()
    for source in sources:
        name = identifier_text(source.name)
        if name and (is_internal(name) or lookup(name) is not None):
            continue
        # Reported in events and logs: keep it printable and short whatever was sent.
        unknown.add(inline_text(source.name, limit=64) or repr(source.name)[:64])
    return tuple(sorted(unknown))


def _digest_entry(item: _Listed) -> list[object]:
    entry: list[object] = [item.listed_as, item.source.description, item.source.scopes]
    # A source listed under another identifier than its own also gives its own, so that
    # `federated_slack` and `slack`, described differently, do not share a digest.
    return entry if item.name == item.listed_as else [*entry, item.name]


def template_digest(template: str) -> str:
    """A digest of a custom template's text."""
    return hashlib.sha256(template.encode("utf-8")).hexdigest()


def sources_digest(sources: Sequence[Source]) -> str:
    """A digest of what a rendering of ``sources`` depends on: the sources SKILL.md lists
    (the first of each identifier listed, sorted, as given) and the unknown names it
    reports. The same sources in another order, or with a duplicate that is not listed,
    have the same digest, so their SKILL.md counts as rendered for them."""
    listed = [_digest_entry(item) for item in _first_of_each(sources)]
    key = {"listed": listed, "unknown": _unknown_names(sources)}
    return hashlib.sha256(json.dumps(key).encode("ascii")).hexdigest()


def render_skill(sources: Sequence[Source], *, template: str | None = None) -> RenderedSkill:
    """Render SKILL.md for ``sources`` with the built-in template or the given ``template``.

    Unknown identifiers are rendered by name and reported in ``unknown_sources`` (so the
    reconciler can emit a warning event). Raises
    :class:`~craft_operator.skills.template.SkillTemplateError` when the template cannot
    be compiled or rendered; the reconciler then keeps the last good rendering.
    """
    items = listed_sources(sources)
    context = {
        "sources": tuple(items),
        "source_count": len(items),
        "source_names": tuple(item.name for item in items),
    }
    text = run_template(builtin_template() if template is None else template, context)
    return RenderedSkill(
        text=text,
        content_hash=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        source_count=len(items),
        unknown_sources=_unknown_names(sources),
        sources_hash=sources_digest(sources),
        template_hash=None if template is None else template_digest(template),
    )


#: Sources a custom template is tried with before use: none, and a mix of known, unknown,
#: described and scoped ones, so branches that only some users reach are exercised too.
_TRIAL_SOURCES: tuple[tuple[Source, ...], ...] = (
    (),
    (
        Source(name="slack", scopes=[f"#channel-{index}" for index in range(7)]),
        Source(name="confluence", description="Engineering wiki"),
        Source(name="unknown_source"),
    ),
)


def validate_template(template: str) -> None:
    """Check a custom template by rendering it for no sources and for several kinds of source.

    Raises :class:`~craft_operator.skills.template.SkillTemplateError` on the first failure.
    Use it when the override ConfigMap changes, before rendering for every sandbox.
    """
    for sources in _TRIAL_SOURCES:
        render_skill(sources, template=template)
