"""Schema management: what the operator creates, migrates, checks and never touches."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Connection, Engine, inspect, text

from craft_operator.config import load_settings
from craft_operator.credentials import (
    CredentialsError,
    DatabaseUnavailableError,
    KeyRing,
    SandboxIdentity,
    SchemaMissingError,
    build_credential_store,
    generate_key_entry,
)
from craft_operator.credentials.db import (
    VERSION_TABLE,
    alembic_config,
    check_schema,
    create_credentials_engine,
    current_revision,
    head_revision,
    upgrade,
)
from craft_operator.credentials.store import CredentialStore
from craft_operator.credentials.tables import PersonalAccessToken
from tests.support.postgres import long_reader, wait_until_a_session_waits_for_a_lock

from .conftest import Database

PAT_COLUMNS = {
    # name: (nullable, type name)
    "id": (False, "INTEGER"),
    "name": (False, "VARCHAR"),
    "hashed_token": (False, "VARCHAR(64)"),
    "token_display": (False, "VARCHAR"),
    "user_id": (False, "UUID"),
    "expires_at": (True, "TIMESTAMP"),
    "created_at": (False, "TIMESTAMP"),
    "last_used_at": (True, "TIMESTAMP"),
    "is_revoked": (False, "BOOLEAN"),
    "pat_type": (False, "VARCHAR"),
    "scopes": (True, "JSON"),
}


def _snapshot(engine: Engine, tables: tuple[str, ...]) -> dict[str, Any]:
    inspector = inspect(engine)
    return {
        table: {
            "columns": [
                (c["name"], str(c["type"]), c["nullable"], str(c.get("default")))
                for c in inspector.get_columns(table)
            ],
            "indexes": sorted(str(i) for i in inspector.get_indexes(table)),
            "unique": sorted(str(u) for u in inspector.get_unique_constraints(table)),
            "foreign_keys": sorted(str(f) for f in inspector.get_foreign_keys(table)),
        }
        for table in tables
    }


def test_the_embedded_database_gets_onyx_pat_table_without_a_user_table(tmp_path: Path) -> None:
    engine = create_credentials_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")

    result = upgrade(engine)

    inspector = inspect(engine)
    assert result.created_pat_table
    assert result.revision_after == head_revision()
    assert set(inspector.get_table_names()) == {
        "personal_access_token",
        "craft_sandbox_credential",
        "craft_library_sync",
        VERSION_TABLE,
    }
    columns = {c["name"]: c for c in inspector.get_columns("personal_access_token")}
    assert set(columns) == set(PAT_COLUMNS)
    for name, (nullable, _type) in PAT_COLUMNS.items():
        assert columns[name]["nullable"] is nullable, name
    assert str(columns["hashed_token"]["type"]) == "VARCHAR(64)"
    assert "USER" in str(columns["pat_type"]["default"])
    assert "false" in str(columns["is_revoked"]["default"])
    assert inspector.get_foreign_keys("personal_access_token") == []
    indexes = {i["name"]: i["column_names"] for i in inspector.get_indexes("personal_access_token")}
    assert indexes["ix_personal_access_token_expires_at"] == ["expires_at"]
    assert indexes["ix_pat_user_created"][0] == "user_id"
    engine.dispose()


def test_credential_rows_are_found_by_sandbox_uid_through_an_index(database: Database) -> None:
    """A library record's write reads its sandbox's row by uid under a lock: not a scan."""

    def indexes() -> dict[str, list[str]]:
        found = inspect(database.engine).get_indexes("craft_sandbox_credential")
        return {index["name"]: index["column_names"] for index in found}

    assert indexes()["ix_craft_sandbox_credential_sandbox_uid"] == ["sandbox_uid"]
    with database.engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0004_superseded_pat")
    assert "ix_craft_sandbox_credential_sandbox_uid" not in indexes()
    with database.engine.begin() as connection:
        command.upgrade(alembic_config(connection), "head")
    assert "ix_craft_sandbox_credential_sandbox_uid" in indexes()


def test_upgrading_twice_changes_nothing(database: Database) -> None:
    tables = ("personal_access_token", "craft_sandbox_credential")
    before = _snapshot(database.engine, tables)

    result = upgrade(database.engine)

    assert result.revision_before == result.revision_after == head_revision()
    assert not result.created_pat_table
    assert _snapshot(database.engine, tables) == before


@pytest.mark.postgres
def test_onyx_mode_never_touches_onyx_tables_or_its_alembic_version(
    onyx_database: Database,
) -> None:
    engine = onyx_database.engine
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32))"))
        connection.execute(text("INSERT INTO alembic_version VALUES ('onyx-head')"))
    before = _snapshot(engine, ("user", "personal_access_token", "alembic_version"))

    upgrade(engine)

    assert _snapshot(engine, ("user", "personal_access_token", "alembic_version")) == before
    with engine.connect() as connection:
        onyx_revision = connection.execute(text("SELECT version_num FROM alembic_version"))
        assert onyx_revision.scalar_one() == "onyx-head"
    assert inspect(engine).has_table("craft_sandbox_credential")


@pytest.mark.postgres
def test_the_model_matches_onyx_pat_table_column_for_column(onyx_database: Database) -> None:
    reflected = {
        c["name"]: c for c in inspect(onyx_database.engine).get_columns("personal_access_token")
    }
    declared = PersonalAccessToken.__table__.columns

    assert set(reflected) == {column.name for column in declared}
    for column in declared:
        assert reflected[column.name]["nullable"] == column.nullable, column.name
        dialect = onyx_database.engine.dialect
        onyx_type = reflected[column.name]["type"].compile(dialect=dialect)
        assert onyx_type.split("(")[0] == column.type.compile(dialect=dialect).split("(")[0]
    assert str(reflected["hashed_token"]["type"]) == "VARCHAR(64)"
    assert str(reflected["scopes"]["type"]) == "JSONB"


@pytest.mark.postgres
def test_onyx_mode_without_onyx_tables_fails_clearly_and_creates_nothing(
    postgres_server: Any,
) -> None:
    engine = create_credentials_engine(postgres_server.create_database())

    with pytest.raises(SchemaMissingError, match="'user', 'personal_access_token' are missing"):
        upgrade(engine)

    assert inspect(engine).get_table_names() == []
    engine.dispose()


@pytest.mark.postgres
def test_concurrent_upgrades_from_several_operators_all_succeed(onyx_database: Database) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            upgrade(onyx_database.engine)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    check_schema(onyx_database.engine)


@pytest.mark.postgres
def test_a_migration_behind_a_long_reader_gives_up_so_other_operators_calls_go_through(
    onyx_database: Database,
) -> None:
    """The ALTER TABLE waits in Postgres's lock queue behind a reader (a pg_dump), and
    every later statement on the table behind it: it gives up well within their own lock
    timeout, so another cluster's operator, still at the previous release, reads its row."""
    url, engine = onyx_database.url, onyx_database.engine
    upgrade(engine)
    ring = KeyRing.parse(generate_key_entry("k1").get_secret_value())
    west = CredentialStore(engine, ring, cluster_id="west")
    west.ensure(
        SandboxIdentity("ns", "alice", "uid-a"),
        user_id=onyx_database.new_user(),
        tenant_id="public",
    )
    with engine.begin() as connection:  # as before this release
        command.downgrade(alembic_config(connection), "0006_cluster_key_repair")
    other = create_credentials_engine(url)  # the other cluster's: the store's own bounds
    migrating = create_credentials_engine(url)
    outcome: list[BaseException | None] = []

    def migrate() -> None:
        try:
            upgrade(migrating)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    migration = threading.Thread(target=migrate)
    try:
        with long_reader(url):
            migration.start()
            wait_until_a_session_waits_for_a_lock(engine)
            with other.begin() as connection:
                rows = connection.execute(
                    text(
                        "SELECT id FROM craft_sandbox_credential WHERE cluster_id = 'west' "
                        "AND namespace = 'ns' AND name = 'alice' FOR UPDATE"
                    )
                ).all()
    finally:
        migration.join(60)  # once the reader is done, should the migration still wait
    other.dispose()
    migrating.dispose()

    assert len(rows) == 1
    assert isinstance(outcome[0], DatabaseUnavailableError)
    assert "another client holds a lock on craft_sandbox_credential" in str(outcome[0])
    assert "nothing was changed" in str(outcome[0])
    with engine.connect() as connection:
        assert current_revision(connection) == "0006_cluster_key_repair"
    assert upgrade(engine).revision_after == head_revision()  # the reader done, it migrates


