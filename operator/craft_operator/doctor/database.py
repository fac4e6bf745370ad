"""``doctor``'s database checks: CRAFT_DATABASE_URL answers and its schema is current.

Only reads: a missing SQLite file is reported, never created, and nothing is migrated.
"""

from __future__ import annotations

from pathlib import Path

from alembic.script import ScriptDirectory
from alembic.util import CommandError as AlembicCommandError
from sqlalchemy import Engine, inspect, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ArgumentError

from craft_operator.config import Settings
from craft_operator.credentials.db import (
    alembic_config,
    check_onyx_tables,
    check_schema,
    create_credentials_engine,
    current_revision,
    describe_url,
    head_revision,
    is_onyx_mode,
    sqlite_file,
    translated_errors,
)
from craft_operator.credentials.errors import CredentialsError, SchemaMissingError
from craft_operator.credentials.factory import production_signs
from craft_operator.credentials.tables import (
    CREDENTIAL_TABLE,
    LIBRARY_SYNC_TABLE,
    PAT_TABLE,
    USER_TABLE,
)
from craft_operator.doctor.paths import WRITABLE_FIX, creation_problem
from craft_operator.doctor.results import CheckResult, Status, fail, ok, warn

DB_CONNECT_TIMEOUT_S = 10
#: The Secret and key from which manifests/base's StatefulSet sets CRAFT_DATABASE_URL.
DATABASE_SECRET, DATABASE_SECRET_KEY = "craft-operator-database", "url"


def _sqlite_file(url: str) -> Path | None:
    try:
        return sqlite_file(url)
    except ArgumentError:
        return None  # create_credentials_engine explains


def _with_connect_timeout(url: str) -> str:
    try:
        parsed = make_url(url)
    except ArgumentError:
        return url  # create_credentials_engine explains
    if parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
        parsed = parsed.update_query_dict({"connect_timeout": str(DB_CONNECT_TIMEOUT_S)})
    return parsed.render_as_string(hide_password=False)


def check_database(
    settings: Settings, *, peering: bool = False
) -> tuple[list[CheckResult], Engine | None]:
    """Connect to CRAFT_DATABASE_URL and check the schema; the engine if the schema is
    current, or behind and migrated by the operator at start.

    The embedded SQLite database is for development: in a pod it is a warning, and a
    failure for an operator that peers (``peering``). The caller disposes of the returned
    engine.
    """
    url = settings.database_url_value
    shown = describe_url(url)
    sqlite_file = _sqlite_file(url)
    if sqlite_file is not None and not sqlite_file.exists():
        detail = f"{shown} does not exist yet"
        problem = creation_problem(sqlite_file)
        if problem is not None:
            return [
                fail("database", f"{detail} and cannot be created: {problem}", WRITABLE_FIX)
            ], None
        if settings.database_auto_migrate:
            created = ok("database", f"{detail}; the operator creates it at start")
            return [_embedded(created, settings, peering=peering)], None
        return [
            fail(
                "database",
                f"{detail} and CRAFT_DATABASE_AUTO_MIGRATE is false",
                "run: craft-operator db upgrade",
            )
        ], None
    try:
        engine = create_credentials_engine(_with_connect_timeout(url))
    except CredentialsError as exc:
        return [fail("database", str(exc), "correct CRAFT_DATABASE_URL")], None
    try:
        with translated_errors(shown), engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except CredentialsError as exc:
        engine.dispose()
        return [
            fail(
                "database",
                str(exc),
                "check host, port, database name, user and password in CRAFT_DATABASE_URL, "
                "and that the database accepts connections from here",
            )
        ], None
    if is_onyx_mode(engine):
        tenants = ", Onyx's tables in each tenant's schema" if settings.onyx_multi_tenant else ""
        results = [ok("database", f"{shown} (Onyx mode, PostgreSQL{tenants})")]
    else:
        embedded = ok("database", f"{shown} (embedded SQLite)")
        results = [_embedded(embedded, settings, peering=peering)]
    schema = _check_schema(engine, settings)
    results.append(schema)
    if is_onyx_mode(engine) and schema.status is not Status.FAIL:
        results.append(_check_privileges(engine, settings))
    # Behind but migrated at start (a warning) is what doctor sees before every rollout:
    # the stored tokens must still be checked against the new ring.
    if schema.status in (Status.OK, Status.WARN):
        return results, engine
    engine.dispose()
    return results, None


