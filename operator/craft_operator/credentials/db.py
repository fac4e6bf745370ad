"""Database plumbing of the credential store: engines, schema checks, migrations, errors.

Two modes, chosen by the URL's backend:

* embedded (SQLite): the operator creates ``personal_access_token`` itself (without the
  foreign key to ``user``, which does not exist there) and migrates its own table;
* Onyx (Postgres): Onyx owns ``personal_access_token`` and ``user``; the operator checks
  they exist, never creates or alters them, and migrates only its own table.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError as AlembicCommandError
from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    IntegrityError,
    InterfaceError,
    NoSuchTableError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.pool import ConnectionPoolEntry
from sqlalchemy.schema import CreateIndex, CreateTable

from craft_operator.config import check_database_url_text
from craft_operator.credentials.errors import (
    CredentialsError,
    DatabaseUnavailableError,
    SchemaMissingError,
    UserNotFoundError,
)
from craft_operator.credentials.tables import CREDENTIAL_TABLE, PAT_TABLE, USER_TABLE, OnyxBase

log = logging.getLogger(__name__)

#: Alembic's bookkeeping table for the operator's migrations; Onyx uses ``alembic_version``.
VERSION_TABLE = "craft_operator_alembic_version"
#: Execution option that makes a SQLite transaction take the write lock at BEGIN.
WRITE_OPTION = "craft_write"
_MIGRATIONS = "craft_operator:migrations"
#: Key of the Postgres advisory lock that serialises migrations of several operators.
_MIGRATION_LOCK_KEY = 0x6372616674  # "craft"
_SQLITE_BUSY_TIMEOUT_S = 30.0
#: libpq parameters of the operator's Postgres connections, unless the URL sets them: a
#: database that accepts TCP and never answers fails the connection in 10 s, and a peer
#: that vanished under an idle or waiting connection is noticed in about a minute. Under a
#: query already sent, keepalives do not probe (data is unacknowledged): the kernel would
#: retransmit for about 15 minutes (tcp_retries2), so ``tcp_user_timeout`` (ms) gives up
#: after a minute of unacknowledged data (a failover whose old address drops packets).
POSTGRES_CONNECT_DEFAULTS: Mapping[str, int] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
    "tcp_user_timeout": 60_000,
}
#: Bounds on each of the operator's Postgres transactions, unless the session already has
#: its own (the URL's ``options``, ``PGOPTIONS``, the role's or the database's settings): a
#: row another client holds locked (a replica cut off mid-mint, an open ``psql`` session)
#: or a statement that hangs would otherwise hold a database thread for as long, and the
#: threads are shared by every sandbox. ``lock_timeout`` and ``statement_timeout`` end
#: well within a call's own bound (60 s). Neither ends a transaction whose client went
#: silent between statements (its node lost, a partition): the server keeps it, and its row
#: locks, until its own TCP keepalive gives up on the peer (about two hours by default),
#: and no other replica can mint, renew or revoke that sandbox meanwhile:
#: ``idle_in_transaction_session_timeout`` ends such a session. 10 s: under
#: ``lock_timeout``, so a call that waits for the row its silent holder keeps gets it
#: within its own wait, instead of failing and being retried later;
#: and far above the operator's own pauses inside a transaction (a few milliseconds of
#: local work between statements: no network call, no sleep, no prompt).
#: ``SET LOCAL`` (here ``set_config(..., true)``) lasts for the transaction, so PgBouncer's
#: transaction pooling passes it on, unlike a startup parameter. Migrations have bounds of
#: their own: see :data:`MIGRATION_LOCK_TIMEOUT_MS`.
POSTGRES_TRANSACTION_BOUNDS: Mapping[str, str] = {
    "lock_timeout": "20s",
    "statement_timeout": "30s",
    "idle_in_transaction_session_timeout": "10s",
}
#: Execution option that leaves a Postgres transaction without the bounds (a migration
#: waits for another operator's, under an advisory lock).
UNBOUNDED_OPTION = "craft_unbounded"
#: How long a migration waits for a lock once it holds the advisory lock (ms), unless the
#: session's own ``lock_timeout`` is shorter. Its ``ALTER TABLE`` waits in Postgres's lock
#: queue behind any reader of the table (a ``pg_dump``, an open ``psql`` transaction), and
#: every later statement on the table queues behind the ``ALTER``: the other replicas' and
#: clusters' calls would fail with their own lock timeout for as long as the reader lasts.
#: Well under :data:`POSTGRES_TRANSACTION_BOUNDS`' 20 s, so that the calls queued behind a
#: migration that gives up still get their rows; the migration is retried (the operator:
#: with its next call; ``craft-operator db upgrade``: run again).
MIGRATION_LOCK_TIMEOUT_MS = 5000
_MIGRATION_BOUNDS = text(
    "SELECT CASE WHEN setting::bigint = 0 OR setting::bigint > :limit "
    "THEN set_config('lock_timeout', :value, true) END "
    "FROM pg_settings WHERE name = 'lock_timeout'"
).bindparams(limit=MIGRATION_LOCK_TIMEOUT_MS, value=f"{MIGRATION_LOCK_TIMEOUT_MS}ms")
#: SQLSTATE of a lock not granted within ``lock_timeout``.
_LOCK_NOT_AVAILABLE_SQLSTATE = "55P03"
#: SQLSTATE of a write in a read-only transaction: a replica after a failover, or a
#: demoted primary that still takes connections.
_READ_ONLY_SQLSTATE = "25006"
#: libpq's environment variables that, like the URL, set a parameter explicitly.
_LIBPQ_ENVIRONMENT = {"connect_timeout": "PGCONNECT_TIMEOUT"}


def is_onyx_mode(engine: Engine | Connection) -> bool:
    """True when the database is Onyx's Postgres (anything but the embedded SQLite)."""
    return engine.dialect.name != "sqlite"