@pytest.mark.postgres
@pytest.mark.parametrize("start", [None, "0006_cluster_key_repair"])
@pytest.mark.parametrize("isolation", ["repeatable read", "serializable"])
def test_concurrent_upgrades_succeed_whatever_the_databases_default_isolation(
    onyx_database: Database, isolation: str, start: str | None
) -> None:
    """The operators that waited for the first one's advisory lock see its migration done,
    although the database's default_transaction_isolation is stricter than read committed."""
    engine = onyx_database.engine
    if start is not None:
        upgrade(engine)
        with engine.begin() as connection:
            command.downgrade(alembic_config(connection), start)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        name = connection.execute(text("SELECT current_database()")).scalar_one()
        connection.execute(
            text(f"ALTER DATABASE \"{name}\" SET default_transaction_isolation = '{isolation}'")
        )
    engine.dispose()  # new connections take the database's default
    errors: list[BaseException] = []
    together = threading.Barrier(4)

    def run() -> None:
        together.wait()
        try:
            upgrade(engine)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    check_schema(engine)


def test_a_store_call_on_a_schema_a_revision_behind_is_schema_missing(
    database: Database, store: CredentialStore
) -> None:
    """The schema went back under a running operator (another cluster's rolled back): its
    calls say to migrate, on either database (SQLite's said it was unavailable)."""
    identity = SandboxIdentity("ns", "alice", "uid-alice")
    store.ensure(identity, user_id=database.new_user(), tenant_id="public")
    with database.engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0001")

    with pytest.raises(SchemaMissingError, match="a column is missing") as caught:
        store.show("ns", "alice")

    assert "run: craft-operator db upgrade" in str(caught.value)


