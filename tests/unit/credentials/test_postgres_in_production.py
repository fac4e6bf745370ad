"""On a production Postgres the credential store is one client among many: a row another
client holds locked, a statement that hangs, a server that became read-only after a
failover, or PgBouncer in front of it must each cost one sandbox's call, never the
operator's threads, and be said as the outage it is."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.exc import DBAPIError

from craft_operator.credentials import CredentialStore, KeyRing, generate_key_entry
from craft_operator.credentials import db as db_module
from craft_operator.credentials.db import create_credentials_engine, upgrade
from craft_operator.credentials.errors import DatabaseUnavailableError, UserNotFoundError
from craft_operator.credentials.model import SandboxIdentity
from craft_operator.devtools.onyx_schema import add_user
from craft_operator.devtools.postgres import ThrowawayPostgres
from tests.support.postgres import onyx_database

pytestmark = [pytest.mark.postgres]

ALICE = SandboxIdentity("ns", "alice", "uid-alice")
BOB = SandboxIdentity("ns", "bob", "uid-bob")


@pytest.fixture
def url(postgres_server: ThrowawayPostgres, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("PGOPTIONS", raising=False)
    return onyx_database(postgres_server)


@pytest.fixture
def engine(url: str) -> Iterator[Engine]:
    engine = create_credentials_engine(url)
    upgrade(engine)
    yield engine
    engine.dispose()


def store_on(engine: Engine) -> CredentialStore:
    key = generate_key_entry("k1").get_secret_value()
    return CredentialStore(engine, KeyRing.parse(key), cluster_id="c1")


def session_setting(engine: Engine, name: str) -> str:
    """``name`` as a transaction of ``engine`` sees it."""
    with engine.connect() as connection:
        return str(connection.execute(text(f"SHOW {name}")).scalar_one())


def test_each_transaction_waits_for_a_lock_and_a_statement_for_a_bounded_time(
    engine: Engine,
) -> None:
    assert session_setting(engine, "lock_timeout") == "20s"
    assert session_setting(engine, "statement_timeout") == "30s"


def test_each_transaction_waits_for_its_client_between_statements_for_a_bounded_time(
    engine: Engine,
) -> None:
    """Set for the transaction only (``SET LOCAL``): PgBouncer may hand the server
    connection to another client next."""
    show = text("SHOW idle_in_transaction_session_timeout")
    with engine.connect() as connection:
        assert connection.execute(show).scalar_one() == "10s"
        connection.commit()

        connection.execution_options(isolation_level="AUTOCOMMIT")
        assert connection.execute(show).scalar_one() == "0"


def scaled_bounds(divisor: int) -> dict[str, str]:
    """The operator's own transaction bounds, each divided by ``divisor`` (in ms)."""
    units = {"ms": 1, "s": 1000, "min": 60_000}
    scaled = {}
    for name, value in db_module.POSTGRES_TRANSACTION_BOUNDS.items():
        number, unit = re.findall(r"\d+|[a-z]+", value)
        scaled[name] = f"{int(number) * units[unit] // divisor}ms"
    return scaled


def test_a_replica_gone_silent_mid_transaction_lets_go_of_the_row_it_locked(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica cut off mid-mint (its node lost, a partition) sends nothing more: its
    transaction stayed open on the server with alice's row locked until the server's TCP
    keepalive gave up on it, about two hours, and the new leader could neither renew nor
    revoke alice (her deletion blocked). Bounds scaled down five times, in proportion."""
    monkeypatch.setattr(db_module, "POSTGRES_TRANSACTION_BOUNDS", scaled_bounds(5))
    engine = create_credentials_engine(url)
    upgrade(engine)
    store = store_on(engine)
    store.ensure(ALICE, user_id=add_user(engine), tenant_id="public")
    cut_off = create_credentials_engine(url)
    replica = cut_off.connect()
    replica.begin()
    replica.execute(text("SELECT 1 FROM craft_sandbox_credential WHERE name = 'alice' FOR UPDATE"))
    try:
        assert store.revoke(ALICE)  # waits for the row within its own lock timeout

        with pytest.raises(DBAPIError, match="idle-in-transaction timeout"):
            replica.execute(text("SELECT 1"))
    finally:
        replica.invalidate()
        cut_off.dispose()
        engine.dispose()


def test_bounds_the_session_already_has_are_kept(url: str) -> None:
    given = create_credentials_engine(url + "?options=-c%20lock_timeout%3D5s")

    assert session_setting(given, "lock_timeout") == "5s"
    assert session_setting(given, "statement_timeout") == "30s"  # the one it did not set
    given.dispose()


def test_a_row_another_client_holds_locked_fails_that_call_and_no_other(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica cut off mid-mint, or an open psql transaction: without a lock timeout each
    retry of alice's mint held a database thread for as long, until none was left."""
    monkeypatch.setitem(db_module.POSTGRES_TRANSACTION_BOUNDS, "lock_timeout", "500ms")
    engine = create_credentials_engine(url)
    upgrade(engine)
    user = add_user(engine)
    store = store_on(engine)
    first = store.ensure(ALICE, user_id=user, tenant_id="public")
    holder = create_credentials_engine(url).connect()
    holder.begin()
    holder.execute(text("SELECT 1 FROM craft_sandbox_credential WHERE name = 'alice' FOR UPDATE"))
    try:
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailableError, match="lock timeout"):
            store.ensure(ALICE, user_id=user, tenant_id="public", rejected_pat_id=first.pat_id)
        assert time.monotonic() - started < 5

        assert store.ensure(BOB, user_id=user, tenant_id="public").minted
    finally:
        holder.rollback()
        holder.close()
    renewed = store.ensure(ALICE, user_id=user, tenant_id="public", rejected_pat_id=first.pat_id)
    assert renewed.pat_id != first.pat_id  # once the lock is let go, the renewal goes ahead
    engine.dispose()


