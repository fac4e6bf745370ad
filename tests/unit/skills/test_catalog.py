"""The source catalog: every Onyx source identifier is described or internal-only."""

from __future__ import annotations

import pytest

from craft_operator.skills.catalog import (
    CATALOG,
    INTERNAL_SOURCES,
    SOURCE_IDENTIFIERS,
    fallback_display_name,
    is_internal,
    lookup,
    search_identifier,
)
from craft_operator.skills.sanitize import MAX_DESCRIPTION_CHARS, inline_text

pytestmark = pytest.mark.unit

# Copied by hand from REFERENCE.md ("Source identifiers"): the specification the module's
# own list is checked against. When Onyx adds a source, add it here and to the catalog.
REFERENCE_TEXT = """
ingestion_api slack web google_drive gmail github gitbook gitlab guru bookstack outline
confluence jira slab productboard file coda canvas notion zulip linear hubspot document360
gong google_sites zendesk loopio box dropbox sharepoint teams salesforce discourse axero
clickup mediawiki wikipedia asana s3 r2 google_cloud_storage oci_storage xenforo
not_applicable discord freshdesk fireflies egnyte airtable highspot drupal_wiki imap
bitbucket testrail braintrust lumapps mock_connector user_file craft_file federated_slack
"""
REFERENCE_IDENTIFIERS = REFERENCE_TEXT.split()
REFERENCE_INTERNAL = {
    "ingestion_api",
    "craft_file",
    "not_applicable",
    "mock_connector",
    "user_file",
}
RENDERABLE = [name for name in REFERENCE_IDENTIFIERS if name not in REFERENCE_INTERNAL]

# The values of Onyx's `DocumentSource` enum, copied by hand from onyx-dot-app/onyx @ a7d66a8b,
# backend/onyx/configs/constants.py lines 240-306: the type of `sources` in the request of
# POST /api/search (backend/onyx/server/features/search/models.py), so the only identifiers
# `onyx-cli search --source` may be given; any other is answered with HTTP 422 (onyx-cli
# exits 2). `federated_slack` is not one: it is `FederatedConnectorSource.FEDERATED_SLACK`
# (constants.py lines 309-315), whose `to_non_federated_source()` is `DocumentSource.SLACK`.
ONYX_DOCUMENT_SOURCES_TEXT = """
ingestion_api slack web google_drive gmail github gitbook gitlab guru bookstack outline
confluence jira slab productboard file coda canvas notion zulip linear hubspot document360
gong google_sites zendesk loopio box dropbox sharepoint teams salesforce discourse axero
clickup mediawiki wikipedia asana s3 r2 google_cloud_storage oci_storage xenforo
not_applicable discord freshdesk fireflies egnyte airtable highspot drupal_wiki imap
bitbucket testrail braintrust lumapps mock_connector user_file craft_file
"""
ONYX_DOCUMENT_SOURCES = frozenset(ONYX_DOCUMENT_SOURCES_TEXT.split())


def test_the_module_lists_exactly_the_reference_identifiers() -> None:
    assert list(SOURCE_IDENTIFIERS) == REFERENCE_IDENTIFIERS
    assert INTERNAL_SOURCES == REFERENCE_INTERNAL


@pytest.mark.parametrize("name", RENDERABLE)
def test_every_renderable_identifier_has_a_display_name_and_a_one_line_description(
    name: str,
) -> None:
    entry = lookup(name)
    assert entry is not None, f"{name} has no catalog entry: add one in skills/catalog.py"
    assert entry.display_name.strip()
    assert entry.description.strip()
    assert entry.description != entry.display_name
    assert len(entry.description) <= MAX_DESCRIPTION_CHARS
    # Catalog text goes into the skill as it is: it must already be inert, one-line text.
    assert inline_text(entry.description, limit=MAX_DESCRIPTION_CHARS) == entry.description


@pytest.mark.parametrize("name", RENDERABLE)
def test_every_renderable_identifier_is_searched_by_an_onyx_document_source(name: str) -> None:
    assert search_identifier(name) in ONYX_DOCUMENT_SOURCES


def test_federated_slack_is_not_a_document_source_and_is_searched_as_slack() -> None:
    assert "federated_slack" not in ONYX_DOCUMENT_SOURCES
    assert search_identifier("federated_slack") == "slack"


@pytest.mark.parametrize("name", ["slack", "confluence", "acme_wiki"])
def test_other_identifiers_are_searched_by_their_own_name(name: str) -> None:
    assert search_identifier(name) == name


@pytest.mark.parametrize("name", sorted(REFERENCE_INTERNAL))
def test_internal_identifiers_are_internal_and_not_in_the_catalog(name: str) -> None:
    assert is_internal(name)
    assert lookup(name) is None


def test_the_catalog_holds_nothing_beyond_the_reference_identifiers() -> None:
    assert set(CATALOG) == set(RENDERABLE)


def test_descriptions_are_distinct() -> None:
    descriptions = [entry.description for entry in CATALOG.values()]
    assert len(set(descriptions)) == len(descriptions)


def test_the_catalog_cannot_be_modified_at_runtime() -> None:
    with pytest.raises(TypeError):
        CATALOG["slack"] = CATALOG["web"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("name", "expected"),
    [("foo_bar", "Foo Bar"), ("acme", "Acme"), ("new-wiki", "New Wiki"), ("x__y", "X Y")],
)
def test_unknown_identifiers_get_a_readable_display_name(name: str, expected: str) -> None:
    assert fallback_display_name(name) == expected
