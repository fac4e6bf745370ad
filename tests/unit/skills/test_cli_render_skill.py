"""``craft-operator render-skill`` previews SKILL.md for a platform engineer."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from craft_operator.api.models import Source
from craft_operator.cli import main
from craft_operator.skills import render_skill

pytestmark = pytest.mark.unit

USER_ID = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"


def sandbox(sources: list[dict[str, object]]) -> dict[str, object]:
    return {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "metadata": {"name": "alice", "namespace": "craft"},
        "spec": {"user": {"id": USER_ID}, "sources": sources},
    }


def invoke(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["render-skill", *args], input=stdin)
    return result.exit_code, result.stdout, result.stderr


def test_prints_the_skill_for_a_list_of_sources() -> None:
    code, out, err = invoke("--sources", "slack, google_drive,,slack")
    assert code == 0, err
    assert out == render_skill([Source(name="google_drive"), Source(name="slack")]).text
    assert err == ""


def test_an_empty_list_prints_the_no_sources_skill() -> None:
    code, out, _ = invoke("--sources", "")
    assert code == 0
    assert out == render_skill([]).text


def test_renders_the_sources_of_a_manifest(tmp_path: Path) -> None:
    manifest = tmp_path / "alice.yaml"
    spec_sources: list[dict[str, object]] = [
        {"name": "confluence", "description": "Wiki", "scopes": ["ENG", "OPS"]}
    ]
    manifest.write_text(yaml.safe_dump(sandbox(spec_sources)))
    code, out, err = invoke("--from", str(manifest))
    assert code == 0, err
    assert "- `confluence` — Wiki (for example: ENG, OPS)\n" in out


def test_reads_the_manifest_from_stdin_among_other_objects() -> None:
    other = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "craft"}}
    stream = yaml.safe_dump_all([other, sandbox([{"name": "jira"}])])
    code, out, err = invoke("--from", "-", stdin=stream)
    assert code == 0, err
    assert out == render_skill([Source(name="jira")]).text


def test_warns_about_unknown_sources_on_stderr_and_still_renders() -> None:
    code, out, err = invoke("--sources", "acme_wiki,slack")
    assert code == 0
    assert "- `acme_wiki` — Acme Wiki\n" in out
    assert err == "craft-operator: warning: not in the source catalog (listed by name): acme_wiki\n"


def test_previews_a_custom_template(tmp_path: Path) -> None:
    template = tmp_path / "SKILL.md.j2"
    template.write_text(
        "---\nname: company-search\ndescription: Custom.\n---\n"
        "{% for s in sources %}{{ s.line }}\n{% endfor %}"
    )
    code, out, err = invoke("--sources", "slack", "--template", str(template))
    assert code == 0, err
    assert out.endswith(
        "---\n- `slack` — Slack messages and threads from channels the user can read.\n"
    )


@pytest.mark.parametrize(
    ("args", "message", "exit_code"),
    [
        ((), "give exactly one of --sources or --from", 2),
        (("--sources", "slack", "--from", "-"), "give exactly one of --sources or --from", 2),
        (("--sources", "Slack"), "--sources: 'Slack' is not a source identifier", 2),
        (("--sources", "slack;rm"), "'slack;rm' is not a source identifier", 2),
        # No CraftSandbox could name it: the API refuses names longer than 64.
        (("--sources", "a" * 65), f"{'a' * 65!r} is not a source identifier", 2),
    ],
)
def test_bad_arguments_print_one_line_and_fail(
    args: tuple[str, ...], message: str, exit_code: int
) -> None:
    code, out, err = invoke(*args, stdin="")
    assert code == exit_code
    assert out == ""
    assert err.count("\n") == 1
    assert message in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("kind: CraftSandbox\n  bad: [", "not valid YAML (line 2)"),
        ("apiVersion: v1\nkind: ConfigMap\n", "expected one CraftSandbox object, found 0"),
        (
            yaml.safe_dump_all([sandbox([]), sandbox([])]),
            "expected one CraftSandbox object, found 2",
        ),
        (
            yaml.safe_dump(sandbox([{"description": "no name"}])),
            "spec.sources.0.name: Field required",
        ),
    ],
)
def test_a_bad_manifest_prints_one_line_and_fails(
    tmp_path: Path, content: str, message: str
) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(content)
    code, out, err = invoke("--from", str(manifest))
    assert code == 2
    assert out == ""
    assert err == f"craft-operator: --from {manifest}: {message}\n"


def test_a_manifest_that_is_not_utf8_prints_one_line_and_fails(tmp_path: Path) -> None:
    manifest = tmp_path / "latin1.yaml"
    manifest.write_bytes("kind: CraftSandbox # caf\xe9\n".encode("latin-1"))
    code, _, err = invoke("--from", str(manifest))
    assert code == 2
    assert err == f"craft-operator: --from {manifest}: not UTF-8 text\n"


def test_a_broken_template_prints_the_template_error_and_fails(tmp_path: Path) -> None:
    template = tmp_path / "SKILL.md.j2"
    template.write_text("---\nname: company-search\ndescription: x\n---\n{{ nope }}\n")
    code, out, err = invoke("--sources", "slack", "--template", str(template))
    assert code == 1
    assert out == ""
    assert err == "craft-operator: company-search template failed to render: 'nope' is undefined\n"


def test_a_template_that_breaks_for_other_sources_is_reported_in_the_preview(
    tmp_path: Path,
) -> None:
    template = tmp_path / "SKILL.md.j2"
    template.write_text("---\nname: company-search\ndescription: x\n---\n{{ source_names[0] }}\n")
    code, out, err = invoke("--sources", "slack", "--template", str(template))
    assert code == 1
    assert out == ""
    assert err.startswith("craft-operator: company-search template failed to render:")
