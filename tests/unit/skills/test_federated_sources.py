"""SKILL.md only offers `onyx-cli search --source` identifiers Onyx's search accepts.

Onyx's POST /api/search types `sources` as `list[DocumentSource]`; `federated_slack` is a
`FederatedConnectorSource` that Onyx searches, and reports results of, as `slack`. A
sandbox may still have `federated_slack` in spec.sources (REFERENCE.md lists it): it is
listed as `slack`, described as Slack's live search.
"""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from click.testing import CliRunner

from craft_operator.api.models import Source
from craft_operator.cli import main
from craft_operator.skills import render_skill
from craft_operator.skills.catalog import CATALOG, INTERNAL_SOURCES, SOURCE_IDENTIFIERS
from tests.unit.skills.structure import list_items
from tests.unit.skills.test_catalog import ONYX_DOCUMENT_SOURCES

pytestmark = pytest.mark.unit

SECTION = "Connected sources"
LIVE = CATALOG["federated_slack"].description
INDEXED = CATALOG["slack"].description


def offered_identifiers(text: str) -> set[str]:
    """The identifiers SKILL.md tells the agent it may pass to `--source`: those listed
    under Connected sources and those of the `--source` example."""
    listed = {item.split("`")[1] for item in list_items(text, SECTION)}
    example = re.search(r"e\.g\. `--source ([a-z0-9_,]+)`", text)
    assert example is not None
    return listed | set(example.group(1).split(","))


def listed(*sources: Source) -> list[str]:
    return list_items(render_skill(list(sources)).text, SECTION)


def previous_digest(listed: list[tuple[str, str | None, list[str] | None]]) -> str:
    """The `craft.onyx.app/sources-hash` the previous version wrote (no unknown names):
    each listed source by its own name, `federated_slack` included."""
    key = {"listed": listed, "unknown": []}
    return hashlib.sha256(json.dumps(key).encode("ascii")).hexdigest()


def test_the_rendered_skill_never_offers_an_identifier_onyx_search_rejects() -> None:
    every = [Source(name=name) for name in SOURCE_IDENTIFIERS]
    for sources in (every, [Source(name="federated_slack")], every[::-1]):
        offered = offered_identifiers(render_skill(sources).text)
        assert offered <= ONYX_DOCUMENT_SOURCES, offered - ONYX_DOCUMENT_SOURCES
    assert len(listed(*every)) == len(set(SOURCE_IDENTIFIERS) - INTERNAL_SOURCES) - 1


def test_federated_slack_is_listed_as_slack_with_its_live_search_description() -> None:
    assert listed(Source(name="federated_slack")) == [f"`slack` — {LIVE}"]
    text = render_skill([Source(name="federated_slack")]).text
    assert "federated_slack" not in text
    assert "e.g. `--source slack`" in text


def test_federated_slack_is_still_known_and_counted() -> None:
    rendered = render_skill([Source(name="federated_slack"), Source(name="confluence")])
    assert rendered.unknown_sources == ()
    assert rendered.source_count == 2
    assert "e.g. `--source confluence,slack`" in rendered.text


def test_federated_slack_keeps_its_spec_description_and_scopes() -> None:
    source = Source(name="federated_slack", description="Live Slack.", scopes=["#eng"])
    assert listed(source) == ["`slack` — Live Slack (for example: #eng)"]


@pytest.mark.parametrize(
    ("first", "second", "line"),
    [
        ("slack", "federated_slack", f"`slack` — {INDEXED}"),
        ("federated_slack", "slack", f"`slack` — {LIVE}"),
    ],
)
def test_slack_and_federated_slack_together_give_one_slack_line_the_first(
    first: str, second: str, line: str
) -> None:
    rendered = render_skill([Source(name=first), Source(name="jira"), Source(name=second)])
    assert list_items(rendered.text, SECTION) == [f"`jira` — {CATALOG['jira'].description}", line]
    assert rendered.source_count == 2
    assert rendered.unknown_sources == ()


def test_a_custom_template_sees_federated_slack_as_slack() -> None:
    template = (
        "---\nname: company-search\ndescription: Company search.\n---\n"
        "{{ source_count }} {{ source_names | join(',') }}\n"
        "{% for s in sources %}{{ s.name }}: {{ s.display_name }}, {{ s.known }}\n{% endfor %}"
    )
    sources = [Source(name="federated_slack"), Source(name="gong"), Source(name="slack")]
    text = render_skill(sources, template=template).text
    assert text.endswith("\n2 gong,slack\ngong: Gong, True\nslack: Slack (live search), True\n")


def test_the_render_skill_command_lists_federated_slack_as_slack() -> None:
    result = CliRunner().invoke(main, ["render-skill", "--sources", "federated_slack,slack"])
    assert result.exit_code == 0, result.stderr
    assert list_items(result.stdout, SECTION) == [f"`slack` — {LIVE}"]
    assert result.stderr == ""


def test_a_skill_rendered_for_federated_slack_before_is_not_current_anymore() -> None:
    """Its sources digest changes, so a SKILL.md that lists `federated_slack` is rewritten,
    not kept as the last good rendering while a custom template fails."""
    assert render_skill([Source(name="federated_slack")]).sources_hash != previous_digest(
        [("federated_slack", None, None)]
    )
    both = render_skill([Source(name="slack"), Source(name="federated_slack")])
    assert both.sources_hash != previous_digest(
        [("federated_slack", None, None), ("slack", None, None)]
    )


def test_other_sources_keep_the_digest_they_had_so_their_skill_is_not_rewritten() -> None:
    sources = [Source(name="slack", scopes=["#eng"]), Source(name="jira", description="Tix")]
    assert render_skill(sources).sources_hash == previous_digest(
        [("jira", "Tix", None), ("slack", None, ["#eng"])]
    )


def test_the_digest_tells_federated_slack_from_slack_and_is_stable() -> None:
    live = render_skill([Source(name="federated_slack")])
    indexed = render_skill([Source(name="slack")])
    assert live.sources_hash != indexed.sources_hash
    again = render_skill([Source(name="federated_slack"), Source(name="slack")])
    assert again.sources_hash == live.sources_hash
    assert again.content_hash == live.content_hash
