"""Driver errors leave the credential store as its typed errors, with the driver's first
line only: Postgres's DETAIL line may quote a row (a PAT's hash and sealed token)."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from craft_operator.credentials import (
    CredentialsError,
    DatabaseUnavailableError,
    SchemaMissingError,
)
from craft_operator.credentials.db import translated_errors

pytestmark = pytest.mark.unit

ROW = "DETAIL:  Failing row contains (7, sha256$canaryhash, v1:canary-sealed-token)."


class DriverError(Exception):
    """A psycopg-like error: a message of several lines and a SQLSTATE."""

    def __init__(self, message: str, sqlstate: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


def raised(error: Exception) -> CredentialsError:
    with pytest.raises(CredentialsError) as caught, translated_errors("minting the PAT of x"):
        raise error
    return caught.value


def test_an_integrity_error_left_unhandled_is_typed_and_never_quotes_the_row() -> None:
    orig = DriverError(f'null value in column "hashed_token" violates not-null\n{ROW}', "23502")
    error = raised(IntegrityError("INSERT ...", {"hashed_token": "x"}, orig))

    assert "violates not-null" in str(error)
    assert "canary" not in str(error)
    assert error.__cause__ is None


def test_a_conflict_left_unhandled_is_a_passing_unavailability() -> None:
    orig = DriverError(f"could not serialize access due to concurrent update\n{ROW}", "40001")
    error = raised(OperationalError("UPDATE ...", {}, orig))

    assert isinstance(error, DatabaseUnavailableError)
    assert "conflicted" in str(error)
    assert "canary" not in str(error)


def test_a_column_postgres_does_not_know_is_a_schema_behind() -> None:
    orig = DriverError(
        "column craft_sandbox_credential.cluster_id does not exist\nLINE 1: x", "42703"
    )
    error = raised(ProgrammingError("SELECT ...", {}, orig))

    assert isinstance(error, SchemaMissingError)
    assert str(error) == (
        "minting the PAT of x: a column is missing (column craft_sandbox_credential.cluster_id "
        "does not exist); run: craft-operator db upgrade"
    )


@pytest.mark.parametrize(
    "message",
    [
        "no such column: craft_sandbox_credential.cluster_id",
        "table craft_sandbox_credential has no column named sandbox_created_at",
    ],
)
def test_a_column_sqlite_does_not_know_is_a_schema_behind_not_an_unavailable_database(
    message: str,
) -> None:
    error = raised(OperationalError("SELECT ...", {}, Exception(message)))

    assert isinstance(error, SchemaMissingError)
    assert f"a column is missing ({message}); run: craft-operator db upgrade" in str(error)


@pytest.mark.parametrize(
    ("message", "sqlstate"),
    [
        ("column personal_access_token.token_display does not exist", "42703"),
        ('column "scopes" of relation "personal_access_token" does not exist', "42703"),
        ("column user.is_active does not exist", "42703"),
        ('relation "tenant_acme.personal_access_token" does not exist', "42P01"),
        ("no such column: personal_access_token.scopes", ""),
        ("table personal_access_token has no column named scopes", ""),
        ("no such table: main.user", ""),
    ],
)
def test_what_onyxs_tables_lack_is_never_said_to_be_fixed_by_db_upgrade(
    message: str, sqlstate: str
) -> None:
    orig = DriverError(message, sqlstate) if sqlstate else Exception(message)
    error = raised(ProgrammingError("SELECT ...", {}, orig))

    assert isinstance(error, SchemaMissingError)
    assert "of Onyx's is missing" in str(error)
    assert "run: craft-operator db upgrade" not in str(error)


@pytest.mark.parametrize(
    ("message", "sqlstate"),
    [
        ('column "user_id" of relation "craft_sandbox_credential" does not exist', "42703"),
        ('relation "craft_library_sync" does not exist', "42P01"),
        ("no such table: craft_sandbox_credential", ""),
    ],
)
def test_what_the_operators_own_tables_lack_is_for_db_upgrade(message: str, sqlstate: str) -> None:
    orig = DriverError(message, sqlstate) if sqlstate else Exception(message)
    error = raised(ProgrammingError("SELECT ...", {}, orig))

    assert isinstance(error, SchemaMissingError)
    assert str(error).endswith("; run: craft-operator db upgrade")
