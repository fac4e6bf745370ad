"""``craft-operator render-skill``: preview the company-search SKILL.md for some sources."""

from __future__ import annotations

import re
import sys
from typing import IO, Any, NoReturn

import click
import yaml

from craft_operator.api.models import KIND, SOURCE_NAME_PATTERN, Source
from craft_operator.api.parse import InvalidSandboxError, parse_sandbox
from craft_operator.skills import SkillTemplateError, render_skill, validate_template


class SourcesInputError(Exception):
    """The sources to render could not be read; the message says what is wrong."""


def _fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"craft-operator: {message}", err=True)
    sys.exit(code)


def sources_from_names(value: str) -> list[Source]:
    """Sources from a comma-separated list of identifiers (``slack,google_drive``)."""
    sources = []
    for name in (part.strip() for part in value.split(",")):
        if not name:
            continue
        if not re.match(SOURCE_NAME_PATTERN, name) or len(name) > 64:
            raise SourcesInputError(
                f"--sources: {name!r} is not a source identifier "
                "(lowercase letters, digits and '_', e.g. google_drive)"
            )
        sources.append(Source(name=name))
    return sources


def sources_from_manifest(stream: IO[str]) -> list[Source]:
    """The ``spec.sources`` of the one CraftSandbox in a YAML stream."""
    label = getattr(stream, "name", "the manifest")
    try:
        documents = [doc for doc in yaml.safe_load_all(stream) if doc is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise SourcesInputError(f"--from {label}: not valid YAML{where}") from None
    except UnicodeDecodeError:
        raise SourcesInputError(f"--from {label}: not UTF-8 text") from None
    bodies: list[dict[str, Any]] = [
        doc for doc in documents if isinstance(doc, dict) and doc.get("kind") == KIND
    ]
    if len(bodies) != 1:
        raise SourcesInputError(f"--from {label}: expected one {KIND} object, found {len(bodies)}")
    try:
        sandbox = parse_sandbox(bodies[0])
    except InvalidSandboxError as exc:
        raise SourcesInputError(f"--from {label}: {exc}") from None
    return list(sandbox.spec.sources)


@click.command("render-skill")
@click.option(
    "--sources",
    "names",
    metavar="NAMES",
    help="Comma-separated source identifiers, e.g. slack,google_drive (may be empty).",
)
@click.option(
    "--from",
    "manifest",
    type=click.File("r", encoding="utf-8"),
    metavar="FILE",
    help="A CraftSandbox manifest (YAML; '-' reads stdin); renders its spec.sources.",
)
@click.option(
    "--template",
    type=click.File("r", encoding="utf-8"),
    metavar="FILE",
    help="Preview a custom template (the SKILL.md.j2 key of the override ConfigMap).",
)
def render_skill_command(
    names: str | None, manifest: IO[str] | None, template: IO[str] | None
) -> None:
    """Print the company-search SKILL.md the operator would mount for these sources.

    Example: craft-operator render-skill --sources slack,confluence,google_drive
    """
    if (names is None) == (manifest is None):
        _fail("give exactly one of --sources or --from", code=2)
    try:
        sources = sources_from_manifest(manifest) if manifest else sources_from_names(names or "")
    except SourcesInputError as exc:
        _fail(str(exc), code=2)
    try:
        text = template.read() if template else None
    except UnicodeDecodeError:
        _fail(f"--template {getattr(template, 'name', 'FILE')}: not UTF-8 text", code=2)
    try:
        if text is not None:
            # Also try the sources other sandboxes may have, not only these.
            validate_template(text)
        rendered = render_skill(sources, template=text)
    except SkillTemplateError as exc:
        _fail(str(exc))
    if rendered.unknown_sources:
        click.echo(
            "craft-operator: warning: not in the source catalog (listed by name): "
            + ", ".join(rendered.unknown_sources),
            err=True,
        )
    click.echo(rendered.text, nl=False)
