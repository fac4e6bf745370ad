"""A throwaway PostgreSQL server for the tests, and databases shaped like Onyx's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from craft_operator.credentials.db import create_credentials_engine
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