def check_multi_tenant(engine: Engine | Connection, multi_tenant: bool) -> None:
    """Raise :class:`CredentialsError` if multi-tenant Onyx is asked of the embedded SQLite
    database, which has no tenant schemas."""
    if multi_tenant and not is_onyx_mode(engine):
        raise CredentialsError(
            "CRAFT_ONYX_MULTI_TENANT is for multi-tenant Onyx's Postgres: the embedded SQLite "
            "database (CRAFT_DATABASE_URL) has no tenant schemas"
        )


def create_credentials_engine(url: str | URL, *, echo: bool = False) -> Engine:
    """An engine for the credentials database.

    Statement parameters are hidden from logs and errors (they include token hashes and
    ciphertexts). On SQLite, transactions marked with ``craft_write`` start with
    ``BEGIN IMMEDIATE`` so that writers queue on the database lock instead of failing, and
    file databases use WAL so that readers do not wait for writers; a locked database is
    waited for at most ``_SQLITE_BUSY_TIMEOUT_S``. Postgres connections time out and probe
    the peer (see :func:`postgres_connect_args`), prepare no statements on the server (so
    that PgBouncer's transaction pooling works), and each transaction waits for a lock or
    a statement, or for its client between statements, at most
    :data:`POSTGRES_TRANSACTION_BOUNDS`.
    """
    parsed = _parse_database_url(url)
    if parsed.get_backend_name() == "postgresql":
        try:
            engine = create_engine(
                parsed,
                hide_parameters=True,
                echo=echo,
                # A pooled connection a failover or a restart of Postgres dropped is
                # replaced before use, not failed on the next call (one per connection).
                pool_pre_ping=True,
                connect_args={
                    **postgres_connect_args(parsed),
                    # psycopg prepares a statement on the server after five runs; behind
                    # PgBouncer's transaction pooling the next transaction may be on another
                    # server connection ("prepared statement _pg3_2 does not exist").
                    "prepare_threshold": None,
                },
            )
        except ImportError as exc:
            raise CredentialsError(
                f"the PostgreSQL driver is not installed ({exc.name}); install "
                "craft-operator[postgres]"
            ) from None
        _bound_postgres_transactions(engine)
        return engine
    return _create_sqlite_engine(parsed, echo=echo)


def postgres_bounds_statement() -> str:
    """The statement that opens each bounded transaction: ``SET LOCAL`` of each of
    :data:`POSTGRES_TRANSACTION_BOUNDS` the session does not set itself."""
    return "SELECT " + ", ".join(
        f"CASE WHEN current_setting('{name}') = '0' THEN set_config('{name}', '{value}', true) END"
        for name, value in POSTGRES_TRANSACTION_BOUNDS.items()
    )


