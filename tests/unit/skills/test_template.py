"""Custom templates: rendered in a sandbox, and every failure is one SkillTemplateError."""

from __future__ import annotations

import re
import sys

import pytest

from craft_operator.api.models import Source
from craft_operator.config import SettingsError, load_settings
from craft_operator.skills import (
    TEMPLATE_CONFIGMAP_KEY,
    SkillTemplateError,
    builtin_template,
    render_skill,
    template_from_configmap,
    validate_template,
)
from craft_operator.skills.template import MAX_RENDERED_CHARS, run_template
from tests.unit.skills.structure import block_outline, headings, html_tokens

pytestmark = pytest.mark.unit

FRONT = "---\nname: company-search\ndescription: Company search.\n---\n"
SOURCES = [Source(name="slack", scopes=["#eng"]), Source(name="acme")]


def test_a_custom_template_replaces_the_builtin_one() -> None:
    template = FRONT + "{% for s in sources %}* {{ s.name }}: {{ s.display_name }}\n{% endfor %}"
    rendered = render_skill(SOURCES, template=template)
    assert rendered.text == FRONT + "* acme: Acme\n* slack: Slack\n"
    assert rendered.source_count == 2
    assert rendered.unknown_sources == ("acme",)


def test_a_custom_template_sees_the_documented_context() -> None:
    template = FRONT + (
        "{{ source_count }} {{ source_names | join(',') }}\n"
        "{% for s in sources %}{{ s.line }} | {{ s.scopes | join(',') }} | {{ s.more_scopes }}"
        " | {{ s.known }} | {{ s.description }}\n{% endfor %}"
    )
    text = render_skill(SOURCES, template=template).text
    assert "2 acme,slack\n" in text
    assert "- `acme` — Acme |  | False | False | Acme\n" in text
    assert "| #eng | False | True |" in text


def test_the_builtin_template_is_the_default() -> None:
    assert render_skill(SOURCES).text == render_skill(SOURCES, template=builtin_template()).text


def test_values_placed_at_the_start_of_a_line_cannot_open_blocks() -> None:
    template = FRONT + "# Sources\n\n{% for s in sources %}{{ s.description }}\n\n{% endfor %}"
    hostile = [
        Source(name="a", description="# Heading"),
        Source(name="b", description="> quote"),
        Source(name="c", description="- item"),
        Source(name="d", description="1. item"),
        Source(name="e", description="<div>raw</div>"),
        Source(name="f", description="```"),
    ]
    plain = [Source(name=source.name, description="text") for source in hostile]
    text = render_skill(hostile, template=template).text
    assert block_outline(text) == block_outline(render_skill(plain, template=template).text)
    assert headings(text) == ["Sources"]
    assert html_tokens(text) == []


@pytest.mark.parametrize(
    ("template", "message"),
    [
        (FRONT + "{% for s in sources %}", "syntax error on line 5"),
        (FRONT + "{{ sources | no_such_filter }}", "syntax error on line 5: No filter named"),
        (FRONT + "{{ no_such_variable }}", "'no_such_variable' is undefined"),
        (FRONT + "{{ 1 / 0 }}", "ZeroDivisionError"),
        (FRONT + "{{ sources.__class__.__mro__ }}", "unsafe"),
        (FRONT + "{{ ''.__class__.__subclasses__() }}", "unsafe"),
        (FRONT + "{% set xs = [1] %}{{ xs.append(2) }}", "unsafe"),
    ],
)
def test_a_broken_or_unsafe_template_raises_a_clear_typed_error(
    template: str, message: str
) -> None:
    with pytest.raises(SkillTemplateError) as caught:
        render_skill(SOURCES, template=template)
    assert message in str(caught.value)
    assert str(caught.value).startswith("company-search template")


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("# no front matter\n", "must start with a '---' line"),
        ("---\nname: company-search\ndescription: x\n", "no closing '---'"),
        ("---\nname: other\ndescription: x\n---\n", "must set name: company-search"),
        ("---\nname: company-search\n---\n", "one-line description"),
        ("---\nname: company-search\ndescription: |\n  a\n  b\n---\n", "one-line description"),
        ("---\nname: [unclosed\n---\n", "not valid YAML"),
        ("---\n- a list\n---\n", "must set name: company-search"),
        ("---\n" + "[" * 2000 + "]" * 2000 + "\n---\n", "not valid YAML"),
    ],
)
def test_a_template_must_produce_the_skill_front_matter(template: str, message: str) -> None:
    with pytest.raises(SkillTemplateError, match=message.replace("[", r"\[")):
        render_skill([], template=template)


@pytest.mark.parametrize(
    "template",
    [
        FRONT + "{% for a in [1] %}" * 25 + "x" + "{% endfor %}" * 25,
        FRONT + "{{ " + "source_count + " * 5000 + "1 }}",
    ],
    ids=["blocks-nested-too-deep-for-python", "an-expression-too-long-to-parse"],
)
def test_a_template_python_cannot_compile_is_a_template_error_too(template: str) -> None:
    with pytest.raises(SkillTemplateError, match="company-search template cannot be compiled"):
        render_skill(SOURCES, template=template)