def test_a_table_lock_held_elsewhere_fails_a_read_within_the_lock_timeout(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An Onyx migration's ALTER TABLE "user", a VACUUM FULL: the read that starts every
    ensure waited for it as long as it took, holding a database thread."""
    monkeypatch.setitem(db_module.POSTGRES_TRANSACTION_BOUNDS, "lock_timeout", "500ms")
    engine = create_credentials_engine(url)
    upgrade(engine)
    user = add_user(engine)
    store = store_on(engine)
    store.ensure(ALICE, user_id=user, tenant_id="public")
    holder = create_credentials_engine(url).connect()
    holder.begin()
    holder.execute(text('LOCK TABLE "user" IN ACCESS EXCLUSIVE MODE'))
    try:
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailableError, match="lock timeout"):
            store.ensure(ALICE, user_id=user, tenant_id="public")
        assert time.monotonic() - started < 5
    finally:
        holder.rollback()
        holder.close()
    engine.dispose()


def test_an_autocommit_statement_is_sent_alone(engine: Engine) -> None:
    """A bound set for the transaction would end with its own statement there: only one
    more round trip."""
    statements: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    with engine.execution_options(isolation_level="AUTOCOMMIT").connect() as connection:
        connection.execute(text("SELECT 1")).scalar_one()

    assert statements == ["SELECT 1"]


def test_a_migration_waits_for_another_operators_without_the_bounds(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(db_module.POSTGRES_TRANSACTION_BOUNDS, "lock_timeout", "200ms")
    engine = create_credentials_engine(url)
    other = create_credentials_engine(url).connect()
    other.begin()
    other.execute(
        text("SELECT pg_advisory_xact_lock(:key)"), {"key": db_module._MIGRATION_LOCK_KEY}
    )
    threading.Timer(1.0, other.rollback).start()  # the other operator's migration ends

    result = upgrade(engine)

    assert result.revision_after == db_module.head_revision()
    other.close()
    engine.dispose()


def test_a_server_become_read_only_is_unavailable_and_its_connections_replaced(
    engine: Engine,
) -> None:
    """A failover's demoted primary still takes connections and answers SELECT 1: the
    pool's check passes, and only the write says what happened."""
    user = add_user(engine)
    store = store_on(engine)
    with engine.connect() as connection:  # the pool's one connection turns read-only
        connection.execute(text("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"))
        connection.commit()

    with pytest.raises(DatabaseUnavailableError, match="read-only transaction"):
        store.ensure(ALICE, user_id=user, tenant_id="public")

    assert store.ensure(ALICE, user_id=user, tenant_id="public").minted  # on a new connection


def test_no_statement_is_prepared_on_the_server_so_pgbouncer_can_pool_transactions(
    engine: Engine,
) -> None:
    """psycopg prepares a statement after five runs; behind PgBouncer's transaction pooling
    the next transaction may run on another server connection, which does not have it."""
    user = add_user(engine)
    store = store_on(engine)
    for _ in range(10):
        store.ensure(ALICE, user_id=user, tenant_id="public")
        store.show("ns", "alice")

    with engine.connect() as connection:
        for _ in range(10):
            connection.execute(text("SELECT count(*) FROM craft_sandbox_credential")).scalar_one()
        prepared = connection.execute(text("SELECT count(*) FROM pg_prepared_statements"))
        assert prepared.scalar_one() == 0


def test_an_unknown_user_id_is_still_not_an_outage(engine: Engine) -> None:
    with pytest.raises(UserNotFoundError):
        store_on(engine).ensure(ALICE, user_id=uuid.uuid4(), tenant_id="public")
