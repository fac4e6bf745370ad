"""An object the API server already holds is read as the CRD of its time admitted it.

The CRDs before 2026-11-27 (fc0cd74) admitted durations with a part of any length, within
Go's range (``idleTimeout: 100000h``), and URLs with any character but RE2's white space
(``https://onyx.bücher.example``). The CRDs refuse them now, and so do the models for a new
object; the operator still reads a stored one, which an older operator ran: an upgrade must
not fail a running sandbox (InvalidSpec) or leave a policy unread.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from craft_operator.api.models import CraftSandbox
from craft_operator.api.parse import InvalidSandboxError, parse_sandbox
from craft_operator.api.status_codec import dump_status
from craft_operator.client.objects import to_model
from tests.support.crd_validation import validate_create
from tests.unit.api.samples import USER_ID, sandbox

pytestmark = pytest.mark.unit

#: Idle timeouts the CRDs before 2026-11-27 admitted, and what they are.
LONG_IDLE_TIMEOUTS = {
    "100000h": timedelta(hours=100000),
    "1000000m": timedelta(minutes=1000000),
    "1000000000s": timedelta(seconds=1000000000),
    "2562047h": timedelta(hours=2562047),
    "0000000000000000000000000001h": timedelta(hours=1),
}
#: Server URLs they admitted: nothing but RE2's \s ([\t\n\f\r ]) was refused.
OLD_SERVER_URLS = ["https://onyx.bücher.example", "https://onyx.example.com/a\u00a0b"]


def with_spec(**fields: Any) -> dict[str, Any]:
    """A stored CraftSandbox with extra spec fields."""
    return sandbox({"user": {"id": USER_ID}, **fields})


@pytest.mark.parametrize(("text", "value"), LONG_IDLE_TIMEOUTS.items())
def test_a_stored_idle_timeout_an_older_crd_admitted_is_read(text: str, value: timedelta) -> None:
    assert parse_sandbox(with_spec(idleTimeout=text)).spec.idle_timeout == value
    assert to_model(with_spec(idleTimeout=text)).spec.idle_timeout == value


@pytest.mark.parametrize("text", LONG_IDLE_TIMEOUTS)
def test_the_same_idle_timeout_in_a_new_object_is_refused_by_the_crd_and_the_model(
    text: str,
) -> None:
    assert validate_create(with_spec(idleTimeout=text)) != []
    with pytest.raises(ValidationError, match="is not a duration"):
        CraftSandbox.model_validate(with_spec(idleTimeout=text))


@pytest.mark.parametrize("text", ["2562048h", "9223372036854775808ns", "153722868m"])
def test_a_stored_duration_beyond_go_s_range_is_still_invalid(text: str) -> None:
    # No CRD admitted it: CEL's duration() fails beyond about 2562047h.
    with pytest.raises(InvalidSandboxError, match="longer than the longest duration Kubernetes"):
        parse_sandbox(with_spec(idleTimeout=text))


@pytest.mark.parametrize("text", ["30s", "1d", "-1h", "1 h"])
def test_a_stored_duration_no_crd_admitted_is_still_invalid(text: str) -> None:
    with pytest.raises(InvalidSandboxError, match=r"spec\.idleTimeout"):
        parse_sandbox(with_spec(idleTimeout=text))


def test_a_stored_credentials_lifetime_keeps_its_range() -> None:
    assert parse_sandbox(
        with_spec(credentials={"lifetime": "000000720h"})
    ).spec.credentials.lifetime == timedelta(hours=720)
    with pytest.raises(InvalidSandboxError, match="between 1h and 8760h"):
        parse_sandbox(with_spec(credentials={"lifetime": "100000h"}))


@pytest.mark.parametrize("url", OLD_SERVER_URLS)
def test_a_stored_server_url_an_older_crd_admitted_is_read(url: str) -> None:
    assert parse_sandbox(with_spec(serverURL=url)).spec.server_url == url


@pytest.mark.parametrize("url", OLD_SERVER_URLS)
def test_the_same_server_url_in_a_new_object_is_refused_by_the_crd_and_the_model(
    url: str,
) -> None:
    assert validate_create(with_spec(serverURL=url)) != []
    with pytest.raises(ValidationError, match="serverURL must be an http:// or https:// URL"):
        CraftSandbox.model_validate(with_spec(serverURL=url))


@pytest.mark.parametrize(
    "url", ["onyx.example.com", "https://onyx .example.com", "https://onyx.example.com/a\tb"]
)
def test_a_stored_server_url_no_crd_admitted_is_still_invalid(url: str) -> None:
    with pytest.raises(InvalidSandboxError, match="serverURL must be an http:// or https://"):
        parse_sandbox(with_spec(serverURL=url))


#: Stored status fields the CRD admits (its ``date-time`` format takes an offset of +24:00
#: and the year 0000) that the model cannot read.
UNREADABLE_STATUSES = [
    {"sleepingSince": "2024-01-01T00:00:00+24:00"},
    {"wokeAt": "0000-01-01T00:00:00Z"},
    {"credentials": {"expiresAt": "0000-01-01T00:00:00Z"}},
    {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Ready",
                "lastTransitionTime": "0000-01-01T00:00:00Z",
            }
        ]
    },
]


@pytest.mark.parametrize("status", UNREADABLE_STATUSES)
def test_a_stored_status_the_model_cannot_read_does_not_make_the_sandbox_invalid(
    status: dict[str, Any],
) -> None:
    stored = {**with_spec(), "status": {"phase": "Ready", "podName": "alice", **status}}
    for read in (parse_sandbox(stored), to_model(stored)):
        assert read.spec.user.id == USER_ID
        assert dump_status(read.status) == {"phase": "Ready", "podName": "alice"}


def test_a_stored_spec_the_model_cannot_read_is_still_invalid_beside_any_status() -> None:
    stored = {**with_spec(idleTimeout="30s"), "status": {"sleepingSince": "not a time"}}
    with pytest.raises(InvalidSandboxError, match=r"^spec\.idleTimeout: [^;]*$"):
        parse_sandbox(stored)
