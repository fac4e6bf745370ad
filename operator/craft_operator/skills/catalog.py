"""The catalog of Onyx source identifiers the company-search skill can list.

Every identifier Onyx knows (its ``DocumentSource`` values, see REFERENCE.md) is either
internal-only, and never shown to the agent, or has a display name and a one-line
description written for an agent deciding where to search. A unit test fails when an
identifier in :data:`SOURCE_IDENTIFIERS` is in neither group.

``federated_slack`` is accepted in ``spec.sources`` and described here, but it is not one
of Onyx's ``DocumentSource`` values: it is a ``FederatedConnectorSource``, which Onyx's
search filters and reports as ``slack``. ``POST /api/search`` rejects it (HTTP 422, so
``onyx-cli`` exits 2), so the skill lists it under :func:`search_identifier`, ``slack``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

#: Every Onyx source identifier, in the order REFERENCE.md lists them.
SOURCE_IDENTIFIERS: tuple[str, ...] = (
    "ingestion_api",
    "slack",
    "web",
    "google_drive",
    "gmail",
    "github",
    "gitbook",
    "gitlab",
    "guru",
    "bookstack",
    "outline",
    "confluence",
    "jira",
    "slab",
    "productboard",
    "file",
    "coda",
    "canvas",
    "notion",
    "zulip",
    "linear",
    "hubspot",
    "document360",
    "gong",
    "google_sites",
    "zendesk",
    "loopio",
    "box",
    "dropbox",
    "sharepoint",
    "teams",
    "salesforce",
    "discourse",
    "axero",
    "clickup",
    "mediawiki",
    "wikipedia",
    "asana",
    "s3",
    "r2",
    "google_cloud_storage",
    "oci_storage",
    "xenforo",
    "not_applicable",
    "discord",
    "freshdesk",
    "fireflies",
    "egnyte",
    "airtable",
    "highspot",
    "drupal_wiki",
    "imap",
    "bitbucket",
    "testrail",
    "braintrust",
    "lumapps",
    "mock_connector",
    "user_file",
    "craft_file",
    "federated_slack",
)

#: Identifiers Onyx uses internally; they are never listed in the skill.
INTERNAL_SOURCES: frozenset[str] = frozenset(
    {"ingestion_api", "craft_file", "not_applicable", "mock_connector", "user_file"}
)


#: Identifiers that are not Onyx ``DocumentSource`` values, mapped to the one Onyx searches
#: them by (``FederatedConnectorSource.to_non_federated_source()`` in Onyx's constants.py).
_SEARCHED_AS: Mapping[str, str] = MappingProxyType({"federated_slack": "slack"})


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """How one source is presented to the agent."""

    display_name: str
    description: str


def _entry(display_name: str, description: str) -> CatalogEntry:
    return CatalogEntry(display_name=display_name, description=description)


_ENTRIES: dict[str, CatalogEntry] = {
    "slack": _entry("Slack", "Slack messages and threads from channels the user can read."),
    "web": _entry("Web", "Pages crawled from websites the company chose to index."),
    "google_drive": _entry(
        "Google Drive", "Docs, Sheets, Slides and other files stored in Google Drive."
    ),
    "gmail": _entry("Gmail", "Email threads from Gmail mailboxes."),
    "github": _entry("GitHub", "GitHub pull requests and issues, with their discussions."),
    "gitbook": _entry("GitBook", "Documentation spaces published with GitBook."),
    "gitlab": _entry("GitLab", "GitLab merge requests, issues and repository files."),
    "guru": _entry("Guru", "Knowledge cards curated by teams in Guru."),
    "bookstack": _entry("BookStack", "Books, chapters and pages from a BookStack wiki."),
    "outline": _entry("Outline", "Documents and collections from the Outline team wiki."),
    "confluence": _entry("Confluence", "Confluence pages and blog posts across spaces."),
    "jira": _entry("Jira", "Jira tickets: descriptions, comments and status."),
    "slab": _entry("Slab", "Posts and topics from the Slab knowledge base."),
    "productboard": _entry(
        "Productboard", "Product feature requests, notes and roadmap items in Productboard."
    ),
    "file": _entry("Files", "Files uploaded straight into Onyx (PDFs, Office documents, text)."),
    "coda": _entry("Coda", "Coda docs, including their pages and tables."),
    "canvas": _entry("Canvas", "Courses, pages and announcements from the Canvas LMS."),
    "notion": _entry("Notion", "Notion pages and databases from the workspace."),
    "zulip": _entry("Zulip", "Zulip chat messages, organised by stream and topic."),
    "linear": _entry("Linear", "Linear issues and projects, with their comments."),
    "hubspot": _entry("HubSpot", "CRM records in HubSpot: companies, contacts, deals and tickets."),
    "document360": _entry("Document360", "Articles from a Document360 knowledge base."),
    "gong": _entry("Gong", "Transcripts of sales and customer calls recorded by Gong."),
    "google_sites": _entry("Google Sites", "Internal websites built with Google Sites."),
    "zendesk": _entry("Zendesk", "Zendesk support tickets and help-center articles."),
    "loopio": _entry("Loopio", "Approved answers from the Loopio RFP and questionnaire library."),
    "box": _entry("Box", "Files and folders stored in Box."),
    "dropbox": _entry("Dropbox", "Files stored in Dropbox."),
    "sharepoint": _entry("SharePoint", "SharePoint sites, pages and document libraries."),
    "teams": _entry("Microsoft Teams", "Microsoft Teams channel conversations."),
    "salesforce": _entry(
        "Salesforce", "CRM records in Salesforce, such as accounts and opportunities."
    ),
    "discourse": _entry("Discourse", "Topics and replies from Discourse forums."),
    "axero": _entry("Axero", "Intranet content from Axero: articles, wikis and discussions."),
    "clickup": _entry("ClickUp", "ClickUp tasks, docs and their comments."),
    "mediawiki": _entry("MediaWiki", "Pages from a MediaWiki-based wiki."),
    "wikipedia": _entry("Wikipedia", "Selected public Wikipedia articles indexed for the company."),
    "asana": _entry("Asana", "Asana tasks and projects, with their comments."),
    "s3": _entry("Amazon S3", "Documents stored in Amazon S3 buckets."),
    "r2": _entry("Cloudflare R2", "Documents stored in Cloudflare R2 buckets."),
    "google_cloud_storage": _entry(
        "Google Cloud Storage", "Documents stored in Google Cloud Storage buckets."
    ),
    "oci_storage": _entry(
        "Oracle Cloud Object Storage", "Documents stored in Oracle Cloud object storage buckets."
    ),
    "xenforo": _entry("XenForo", "Threads and posts from XenForo community forums."),
    "discord": _entry("Discord", "Messages from Discord server channels."),
    "freshdesk": _entry("Freshdesk", "Customer support tickets from Freshdesk."),
    "fireflies": _entry("Fireflies", "Meeting transcripts and summaries recorded by Fireflies."),
    "egnyte": _entry("Egnyte", "Files shared and stored in Egnyte."),
    "airtable": _entry("Airtable", "Records from Airtable bases and tables."),
    "highspot": _entry("Highspot", "Sales enablement decks and pitches in Highspot."),
    "drupal_wiki": _entry("Drupal Wiki", "Pages from a Drupal-based wiki."),
    "imap": _entry("Email (IMAP)", "Email messages read from an IMAP mailbox."),
    "bitbucket": _entry("Bitbucket", "Bitbucket pull requests and their discussions."),
    "testrail": _entry("TestRail", "Test cases, suites and runs managed in TestRail."),
    "braintrust": _entry(
        "Braintrust", "LLM evaluation experiments, datasets and prompts from Braintrust."
    ),
    "lumapps": _entry("LumApps", "Intranet pages and news from LumApps."),
    "federated_slack": _entry(
        "Slack (live search)",
        "Slack messages searched live in Slack at query time, limited to what the user can read.",
    ),
}

#: Display name and description of every identifier that may be rendered.
CATALOG: Mapping[str, CatalogEntry] = MappingProxyType(_ENTRIES)


def is_internal(name: str) -> bool:
    """Whether ``name`` is an internal-only identifier that the skill never lists."""
    return name in INTERNAL_SOURCES


def lookup(name: str) -> CatalogEntry | None:
    """The catalog entry of ``name``, or None for an identifier the operator does not know."""
    return CATALOG.get(name)


def search_identifier(name: str) -> str:
    """The identifier ``onyx-cli search --source`` takes for source ``name``.

    The name itself, except for a federated connector, which Onyx searches (and reports in
    a result's ``source_type``) under the source it federates: ``federated_slack`` → ``slack``.
    """
    return _SEARCHED_AS.get(name, name)


def fallback_display_name(name: str) -> str:
    """A readable name for an identifier that is not in the catalog (``foo_bar`` → Foo Bar)."""
    words = [word for word in name.replace("-", "_").split("_") if word]
    return " ".join(word[:1].upper() + word[1:] for word in words) or name