#: What the operator does to each table on Onyx's Postgres: Onyx's, whose PATs it mints and
#: revokes and whose users it reads, and its own.
_PRIVILEGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (PAT_TABLE, ("SELECT", "INSERT", "UPDATE")),
    (USER_TABLE, ("SELECT",)),
    (CREDENTIAL_TABLE, ("SELECT", "INSERT", "UPDATE", "DELETE")),
    (LIBRARY_SYNC_TABLE, ("SELECT", "INSERT", "UPDATE", "DELETE")),
)


def _check_privileges(engine: Engine, settings: Settings) -> CheckResult:
    """Whether the database role may do to each table what the operator does (a role made
    for the operator's own tables alone passed every check, and every mint failed), and
    take ids from the sequences of the tables it inserts into (a role given exactly the
    table grants passed, and its first INSERT failed: "permission denied for sequence").
    Onyx's tables of a multi-tenant deployment are in each tenant's schema: not checked
    here."""
    name = "database privileges"
    wanted = [
        (table, privileges)
        for table, privileges in _PRIVILEGES
        if not (settings.onyx_multi_tenant and table in (PAT_TABLE, USER_TABLE))
    ]
    grants: list[str] = []
    try:
        with translated_errors("checking the database role's privileges"), engine.connect() as c:
            inspector = inspect(c)
            for table, privileges in wanted:
                if not inspector.has_table(table):
                    continue  # the schema check says what is missing
                grants.extend(_lacking_grants(c, table, privileges))
    except CredentialsError as exc:
        return warn(name, f"cannot ask the database: {exc}")
    if grants:
        return fail(
            name,
            f"the role in CRAFT_DATABASE_URL may not {'; '.join(grants)}: sandboxes' PATs "
            "cannot be minted, renewed or revoked",
            "; ".join(f"GRANT {grant} TO <that role>" for grant in grants),
        )
    return ok(
        name,
        "the role may read and write every table the operator uses, and take ids from their "
        "sequences",
    )


def _lacking_grants(connection: Connection, table: str, privileges: tuple[str, ...]) -> list[str]:
    """What the role lacks of ``privileges`` on ``table`` and, if it inserts there, of the
    sequences that number its rows, each as a GRANT's object (``USAGE ON SEQUENCE s``)."""
    lacking = [
        privilege
        for privilege in privileges
        if not connection.execute(
            text("SELECT has_table_privilege(current_user, :table, :privilege)"),
            {"table": f'"{table}"', "privilege": privilege},
        ).scalar()
    ]
    grants = [f'{", ".join(lacking)} ON "{table}"'] if lacking else []
    if "INSERT" in privileges:
        grants.extend(
            f"USAGE ON SEQUENCE {sequence}"
            for sequence in table_sequences(connection, table)
            # nextval() takes either.
            if not connection.execute(
                text("SELECT has_sequence_privilege(current_user, :sequence, 'USAGE, UPDATE')"),
                {"sequence": sequence},
            ).scalar()
        )
    return grants


def table_sequences(connection: Connection, table: str) -> list[str]:
    """The sequences an INSERT into ``table`` takes ids from, named as a GRANT names them:
    those of its serial and identity columns (none if it has neither)."""
    rows = connection.execute(
        text(
            "SELECT DISTINCT CAST(CAST(pg_get_serial_sequence(:table, attname) AS regclass) "
            "AS text) AS sequence FROM pg_attribute "
            "WHERE attrelid = CAST(:table AS regclass) AND attnum > 0 AND NOT attisdropped"
        ),
        {"table": f'"{table}"'},
    )
    return sorted(row.sequence for row in rows if row.sequence is not None)