def test_a_column_missing_from_onyxs_table_is_not_said_to_be_fixed_by_db_upgrade(
    database: Database, store: CredentialStore
) -> None:
    """db upgrade migrates the operator's own tables, never Onyx's: a column Onyx's
    schema lost (Onyx rolled back under a running operator) is Onyx's to fix."""
    identity = SandboxIdentity("ns", "alice", "uid-alice")
    user = database.new_user()
    with database.engine.begin() as connection:
        connection.execute(text("ALTER TABLE personal_access_token DROP COLUMN token_display"))

    with pytest.raises(SchemaMissingError) as caught:
        store.ensure(identity, user_id=user, tenant_id="public")

    message = str(caught.value)
    assert "Onyx's" in message
    assert "personal_access_token" in message
    assert "run: craft-operator db upgrade" not in message


def test_without_auto_migration_an_unmigrated_database_is_refused(tmp_path: Path) -> None:
    settings = load_settings(
        state_dir=tmp_path,
        database_auto_migrate=False,
        encryption_keys=generate_key_entry("k1"),
    )

    with pytest.raises(SchemaMissingError, match="craft-operator db upgrade"):
        build_credential_store(settings)


def test_without_auto_migration_a_schema_a_revision_behind_is_refused_naming_both(
    tmp_path: Path,
) -> None:
    settings = load_settings(state_dir=tmp_path, encryption_keys=generate_key_entry("k1"))
    build_credential_store(settings).close()
    engine = create_credentials_engine(settings.database_url_value)
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0006_cluster_key_repair")
    engine.dispose()

    with pytest.raises(SchemaMissingError) as caught:
        build_credential_store(settings, migrate=False)

    assert f"at revision 0006_cluster_key_repair, this operator needs {head_revision()}" in str(
        caught.value
    )


