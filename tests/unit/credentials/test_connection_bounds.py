"""Postgres connections of the operator are bounded: a connect timeout and TCP keepalives,
unless the URL (or libpq's environment) says otherwise; a database that accepts connections
and never answers fails the connection instead of hanging. No server-side option is sent
(PgBouncer refuses an ``options`` startup parameter it is not told to ignore)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, event, make_url, text

from craft_operator.credentials import db
from craft_operator.credentials.db import (
    POSTGRES_CONNECT_DEFAULTS,
    create_credentials_engine,
    postgres_connect_args,
    translated_errors,
)
from craft_operator.credentials.errors import DatabaseUnavailableError
from craft_operator.devtools.postgres import ThrowawayPostgres
from tests.support.silent_server import SilentServer

URL = "postgresql+psycopg://craft:secret@127.0.0.1:5432/onyx"


class RefusedError(Exception):
    """Raised instead of connecting, once the driver's parameters are seen."""


def driver_parameters(url: str) -> dict[str, Any]:
    """The keyword arguments the engine made from ``url`` hands to ``psycopg.connect``."""
    engine = create_credentials_engine(url)
    seen: dict[str, Any] = {}

    @event.listens_for(engine, "do_connect")
    def _capture(dialect: Any, record: Any, cargs: Any, cparams: dict[str, Any]) -> None:
        seen.update(cparams)
        raise RefusedError

    with pytest.raises(RefusedError):
        engine.connect()
    engine.dispose()
    return seen


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    """A database that accepts connections and never answers."""
    with SilentServer() as server:
        yield server


def test_a_postgres_connection_has_a_connect_timeout_and_keepalives_and_no_startup_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)

    parameters = driver_parameters(URL)

    assert parameters["connect_timeout"] == 10
    assert (
        parameters["keepalives"],
        parameters["keepalives_idle"],
        parameters["keepalives_interval"],
        parameters["keepalives_count"],
    ) == (1, 30, 10, 3)
    # Under a query already sent keepalives do not probe: the kernel's retransmissions
    # (about 15 minutes) are cut to a minute.
    assert parameters["tcp_user_timeout"] == 60_000
    assert "options" not in parameters


def test_parameters_the_url_sets_win_over_the_operators_defaults() -> None:
    parameters = driver_parameters(
        URL + "?connect_timeout=3&keepalives_idle=300&options=-c%20search_path%3Dcraft"
    )

    assert parameters["connect_timeout"] == "3"
    assert parameters["keepalives_idle"] == "300"
    assert parameters["keepalives_interval"] == 10  # the ones it leaves are still set
    assert parameters["options"] == "-c search_path=craft"


def test_libpq_environment_variables_count_as_set() -> None:
    parameters = postgres_connect_args(make_url(URL), {"PGCONNECT_TIMEOUT": "20"})

    assert "connect_timeout" not in parameters  # libpq reads PGCONNECT_TIMEOUT
    assert parameters["keepalives"] == 1


def test_a_database_that_accepts_and_never_answers_fails_to_connect_within_the_timeout(
    silent: SilentServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    # psycopg waits at least 2 s: the operator's 10 s shortened for the test.
    monkeypatch.setattr(
        db, "POSTGRES_CONNECT_DEFAULTS", {**POSTGRES_CONNECT_DEFAULTS} | {"connect_timeout": 2}
    )
    engine = create_credentials_engine(silent.postgres_url())
    started = time.monotonic()

    with (
        pytest.raises(DatabaseUnavailableError, match="timeout") as caught,
        translated_errors("connecting"),
        engine.connect(),
    ):
        pass

    assert time.monotonic() - started < 6
    assert silent.connections == 1
    assert "secret" not in str(caught.value)
    engine.dispose()


def _setting(engine: Engine, name: str) -> str:
    with engine.connect() as connection:
        return str(connection.execute(text(f"SHOW {name}")).scalar_one())


@pytest.mark.postgres
def test_a_statement_timeout_the_url_gives_is_in_force_on_the_operators_connections(
    postgres_server: ThrowawayPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGOPTIONS", raising=False)
    url = postgres_server.create_database()
    engine = create_credentials_engine(url)
    given = create_credentials_engine(url + "?options=-c%20statement_timeout%3D5s")

    assert _setting(engine, "statement_timeout") == "30s"  # the operator's own, per transaction
    assert _setting(given, "statement_timeout") == "5s"
    engine.dispose()
    given.dispose()


@pytest.mark.postgres
def test_connections_postgres_dropped_under_the_pool_fail_no_call(
    postgres_server: ThrowawayPostgres,
) -> None:
    """A failover or a restart of Postgres drops the pooled connections: each is replaced
    before use, not found broken by the next call (DatabaseUnavailable on a sandbox)."""
    url = postgres_server.create_database()
    engine = create_credentials_engine(url)
    held = [engine.connect() for _ in range(3)]  # three pooled connections
    for connection in held:
        connection.execute(text("SELECT 1"))
        connection.close()
    admin = create_credentials_engine(url)
    with admin.connect() as connection:
        connection.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )
        connection.commit()

    for _ in range(3):
        with translated_errors("reading"), engine.connect() as connection:
            assert connection.execute(text("SELECT 1")).scalar_one() == 1
    engine.dispose()
    admin.dispose()