def _embedded(result: CheckResult, settings: Settings, *, peering: bool) -> CheckResult:
    """The embedded SQLite database's ``result``, judged by where the operator runs: in a
    pod the file dies with the pod and Onyx cannot see its PATs (a warning); peered, each
    replica has a file of its own and a takeover mints every PAT again (a failure)."""
    signs = production_signs(settings, peering=peering)
    if not signs:
        return result
    harm = []
    if production_signs(settings):  # on SQLite, the sign besides peering: it runs in a pod
        harm.append("its file is lost with the pod and Onyx cannot see its PATs")
    if peering:
        harm.append("each replica has a database of its own, so a takeover mints every PAT again")
    detail = f"{result.detail}, but {' and '.join(signs)}: {'; '.join(harm)}"
    fix = (
        f"point CRAFT_DATABASE_URL at Onyx's Postgres: the key {DATABASE_SECRET_KEY!r} of "
        f"Secret {DATABASE_SECRET} sets it (kubectl -n {settings.operator_namespace} create "
        f"secret generic {DATABASE_SECRET} --from-literal={DATABASE_SECRET_KEY}="
        "'postgresql+psycopg://USER:PASSWORD@HOST:5432/onyx'), then restart the operator"
    )
    if peering:
        return fail(result.name, detail, f"{fix}; or run one replica with --standalone")
    return warn(result.name, detail, fix)


def _known_revisions(engine: Engine) -> set[str]:
    with engine.connect() as connection:
        scripts = ScriptDirectory.from_config(alembic_config(connection))
        return {script.revision for script in scripts.walk_revisions()}


def _check_schema(engine: Engine, settings: Settings) -> CheckResult:
    name = "database schema"
    try:
        check_schema(engine, multi_tenant=settings.onyx_multi_tenant)
    except SchemaMissingError as exc:
        return _diagnose_schema(engine, settings, str(exc))
    except CredentialsError as exc:
        return fail(name, str(exc), "check the database; run: craft-operator db upgrade")
    return ok(name, f"{CREDENTIAL_TABLE} at revision {head_revision()}, the newest")


def _diagnose_schema(engine: Engine, settings: Settings, message: str) -> CheckResult:
    name = "database schema"
    try:
        with translated_errors("checking the credentials database"), engine.connect() as c:
            if is_onyx_mode(engine) and not settings.onyx_multi_tenant:
                try:
                    check_onyx_tables(c)
                except SchemaMissingError as exc:
                    return fail(
                        name,
                        str(exc),
                        "point CRAFT_DATABASE_URL at Onyx's database once Onyx's migrations ran",
                    )
            revision = current_revision(c)
            has_pat_table = inspect(c).has_table(PAT_TABLE)
        known = _known_revisions(engine)
    except (CredentialsError, AlembicCommandError):
        return fail(name, message, "run: craft-operator db upgrade")
    head = head_revision()
    if revision is not None and revision not in known:
        return fail(
            name,
            f"{CREDENTIAL_TABLE} is at revision {revision}, which this operator does not know "
            f"(its newest is {head}): a newer operator migrated it",
            "run the newer operator version (a downgrade is not supported)",
        )
    what = f"{CREDENTIAL_TABLE} is at revision {revision or 'none'}, this operator needs {head}"
    if not is_onyx_mode(engine) and not has_pat_table:
        what = f"the embedded database has no {PAT_TABLE} table yet; {what}"
    if settings.database_auto_migrate:
        return warn(
            name,
            f"{what}; the operator migrates it at start (CRAFT_DATABASE_AUTO_MIGRATE)",
            "nothing to do, or run: craft-operator db upgrade",
        )
    return fail(name, what, "run: craft-operator db upgrade (CRAFT_DATABASE_AUTO_MIGRATE is off)")