@pytest.mark.postgres
def test_an_onyx_too_old_for_craft_pats_is_refused_and_its_table_left_alone(
    onyx_database: Database,
) -> None:
    """Onyx's table without the columns a Craft PAT needs: Onyx must be upgraded first;
    the operator never adds them itself."""
    with onyx_database.engine.begin() as connection:
        connection.execute(text("ALTER TABLE personal_access_token DROP COLUMN scopes"))

    for call in (check_schema, upgrade):
        with pytest.raises(SchemaMissingError, match=r"lacks \['scopes'\].*upgrade Onyx first"):
            call(onyx_database.engine)

    columns = {
        c["name"] for c in inspect(onyx_database.engine).get_columns("personal_access_token")
    }
    assert "scopes" not in columns


def test_the_factory_migrates_by_default_and_the_store_works(tmp_path: Path) -> None:
    settings = load_settings(state_dir=tmp_path, encryption_keys=generate_key_entry("k1"))

    store = build_credential_store(settings)
    issued = store.ensure(
        SandboxIdentity("ns", "a", "u"),
        user_id="3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b",
        tenant_id="public",
    )
    store.close()

    assert issued.minted
    assert (tmp_path / "craft-operator.db").exists()


def test_an_unreachable_database_is_a_typed_error_without_the_password() -> None:
    url = "postgresql+psycopg://craft:hunter2@127.0.0.1:1/onyx?connect_timeout=2"
    store = CredentialStore(url, KeyRing.parse(generate_key_entry("k1")))

    with pytest.raises(DatabaseUnavailableError, match="unavailable") as caught:
        store.show("ns", "a")

    assert "hunter2" not in str(caught.value)
    assert "hunter2" not in repr(store)
    store.close()


NOT_ONE = "no parser reads right"


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("mysql://u:p@h/db", "must be a database URL"),
        ("::not-a-url", "must be a database URL"),
        ("postgresql+psycopg://u:p@h:54x/db", NOT_ONE),
        ("postgresql+psycopg://u:pa@ssSECRET@h/db", NOT_ONE),
        ("postgresql+psycopg://u:pw@SECRETHOST/SECRETDB@h:5432/db", NOT_ONE),
        ("postgresql+psycopg://u:Xk9@ab3?Qz7@SECRET.example:5432/db", NOT_ONE),
    ],
)
def test_an_unsupported_database_url_is_a_clear_error(url: str, complaint: str) -> None:
    with pytest.raises(CredentialsError, match=complaint) as caught:
        create_credentials_engine(url)
    assert "SECRET" not in str(caught.value)


@pytest.mark.parametrize("host", ["db.example.com", "10.0.0.7", "[::1]", "db-1.internal"])
def test_host_names_and_addresses_are_accepted(host: str) -> None:
    create_credentials_engine(f"postgresql+psycopg://u:p@{host}:5432/db").dispose()


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://craft:Zm9v/YmFy+cXV4@onyx-db:5432/onyx",
        "postgresql+psycopg://craft:pw@db/onyx?application_name=craft@prod",
        "postgresql+psycopg://craft@server:pw@db.postgres.azure.com:5432/onyx",
    ],
    ids=["slash-in-password", "at-sign-in-a-query-value", "azure-user-name"],
)
def test_urls_sqlalchemy_reads_right_are_opened(url: str) -> None:
    create_credentials_engine(url).dispose()


def test_a_plain_postgresql_url_uses_the_psycopg_driver() -> None:
    engine = create_credentials_engine("postgresql://u@127.0.0.1/db")

    assert engine.dialect.driver == "psycopg"
    engine.dispose()