def test_a_template_that_produces_too_much_text_is_stopped() -> None:
    template = FRONT + "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}"
    with pytest.raises(SkillTemplateError, match=f"exceeds {MAX_RENDERED_CHARS} characters"):
        render_skill([], template=template)


def test_a_custom_template_is_not_html_escaped() -> None:
    template = FRONT + "{% for s in sources %}{{ s.description }}{% endfor %}\n"
    text = render_skill([Source(name="x", description='Tom & Jerry\'s "notes"')], template=template)
    assert text.text.endswith('Tom & Jerry\'s "notes"\n')


def test_the_template_is_read_from_its_configmap_key() -> None:
    data = {TEMPLATE_CONFIGMAP_KEY: FRONT, "other": "ignored"}
    assert template_from_configmap(data, reference="craft-system/skill") == FRONT


@pytest.mark.parametrize("data", [None, {}, {"SKILL.md": FRONT}])
def test_a_configmap_without_the_key_is_an_error_naming_it(data: dict[str, str] | None) -> None:
    with pytest.raises(
        SkillTemplateError, match=r"ConfigMap craft-system/skill has no key SKILL\.md\.j2"
    ):
        template_from_configmap(data, reference="craft-system/skill")


def test_a_configmap_with_an_empty_template_is_an_error() -> None:
    with pytest.raises(SkillTemplateError, match=r"key SKILL\.md\.j2 is empty"):
        template_from_configmap({TEMPLATE_CONFIGMAP_KEY: " \n"}, reference="ns/cm")


def test_the_override_setting_names_a_configmap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAFT_SKILL_TEMPLATE_CONFIGMAP", "craft-system/company-search-skill")
    settings = load_settings()
    assert settings.skill_template_configmap_ref == ("craft-system", "company-search-skill")


def test_without_the_setting_there_is_no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CRAFT_SKILL_TEMPLATE_CONFIGMAP", raising=False)
    assert load_settings().skill_template_configmap_ref is None


@pytest.mark.parametrize(
    "value", ["just-a-name", "ns/", "/name", "Bad_NS/name", "ns/name/extra", "ns/Name"]
)
def test_a_malformed_override_setting_stops_the_operator(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("CRAFT_SKILL_TEMPLATE_CONFIGMAP", value)
    with pytest.raises(
        SettingsError, match="CRAFT_SKILL_TEMPLATE_CONFIGMAP: must be namespace/name"
    ):
        load_settings()


def test_validation_accepts_the_builtin_template() -> None:
    validate_template(builtin_template())


def test_validation_catches_a_template_that_fails_only_when_sources_exist() -> None:
    template = FRONT + "{% for s in sources %}{{ s.no_such_field }}{% endfor %}"
    render_skill([], template=template)
    with pytest.raises(SkillTemplateError, match="no attribute 'no_such_field'"):
        validate_template(template)


def test_validation_catches_a_template_that_fails_only_without_sources() -> None:
    template = FRONT + "{{ source_names[0] }}"
    render_skill(SOURCES, template=template)
    with pytest.raises(SkillTemplateError, match="failed to render"):
        validate_template(template)


def test_a_template_whose_loops_run_past_its_cpu_budget_is_stopped() -> None:
    nested = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"
    with pytest.raises(SkillTemplateError, match=r"used more than 0\.2 s of CPU in one rendering"):
        run_template(FRONT + nested, {}, cpu_seconds=0.2)


def test_the_cpu_budget_puts_back_the_tracer_that_was_in_place() -> None:
    def tracer(frame: object, event: str, arg: object) -> None:
        return None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        run_template(FRONT + "{% for a in range(10) %}{{ a }}{% endfor %}", {})
        assert sys.gettrace() is tracer
    finally:
        sys.settrace(previous)


LONG = f"builds a string or list of more than {MAX_RENDERED_CHARS} items"
BITS = "computes a number of more than 4096 bits"


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("2 ** 100000", BITS),
        ("(-3) ** 5000", BITS),
        ("(2 ** 2000) * (2 ** 2200)", BITS),
        ("'x' * 1000000", LONG),
        ("1000000 * 'x'", LONG),
        ("[1, 2] * 200000", LONG),
        ("('x' * 200000) + ('y' * 200000)", LONG),
        ("'%050000000d' % 0", "formats to a width of 50000000, more than 1024"),
        ("'%.2000f' % 1", "formats to a precision of 2000"),
        ("'%*d' % (50000000, 0)", "takes a width from an argument"),
        ("'%050000000d' | format(0)", "formats to a width of 50000000"),
        ("'{:>50000000}'.format(0)", "formats to a width or precision of 50000000"),
        ("'{:>{w}}'.format(0, w=50000000)", "takes a width from an argument"),
        ("'{0:>9999}'.format_map({'0': 1})", "formats to a width or precision of 9999"),
        ("'x'.ljust(10 ** 9)", LONG),
        ("'x'.zfill(10 ** 9)", LONG),
        ("'a\tb'.expandtabs(10 ** 8)", LONG),
        ("('x' * 200000).replace('x', 'x' * 200000)", LONG),
        ("('y' * 2000).join(range(100000) | map('string'))", LONG),
        ("'x' | center(10 ** 9)", LONG),
        ("'a\nb\nc' | indent(10 ** 8)", LONG),
        ("('x' * 200000) | replace('x', 'yy')", LONG),
        ("(['a'] * 200000) | join(d='x' * 200000)", LONG),
        ("('x' * 200000) ~ ('y' * 200000)", LONG),
        ("[1] | batch(10 ** 9, 'x') | list", LONG),
        ("[1] | slice(10 ** 9) | list", LONG),
    ],
)
def test_a_huge_value_is_refused_before_it_is_built(expression: str, message: str) -> None:
    with pytest.raises(SkillTemplateError, match=re.escape(message)):
        run_template(FRONT + "{% set value = " + expression + " %}", {})


