"""Load, compile and run the company-search SKILL.md template in a Jinja2 sandbox.

The built-in template ships in the package (``company-search/SKILL.md.j2``). A platform
team may replace it with a ConfigMap (setting ``CRAFT_SKILL_TEMPLATE_CONFIGMAP``, key
:data:`TEMPLATE_CONFIGMAP_KEY`); the reconciler fetches the ConfigMap and passes its text in.
Every template, built-in or custom, runs in an immutable sandbox with autoescaping off (the
output is Markdown, and values are sanitized before they reach the template), undefined
names are errors, and any failure becomes a :class:`SkillTemplateError`.

A custom template is the platform's configuration, trusted, but a mistake in it must not
hold the operator: a rendering may use :data:`RENDER_CPU_SECONDS` of its thread's CPU in the
template's own code (a loop nested too deep is stopped there), and what one step may build
is bounded by the sandbox (:mod:`craft_operator.skills.bounded`).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from collections.abc import Iterator, Mapping
from importlib import resources
from types import FrameType
from typing import Any

import jinja2
import yaml

from craft_operator.skills.bounded import MAX_RENDERED_CHARS, SKILL_NAME, BoundedEnvironment
from craft_operator.skills.errors import SkillTemplateError

__all__ = ["MAX_RENDERED_CHARS", "SKILL_NAME", "SkillTemplateError"]

#: The ConfigMap key that holds a custom template.
TEMPLATE_CONFIGMAP_KEY = "SKILL.md.j2"

#: CPU seconds one rendering may spend in the template's own code.
RENDER_CPU_SECONDS = 2.0

_BUILTIN_TEMPLATE = ("company-search", "SKILL.md.j2")
#: The file name Jinja compiles a template from a string under.
_TEMPLATE_FILENAME = "<template>"
#: Lines of template code run between two looks at the CPU clock.
_LINES_PER_CHECK = 64


@functools.cache
def builtin_template() -> str:
    """The text of the template shipped in the package."""
    path = resources.files(__package__ or "craft_operator.skills").joinpath(*_BUILTIN_TEMPLATE)
    return path.read_text(encoding="utf-8")


def _environment() -> jinja2.Environment:
    # Autoescape is off on purpose: the output is Markdown, where HTML entities would garble
    # the text; untrusted values are made inert by craft_operator.skills.sanitize instead.
    return BoundedEnvironment(
        autoescape=False,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


@functools.lru_cache(maxsize=8)
def compile_template(text: str) -> jinja2.Template:
    """Compile template ``text`` in the sandbox; raise :class:`SkillTemplateError` if invalid."""
    try:
        return _environment().from_string(text)
    except jinja2.TemplateSyntaxError as exc:
        raise SkillTemplateError(
            f"{SKILL_NAME} template has a syntax error on line {exc.lineno}: {exc.message}"
        ) from None
    except jinja2.TemplateError as exc:
        raise SkillTemplateError(f"{SKILL_NAME} template is invalid: {exc}") from None
    except Exception as exc:
        # Jinja compiles to Python source and Python compiles that: blocks nested too deep
        # or an expression too long fail there, in Python's own errors, not Jinja's.
        raise SkillTemplateError(
            f"{SKILL_NAME} template cannot be compiled: {type(exc).__name__}: {exc}"
        ) from None


@contextlib.contextmanager
def _cpu_budget(seconds: float) -> Iterator[None]:
    """Stop template code that runs past ``seconds`` of this thread's CPU.

    Only frames of template code are traced (line by line), so the built-in filters and
    the sandbox's own checks run at full speed; the tracer in place before (a coverage
    tool's, a debugger's) is put back after.
    """
    deadline = time.thread_time() + seconds
    lines = 0

    def in_template(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal lines
        if event == "line":
            lines += 1
            if lines % _LINES_PER_CHECK == 0 and time.thread_time() > deadline:
                raise SkillTemplateError(
                    f"{SKILL_NAME} template used more than {seconds:g} s of CPU in one "
                    "rendering: look for loops nested too deep"
                )
        return in_template

    def on_call(frame: FrameType, event: str, arg: Any) -> Any:
        return in_template if frame.f_code.co_filename == _TEMPLATE_FILENAME else None

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        yield
    finally:
        sys.settrace(previous)


def run_template(
    text: str, context: Mapping[str, Any], *, cpu_seconds: float = RENDER_CPU_SECONDS
) -> str:
    """Render template ``text`` with ``context`` and check the result is a usable SKILL.md.

    Raises :class:`SkillTemplateError` when the template does not compile, fails while
    rendering (undefined name, unsafe attribute, any runtime error), runs its own code for
    more than ``cpu_seconds`` of CPU, builds a value past the sandbox's bounds
    (:mod:`craft_operator.skills.bounded`), produces more than :data:`MAX_RENDERED_CHARS`,
    or lacks front matter with ``name: company-search`` and a description.
    """
    template = compile_template(text)
    parts: list[str] = []
    size = 0
    try:
        with _cpu_budget(cpu_seconds):
            for chunk in template.generate(**context):
                size += len(chunk)
                if size > MAX_RENDERED_CHARS:
                    raise SkillTemplateError(
                        f"{SKILL_NAME} template output exceeds {MAX_RENDERED_CHARS} characters"
                    )
                parts.append(chunk)
    except SkillTemplateError:
        raise
    except jinja2.TemplateError as exc:
        raise SkillTemplateError(f"{SKILL_NAME} template failed to render: {exc}") from None
    except Exception as exc:
        # A custom template can fail in arbitrary ways (division by zero, bad filter
        # arguments); every one of them must reach the reconciler as one typed error.
        raise SkillTemplateError(
            f"{SKILL_NAME} template failed to render: {type(exc).__name__}: {exc}"
        ) from None
    rendered = "".join(parts).rstrip("\n") + "\n"
    check_front_matter(rendered)
    return rendered


def check_front_matter(text: str) -> None:
    """Raise :class:`SkillTemplateError` unless ``text`` opens with the skill's front matter.

    Agents discover skills by this block: it must be the first thing in the file, fenced by
    ``---`` lines, and be a YAML mapping with ``name: company-search`` and a non-empty
    one-line ``description``.
    """
    lines = text.split("\n")
    if not lines or lines[0] != "---":
        raise SkillTemplateError(f"{SKILL_NAME} template output must start with a '---' line")
    try:
        end = lines.index("---", 1)
    except ValueError:
        raise SkillTemplateError(
            f"{SKILL_NAME} template output has no closing '---' after its front matter"
        ) from None
    try:
        meta = yaml.safe_load("\n".join(lines[1:end]))
    except (yaml.YAMLError, RecursionError):
        # PyYAML parses nested collections recursively: front matter nested a thousand deep
        # ends in RecursionError, not a YAMLError.
        raise SkillTemplateError(f"{SKILL_NAME} template front matter is not valid YAML") from None
    if not isinstance(meta, dict) or meta.get("name") != SKILL_NAME:
        raise SkillTemplateError(f"{SKILL_NAME} template front matter must set name: {SKILL_NAME}")
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip() or "\n" in description:
        raise SkillTemplateError(
            f"{SKILL_NAME} template front matter must set a one-line description"
        )


def template_from_configmap(data: Mapping[str, str] | None, *, reference: str) -> str:
    """The custom template held in a ConfigMap's ``data`` (``reference`` is namespace/name).

    Raises :class:`SkillTemplateError` when the key :data:`TEMPLATE_CONFIGMAP_KEY` is
    missing or empty.
    """
    text = (data or {}).get(TEMPLATE_CONFIGMAP_KEY)
    if text is None:
        raise SkillTemplateError(f"ConfigMap {reference} has no key {TEMPLATE_CONFIGMAP_KEY}")
    if not text.strip():
        raise SkillTemplateError(f"ConfigMap {reference} key {TEMPLATE_CONFIGMAP_KEY} is empty")
    return text