def test_a_schema_from_a_newer_operator_is_a_clear_error(database: Database) -> None:
    with database.engine.begin() as connection:
        connection.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = '9999'"))

    # Both ways an older operator meets it (migrating, or checking) say the same thing,
    # not "run: craft-operator db upgrade", which the older operator cannot do.
    for attempt in (upgrade, check_schema):
        with pytest.raises(SchemaMissingError, match="revision 9999") as caught:
            attempt(database.engine)
        assert "a newer operator migrated" in str(caught.value)
        assert "db upgrade" not in str(caught.value)


def test_a_sqlite_path_whose_folder_cannot_be_made_is_a_credentials_error_naming_it(
    tmp_path: Path,
) -> None:
    """Not a bare OSError that no pass or finalizer expects (a read-only root file system
    with the state directory left at its default, say)."""
    from craft_operator.credentials.db import create_credentials_engine
    from craft_operator.credentials.errors import CredentialsError

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")

    with pytest.raises(CredentialsError, match="CRAFT_DATABASE_URL") as caught:
        create_credentials_engine(f"sqlite:///{blocker}/state/craft.db")

    assert str(blocker / "state") in str(caught.value)


def test_a_database_the_first_version_of_0002_migrated_gets_the_per_cluster_key(
    database: Database,
) -> None:
    """0002 first shipped as a cluster_id column with an index, (namespace, name) still
    unique, and was rewritten under the same id: a database it migrated is given the
    per-cluster key by 0006, so two clusters may each hold a row of one sandbox name."""
    engine = database.engine
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0001")
        # What the first version of 0002 did, then the revisions after it as they are.
        connection.execute(
            text("ALTER TABLE craft_sandbox_credential ADD COLUMN cluster_id VARCHAR(128)")
        )
        connection.execute(
            text(
                "CREATE INDEX ix_craft_sandbox_credential_cluster_id "
                "ON craft_sandbox_credential (cluster_id)"
            )
        )
        command.stamp(alembic_config(connection), "0002_job_sweep")
        command.upgrade(alembic_config(connection), "0005_credential_sandbox_uid")
    assert _uniques(engine) == {("namespace", "name")}, "the drifted shape, as in the field"

    upgrade(engine)

    assert _uniques(engine) == {("cluster_id", "namespace", "name")}
    indexes = {index["name"] for index in inspect(engine).get_indexes("craft_sandbox_credential")}
    assert "ix_craft_sandbox_credential_cluster_id" not in indexes
    with engine.begin() as connection:  # and it goes down and up again as any other
        command.downgrade(alembic_config(connection), "0001")
        assert _uniques(connection) == {("namespace", "name")}
        command.upgrade(alembic_config(connection), "head")
    ring = KeyRing.parse(generate_key_entry("k1").get_secret_value())
    for cluster in ("east", "west"):
        store = CredentialStore(engine, ring, cluster_id=cluster)
        identity = SandboxIdentity("ns", "alice", f"uid-{cluster}")
        store.ensure(identity, user_id=database.new_user(), tenant_id="public")


def test_a_rollback_past_0007_as_the_readme_says_migrates_forward_again(
    database: Database,
) -> None:
    engine = database.engine
    with engine.begin() as connection:  # the README's two statements, verbatim
        connection.execute(
            text("ALTER TABLE craft_sandbox_credential DROP COLUMN sandbox_created_at")
        )
        connection.execute(
            text(
                "UPDATE craft_operator_alembic_version SET version_num = '0006_cluster_key_repair'"
            )
        )

    upgrade(engine)

    columns = {column["name"] for column in inspect(engine).get_columns("craft_sandbox_credential")}
    assert "sandbox_created_at" in columns


def _uniques(bind: Engine | Connection) -> set[tuple[str, ...]]:
    found = inspect(bind).get_unique_constraints("craft_sandbox_credential")
    return {tuple(unique["column_names"]) for unique in found}