def test_a_string_doubled_in_a_loop_is_stopped_before_it_outgrows_a_rendering() -> None:
    doubling = (
        "{% set ns = namespace(text='x') %}"
        "{% for _ in range(64) %}{% set ns.text = ns.text ~ ns.text %}{% endfor %}"
    )
    with pytest.raises(SkillTemplateError, match=re.escape(LONG)):
        run_template(FRONT + doubling, {})


@pytest.mark.parametrize(
    "expression",
    [
        "([s] * 3) | join",
        "''.join([s] * 3)",
        "'%s' % ([s] * 3)",
        "('%s' * 3) % ((s,) * 3)",
        "('%(a)s' * 3) % {'a': s}",
        "('{0}' * 3).format(s)",
        "([s] * 3) | string",
        "s.translate({120: 'yyy'})",
    ],
)
def test_values_are_not_turned_into_more_text_than_a_rendering(expression: str) -> None:
    long_text = "{% set s = 'x' * 200000 %}"
    with pytest.raises(SkillTemplateError, match=re.escape(LONG)):
        run_template(FRONT + long_text + "{% set v = " + expression + " %}", {})


def test_a_value_is_measured_before_it_is_written_out() -> None:
    with pytest.raises(SkillTemplateError, match=re.escape(LONG)):
        run_template(FRONT + "{% set s = 'x' * 200000 %}{{ [s] * 3 }}", {})


def test_a_string_doubled_by_join_in_a_loop_is_stopped_too() -> None:
    doubling = (
        "{% set ns = namespace(text='x') %}"
        "{% for _ in range(64) %}{% set ns.text = [ns.text, ns.text] | join %}{% endfor %}"
    )
    with pytest.raises(SkillTemplateError, match=re.escape(LONG)):
        run_template(FRONT + doubling, {})


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("'%d%% 2025' % 5", "5% 2025"),
        ("'%s%% 1500 firms' | format(40)", "40% 1500 firms"),
        ("'{:08.3f}|{:02d}|{:,}'.format(3.14159, 7, 1234567)", "0003.142|07|1,234,567"),
    ],
)
def test_a_literal_percent_sign_and_ordinary_formats_are_not_refused(
    expression: str, expected: str
) -> None:
    assert run_template(FRONT + "{{ " + expression + " }}", {}) == FRONT + expected + "\n"


def test_lipsum_which_generates_text_outside_the_template_s_own_code_is_not_offered() -> None:
    with pytest.raises(SkillTemplateError, match="'lipsum' is undefined"):
        run_template(FRONT + "{{ lipsum(10000) }}", {})


def test_a_macro_recursing_through_few_lines_still_meets_the_cpu_budget() -> None:
    recursive = (
        "{% macro deep(n) %}{% if n %}{{ deep(n - 1) }}{{ deep(n - 1) }}{% endif %}{% endmacro %}"
        "{{ deep(30) }}"
    )
    with pytest.raises(SkillTemplateError, match=r"used more than 0\.2 s of CPU"):
        run_template(FRONT + recursive, {}, cpu_seconds=0.2)


def test_ordinary_arithmetic_and_repetition_still_work() -> None:
    text = (
        "{{ 2 ** 64 }} {{ 2.5 ** 2 }} {{ 3 * 4 }} {{ '-' * 3 }} {{ ([0] * 2) | length }} "
        "{{ 'a' + 'b' }} {{ '%05.1f' % 2.25 }} {{ '%s=%d' | format('n', 3) }} "
        "{{ '{:>4}|{:,}'.format('x', 12345) }} {{ '100%' }} {{ 'ab'.ljust(4) }}| "
        "{{ ['a', 'b'] | join(', ') }} {{ '-'.join(['c', 'd']) }} {{ 'a-b' | replace('-', '+') }} "
        "{{ 'ab' | center(6) }}|{{ 'x'.zfill(3) }} {{ 'a\nb' | indent(2) }} "
        "{% set n = 'n' %}{{ n ~ 1 ~ 'm' }} {{ [1, 2, 3] | batch(2) | list | length }}"
    )
    rendered = run_template(FRONT + text, {})
    expected = (
        "18446744073709551616 6.25 12 --- 2 ab 002.2 n=3    x|12,345 100% ab  | a, b c-d a+b "
    )
    assert rendered == FRONT + expected + "  ab  |00x a\n  b n1m 2\n"
