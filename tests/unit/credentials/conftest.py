"""Fixtures of the credential tests: both database modes, a key ring, a settable clock.

``database`` is parametrised over the embedded SQLite mode and Onyx mode on a throwaway
PostgreSQL server (tests marked ``postgres``). In Onyx mode the fixture creates Onyx's
``user`` and ``personal_access_token`` tables the way Onyx's schema has them; the operator
only migrates its own table.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, or_, select

from craft_operator.credentials import CredentialStore, KeyRing, generate_key_entry
from craft_operator.credentials.db import create_credentials_engine, upgrade
from craft_operator.credentials.tables import PersonalAccessToken
from craft_operator.devtools.onyx_schema import add_user
from craft_operator.devtools.postgres import ThrowawayPostgres
from tests.support.postgres import onyx_database as onyx_database_url


class Clock:
    """A clock the test moves by hand; starts at the real current time."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


@dataclass
class Database:
    """One freshly migrated credentials database."""

    mode: str
    url: str
    engine: Engine

    @property
    def onyx_mode(self) -> bool:
        return self.mode == "postgres"

    def new_user(self, *, active: bool = True) -> uuid.UUID:
        """An Onyx user id (inserted into ``user`` in Onyx mode; any UUID on SQLite)."""
        if self.onyx_mode:
            return add_user(self.engine, active=active)
        return uuid.uuid4()

    def live_pats(self, *, user_id: uuid.UUID | None = None, at: datetime | None = None) -> int:
        """How many PATs would authenticate at ``at`` (default: now), as Onyx's server
        decides: by ``expires_at`` alone (it never reads ``is_revoked``)."""
        moment = at or datetime.now(UTC)
        pat = PersonalAccessToken.__table__
        query = (
            select(func.count())
            .select_from(pat)
            .where(or_(pat.c.expires_at.is_(None), pat.c.expires_at > moment))
        )
        if user_id is not None:
            query = query.where(pat.c.user_id == user_id)
        with self.engine.connect() as connection:
            return int(connection.execute(query).scalar_one())


def _postgres_database(server: ThrowawayPostgres) -> str:
    return onyx_database_url(server)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A migrated credentials database in each mode."""
    if request.param == "postgres":
        server: ThrowawayPostgres = request.getfixturevalue("postgres_server")
        url = _postgres_database(server)
    else:
        url = f"sqlite:///{tmp_path / 'credentials.db'}"
    engine = create_credentials_engine(url)
    upgrade(engine)
    yield Database(request.param, url, engine)
    engine.dispose()


@pytest.fixture
def onyx_database(postgres_server: ThrowawayPostgres) -> Iterator[Database]:
    """A Postgres database with Onyx's tables, not yet migrated by the operator."""
    url = _postgres_database(postgres_server)
    engine = create_credentials_engine(url)
    yield Database("postgres", url, engine)
    engine.dispose()


@pytest.fixture
def key_entry() -> str:
    """One key ring entry, id ``k1``."""
    return generate_key_entry("k1").get_secret_value()


@pytest.fixture
def keyring(key_entry: str) -> KeyRing:
    """A key ring with the single key ``k1``."""
    return KeyRing.parse(key_entry)


@pytest.fixture
def clock() -> Clock:
    """A clock the test can move."""
    return Clock()


@pytest.fixture
def make_store(
    database: Database, keyring: KeyRing, clock: Clock
) -> Iterator[Callable[..., CredentialStore]]:
    """Build stores over the test database (several may share it, like several replicas)."""
    stores: list[CredentialStore] = []

    def make(ring: KeyRing | None = None, **kwargs: object) -> CredentialStore:
        store = CredentialStore(database.engine, ring or keyring, clock=clock, **kwargs)  # type: ignore[arg-type]
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


@pytest.fixture
def store(make_store: Callable[..., CredentialStore]) -> CredentialStore:
    """A credential store over the test database with the ``k1`` key ring."""
    return make_store()
