"""A throwaway PostgreSQL server for the tests, and databases shaped like Onyx's."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text

from craft_operator.credentials.db import UNBOUNDED_OPTION, create_credentials_engine
from craft_operator.devtools.onyx_schema import create_onyx_tables
from craft_operator.devtools.postgres import ThrowawayPostgres, find_bindir


def throwaway_postgres() -> Iterator[ThrowawayPostgres]:
    """Start a server (as root, it runs as ``postgres``), or skip where there are no binaries."""
    if find_bindir() is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on this machine")
    with ThrowawayPostgres() as server:
        yield server


def onyx_database(server: ThrowawayPostgres) -> str:
    """A fresh database with Onyx's ``user`` and ``personal_access_token`` tables; its URL."""
    url = server.create_database()
    engine = create_credentials_engine(url)
    try:
        create_onyx_tables(engine)
    finally:
        engine.dispose()
    return url


@contextlib.contextmanager
def long_reader(url: str) -> Iterator[None]:
    """A client reading craft_sandbox_credential in an open transaction (a pg_dump)."""
    engine = create_credentials_engine(url)
    try:
        with (
            engine.connect().execution_options(**{UNBOUNDED_OPTION: True}) as reader,
            reader.begin(),
        ):
            reader.execute(text("SELECT count(*) FROM craft_sandbox_credential"))
            yield
    finally:
        engine.dispose()


def wait_until_a_session_waits_for_a_lock(engine: Engine) -> None:
    """Return once some session of the database is queued for a lock."""
    query = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock'"
    )
    for _ in range(600):
        with engine.connect() as connection:
            if connection.execute(query).scalar_one():
                return
        time.sleep(0.05)
    raise AssertionError("no session waited for a lock")