def _bound_postgres_transactions(engine: Engine) -> None:
    """Give each transaction :data:`POSTGRES_TRANSACTION_BOUNDS` the session does not set
    itself, and treat a read-only server as a disconnect: the pooled connections to it are
    replaced (a failover's new primary may be behind the same address)."""
    statement = postgres_bounds_statement()

    @event.listens_for(engine, "begin")
    def _bounded(connection: Connection) -> None:
        options = connection.get_execution_options()
        # In autocommit a SET LOCAL would end with its own statement: no use, one more trip.
        if options.get(UNBOUNDED_OPTION) or options.get("isolation_level") == "AUTOCOMMIT":
            return
        connection.exec_driver_sql(statement)

    @event.listens_for(engine, "handle_error")
    def _read_only_is_gone(context: Any) -> None:
        original = context.original_exception
        if getattr(original, "sqlstate", None) == _READ_ONLY_SQLSTATE:
            context.is_disconnect = True


#: What a host name or address may hold, as parsed (IPv6 and a zone included; several
#: hosts, comma separated): :func:`describe_url` hides anything else, most likely a
#: password's tail (an "@" not encoded).
_HOST = re.compile(r"^[A-Za-z0-9._:%,\[\]-]+$")


def _parse_database_url(url: str | URL) -> URL:
    """The URL, checked as the settings check it (SQLite or PostgreSQL, and its parts where
    SQLAlchemy finds them: it drops what would show a password's unencoded @), with psycopg
    3 as PostgreSQL's driver."""
    text = url if isinstance(url, str) else url.render_as_string(hide_password=False)
    try:
        check_database_url_text(text)
    except ValueError as exc:
        raise CredentialsError(f"CRAFT_DATABASE_URL {exc}") from None
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        raise CredentialsError(
            "CRAFT_DATABASE_URL is not a database URL; use sqlite:///path or "
            "postgresql+psycopg://user:password@host:port/db (a password's @ and % "
            "percent-encoded, as %40 and %25)"
        ) from None
    if parsed.drivername == "postgresql":
        # The operator ships psycopg 3; SQLAlchemy's default driver would be psycopg2.
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def postgres_connect_args(url: URL, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The client-side connection parameters that keep a silent Postgres from holding a
    thread forever: a connect timeout and TCP keepalives.

    A parameter that the URL's query (``?connect_timeout=30``) or libpq's environment
    (``PGCONNECT_TIMEOUT``) sets is left as given. No statement timeout is sent here: it
    would go as the ``options`` startup parameter, which PgBouncer refuses unless configured
    to ignore it; each transaction sets its own instead (:data:`POSTGRES_TRANSACTION_BOUNDS`),
    unless the URL sets one (``?options=-c%20statement_timeout%3D10s``).
    """
    environ = os.environ if environ is None else environ

    def given(name: str) -> bool:
        variable = _LIBPQ_ENVIRONMENT.get(name)
        return name in url.query or (variable is not None and bool(environ.get(variable)))

    return {name: value for name, value in POSTGRES_CONNECT_DEFAULTS.items() if not given(name)}


def sqlite_file(url: str | URL) -> Path | None:
    """The file an SQLite URL names, ``~`` expanded (``sqlite:///~/craft.db``: in the home
    folder), as the engine opens it; ``None`` for a database in memory or not SQLite."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database).expanduser()


def _create_sqlite_engine(parsed: URL, *, echo: bool) -> Engine:
    """The embedded database's engine: WAL for files, ``BEGIN IMMEDIATE`` for writers."""
    path = sqlite_file(parsed)
    if path is not None:
        # SQLite would open "~/craft.db" in a folder named "~" of the working directory.
        parsed = parsed.set(database=str(path))
        folder = path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise CredentialsError(
                f"cannot create the SQLite database's folder {folder} ({exc.strerror}): set "
                "CRAFT_DATABASE_URL (or CRAFT_STATE_DIR) to a writable path, e.g. a volume"
            ) from None
    engine = create_engine(
        parsed,
        hide_parameters=True,
        echo=echo,
        connect_args={"timeout": _SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False},
    )
    file_database = bool(parsed.database) and parsed.database != ":memory:"

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
        # Take over transaction control from pysqlite (see the "begin" listener).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if file_database:
            cursor.execute("PRAGMA journal_mode=WAL")
            # In WAL mode NORMAL syncs at checkpoints, not at every commit: a commit survives
            # an operator crash, only a power cut can lose the last ones, and a PAT lost that
            # way is simply minted again (the Secret's token then fails, and is replaced).
            cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={int(_SQLITE_BUSY_TIMEOUT_S * 1000)}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        write = connection.get_execution_options().get(WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def _first_line(exc: BaseException) -> str:
    original = getattr(exc, "orig", None) or exc
    lines = str(original).strip().splitlines()
    return lines[0] if lines else type(original).__name__


def sqlstate(exc: DBAPIError) -> str | None:
    """The SQLSTATE of a driver error, when the driver reports one (psycopg does)."""
    return getattr(exc.orig, "sqlstate", None)


def is_unique_violation(exc: IntegrityError) -> bool:
    """True for a unique-constraint violation (a lost race that a retry resolves)."""
    code = sqlstate(exc)
    if code is not None:
        return code == "23505"
    return "UNIQUE constraint failed" in str(exc.orig)


def is_retryable(exc: DBAPIError) -> bool:
    """Serialization failures and deadlocks: the transaction may simply be run again."""
    return sqlstate(exc) in {"40001", "40P01"}


def _is_undefined_column(exc: DBAPIError, message: str) -> bool:
    """A statement named a column the table lacks (Postgres 42703; SQLite says "no such
    column" when reading it, "has no column named" when writing it)."""
    code = sqlstate(exc)
    if code is not None:
        return code == "42703"
    return "no such column" in message or "has no column named" in message


#: Where the drivers' messages name the table of a missing table or column: Postgres's
#: ``relation "s.t"``, ``column "c" of relation "t"`` and ``column t.c``, SQLite's
#: ``no such table: s.t``, ``no such column: t.c`` and ``table t has no column named c``.
_TABLE_IN_MESSAGE = re.compile(
    r'relation "(?:[^"]*\.)?([^".]+)"'
    r"|^column \"?([^\s\".]+)\"?\."
    r"|^no such table: (?:\w+\.)?(\w+)"
    r"|^no such column: (\w+)\."
    r"|^table (\w+) has no column"
)


def _schema_missing(subject: str, what: str, message: str) -> str:
    """What a missing table or column means: this operator's own tables are migrated by
    ``db upgrade``; Onyx's (``user``, ``personal_access_token``) never are, by it."""
    found = _TABLE_IN_MESSAGE.search(message)
    table = next((name for name in found.groups() if name), None) if found else None
    if table in (USER_TABLE, PAT_TABLE):
        return (
            f"{subject}: {what} of Onyx's is missing ({message}): Onyx's schema is not one "
            f"this operator reads (Onyx rolled back, or a release that changed its "
            f"{table} table); craft-operator db upgrade never changes Onyx's tables"
        )
    return f"{subject}: {what} is missing ({message}); run: craft-operator db upgrade"


@contextlib.contextmanager
def translated_errors(subject: str) -> Iterator[None]:
    """Turn driver errors into the store's typed errors; ``subject`` says what was done.

    Messages carry the driver's first line only: SQLAlchemy's own text would include the
    statement, parameters are hidden anyway, and Postgres's DETAIL line (the next) may
    quote the row: a PAT's hash and sealed token. Lost races and conflicts are handled
    inside the block where they can be (a retry); what reaches here is translated too.
    """
    try:
        yield
    except IntegrityError as exc:
        if sqlstate(exc) == "23503" or "FOREIGN KEY constraint failed" in str(exc.orig):
            raise UserNotFoundError(f"{subject}: the user does not exist in Onyx") from None
        raise CredentialsError(f"{subject}: database error: {_first_line(exc)}") from None
    except DBAPIError as exc:
        message = _first_line(exc)
        if is_retryable(exc):
            raise DatabaseUnavailableError(
                f"{subject}: the transaction conflicted with another (retried): {message}"
            ) from None
        if sqlstate(exc) == "42P01" or "no such table" in message:
            raise SchemaMissingError(_schema_missing(subject, "a table", message)) from None
        if _is_undefined_column(exc, message):  # a schema behind this operator's
            raise SchemaMissingError(_schema_missing(subject, "a column", message)) from None
        if exc.connection_invalidated or isinstance(exc, OperationalError | InterfaceError):
            raise DatabaseUnavailableError(
                f"{subject}: the credentials database is unavailable: {message}"
            ) from None
        raise CredentialsError(f"{subject}: database error: {message}") from None


@dataclass(frozen=True)
class UpgradeResult:
    """What :func:`upgrade` did."""

    onyx_mode: bool
    created_pat_table: bool
    revision_before: str | None
    revision_after: str | None


def alembic_config(connection: Connection) -> Config:
    """An Alembic configuration that runs the packaged migrations on ``connection``."""
    config = Config()
    config.set_main_option("script_location", _MIGRATIONS)
    config.attributes["connection"] = connection
    return config


def head_revision() -> str | None:
    """The newest migration shipped with this operator."""
    return _scripts().get_current_head()


def _newer_schema(revision: str) -> str:
    return (
        f"the {CREDENTIAL_TABLE} table is at revision {revision}, which a newer operator "
        f"migrated to (this one knows up to {head_revision()}): run that version again; "
        "going back to an older operator after a migration is not supported"
    )


def is_known_revision(revision: str) -> bool:
    """Whether ``revision`` is one of this operator's migrations (else a newer one's)."""
    return any(script.revision == revision for script in _scripts().walk_revisions())


def _scripts() -> ScriptDirectory:
    config = Config()
    config.set_main_option("script_location", _MIGRATIONS)
    return ScriptDirectory.from_config(config)


def current_revision(connection: Connection) -> str | None:
    """The operator's schema revision recorded in the database (None: never migrated)."""
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def check_onyx_tables(connection: Connection, *, tenant_schema: str | None = None) -> None:
    """In Onyx mode, raise :class:`SchemaMissingError` unless Onyx's tables exist: in the
    default schema, or in ``tenant_schema`` (a tenant's, in multi-tenant Onyx)."""
    inspector = inspect(connection)
    where = (
        "the database in CRAFT_DATABASE_URL"
        if tenant_schema is None
        else f"schema {tenant_schema!r} (Onyx tenant {tenant_schema!r}) of the database in "
        "CRAFT_DATABASE_URL"
    )
    missing = [
        table
        for table in (USER_TABLE, PAT_TABLE)
        if not inspector.has_table(table, schema=tenant_schema)
    ]
    if missing:
        fix = (
            "point it at Onyx's Postgres after Onyx's own migrations have run (the operator "
            "never creates Onyx's tables)"
            if tenant_schema is None
            else "is the tenant id the sandbox's Onyx tenant, is the tenant on this database "
            "(tenants on Onyx's other databases are not supported), and have Onyx's "
            "migrations run for it? (the operator never creates Onyx's tables)"
        )
        raise SchemaMissingError(
            f"Onyx's table(s) {', '.join(repr(t) for t in missing)} are missing from {where}: {fix}"
        )
    try:
        columns = {
            column["name"] for column in inspector.get_columns(PAT_TABLE, schema=tenant_schema)
        }
    except NoSuchTableError:  # pragma: no cover - raced with a DROP
        columns = set()
    lacking = {"pat_type", "scopes"} - columns
    if lacking:
        raise SchemaMissingError(
            f"Onyx's personal_access_token table{'' if tenant_schema is None else ' in ' + where}"
            f" lacks {sorted(lacking)}: Onyx is too old for Craft PATs; upgrade Onyx first"
        )


def _create_embedded_pat_table(connection: Connection) -> bool:
    if inspect(connection).has_table(PAT_TABLE):
        return False
    table = OnyxBase.metadata.tables[PAT_TABLE]
    # No foreign key: the embedded database has no ``user`` table.
    connection.execute(CreateTable(table, include_foreign_key_constraints=[]))
    for index in table.indexes:
        connection.execute(CreateIndex(index))
    return True


@contextlib.contextmanager
def _lock_waits_explained() -> Iterator[None]:
    """A migration that gave up waiting for a lock (:data:`MIGRATION_LOCK_TIMEOUT_MS`) is
    :class:`DatabaseUnavailableError`, saying who holds it and that it is retried."""
    try:
        yield
    except DBAPIError as exc:
        if sqlstate(exc) != _LOCK_NOT_AVAILABLE_SQLSTATE:
            raise
        raise DatabaseUnavailableError(
            f"migrating the credentials database: another client holds a lock on "
            f"{CREDENTIAL_TABLE} (a pg_dump, an open transaction: see pg_locks) and the "
            f"migration gave up waiting for it (at most {MIGRATION_LOCK_TIMEOUT_MS // 1000} s) so "
            "as not to hold up the other operators' calls queued behind it; nothing was "
            f"changed: the operator tries again with its next call, or run craft-operator db "
            f"upgrade again once that client is done ({_first_line(exc)})"
        ) from None


def upgrade(engine: Engine, *, multi_tenant: bool = False) -> UpgradeResult:
    """Bring the schema up to date: the operator's table, and in SQLite Onyx's PAT table.

    Safe to run from several operator processes at once (Postgres: an advisory lock;
    SQLite: the database write lock) and to run again. ``multi_tenant`` (multi-tenant
    Onyx): Onyx's tables are in the tenants' schemas, checked as each is first used, not
    in the default schema. On Postgres the wait for another operator's migration is
    unbounded, any other lock is waited for at most :data:`MIGRATION_LOCK_TIMEOUT_MS`
    (then :class:`DatabaseUnavailableError`, nothing changed).
    """
    check_multi_tenant(engine, multi_tenant)
    onyx_mode = is_onyx_mode(engine)
    options: dict[str, Any] = {WRITE_OPTION: True, UNBOUNDED_OPTION: True}
    if onyx_mode:
        # Each statement sees what committed before it: under a database default of
        # repeatable read or serializable, the snapshot would be taken at the advisory lock,
        # before the wait, and a migration that waited for another would not see its work
        # and run the same migrations again ("relation ... already exists").
        options["isolation_level"] = "READ COMMITTED"
    with (
        translated_errors("migrating the credentials database"),
        engine.connect().execution_options(**options) as connection,
        connection.begin(),
        _lock_waits_explained(),
    ):
        if onyx_mode:
            # Waiting for another operator's migration is unbounded; any other lock is not.
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY}
            )
            connection.execute(_MIGRATION_BOUNDS)
            if not multi_tenant:
                check_onyx_tables(connection)
            created = False
        else:
            created = _create_embedded_pat_table(connection)
        before = current_revision(connection)
        if before is not None and not is_known_revision(before):
            raise SchemaMissingError(_newer_schema(before))
        try:
            command.upgrade(alembic_config(connection), "head")
        except AlembicCommandError as exc:
            raise SchemaMissingError(
                f"cannot migrate {CREDENTIAL_TABLE} from revision {before}: {exc} "
                "(was it migrated by a newer operator?)"
            ) from None
        after = current_revision(connection)
    if created:
        log.info("created the embedded %s table", PAT_TABLE)
    if before != after:
        log.info("migrated %s from revision %s to %s", CREDENTIAL_TABLE, before, after)
    return UpgradeResult(onyx_mode, created, before, after)


