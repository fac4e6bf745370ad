"""A database URL as logs, doctor and ``craft-operator db`` show it: every secret masked,
in the user info or in the query, the rest as written."""

from __future__ import annotations

import pytest

from craft_operator.credentials.db import describe_url

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql+psycopg://u:hunter2@h/db", "postgresql+psycopg://u:***@h/db"),
        (
            "postgresql+psycopg://u@h/db?password=hunter2",
            "postgresql+psycopg://u@h/db?password=***",
        ),
        (
            "postgresql+psycopg://u@h:5432/db?sslmode=verify-full&sslkey=/keys/client.key"
            "&sslpassword=hunter2",
            "postgresql+psycopg://u@h:5432/db?sslkey=***&sslmode=verify-full&sslpassword=***",
        ),
        (
            "postgresql+psycopg://u@h/db?Client_Secret=s1&auth_token=t1&PASSWORD=p1",
            "postgresql+psycopg://u@h/db?Client_Secret=***&PASSWORD=***&auth_token=***",
        ),
        (
            "postgresql+psycopg://u@h/db?password=a&password=b&application_name=craft",
            "postgresql+psycopg://u@h/db?application_name=craft&password=***&password=***",
        ),
    ],
    ids=["user-info", "query-password", "ssl-key-and-password", "any-secret-name", "repeated"],
)
def test_every_secret_in_a_database_url_is_masked(url: str, shown: str) -> None:
    assert describe_url(url) == shown
    assert "hunter2" not in describe_url(url)


def test_a_url_without_secrets_is_shown_as_written() -> None:
    assert describe_url("sqlite:////var/lib/craft/credentials.db") == (
        "sqlite:////var/lib/craft/credentials.db"
    )
    assert describe_url("postgresql+psycopg://u@h/db?connect_timeout=5&sslmode=require") == (
        "postgresql+psycopg://u@h/db?connect_timeout=5&sslmode=require"
    )


def test_a_host_that_holds_a_passwords_tail_is_not_shown() -> None:
    """An @ in the password not percent-encoded: what follows it parses as the host."""
    shown = describe_url("postgresql+psycopg://craft:pa@ssSECRET@127.0.0.1:5432/onyx")
    assert "SECRET" not in shown
    assert "not a host name" in shown
