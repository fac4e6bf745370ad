"""``doctor``'s database checks: CRAFT_DATABASE_URL answers and its schema is current.

Only reads: a missing SQLite file is reported, never created, and nothing is migrated.
"""

from __future__ import annotations

from pathlib import Path

from alembic.script import ScriptDirectory
from alembic.util import CommandError as AlembicCommandError
from sqlalchemy import Engine, inspect, text
from sqlalchemy.engine import make_url
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
    translated_errors,
)
from craft_operator.credentials.errors import CredentialsError, SchemaMissingError
from craft_operator.credentials.tables import CREDENTIAL_TABLE, PAT_TABLE
from craft_operator.doctor.results import CheckResult, Status, fail, ok, warn

DB_CONNECT_TIMEOUT_S = 10


def _sqlite_file(url: str) -> Path | None:
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None  # create_credentials_engine explains
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database).expanduser()


def _with_connect_timeout(url: str) -> str:
    try:
        parsed = make_url(url)
    except ArgumentError:
        return url  # create_credentials_engine explains
    if parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
        parsed = parsed.update_query_dict({"connect_timeout": str(DB_CONNECT_TIMEOUT_S)})
    return parsed.render_as_string(hide_password=False)


def check_database(settings: Settings) -> tuple[list[CheckResult], Engine | None]:
    """Connect to CRAFT_DATABASE_URL and check the schema; the engine if the schema is current.

    The caller disposes of the returned engine.
    """
    url = settings.database_url_value
    shown = describe_url(url)
    sqlite_file = _sqlite_file(url)
    if sqlite_file is not None and not sqlite_file.exists():
        detail = f"{shown} does not exist yet"
        if settings.database_auto_migrate:
            return [ok("database", f"{detail}; the operator creates it at start")], None
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
    mode = "Onyx mode, PostgreSQL" if is_onyx_mode(engine) else "embedded SQLite"
    results = [ok("database", f"{shown} ({mode})")]
    schema = _check_schema(engine, settings)
    results.append(schema)
    if schema.status is Status.OK:
        return results, engine
    engine.dispose()
    return results, None


def _known_revisions(engine: Engine) -> set[str]:
    with engine.connect() as connection:
        scripts = ScriptDirectory.from_config(alembic_config(connection))
        return {script.revision for script in scripts.walk_revisions()}


def _check_schema(engine: Engine, settings: Settings) -> CheckResult:
    name = "database schema"
    try:
        check_schema(engine)
    except SchemaMissingError as exc:
        return _diagnose_schema(engine, settings, str(exc))
    except CredentialsError as exc:
        return fail(name, str(exc), "check the database; run: craft-operator db upgrade")
    return ok(name, f"{CREDENTIAL_TABLE} at revision {head_revision()}, the newest")


def _diagnose_schema(engine: Engine, settings: Settings, message: str) -> CheckResult:
    name = "database schema"
    try:
        with translated_errors("checking the credentials database"), engine.connect() as c:
            if is_onyx_mode(engine):
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