def check_schema(engine: Engine, *, multi_tenant: bool = False) -> None:
    """Raise :class:`SchemaMissingError` unless every table the store needs is in place
    (``multi_tenant``: Onyx's tables are not looked for in the default schema; the store
    checks each tenant's schema as it first uses it)."""
    check_multi_tenant(engine, multi_tenant)
    with translated_errors("checking the credentials database"), engine.connect() as connection:
        if is_onyx_mode(engine):
            if not multi_tenant:
                check_onyx_tables(connection)
        elif not inspect(connection).has_table(PAT_TABLE):
            raise SchemaMissingError(
                f"the embedded database lacks {PAT_TABLE}; run: craft-operator db upgrade"
            )
        revision, head = current_revision(connection), head_revision()
        if revision is not None and revision != head and not is_known_revision(revision):
            raise SchemaMissingError(_newer_schema(revision))
        if revision != head:
            raise SchemaMissingError(
                f"the {CREDENTIAL_TABLE} table is at revision {revision or 'none'}, "
                f"this operator needs {head}; run: craft-operator db upgrade "
                "(or leave CRAFT_DATABASE_AUTO_MIGRATE on)"
            )


def describe_url(url: str | URL) -> str:
    """The database URL with every secret masked (``***``), for messages: the password,
    and the query parameters that hold one: ``password``, ``sslpassword``, ``sslkey``, and
    any whose name has ``password``, ``passwd``, ``secret`` or ``token`` in it."""
    from urllib.parse import quote_plus

    try:
        parsed = make_url(url)
        if parsed.host is not None and not _HOST.match(parsed.host):
            parsed = parsed.set(host="<not a host name>")  # a password's tail, likely
        shown = parsed.set(query={}).render_as_string(hide_password=True)
    except (SQLAlchemyError, ValueError):
        return "<unparseable database URL>"
    pairs: list[str] = []
    for key, values in sorted(parsed.query.items()):
        lowered = key.lower()
        secret = lowered == "sslkey" or any(
            word in lowered for word in ("password", "passwd", "secret", "token")
        )
        for value in (values,) if isinstance(values, str) else values:
            pairs.append(f"{quote_plus(key)}={'***' if secret else quote_plus(value)}")
    return f"{shown}?{'&'.join(pairs)}" if pairs else shown
